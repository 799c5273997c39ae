"""Vector-unit layers (element-wise, pools, LUT, upsample, copy) against numpy integers."""

from __future__ import annotations

import numpy as np
import pytest
from npu_testlib import ref_requant

from npu_model import asm
from xir.quant.fixed_point import quantize_multiplier
from xir.quant.lut import apply_lut, build_lut


@pytest.mark.parametrize("op", ["add", "sub", "mul"])
@pytest.mark.parametrize("dtype", ["int8", "int16"])
def test_eltw(hw, rng, op, dtype):
    npdt = np.int8 if dtype == "int8" else np.int16
    info = np.iinfo(npdt)
    a = rng.integers(info.min, info.max + 1, (5, 7, 19)).astype(npdt)
    b = rng.integers(info.min, info.max + 1, (5, 7, 19)).astype(npdt)
    ka, kb = (1, 1) if op == "mul" else (23170, 19000)
    m, s = quantize_multiplier(0.37 / (info.max if op == "mul" else 30000))
    fo = hw.fmap_out(5, 7, 19, dtype)
    hw.run([asm.Eltw(hw.fmap_in(a), hw.fmap_in(b), fo, op, ka, kb, int(m), int(s),
                     clip=(0, info.max))])
    va, vb = a.astype(np.int64) * ka, b.astype(np.int64) * kb
    acc = {"add": va + vb, "sub": va - vb, "mul": va * vb}[op]
    np.testing.assert_array_equal(hw.read(fo), ref_requant(acc, m, s, 0, info.max))


def test_eltw_leaky_and_broadcast(hw, rng):
    a = rng.integers(-128, 128, (4, 6, 33)).astype(np.int8)
    b = rng.integers(-128, 128, (1, 1, 33)).astype(np.int8)
    m, s = quantize_multiplier(0.8 / 256)
    mn, sn = quantize_multiplier(0.1 * 0.8 / 256)
    fo = hw.fmap_out(4, 6, 33)
    hw.run([asm.Eltw(hw.fmap_in(a), hw.fmap_in(b), fo, "add", 256, 256, int(m), int(s),
                     int(mn), int(sn))])
    acc = a.astype(np.int64) * 256 + b.astype(np.int64) * 256
    np.testing.assert_array_equal(hw.read(fo), ref_requant(acc, m, s, -128, 127, mn, sn))


def _ref_maxpool(x, k, s, p, d=(1, 1)):
    pt, pb, pl, pr = p
    xp = np.pad(x.astype(np.int64), ((pt, pb), (pl, pr), (0, 0)), constant_values=-(1 << 40))
    oh, ow = asm.conv_out_hw(x.shape[0], x.shape[1], k, s, p, d)
    out = np.full((oh, ow, x.shape[2]), -(1 << 40), dtype=np.int64)
    for ky in range(k[0]):
        for kx in range(k[1]):
            win = xp[ky * d[0]: ky * d[0] + (oh - 1) * s[0] + 1: s[0],
                     kx * d[1]: kx * d[1] + (ow - 1) * s[1] + 1: s[1]]
            out = np.maximum(out, win)
    return out


@pytest.mark.parametrize("k,s,p,d", [((2, 2), (2, 2), (0, 0, 0, 0), (1, 1)),
                                     ((5, 5), (1, 1), (2, 2, 2, 2), (1, 1)),
                                     ((3, 2), (2, 1), (1, 0, 0, 1), (2, 1))])
def test_maxpool(hw, rng, k, s, p, d):
    x = rng.integers(-128, 128, (9, 8, 21)).astype(np.int8)
    oh, ow = asm.conv_out_hw(9, 8, k, s, p, d)
    fo = hw.fmap_out(oh, ow, 21)
    hw.run([asm.Pool(hw.fmap_in(x), fo, "max", k, s, p, d)])
    np.testing.assert_array_equal(hw.read(fo), _ref_maxpool(x, k, s, p, d))


@pytest.mark.parametrize("include_pad", [False, True])
@pytest.mark.parametrize("dtype", ["int8", "int16"])
def test_avgpool(hw, rng, include_pad, dtype):
    npdt = np.int8 if dtype == "int8" else np.int16
    info = np.iinfo(npdt)
    x = rng.integers(info.min, info.max + 1, (7, 9, 10)).astype(npdt)
    k, s, p = (3, 3), (2, 2), (1, 1, 1, 1)
    n = np.arange(10)
    mult, shift = quantize_multiplier(0.9 / np.maximum(n, 1))
    table = hw.put(asm.pack_avgpool_params(mult, shift))
    oh, ow = asm.conv_out_hw(7, 9, k, s, p)
    fo = hw.fmap_out(oh, ow, 10, dtype)
    hw.run([asm.Pool(hw.fmap_in(x), fo, "avg", k, s, p, count_include_pad=include_pad,
                     params_addr=table)])
    xp = np.pad(x.astype(np.int64), ((1, 1), (1, 1), (0, 0)))
    valid = np.pad(np.ones((7, 9), np.int64), 1)
    ref = np.zeros((oh, ow, 10), np.int64)
    for i in range(oh):
        for j in range(ow):
            win = xp[2 * i:2 * i + 3, 2 * j:2 * j + 3]
            cnt = 9 if include_pad else int(valid[2 * i:2 * i + 3, 2 * j:2 * j + 3].sum())
            ref[i, j] = ref_requant(win.sum(axis=(0, 1)), mult[cnt], shift[cnt], info.min,
                                    info.max)
    np.testing.assert_array_equal(hw.read(fo), ref)


def test_global_avgpool(hw, rng):
    x = rng.integers(-128, 128, (6, 5, 40)).astype(np.int8)
    mult, shift = quantize_multiplier(1.0 / np.maximum(np.arange(31), 1))
    fo = hw.fmap_out(1, 1, 40)
    hw.run([asm.Pool(hw.fmap_in(x), fo, "avg", (6, 5), 1, 0,
                     params_addr=hw.put(asm.pack_avgpool_params(mult, shift)))])
    ref = ref_requant(x.astype(np.int64).sum(axis=(0, 1)), mult[30], shift[30], -128, 127)
    np.testing.assert_array_equal(hw.read(fo)[0, 0], ref)


@pytest.mark.parametrize("in_dt,out_dt", [("int8", "int8"), ("int8", "int16"),
                                          ("int16", "int16")])
def test_lut(hw, rng, in_dt, out_dt):
    npin = np.int8 if in_dt == "int8" else np.int16
    npout = np.int8 if out_dt == "int8" else np.int16
    info = np.iinfo(npin)
    x = rng.integers(info.min, info.max + 1, (4, 5, 17)).astype(npin)
    table = build_lut("silu", 0.05 if in_dt == "int8" else 0.0005, 0.04 if out_dt == "int8"
                      else 0.0003, npin, npout)
    fo = hw.fmap_out(4, 5, 17, out_dt)
    hw.run([asm.Lut(hw.fmap_in(x), fo, hw.put(asm.pack_lut(table)))])
    np.testing.assert_array_equal(hw.read(fo), apply_lut(x, table))


def test_upsample_into_concat_slice(hw, rng):
    x = rng.integers(-128, 128, (3, 4, 12)).astype(np.int8)
    fo = hw.fmap_out(6, 12, 12, pitch=64, c_off=32)
    hw.run([asm.Upsample(hw.fmap_in(x), fo, (2, 3))])
    np.testing.assert_array_equal(hw.read(fo), np.repeat(np.repeat(x, 2, 0), 3, 1))
    assert (hw.read(fo, all_channels=True)[:, :, :32].view(np.uint8) == 0x5A).all()


def test_copy_repitch(hw, rng):
    x = rng.integers(-2000, 2000, (3, 3, 5)).astype(np.int16)
    fo = hw.fmap_out(3, 3, 5, "int16", pitch=48, c_off=7)
    hw.run([asm.Copy(hw.fmap_in(x), fo)])
    np.testing.assert_array_equal(hw.read(fo), x)


def test_add_with_host_style_large_multipliers(hw, rng):
    """docs/quantization.md section 9: ka = m_a << (S - sh_a) reaches 2**31 (16-bit shift gap)."""
    a = rng.integers(-32768, 32768, (3, 4, 16)).astype(np.int16)
    b = rng.integers(-32768, 32768, (3, 4, 16)).astype(np.int16)
    ka, kb, S = (32000 << 16), 17000, 45
    fo = hw.fmap_out(3, 4, 16, "int16")
    hw.run([asm.Eltw(hw.fmap_in(a), hw.fmap_in(b), fo, "sub", ka, kb, 1, S)])
    acc = a.astype(np.int64) * ka - b.astype(np.int64) * kb
    np.testing.assert_array_equal(hw.read(fo), ref_requant(acc, 1, S, -32768, 32767))

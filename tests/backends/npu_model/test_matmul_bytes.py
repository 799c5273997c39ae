"""int8 matmuls of two feature maps on the byte GEMM (`npu_model.kernels.matmul.
matmul_dynamic_int8_bytes`): exact against int64 numpy where the requantization takes each
sign's own multiplier (LeakyReLU records: not the folded form), into int16 outputs, from and
into channel windows of wider maps, with operands at -128 everywhere, and really on that
path."""

from __future__ import annotations

import llvmlite.binding as ll
import numpy as np
import pytest
from npu_testlib import Harness, rand_requant, ref_requant

from npu_model import asm

VNNI = bool(ll.get_host_cpu_features().get("avx512vnni"))
pytestmark = pytest.mark.skipif(not VNNI, reason="vpdpbusd needs AVX-512 VNNI")


@pytest.fixture
def hw():
    from xrt import Device

    dev = Device.Open("sim://zg330")
    dev.sim.int_gemm = dev.sim.byte_gemm = True
    yield Harness(dev, size=16 << 20)
    dev.close()


@pytest.fixture
def ran(monkeypatch):
    from npu_model.kernels import matmul

    names: list[str] = []
    for split in (matmul.MATMUL_INT, matmul.MATMUL_INT8_BYTES):
        def spy(*args, _k=split.kernel, _n=split.__name__):
            names.append(_n)
            return _k(*args)

        monkeypatch.setattr(split, "kernel", spy)
    return names


def _matmul(hw, a, b, bias, mult, shift, out="int8", transposed=False, neg=None,
            a_win=(0, None), b_win=(0, None), o_win=(0, None)):
    """Run one MATMUL of `a` (batch, m, k) by `b` (batch, k, n) on the chip; the result read
    back. ``*_win`` = (first channel, pitch) of each map."""
    batch, m, k = a.shape
    n = b.shape[2]
    fa = hw.fmap_in(a, pitch=a_win[1], c_off=a_win[0])
    bm = np.ascontiguousarray(b.transpose(0, 2, 1)) if transposed else b
    fb = hw.fmap_in(bm, pitch=b_win[1], c_off=b_win[0])
    fo = hw.fmap_out(batch, m, n, out, pitch=o_win[1], c_off=o_win[0])
    mn, sn = neg if neg is not None else (None, None)
    lim = np.iinfo(np.int16 if out == "int16" else np.int8)
    prm = asm.pack_requant_params(bias, mult, shift, mn, sn, n=n)
    hw.run([asm.Matmul(fa, fo, hw.put(prm), b=fb, clip=(int(lim.min), int(lim.max)),
                       b_transposed=transposed)])
    whole = hw.read(fo, all_channels=True)
    outside = np.ones(whole.shape, dtype=bool)
    outside[:, :, fo.c_off:fo.c_off + n] = False
    assert (whole[outside].view(np.uint8) == 0x5A).all()  # nothing written past the window
    return hw.read(fo), (int(lim.min), int(lim.max))


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize(("batch", "m", "k", "n"), [(1, 64, 128, 64), (2, 9, 66, 45)])
def test_leaky_records_take_each_signs_multiplier(hw, ran, transposed, batch, m, k, n):
    rng = np.random.default_rng(k + n)
    a = rng.integers(-128, 128, (batch, m, k)).astype(np.int8)
    b = rng.integers(-128, 128, (batch, k, n)).astype(np.int8)
    bias = rng.integers(-5000, 5000, n)
    mult, shift = rand_requant(rng, n, 1.0 / (k * 60))
    mult_neg, shift_neg = rand_requant(rng, n, 0.1 / (k * 60))
    got, (lo, hi) = _matmul(hw, a, b, bias, mult, shift, transposed=transposed,
                            neg=(mult_neg, shift_neg))
    acc = a.astype(np.int64) @ b.astype(np.int64) + bias
    assert (acc < 0).any() and (acc > 0).any()
    np.testing.assert_array_equal(got, ref_requant(acc, mult, shift, lo, hi, mult_neg,
                                                   shift_neg))
    assert set(ran) == {"matmul_dynamic_int8_bytes"}


@pytest.mark.parametrize("transposed", [False, True])
def test_int16_output_of_extreme_operands(hw, ran, transposed):
    """Every operand -128 (the largest products, the unsigned ``a + 128`` at 0) and a few
    at 127, requantized into int16 with little headroom."""
    batch, m, k, n = 1, 17, 255, 40
    a = np.full((batch, m, k), -128, dtype=np.int8)
    b = np.full((batch, k, n), -128, dtype=np.int8)
    a[0, 3, :7] = 127
    b[0, :5, 9] = 127
    bias = np.arange(n) * 1000 - 20000
    mult, shift = rand_requant(np.random.default_rng(5), n, 30000.0 / (k * 128 * 128))
    got, (lo, hi) = _matmul(hw, a, b, bias, mult, shift, out="int16", transposed=transposed)
    acc = a.astype(np.int64) @ b.astype(np.int64) + bias
    np.testing.assert_array_equal(got, ref_requant(acc, mult, shift, lo, hi))
    assert np.abs(got).max() > 10000
    assert set(ran) == {"matmul_dynamic_int8_bytes"}


@pytest.mark.parametrize("transposed", [False, True])
def test_channel_windows_of_wider_maps(hw, ran, transposed):
    """Operands read from, and the result written into, windows of wider maps (`_matmul`
    checks that the bytes around the output window keep their fill)."""
    batch, m, k, n = 2, 11, 37, 21
    rng = np.random.default_rng(11)
    a = rng.integers(-128, 128, (batch, m, k)).astype(np.int8)
    b = rng.integers(-128, 128, (batch, k, n)).astype(np.int8)
    bias = rng.integers(-3000, 3000, n)
    mult, shift = rand_requant(rng, n, 1.0 / (k * 60))
    wb = (8, 64) if transposed else (16, 64)
    got, (lo, hi) = _matmul(hw, a, b, bias, mult, shift, transposed=transposed,
                            a_win=(5, 64), b_win=wb, o_win=(3, 64))
    acc = a.astype(np.int64) @ b.astype(np.int64) + bias
    np.testing.assert_array_equal(got, ref_requant(acc, mult, shift, lo, hi))
    assert set(ran) == {"matmul_dynamic_int8_bytes"}

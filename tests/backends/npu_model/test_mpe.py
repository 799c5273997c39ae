"""Convolution and matmul on the simulated MPE array, byte-for-byte against numpy integers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from npu_testlib import rand_requant, ref_conv_acc, ref_requant

from npu_model import asm
from xir.quant.fixed_point import clip_bounds


def _run_conv(hw, rng, h, w, cin, cout, k=(3, 3), stride=(1, 1), pad=(1, 1, 1, 1),
              dilation=(1, 1), groups=1, dtype="int8", relu=False, leaky=False, out_pitch=None,
              out_c_off=0, in_pitch=None):
    npdt = np.int8 if dtype == "int8" else np.int16
    info = np.iinfo(npdt)
    x = rng.integers(info.min, info.max + 1, (h, w, cin)).astype(npdt)
    wq = rng.integers(-info.max, info.max + 1, (k[0], k[1], cin // groups, cout)).astype(npdt)
    bias = rng.integers(-5000, 5000, cout)
    kk = k[0] * k[1] * cin // groups
    m, s = rand_requant(rng, cout, 2.0 / (kk * (30 if dtype == "int8" else 3000)))
    mn, sn = (rand_requant(rng, cout, 0.1 / (kk * 30)) if leaky else (None, None))
    lo, hi = clip_bounds(npdt, relu=relu)
    fi = hw.fmap_in(x, pitch=in_pitch)
    oh, ow = asm.conv_out_hw(h, w, k, stride, pad, dilation)
    fo = hw.fmap_out(oh, ow, cout, dtype, pitch=out_pitch, c_off=out_c_off)
    wa = hw.put(asm.pack_conv_weights(wq, groups, dtype, hw.cfg))
    pa = hw.put(asm.pack_requant_params(bias, m, s, mn, sn))
    layer = asm.Conv(fi, fo, wa, pa, kernel=k, stride=stride, pad=pad, dilation=dilation,
                     groups=groups, clip=(lo, hi))
    hw.run([layer])
    acc = ref_conv_acc(x, wq, bias, stride, pad, dilation, groups)
    ref = ref_requant(acc, m, s, lo, hi, mn, sn)
    return hw.read(fo), ref, fo


@pytest.fixture(params=["int", "float"])
def gemm(request, dev):
    """Both GEMMs of int8 convolutions: integer SIMD (`igemm`) and exact float K-chunks."""
    dev.sim.int_gemm = request.param == "int"
    return request.param


CASES = [
    dict(h=9, w=7, cin=20, cout=40),  # channels not a multiple of the unit
    dict(h=8, w=8, cin=3, cout=5, k=(1, 1), pad=(0, 0, 0, 0)),
    dict(h=11, w=10, cin=16, cout=33, stride=(2, 2)),
    dict(h=10, w=12, cin=8, cout=8, k=(3, 2), stride=(2, 1), pad=(2, 0, 1, 0)),
    dict(h=12, w=12, cin=12, cout=16, dilation=(2, 3), pad=(2, 2, 3, 3)),
    dict(h=8, w=9, cin=12, cout=18, groups=3),
    dict(h=9, w=9, cin=40, cout=40, groups=40),  # depthwise
    dict(h=9, w=8, cin=24, cout=24, groups=24, stride=(2, 2), dilation=(1, 2),
         pad=(1, 1, 2, 2)),  # depthwise, strided, dilated
    dict(h=6, w=6, cin=70, cout=36, k=(6, 6), stride=(2, 2), pad=(2, 2, 2, 2)),
    dict(h=4, w=45, cin=24, cout=24, groups=24, leaky=True),  # a row longer than one run
    dict(h=7, w=9, cin=24, cout=36, groups=3, k=(1, 1), pad=(0, 0, 0, 0)),  # grouped 1x1
    dict(h=5, w=6, cin=12, cout=20, groups=4, k=(1, 1), pad=(0, 0, 0, 0), leaky=True,
         out_pitch=48, out_c_off=7),
    dict(h=5, w=5, cin=10, cout=6, groups=2, k=(1, 1), pad=(0, 0, 0, 0), dtype="int16"),
    dict(h=7, w=6, cin=20, cout=24, dtype="int16"),
    dict(h=6, w=7, cin=10, cout=10, groups=10, dtype="int16"),
    dict(h=13, w=11, cin=3, cout=16, stride=(2, 2), in_pitch=3),  # an RGB stem, dense pixels
    dict(h=9, w=10, cin=3, cout=8, pad=(0, 2, 1, 0), in_pitch=4),  # 3 of 4 channels
    dict(h=7, w=7, cin=18, cout=9, relu=True),
    dict(h=7, w=7, cin=18, cout=9, leaky=True),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_conv_bit_exact(hw, rng, case, gemm):
    got, ref, _ = _run_conv(hw, rng, **case)
    np.testing.assert_array_equal(got, ref)


def test_conv_writes_channel_slice_only(hw, rng):
    """Concat for free: a conv writes channels [c_off, c_off + c) of a wider buffer and leaves
    the rest of the buffer untouched."""
    got, ref, fo = _run_conv(hw, rng, 6, 6, 8, 10, out_pitch=64, out_c_off=20)
    np.testing.assert_array_equal(got, ref)
    full = hw.read(fo, all_channels=True)
    assert (full[:, :, :20].view(np.uint8) == 0x5A).all()
    assert (full[:, :, 30:].view(np.uint8) == 0x5A).all()


def test_concat_of_two_convs_and_split_read(hw, rng):
    """Two convs write halves of one buffer (Concat); a third reads a channel slice (Split)."""
    x = rng.integers(-128, 128, (5, 5, 8)).astype(np.int8)
    fi = hw.fmap_in(x)
    cat = hw.fmap_out(5, 5, 30, pitch=32)
    ws, layers, refs = [], [], []
    for c_off, cout in ((0, 13), (13, 17)):
        wq = rng.integers(-127, 128, (1, 1, 8, cout)).astype(np.int8)
        m, s = rand_requant(rng, cout, 1 / 300)
        out = asm.FMap(cat.addr, 5, 5, cout, 32, c_off)
        layers.append(asm.Conv(fi, out, hw.put(asm.pack_conv_weights(wq)),
                               hw.put(asm.pack_requant_params(0, m, s, n=cout))))
        refs.append(ref_requant(ref_conv_acc(x, wq, 0), m, s, -128, 127))
        ws.append(wq)
    # split: read channels 10..25 of the concat buffer
    sl = asm.FMap(cat.addr, 5, 5, 15, 32, 10)
    w3 = rng.integers(-127, 128, (3, 3, 15, 7)).astype(np.int8)
    m3, s3 = rand_requant(rng, 7, 1 / 3000)
    y = hw.fmap_out(5, 5, 7)
    layers.append(asm.Conv(sl, y, hw.put(asm.pack_conv_weights(w3)),
                           hw.put(asm.pack_requant_params(0, m3, s3, n=7)), kernel=3, pad=1))
    hw.run(layers)
    cat_ref = np.concatenate(refs, axis=-1)
    np.testing.assert_array_equal(hw.read(cat), cat_ref)
    ref3 = ref_requant(ref_conv_acc(cat_ref[:, :, 10:25], w3, 0, pad=(1, 1, 1, 1)), m3, s3,
                       -128, 127)
    np.testing.assert_array_equal(hw.read(y), ref3)
    assert hw.dev.layerCount() == 3


def test_row_stride_reads_a_window(hw, rng):
    """An explicit row stride reads a sub-window of a wider map."""
    big = rng.integers(-128, 128, (6, 10, 32)).astype(np.int8)
    base = hw.put(big)
    win = asm.FMap(base + 3 * 32, 6, 4, 32, 32, 0, "int8", row_stride=10 * 32)
    y = hw.fmap_out(6, 4, 32)
    hw.run([asm.Copy(win, y)])
    np.testing.assert_array_equal(hw.read(y), big[:, 3:7])


@pytest.mark.parametrize("dtype", ["int8", "int16"])
def test_matmul_constant_b(hw, rng, dtype):
    npdt = np.int8 if dtype == "int8" else np.int16
    info = np.iinfo(npdt)
    batch, m_, k, n = 2, 9, 37, 21
    a = rng.integers(info.min, info.max + 1, (batch, m_, k)).astype(npdt)
    b = rng.integers(-info.max, info.max + 1, (k, n)).astype(npdt)
    bias = rng.integers(-100, 100, n)
    mult, shift = rand_requant(rng, n, 1.0 / (k * (40 if dtype == "int8" else 9000)))
    fa = hw.fmap_in(a)
    fo = hw.fmap_out(batch, m_, n, dtype)
    hw.run([asm.Matmul(fa, fo, hw.put(asm.pack_requant_params(bias, mult, shift)),
                       weights_addr=hw.put(asm.pack_matmul_weights(b, dtype)))])
    acc = a.astype(np.int64) @ b.astype(np.int64) + bias
    np.testing.assert_array_equal(hw.read(fo), ref_requant(acc, mult, shift, info.min, info.max))


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("dtype", ["int8", "int16"])
@pytest.mark.parametrize("shape", [(3, 5, 40, 6), (2, 13, 33, 70)])
def test_matmul_dynamic_b(hw, rng, dtype, transposed, shape, gemm):
    """Both operands feature maps (attention's Q K^T and P V): odd K, several B panels, rows
    not a multiple of the micro tile, a bias; int8 through either GEMM."""
    npdt = np.int8 if dtype == "int8" else np.int16
    info = np.iinfo(npdt)
    batch, m_, k, n = shape
    a = rng.integers(info.min, info.max + 1, (batch, m_, k)).astype(npdt)
    b = rng.integers(info.min, info.max + 1, (batch, k, n)).astype(npdt)
    bias = rng.integers(-3000, 3000, n)
    mult, shift = rand_requant(rng, n, 1.0 / (k * (40 if dtype == "int8" else 9000)))
    fa = hw.fmap_in(a)
    fb = hw.fmap_in(np.ascontiguousarray(b.transpose(0, 2, 1)) if transposed else b)
    fo = hw.fmap_out(batch, m_, n, dtype)
    hw.run([asm.Matmul(fa, fo, hw.put(asm.pack_requant_params(bias, mult, shift, n=n)), b=fb,
                       clip=(-info.max, info.max), b_transposed=transposed)])
    acc = a.astype(np.int64) @ b.astype(np.int64) + bias
    np.testing.assert_array_equal(hw.read(fo), ref_requant(acc, mult, shift, -info.max,
                                                           info.max))


def test_long_reduction_is_exact(hw, rng, gemm):
    """K far above the float32 chunk (1024): extreme operands must still be exact."""
    cin, k = 600, 3  # K = 5400
    x = np.full((4, 4, cin), -128, dtype=np.int8)
    x[::2, :, ::3] = 127
    wq = np.full((k, k, cin, 8), -127, dtype=np.int8)
    wq[..., 1::2] = 127
    m, s = rand_requant(rng, 8, 1 / 5e5)
    fi, fo = hw.fmap_in(x), hw.fmap_out(4, 4, 8)
    hw.run([asm.Conv(fi, fo, hw.put(asm.pack_conv_weights(wq)),
                     hw.put(asm.pack_requant_params(0, m, s, n=8)), kernel=k, pad=1)])
    ref = ref_requant(ref_conv_acc(x, wq, 0, pad=(1, 1, 1, 1)), m, s, -128, 127)
    np.testing.assert_array_equal(hw.read(fo), ref)


def test_reduction_past_int32_is_exact(hw, rng, dev):
    """K so long that an int32 accumulator would wrap (144,000 products of 16,256): the
    integer GEMM leaves it to the float K-chunk path, which sums chunks in int64."""
    dev.sim.int_gemm = True
    cin, k = 16000, 3
    x = np.full((3, 3, cin), -128, dtype=np.int8)
    wq = np.full((k, k, cin, 2), -127, dtype=np.int8)
    wq[..., 1] = 127
    m, s = rand_requant(rng, 2, 1 / 5e9)
    fi, fo = hw.fmap_in(x), hw.fmap_out(1, 1, 2)
    hw.run([asm.Conv(fi, fo, hw.put(asm.pack_conv_weights(wq)),
                     hw.put(asm.pack_requant_params(0, m, s, n=2)), kernel=k)])
    acc = ref_conv_acc(x, wq, 0)
    assert abs(acc).max() > 2**31
    np.testing.assert_array_equal(hw.read(fo), ref_requant(acc, m, s, -128, 127))


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_random_conv_configs(hw, data, gemm):
    d = data.draw
    dtype = d(st.sampled_from(["int8", "int8", "int16"]))
    kind = d(st.sampled_from(["dense", "grouped", "depthwise"]))
    kh, kw = d(st.integers(1, 4)), d(st.integers(1, 4))
    sh, sw = d(st.integers(1, 3)), d(st.integers(1, 3))
    dh, dw = d(st.integers(1, 2)), d(st.integers(1, 2))
    pads = tuple(d(st.integers(0, 2)) for _ in range(4))
    if kind == "depthwise":
        g = cin = cout = d(st.integers(2, 40))
    elif kind == "grouped":
        g = d(st.integers(2, 4))
        cin, cout = g * d(st.integers(1, 12)), g * d(st.integers(1, 12))
    else:
        g, cin, cout = 1, d(st.integers(1, 70)), d(st.integers(1, 70))
    h = d(st.integers(dh * (kh - 1) + 1, 12))
    w = d(st.integers(dw * (kw - 1) + 1, 12))
    rng = np.random.default_rng(d(st.integers(0, 2**32 - 1)))
    relu, leaky = d(st.booleans()), d(st.booleans())
    extra = d(st.sampled_from([0, 0, 3, 16]))  # a channel window inside a wider output map
    c_off = d(st.integers(0, extra))
    got, ref, _ = _run_conv(hw, rng, h, w, cin, cout, (kh, kw), (sh, sw), pads, (dh, dw), g,
                            dtype, relu=relu, leaky=leaky,
                            out_pitch=cout + extra if extra else None, out_c_off=c_off)
    np.testing.assert_array_equal(got, ref)
    hw.off = 64  # reuse the scratch memory between examples

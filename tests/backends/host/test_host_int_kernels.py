"""HostBackend integer kernels against integer references computed here, in numpy.

The references follow docs/quantization.md ("Integer ops") literally: exact int64 sums, then
`(acc * m + 2**(s-1)) >> s`, the folded activation, saturation. Only the multipliers come from
xir.quant (`requant_multiplier`), since deriving them is the documented part every component
shares.
"""

from __future__ import annotations

import numpy as np
import pytest

from host_backend.ops import INT_KERNELS
from xir.quant import quantize_multiplier, requant_multiplier
from xir.quant.fixed_point import add_rescale_params, round_half_away
from xir.quant.lut import LUT_FUNCTIONS
from xir.types import FP32, INT8, INT16, INT32, INT64, Layout, QuantizedType, TensorType

DT = {8: (INT8, np.int8, INT32, np.int32), 16: (INT16, np.int16, INT64, np.int64)}


def qt(bits, scale, shape, axis=None, layout=None):
    return TensorType(QuantizedType(DT[bits][0], scale, axis=axis), shape, layout)


def bias_t(bits, scale, shape, axis=0):
    return TensorType(QuantizedType(DT[bits][2], scale, axis=axis), shape)


def ref_rq(acc, m, s, dtype, relu=False, hi=None, leaky=None):
    acc = np.asarray(acc, np.int64)
    m = np.asarray(m, np.int64)
    s = np.asarray(s, np.int64)
    if leaky is not None:
        m = np.where(acc < 0, np.asarray(leaky[0], np.int64), m)
        s = np.where(acc < 0, np.asarray(leaky[1], np.int64), s)
    p = acc * m
    r = np.where(s > 0, (p + (np.int64(1) << np.maximum(s - 1, 0))) >> s, p)
    info = np.iinfo(dtype)
    lo = 0 if relu else info.min
    top = info.max if hi is None else min(info.max, hi)
    return np.clip(r, lo, top).astype(dtype)


def ref_conv(qx, qw, sh, sw, pads, groups, dil=(1, 1)):
    """Direct int64 convolution, NHWC x HWIO, one tap at a time."""
    pt, pb, pl, pr = pads
    x = np.pad(qx.astype(np.int64), ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    n, h, w, cin = x.shape
    kh, kw, cig, cout = qw.shape
    og = cout // groups
    ho = (h - dil[0] * (kh - 1) - 1) // sh + 1
    wo = (w - dil[1] * (kw - 1) - 1) // sw + 1
    acc = np.zeros((n, ho, wo, cout), np.int64)
    w64 = qw.astype(np.int64)
    for g in range(groups):
        for i in range(kh):
            for j in range(kw):
                patch = x[:, i * dil[0]:i * dil[0] + sh * (ho - 1) + 1:sh,
                          j * dil[1]:j * dil[1] + sw * (wo - 1) + 1:sw, g * cig:(g + 1) * cig]
                acc[..., g * og:(g + 1) * og] += np.einsum("nhwc,co->nhwo", patch,
                                                           w64[i, j, :, g * og:(g + 1) * og])
    return acc


def rand_q(rng, shape, bits, narrow=False):
    info = np.iinfo(DT[bits][1])
    lo = -info.max if narrow else info.min
    return rng.integers(lo, info.max + 1, size=shape).astype(DT[bits][1])


CONV_CASES = [
    # (h, w, cin, cout, k, stride, pads, groups, dilation)
    (9, 8, 4, 6, 3, 1, (1, 1, 1, 1), 1, 1),
    (10, 10, 8, 8, 3, 2, (1, 0, 1, 2), 1, 1),
    (8, 8, 6, 6, 3, 1, (1, 1, 1, 1), 6, 1),       # depthwise
    (8, 9, 4, 8, 3, 2, (0, 1, 1, 0), 4, 1),       # depthwise, channel multiplier 2
    (7, 7, 8, 6, 3, 1, (2, 2, 2, 2), 2, 2),       # groups 2, dilation 2
    (6, 6, 8, 5, 1, 1, (0, 0, 0, 0), 1, 1),       # pointwise
    (5, 5, 128, 4, 3, 1, (1, 1, 1, 1), 1, 1),     # K = 1152 > 1024: chunked float32 sums
]


@pytest.mark.parametrize("bits", [8, 16])
@pytest.mark.parametrize("case", CONV_CASES)
@pytest.mark.parametrize("act", ["none", "relu", "relu6", "leaky"])
def test_conv2d_int_matches_reference(rng, bits, case, act):
    h, w, cin, cout, k, stride, pads, groups, dil = case
    qx = rand_q(rng, (1, h, w, cin), bits)
    qw = rand_q(rng, (k, k, cin // groups, cout), bits, narrow=True)
    qb = rng.integers(-5000, 5000, cout).astype(DT[bits][3])
    s_x, s_y = 0.02, 0.05 * (1 if bits == 8 else 0.01)
    s_w = rng.uniform(1e-4, 1e-3, cout)
    attrs = dict(stride_height=stride, stride_width=stride, pad_top=pads[0], pad_bottom=pads[1],
                 pad_left=pads[2], pad_right=pads[3], groups=groups, dilation_height=dil,
                 dilation_width=dil)
    relu, hi, leaky = False, None, None
    m, s = requant_multiplier(s_x, s_w, s_y)
    if act != "none":
        attrs["act"] = "relu"
    if act == "relu":
        relu = True
    if act == "relu6":
        attrs["act_max"] = 6.0 * s_y * 20  # a clip inside the range
        relu, hi = True, int(round_half_away(np.float64(attrs["act_max"]) / s_y))
    if act == "leaky":
        attrs["act_alpha"] = 0.1
        leaky = quantize_multiplier(0.1 * ((np.float64(s_x) * s_w) / np.float64(s_y)))
    acc = ref_conv(qx, qw, stride, stride, pads, groups, (dil, dil)) + qb.astype(np.int64)
    want = ref_rq(acc, m, s, DT[bits][1], relu, hi, leaky)
    in_types = [qt(bits, s_x, qx.shape), qt(bits, s_w, qw.shape, axis=3),
                bias_t(bits, s_x * s_w, qb.shape)]
    got = INT_KERNELS["Conv2d"]([qx, qw, qb], attrs, in_types,
                                [qt(bits, s_y, want.shape)])[0]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_conv_transpose2d_int(rng):
    qx = rand_q(rng, (1, 4, 5, 3), 8)
    qw = rand_q(rng, (3, 3, 3, 4), 8, narrow=True)
    s_x, s_w, s_y = 0.03, np.full(4, 0.002), 0.01
    attrs = dict(stride_height=2, stride_width=2, pad_top=1, pad_bottom=1, pad_left=1,
                 pad_right=1)
    # reference: scatter every input pixel times the kernel, then crop
    full = np.zeros((1, 3 * 2 + 3, 4 * 2 + 3, 4), np.int64)
    for y in range(4):
        for x in range(5):
            full[0, 2 * y:2 * y + 3, 2 * x:2 * x + 3] += np.einsum(
                "c,ijco->ijo", qx[0, y, x].astype(np.int64), qw.astype(np.int64))
    acc = full[:, 1:-1, 1:-1]
    m, s = requant_multiplier(s_x, s_w, s_y)
    want = ref_rq(acc, m, s, np.int8)
    got = INT_KERNELS["ConvTranspose2d"]([qx, qw], attrs, [qt(8, s_x, qx.shape),
                                                           qt(8, s_w, qw.shape, axis=3)],
                                         [qt(8, s_y, want.shape)])[0]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("bits", [8, 16])
def test_matmul_int(rng, bits):
    qa = rand_q(rng, (3, 1500), bits)
    qb = rand_q(rng, (1500, 7), bits, narrow=True)
    qbias = rng.integers(-1000, 1000, 7).astype(DT[bits][3])
    s_a, s_b, s_y = 0.01, rng.uniform(1e-4, 2e-4, 7), 0.5 if bits == 8 else 0.002
    acc = qa.astype(np.int64) @ qb.astype(np.int64) + qbias
    m, s = requant_multiplier(s_a, s_b, s_y)
    want = ref_rq(acc, m, s, DT[bits][1])
    got = INT_KERNELS["Matmul"]([qa, qb, qbias], {}, [qt(bits, s_a, qa.shape),
                                                      qt(bits, s_b, qb.shape, axis=1),
                                                      bias_t(bits, s_a * s_b, (7,))],
                                [qt(bits, s_y, want.shape)])[0]
    np.testing.assert_array_equal(got, want)


def ref_add(qa, qb, s_a, s_b, s_y, dtype, sign=1, relu=False):
    (ma, sa), (mb, sb) = (tuple(int(v) for v in requant_multiplier(x, 1.0, s_y))
                          for x in (s_a, s_b))
    for _ in range(1):  # the documented shift-difference rule, D = 16
        if sa - sb > 16:
            k = sa - sb - 16
            ma, sa = (ma + (1 << (k - 1))) >> k, sa - k
        if sb - sa > 16:
            k = sb - sa - 16
            mb, sb = (mb + (1 << (k - 1))) >> k, sb - k
    S = max(sa, sb)
    acc = qa.astype(np.int64) * (ma << (S - sa)) + sign * qb.astype(np.int64) * (mb << (S - sb))
    return ref_rq(acc, 1, S, dtype, relu)


@pytest.mark.parametrize("bits", [8, 16])
@pytest.mark.parametrize("scales", [(0.02, 0.05, 0.04), (0.3, 1e-4, 0.25), (1e-6, 0.2, 0.1)])
def test_add_sub_with_different_scales(rng, bits, scales):
    s_a, s_b, s_y = scales
    qa = rand_q(rng, (2, 5, 5, 3), bits)
    qb = rand_q(rng, (1, 5, 1, 3), bits)  # broadcasts
    dt = DT[bits][1]
    types = [qt(bits, s_a, qa.shape), qt(bits, s_b, qb.shape)]
    out = [qt(bits, s_y, qa.shape)]
    got = INT_KERNELS["Add"]([qa, qb], {"act": "relu"}, types, out)[0]
    np.testing.assert_array_equal(got, ref_add(qa, qb, s_a, s_b, s_y, dt, relu=True))
    got = INT_KERNELS["Sub"]([qa, qb], {}, types, out)[0]
    np.testing.assert_array_equal(got, ref_add(qa, qb, s_a, s_b, s_y, dt, sign=-1))
    (_, sa), (_, sb), _ = add_rescale_params(s_a, s_b, s_y)
    assert abs(sa - sb) <= 16


def test_multiply_int(rng):
    qa, qb = rand_q(rng, (1, 4, 4, 3), 8), rand_q(rng, (1, 1, 1, 3), 8)
    m, s = requant_multiplier(0.05, 0.01, 0.02)
    want = ref_rq(qa.astype(np.int64) * qb.astype(np.int64), m, s, np.int8)
    got = INT_KERNELS["Multiply"]([qa, qb], {}, [qt(8, 0.05, qa.shape), qt(8, 0.01, qb.shape)],
                                  [qt(8, 0.02, qa.shape)])[0]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("bits", [8, 16])
def test_avgpool_int(rng, bits):
    qx = rand_q(rng, (1, 7, 6, 4), bits)
    dt = DT[bits][1]
    s_x, s_y = 0.03, 0.02
    # global
    acc = qx.astype(np.int64).sum(axis=(1, 2), keepdims=True)
    m, s = requant_multiplier(s_x, 1.0 / 42, s_y)
    got = INT_KERNELS["AvgPool2d"]([qx], {"is_global": True}, [qt(bits, s_x, qx.shape)],
                                   [qt(bits, s_y, acc.shape)])[0]
    np.testing.assert_array_equal(got, ref_rq(acc, m, s, dt))
    # 3x3 / 2, pad 1, count_include_pad False: border windows divide by fewer taps
    attrs = dict(pool_height=3, pool_width=3, stride_height=2, stride_width=2, pad_top=1,
                 pad_bottom=1, pad_left=1, pad_right=1)
    xp = np.pad(qx.astype(np.int64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    ones = np.pad(np.ones((7, 6), np.int64), 1)
    ho, wo = 4, 3
    want = np.zeros((1, ho, wo, 4), dt)
    for i in range(ho):
        for j in range(wo):
            win = xp[:, 2 * i:2 * i + 3, 2 * j:2 * j + 3].sum(axis=(1, 2))
            n = int(ones[2 * i:2 * i + 3, 2 * j:2 * j + 3].sum())
            m, s = requant_multiplier(s_x, 1.0 / n, s_y)
            want[:, i, j] = ref_rq(win, m, s, dt)
    got = INT_KERNELS["AvgPool2d"]([qx], attrs, [qt(bits, s_x, qx.shape)],
                                   [qt(bits, s_y, want.shape)])[0]
    np.testing.assert_array_equal(got, want)


def test_maxpool_int_pads_with_qmin(rng):
    qx = -np.abs(rand_q(rng, (1, 4, 4, 2), 8)).astype(np.int8) - 1  # all negative
    attrs = dict(pool_height=3, pool_width=3, stride_height=1, stride_width=1, pad_top=1,
                 pad_bottom=1, pad_left=1, pad_right=1)
    t = qt(8, 0.1, qx.shape)
    got = INT_KERNELS["MaxPool2d"]([qx], attrs, [t], [t])[0]
    xp = np.pad(qx, ((0, 0), (1, 1), (1, 1), (0, 0)), constant_values=-128)
    want = np.max([xp[:, i:i + 4, j:j + 4] for i in range(3) for j in range(3)], axis=0)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("bits", [8, 16])
@pytest.mark.parametrize("op,fn", [("Silu", "silu"), ("Sigmoid", "sigmoid"), ("Tanh", "tanh"),
                                   ("Hardswish", "hardswish"), ("Power", "power")])
def test_lut_ops(rng, bits, op, fn):
    """Every input code through the table; Power's parameters from its attributes (a base
    that crosses zero: 0 where a negative base has no real power, saturated at 0**-0.5)."""
    dt = DT[bits][1]
    info = np.iinfo(dt)
    q = np.arange(info.min, info.max + 1, dtype=dt).reshape(1, 1, -1, 1)
    s_x, s_y = 8.0 / info.max, 6.0 / info.max
    attrs = {"power": -0.5, "scale": 0.5, "shift": 1.0} if op == "Power" else {}
    v = LUT_FUNCTIONS[fn](q.astype(np.float64) * s_x, *attrs.values()) / s_y
    if op == "Power":
        assert (1.0 + 0.5 * q.astype(np.float64) * s_x < 0).any()
    want = np.clip(round_half_away(v), info.min, info.max).astype(dt)
    got = INT_KERNELS[op]([q], attrs, [qt(bits, s_x, q.shape)], [qt(bits, s_y, q.shape)])[0]
    np.testing.assert_array_equal(got, want)


def test_relu_standalone_int(rng):
    qx = rand_q(rng, (1, 3, 3, 5), 8)
    m, s = requant_multiplier(0.05, 1.0, 0.04)
    leaky = quantize_multiplier(0.2 * (0.05 / 0.04))
    got = INT_KERNELS["Relu"]([qx], {"alpha": 0.2}, [qt(8, 0.05, qx.shape)],
                              [qt(8, 0.04, qx.shape)])[0]
    np.testing.assert_array_equal(got, ref_rq(qx, m, s, np.int8, leaky=leaky))


def test_bilinear_upsample_int(rng):
    qx = rand_q(rng, (1, 3, 4, 2), 8)
    got = INT_KERNELS["Upsample"]([qx], {"mode": "bilinear"}, [qt(8, 0.1, qx.shape)],
                                  [qt(8, 0.1, (1, 6, 8, 2))])[0]
    # half_pixel, scale 2: source coordinate (o + 0.5) / 2 - 0.5, clamped to the edges
    def weights(n_out, n_in):
        c = np.clip((np.arange(n_out) + 0.5) / 2 - 0.5, 0, n_in - 1)
        i0 = np.floor(c).astype(int)
        i1 = np.minimum(i0 + 1, n_in - 1)
        w1 = round_half_away((c - i0) * 1024).astype(np.int64)
        return i0, i1, 1024 - w1, w1
    y0, y1, wy0, wy1 = weights(6, 3)
    x0, x1, wx0, wx1 = weights(8, 4)
    q = qx.astype(np.int64)
    rows = q[:, y0] * wy0[None, :, None, None] + q[:, y1] * wy1[None, :, None, None]
    acc = rows[:, :, x0] * wx0[None, None, :, None] + rows[:, :, x1] * wx1[None, None, :, None]
    m, s = requant_multiplier(0.1, 2.0 ** -20, 0.1)
    np.testing.assert_array_equal(got, ref_rq(acc, m, s, np.int8))


@pytest.mark.parametrize("bits", [8, 16])
def test_cast_float_quant_roundtrip(rng, bits):
    dt = DT[bits][1]
    x = rng.normal(0, 2, (1, 4, 4, 3)).astype(np.float32)
    x[0, 0, 0, 0] = 1e6  # saturates
    s = 0.01 if bits == 8 else 1e-4
    ft, q_t = TensorType(FP32, x.shape), qt(bits, s, x.shape)
    q = INT_KERNELS["Cast"]([x], {}, [ft], [q_t])[0]
    info = np.iinfo(dt)
    want = np.clip(round_half_away(x.astype(np.float64) / s), info.min, info.max).astype(dt)
    np.testing.assert_array_equal(q, want)
    back = INT_KERNELS["Cast"]([q], {}, [q_t], [ft])[0]
    assert back.dtype == np.float32
    np.testing.assert_array_equal(back, (q.astype(np.float64) * s).astype(np.float32))
    # q -> q rescale
    q2 = INT_KERNELS["Cast"]([q], {}, [q_t], [qt(bits, 2 * s, x.shape)])[0]
    m, sh = requant_multiplier(s, 1.0, 2 * s)
    np.testing.assert_array_equal(q2, ref_rq(q, m, sh, dt))


def test_cast_retiles_layout(rng):
    x = rng.normal(0, 1, (1, 20, 3, 3)).astype(np.float32)  # NCHW, C = 20
    src = TensorType(FP32, x.shape, "NCHW")
    dst = TensorType(QuantizedType(INT8, 0.05), (1, 2, 3, 3, 16), Layout("NCHWc16"))
    y = INT_KERNELS["Cast"]([x], {}, [src], [dst])[0]
    assert y.shape == (1, 2, 3, 3, 16) and y.dtype == np.int8
    q = np.clip(round_half_away(x / 0.05), -128, 127)
    np.testing.assert_array_equal(y[0, 0, :, :, :], np.moveaxis(q[0, :16], 0, -1))
    np.testing.assert_array_equal(y[0, 1, :, :, :4], np.moveaxis(q[0, 16:], 0, -1))
    assert not y[0, 1, :, :, 4:].any()  # the padding of the last tile
    back = INT_KERNELS["Cast"]([y], {}, [dst], [src])[0]
    np.testing.assert_array_equal(back[0], (q[0] * 0.05).astype(np.float32))


def test_fake_qf_has_no_rounding_or_saturation(rng):
    qx = rand_q(rng, (1, 6, 6, 8), 8)
    qw = rand_q(rng, (3, 3, 8, 4), 8, narrow=True)
    s_w = np.full(4, 0.01)
    types = [qt(8, 0.02, qx.shape), qt(8, s_w, qw.shape, axis=3)]
    out = [qt(8, 0.05, (1, 4, 4, 4))]
    exact = INT_KERNELS["Conv2d"]([qx, qw], {}, types, out)[0]
    fake = INT_KERNELS["Conv2d"]([qx.astype(np.float64), qw], {}, types, out, fake=True)[0]
    assert fake.dtype == np.float64
    acc = ref_conv(qx, qw, 1, 1, (0, 0, 0, 0), 1)
    m, s = requant_multiplier(0.02, s_w, 0.05)
    np.testing.assert_allclose(fake, acc * (m * 2.0 ** -s.astype(np.float64)), rtol=1e-12)
    inside = np.abs(fake) < 127
    assert np.all(np.abs(exact[inside] - fake[inside]) <= 0.5)
    assert np.any(~inside) and np.all(np.abs(exact[~inside].astype(np.int64)) >= 127)


def _softmax_f64(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("bits,s_in", [(8, 0.06), (16, 0.0009), (16, 2e-5)])
def test_softmax_int_is_the_rounded_float_softmax(rng, bits, s_in):
    """The integer Softmax (xir.quant.rownorm) lands within a rounding (half a code, plus the
    exponential table's 2**-20) of the float softmax of the dequantized codes; its fakeQf
    twin is that float softmax unrounded."""
    n = 96
    info = np.iinfo(DT[bits][1])
    q = rng.integers(-2000, 2000, size=(3, 7, n)).clip(info.min, info.max).astype(info.dtype)
    s_out = 1.0 / 127
    types = ([qt(bits, s_in, q.shape)], [qt(8, s_out, q.shape)])
    (y,) = INT_KERNELS["Softmax"]([q], {"axis": -1}, *types)
    want = _softmax_f64(q.astype(np.float64) * s_in) / s_out
    assert y.dtype == np.int8
    assert np.abs(y - want).max() <= 0.5 + 1e-3
    (fake,) = INT_KERNELS["Softmax"]([q.astype(np.float64)], {"axis": -1}, *types, fake=True)
    np.testing.assert_allclose(fake, want, rtol=1e-6, atol=1e-9)
    with pytest.raises(ValueError, match="last axis"):
        INT_KERNELS["Softmax"]([q], {"axis": 1}, *types)


@pytest.mark.parametrize("bits", [8, 16])
def test_layer_norm_int_is_the_rounded_float_layer_norm(rng, bits):
    """The integer LayerNorm: exact integer statistics, so within half a code (and float64
    noise) of the float LayerNorm of the dequantized codes, saturated; constant rows give the
    bias."""
    n, s_in, eps = 128, 0.02 if bits == 8 else 1e-4, 1e-5
    info = np.iinfo(DT[bits][1])
    q = rng.integers(info.min, info.max + 1, size=(5, n)).astype(DT[bits][1])
    q[0] = 7  # a constant row
    gamma = rng.normal(1, 0.3, n).astype(np.float32)
    beta = rng.normal(0, 0.2, n).astype(np.float32)
    s_out = 3.0 / 127
    types = ([qt(bits, s_in, q.shape), TensorType(FP32, [n]), TensorType(FP32, [n])],
             [qt(8, s_out, q.shape)])
    (y,) = INT_KERNELS["LayerNorm"]([q, gamma, beta], {"axis": -1, "epsilon": eps}, *types)
    x = q.astype(np.float64) * s_in
    z = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps)
    want = (z * gamma + beta) / s_out
    assert y.dtype == np.int8
    assert np.abs(y - np.clip(want, -128, 127)).max() <= 0.5 + 1e-6
    np.testing.assert_array_equal(y[0], np.clip(round_half_away(beta / s_out), -128, 127))
    (fake,) = INT_KERNELS["LayerNorm"]([q.astype(np.float64), gamma, beta],
                                       {"axis": -1, "epsilon": eps}, *types, fake=True)
    np.testing.assert_allclose(fake, want, rtol=1e-5, atol=1e-4)

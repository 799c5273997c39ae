"""Fast paths of the NPU model's kernels for small networks (issue 30: MobileNetV3's stem,
pointwise and depthwise layers, its NCHW input going NHWC) against the plain forms they
replace, byte for byte."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.lib.stride_tricks import as_strided

from npu_model.kernels import vector


def _permute_numpy(x, xrs, xpitch, xcoff, h, w, c, y, yrs, ypitch, ycoff, perm):
    """COPY PERMUTE as one strided numpy assignment (the form `vector.permute_walk` replaced)."""
    e = x.itemsize
    xv = as_strided(x[xcoff:], (h, w, c), (xrs * e, xpitch * e, e)).transpose(perm)
    as_strided(y[ycoff:], xv.shape, (yrs * e, ypitch * e, e))[...] = xv.copy()


@settings(max_examples=60, deadline=None)
@given(dims=st.tuples(*[st.integers(1, 9)] * 3), perm=st.sampled_from(
    list(itertools.permutations(range(3)))), pads=st.tuples(*[st.integers(0, 4)] * 4),
    wide=st.booleans(), seed=st.integers(0, 2**16))
def test_permute_walk_is_the_strided_copy(dims, perm, pads, wide, seed):
    """Every axis order, pitches and row strides wider than the map, channel offsets: the
    bytes outside the written elements stay as they were."""
    rng = np.random.default_rng(seed)
    dt = np.int16 if wide else np.int8
    h, w, c = dims
    xpitch, xcoff = c + pads[0], pads[1]
    xrs = w * xpitch + pads[2]
    x = rng.integers(-128, 128, xcoff + h * xrs + 3).astype(dt)
    shape = tuple(dims[a] for a in perm)
    ypitch, ycoff = shape[2] + pads[3], pads[0]
    yrs = shape[1] * ypitch + pads[1]
    got = rng.integers(-128, 128, ycoff + shape[0] * yrs + 2).astype(dt)
    want = got.copy()
    vector.permute(x, xrs, xpitch, xcoff, h, w, c, got, yrs, ypitch, ycoff, *perm)
    _permute_numpy(x, xrs, xpitch, xcoff, h, w, c, want, yrs, ypitch, ycoff, perm)
    assert got.tobytes() == want.tobytes()


def test_permute_of_a_network_input_and_of_overlapping_operands():
    """The NCHW input (3 x 224 x 224, 32-channel pitch out) takes the walk; operands sharing
    memory take numpy's copy, which reads the source whole before writing."""
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, 3 * 224 * 224).astype(np.int8)
    got = np.zeros(224 * 224 * 32, np.int8)
    want = got.copy()
    args = (224 * 224, 224, 0, 3, 224, 224)
    vector.permute(x, *args, got, 224 * 32, 32, 0, 1, 2, 0)
    _permute_numpy(x, *args, want, 224 * 32, 32, 0, (1, 2, 0))
    assert got.tobytes() == want.tobytes()
    buf = rng.integers(-128, 128, 64).astype(np.int8)
    want = buf.copy()
    _permute_numpy(buf.copy(), 4, 1, 0, 4, 4, 1, want, 4, 1, 0, (1, 0, 2))
    vector.permute(buf, 4, 1, 0, 4, 4, 1, buf, 4, 1, 0, 1, 0, 2)  # an in-place transpose
    assert buf.tobytes() == want.tobytes()


def _conv_extreme_requant(hw, rng, dtype, h, w, cin, cout, k, stride, groups, leaky,
                          out_pitch, c_off, big):
    """One convolution whose requantization parameters span their whole record ranges
    (int32 multipliers of either sign, shifts 0..63, biases near the int64 ends when `big`:
    products that wrap), against the numpy reference, which wraps alike."""
    from npu_testlib import rand_requant, ref_conv_acc, ref_requant

    from npu_model import asm
    from xir.quant.fixed_point import clip_bounds

    npdt = np.int8 if dtype == "int8" else np.int16
    info = np.iinfo(npdt)
    x = rng.integers(info.min, info.max + 1, (h, w, cin)).astype(npdt)
    wq = rng.integers(-info.max, info.max + 1, (k, k, cin // groups, cout)).astype(npdt)
    kk = k * k * cin // groups
    if big:  # anything the records hold: products wrap, most outputs saturate
        bias = rng.integers(-(1 << 62), 1 << 62, cout)
        m, s = rng.integers(-(1 << 31), 1 << 31, cout), rng.integers(0, 64, cout)
        mn, sn = rng.integers(-(1 << 31), 1 << 31, cout), rng.integers(0, 64, cout)
    else:  # a layer's scales: outputs spread over the range, every rounding counts
        bias = rng.integers(-(1 << 20), 1 << 20, cout)
        m, s = rand_requant(rng, cout, 2.0 / (kk * (30 if dtype == "int8" else 3000)))
        mn, sn = rand_requant(rng, cout, 0.2 / (kk * (30 if dtype == "int8" else 3000)))
    if not leaky:
        mn, sn = None, None
    lo, hi = clip_bounds(npdt, relu=False)
    pad = (k // 2,) * 4
    oh, ow = asm.conv_out_hw(h, w, (k, k), (stride, stride), pad, (1, 1))
    fo = hw.fmap_out(oh, ow, cout, dtype, pitch=out_pitch, c_off=c_off)
    hw.run([asm.Conv(hw.fmap_in(x), fo, hw.put(asm.pack_conv_weights(wq, groups, dtype, hw.cfg)),
                     hw.put(asm.pack_requant_params(bias, m, s, mn, sn)), kernel=(k, k),
                     stride=(stride, stride), pad=pad, groups=groups, clip=(lo, hi))])
    acc = ref_conv_acc(x, wq, 0, (stride, stride), pad, (1, 1), groups)
    with np.errstate(over="ignore"):
        want = ref_requant(acc + bias.astype(np.int64), m, s, lo, hi, mn, sn)
    return hw.read(fo), want.astype(npdt)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_requantization_over_whole_parameter_ranges(hw, data):
    """The one-sided requantization with the bias folded into the rounding term
    (`mpe._fold_params`) gives the bits of ``((acc + bias) * m + rounding) >> s`` for any
    parameters the records hold, in dense, 1x1 and depthwise layers, pitched outputs too."""
    d = data.draw
    dtype = d(st.sampled_from(["int8", "int8", "int16"]))
    kind = d(st.sampled_from(["dense", "pointwise", "depthwise"]))
    k = 1 if kind == "pointwise" else d(st.sampled_from([3, 5]))
    cin = d(st.integers(1, 40))
    cout, groups = (cin, cin) if kind == "depthwise" else (d(st.integers(1, 70)), 1)
    extra = d(st.sampled_from([0, 0, 5, 32]))
    got, want = _conv_extreme_requant(
        hw, np.random.default_rng(d(st.integers(0, 2**32 - 1))), dtype, d(st.integers(k, 9)),
        d(st.integers(k, 9)), cin, cout, k, d(st.integers(1, 2)), groups, d(st.booleans()),
        cout + extra if extra else None, d(st.integers(0, extra)), d(st.booleans()))
    assert got.tobytes() == want.tobytes()
    hw.off = 64


@settings(max_examples=50, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_depthwise_on_pitched_rows(hw, data):
    """int8 depthwise layers of any kernel width, stride, dilation and padding, on maps whose
    pitch is wider than their channels (unit-stride rows taken as pitch-wide runs, `cc`
    accumulators a pixel, where the pitch is at most twice the channels), extreme weights
    (-128) too, one- and two-sided requantization, against numpy integers."""
    from npu_testlib import rand_requant, ref_conv_acc, ref_requant

    from npu_model import asm

    d = data.draw
    rng = np.random.default_rng(d(st.integers(0, 2**32 - 1)))
    c = d(st.integers(1, 70))
    kh, kw = d(st.integers(1, 5)), d(st.sampled_from([1, 2, 3, 3, 5, 5, 6]))
    sh, sw = d(st.integers(1, 3)), d(st.integers(1, 3))
    dh, dw = d(st.integers(1, 2)), d(st.integers(1, 2))
    pad = tuple(d(st.integers(0, 2)) for _ in range(4))
    h = d(st.integers(dh * (kh - 1) + 1, 14))
    w = d(st.integers(dw * (kw - 1) + 1, 30))
    x = rng.integers(-128, 128, (h, w, c)).astype(np.int8)
    wq = rng.integers(-127, 128, (kh, kw, 1, c)).astype(np.int8)
    if d(st.booleans()):  # one weight at the int8 end
        wq.flat[d(st.integers(0, wq.size - 1))] = -128
    bias = rng.integers(-5000, 5000, c)
    m, s = rand_requant(rng, c, 2.0 / (kh * kw * 30))
    leaky = d(st.booleans())
    mn, sn = rand_requant(rng, c, 0.2 / (kh * kw * 30)) if leaky else (None, None)
    extra = d(st.sampled_from([0, 8, 32]))
    oh, ow = asm.conv_out_hw(h, w, (kh, kw), (sh, sw), pad, (dh, dw))
    fo = hw.fmap_out(oh, ow, c, "int8", pitch=c + extra if extra else None)
    hw.run([asm.Conv(hw.fmap_in(x, pitch=c + d(st.sampled_from([0, 3, 16]))), fo,
                     hw.put(asm.pack_conv_weights(wq, c, "int8", hw.cfg)),
                     hw.put(asm.pack_requant_params(bias, m, s, mn, sn)), kernel=(kh, kw),
                     stride=(sh, sw), pad=pad, dilation=(dh, dw), groups=c, clip=(-128, 127))])
    acc = ref_conv_acc(x, wq, bias, (sh, sw), pad, (dh, dw), c)
    want = ref_requant(acc, m, s, -128, 127, mn, sn).astype(np.int8)
    assert hw.read(fo).tobytes() == want.tobytes()
    hw.off = 64


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_eltw_int32_form_and_the_int64_one(hw, data):
    """ELTW add / sub / mul, broadcast or not, pitched maps: where the accumulators fit int32
    and both signs requantize alike the kernel takes the int32 form (`vector._eltw_run32`),
    else the int64 one; both against numpy integers, scales up to the field widths."""
    from npu_testlib import ref_requant

    from npu_model import asm

    d = data.draw
    rng = np.random.default_rng(d(st.integers(0, 2**32 - 1)))
    npdt = d(st.sampled_from([np.int8, np.int8, np.int16]))
    info = np.iinfo(npdt)
    op = d(st.sampled_from(["add", "sub", "mul"]))
    h, w, c = d(st.integers(1, 6)), d(st.integers(1, 9)), d(st.integers(1, 40))
    bcast = d(st.booleans())
    a = rng.integers(info.min, info.max + 1, (h, w, c)).astype(npdt)
    b = rng.integers(info.min, info.max + 1, (1, 1, c) if bcast else (h, w, c)).astype(npdt)
    big = d(st.booleans())  # ka, kb past the int32 bound of the narrow form
    ka = int(rng.integers(-(1 << 30), 1 << 30)) if big else int(rng.integers(-(1 << 14), 1 << 14))
    kb = int(rng.integers(-(1 << 30), 1 << 30)) if big else int(rng.integers(-(1 << 14), 1 << 14))
    if op == "mul" and not big:
        ka, kb = int(rng.integers(-3, 4)), int(rng.integers(-3, 4))
    m = int(rng.integers(-(1 << 31), 1 << 31))
    s = int(rng.integers(0, 64))
    mn, sn = ((int(rng.integers(-(1 << 31), 1 << 31)), int(rng.integers(0, 64)))
              if d(st.booleans()) else (None, None))
    fo = hw.fmap_out(h, w, c, "int8" if npdt == np.int8 else "int16",
                     pitch=c + d(st.sampled_from([0, 5, 32])))
    hw.run([asm.Eltw(hw.fmap_in(a, pitch=c + d(st.sampled_from([0, 7]))), hw.fmap_in(b), fo, op,
                     ka, kb, m, s, mn, sn, clip=(info.min, info.max))])
    va, vb = a.astype(np.int64) * ka, b.astype(np.int64) * kb
    with np.errstate(over="ignore"):
        acc = {"add": va + vb, "sub": va - vb, "mul": va * vb}[op]
        want = ref_requant(acc, m, s, info.min, info.max, mn, sn).astype(npdt)
    assert hw.read(fo).tobytes() == want.tobytes()
    hw.off = 64


@settings(max_examples=60, deadline=None)
@given(h=st.integers(1, 5), w=st.integers(1, 9), c=st.integers(1, 150),
       pads=st.tuples(*[st.integers(0, 70)] * 4), seed=st.integers(0, 2**16))
def test_byte_lut_is_the_table_walk(h, w, c, pads, seed):
    """int8 LUT layers through the byte lookup (`bytelut.lut_bytes`: 64 channels a step, the
    last masked) give the bytes of the value-at-a-time walk, pitched maps' other channels
    untouched, dense maps as one run; other tables and dtypes take the walk."""
    import pytest

    from npu_model.kernels import bytelut

    if not bytelut.enabled():
        pytest.skip("no AVX-512 VBMI on this CPU")
    rng = np.random.default_rng(seed)
    table = rng.integers(-128, 128, 256).astype(np.int8)
    xpitch, ypitch = c + pads[0], c + pads[1]
    xrs, yrs = w * xpitch + pads[2], w * ypitch + pads[3]
    x = rng.integers(-128, 128, pads[2] + h * xrs).astype(np.int8)
    got = rng.integers(-128, 128, pads[3] + h * yrs + 64).astype(np.int8)
    want = got.copy()
    args = (xrs, xpitch, pads[2] % 7)
    vector.lut(x, *args, table, -128, got, yrs, ypitch, pads[3] % 5, h, w, c)
    vector.lut_walk(x, *args, table, -128, want, yrs, ypitch, pads[3] % 5, h, w, c)
    assert got.tobytes() == want.tobytes()
    dense_x = rng.integers(-128, 128, h * w * c).astype(np.int8)
    dense_y = np.zeros(h * w * c, np.int8)
    vector.lut(dense_x, w * c, c, 0, table, -128, dense_y, w * c, c, 0, h, w, c)
    assert dense_y.tobytes() == table[dense_x.astype(np.int64) + 128].tobytes()


def test_the_requant8_stamp_is_current():
    """`mpe._requant_folded` runs `grouped._requant8`, an intrinsic: when it changes, update
    mpe.REQUANT8_STAMP (that edit makes Numba recompile mpe's cached kernels)."""
    import sys
    from pathlib import Path

    from npu_model.kernels import grouped, mpe

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from test_kernel_stamps import source_stamp

    now = source_stamp(grouped._requant8)
    assert mpe.REQUANT8_STAMP == now, (
        f"npu_model.kernels.grouped._requant8 changed: set REQUANT8_STAMP in {mpe.__file__} "
        f"to {now!r}")

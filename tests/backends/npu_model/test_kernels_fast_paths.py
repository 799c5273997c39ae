"""Fast paths of the NPU model's kernels for small networks (issue 30: MobileNetV3's stem,
pointwise and depthwise layers, its NCHW input going NHWC) against the plain forms they
replace, byte for byte."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
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

"""The compile's integer passes (mixed-precision probes, accuracy checks) run the HostBackend's
integer Conv2d and Matmul: 8-bit convolutions on the single-precision GEMM in exact K-chunks,
and fully connected layers of a few rows on an integer kernel that reads the codes as they
are. Both must give the int64 reference's sums exactly, at the chunk boundaries, with extreme
codes, and for unsigned codes (whose products are twice as large)."""

from __future__ import annotations

import numpy as np
import pytest

from host_backend.ops import INT_KERNELS, conv, sgemm
from host_backend.ops.int_gemv import FEW_ROWS, int_rows_matmul
from xir.quant import requant_multiplier
from xir.types import INT8, INT16, UINT8, QuantizedType, TensorType

CODES = {INT8: np.int8, INT16: np.int16, UINT8: np.uint8}


def qt(dt, scale, shape, axis=None):
    return TensorType(QuantizedType(dt, scale, axis=axis), shape)


def codes(rng, dt, shape, extreme=False):
    info = np.iinfo(CODES[dt])
    if extreme:  # every product at its largest magnitude: partial sums at the 2**24 bound
        return np.full(shape, info.min if info.min < 0 else info.max, CODES[dt])
    return rng.integers(info.min, info.max + 1, size=shape).astype(CODES[dt])


def ref_conv_sums(x, w, pad):
    """int64 sums of a stride-1 Conv2d, NHWC / HWIO, zero padding `pad` on every side."""
    xp = np.pad(x.astype(np.int64), ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    kh, kw = w.shape[:2]
    ho, wo = xp.shape[1] - kh + 1, xp.shape[2] - kw + 1
    acc = np.zeros((x.shape[0], ho, wo, w.shape[3]), np.int64)
    for i in range(kh):
        for j in range(kw):
            acc += np.einsum("nhwc,co->nhwo", xp[:, i:i + ho, j:j + wo], w[i, j].astype(np.int64))
    return acc


def as_rq(acc, s_x, s_w, s_y, dtype):
    m, s = requant_multiplier(s_x, s_w, s_y)
    p = acc * np.asarray(m, np.int64)
    s = np.asarray(s, np.int64)
    r = (p + (np.int64(1) << np.maximum(s - 1, 0))) >> s
    info = np.iinfo(dtype)
    return np.clip(r, info.min, info.max).astype(dtype)


@pytest.mark.parametrize("cin,k", [(113, 3), (114, 3), (128, 3), (1024, 1), (1025, 1), (3, 7)])
@pytest.mark.parametrize("extreme", [False, True])
def test_int8_conv_on_sgemm_is_exact(rng, cin, k, extreme):
    """K = k*k*cin around the 1024-term chunk (113*9 = 1017, 114*9 = 1026, 1152, 1025): the
    float32 sums are exact in every channel slice, the requantized codes the reference's."""
    x = codes(rng, INT8, (2, 6, 7, cin), extreme)
    w = codes(rng, INT8, (k, k, cin, 20), extreme)
    s_w = np.full(20, 1e-6)  # small enough that the extreme sums do not all saturate
    attrs = dict(pad_top=k // 2, pad_bottom=k // 2, pad_left=k // 2, pad_right=k // 2)
    want = as_rq(ref_conv_sums(x, w, k // 2), 0.02, s_w, 0.5, np.int8)
    got = INT_KERNELS["Conv2d"]([x, w], attrs, [qt(INT8, 0.02, x.shape),
                                                qt(INT8, s_w, w.shape, axis=3)],
                                [qt(INT8, 0.5, want.shape)])[0]
    np.testing.assert_array_equal(got, want)


def test_uint8_operands_take_shorter_exact_chunks():
    """uint8 x int8 products reach 255 * 128: a float32 chunk holds 514 of them exactly, not
    1024 (which could round a sum past 2**24)."""
    assert conv._work_dtype(qt(INT8, 1.0, (1,)), qt(INT8, 1.0, (1,)))[1] == 1024
    assert conv._work_dtype(qt(UINT8, 1.0, (1,)), qt(INT8, 1.0, (1,)))[1] == 2 ** 24 // (255 * 128)
    assert conv._work_dtype(qt(INT16, 1.0, (1,)), qt(INT8, 1.0, (1,))) == (np.float64, None)


def test_uint8_conv_is_exact(rng):
    """uint8 codes near 255 by int8 weights near -128, K = 1152: partial sums pass 2**24 in a
    1024-term chunk (where float32 steps by 2 and odd sums round); in 514-term ones exact."""
    x = rng.integers(200, 256, (1, 5, 5, 128)).astype(np.uint8)
    w = rng.integers(-128, -100, (3, 3, 128, 4)).astype(np.int8)
    s_w = np.full(4, 1e-6)
    attrs = dict(pad_top=1, pad_bottom=1, pad_left=1, pad_right=1)
    acc = ref_conv_sums(x, w, 1)
    want = as_rq(acc, 0.02, s_w, 0.5, np.int8)
    got = INT_KERNELS["Conv2d"]([x, w], attrs, [qt(UINT8, 0.02, x.shape),
                                                qt(INT8, s_w, w.shape, axis=3)],
                                [qt(INT8, 0.5, want.shape)])[0]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dt", [INT8, INT16])
@pytest.mark.parametrize("rows", [1, FEW_ROWS, FEW_ROWS + 1])
def test_fully_connected_int_matmul_is_exact(rng, dt, rows):
    """A classifier's layer (a few rows, K = 3000 > the float32 chunk): the integer kernel for
    <= FEW_ROWS rows, the chunked GEMM above, both the int64 reference bit for bit; zeros in
    the input (skipped rows of B) change nothing."""
    a = codes(rng, dt, (rows, 3000))
    a[:, ::3] = 0
    b = codes(rng, dt, (3000, 37))
    s_b = rng.uniform(1e-5, 2e-5, 37)
    out = INT16 if dt == INT16 else INT8
    want = as_rq(a.astype(np.int64) @ b.astype(np.int64), 0.01, s_b, 40.0,
                 CODES[out])
    got = INT_KERNELS["Matmul"]([a, b], {}, [qt(dt, 0.01, a.shape), qt(dt, s_b, b.shape, axis=1)],
                                [qt(out, 40.0, want.shape)])[0]
    np.testing.assert_array_equal(got, want)


def test_fully_connected_transposed_and_batched(rng):
    """transpose_b (a Gemm's weights as ONNX stores them) and a rank-3 input of 2 x 3 rows."""
    a = codes(rng, INT8, (2, 3, 300))
    bt = codes(rng, INT8, (11, 300))
    want = as_rq(np.matmul(a.astype(np.int64), bt.T.astype(np.int64)), 0.01, 1e-4, 0.5, np.int8)
    got = INT_KERNELS["Matmul"]([a, bt], {"transpose_b": True},
                                [qt(INT8, 0.01, a.shape), qt(INT8, 1e-4, bt.shape)],
                                [qt(INT8, 0.5, want.shape)])[0]
    np.testing.assert_array_equal(got, want)


def test_int_rows_matmul_sums_in_int64():
    """int16 extremes over K = 40000: 40000 * 2**30 passes int32 by far; the sum is exact."""
    a = np.full((2, 40000), -32768, np.int16)
    b = np.full((40000, 3), -32768, np.int16)
    np.testing.assert_array_equal(int_rows_matmul(a, b), np.full((2, 3), 40000 * 2 ** 30))


def test_int8_conv_without_sgemm_gives_the_same_codes(rng, monkeypatch):
    """HOST_GEMM=blas (a CPU without AVX-512) keeps numpy's BLAS: the same codes."""
    x = codes(rng, INT8, (1, 9, 9, 130))
    w = codes(rng, INT8, (3, 3, 130, 16))
    types = [qt(INT8, 0.02, x.shape), qt(INT8, np.full(16, 1e-4), w.shape, axis=3)]
    attrs = dict(pad_top=1, pad_bottom=1, pad_left=1, pad_right=1)
    own = INT_KERNELS["Conv2d"]([x, w], attrs, types, [qt(INT8, 0.5, (1, 9, 9, 16))])[0]
    monkeypatch.setenv("HOST_GEMM", "blas")
    assert not sgemm.enabled()
    blas = INT_KERNELS["Conv2d"]([x, w], attrs, types, [qt(INT8, 0.5, (1, 9, 9, 16))])[0]
    np.testing.assert_array_equal(own, blas)


def _numpy_logistic(x):
    """The former HostBackend Sigmoid, numpy's passes: the bits calibration was measured on."""
    e = np.exp(-np.abs(x))
    y = 1 / (1 + e)
    return np.where(x >= 0, y, e * y)


@pytest.mark.parametrize("op", ["Sigmoid", "Silu"])
def test_sigmoid_and_silu_keep_numpys_bits(rng, op):
    """The one-pass logistic (calibration's Silu of every yolov5s layer) gives numpy's float32
    bits for every value: zeros of both signs, infinities, NaN, tiny and huge inputs, any
    layout (a transposed view)."""
    from host_backend.ops import FLOAT_KERNELS

    x = (rng.standard_normal((2, 33, 17, 8)) * rng.choice([1e-3, 1.0, 30.0, 1e3],
                                                           (2, 33, 17, 8))).astype(np.float32)
    x.flat[:7] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40]
    x = x.transpose(0, 2, 1, 3)  # not contiguous
    with np.errstate(invalid="ignore"):  # inf * 0 in the reference Silu
        want = _numpy_logistic(x) if op == "Sigmoid" else x * _numpy_logistic(x)
    got = FLOAT_KERNELS[op]([x], {})[0]
    assert got.dtype == np.float32 and got.shape == x.shape
    np.testing.assert_array_equal(got.view(np.uint32), np.ascontiguousarray(want).view(np.uint32))

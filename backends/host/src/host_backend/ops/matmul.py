"""Matmul, float32: numpy matmul semantics with optional transposes and bias."""

from __future__ import annotations

import numpy as np

from . import sgemm
from ._common import f32, fold_act, out32
from .int_gemv import FEW_ROWS, int_rows_matmul


def _t(x: np.ndarray) -> np.ndarray:
    return np.swapaxes(x, -1, -2) if x.ndim >= 2 else x


def matmul(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """a (..., M, K) @ b (..., K, N) [+ bias (N,)], then the folded act; batches broadcast."""
    a, b = f32(inputs[0]), f32(inputs[1])
    if attrs.get("transpose_a", False):
        a = _t(a)
    if attrs.get("transpose_b", False):
        b = _t(b)
    bias = f32(inputs[2]) if len(inputs) > 2 else None
    if a.ndim >= 2 and b.ndim == 2 and (bias is None or bias.shape == b.shape[1:]) and \
            sgemm.enabled():
        # a weight matrix: the batch rows are GEMM rows, the bias starts each row
        y = sgemm.matmul(a.reshape(-1, a.shape[-1]), b, bias).reshape(*a.shape[:-1], b.shape[1])
        return [fold_act(y, attrs, "Matmul")]
    y = out32(np.matmul(a, b))
    if bias is not None:
        y = out32(y + bias)  # not in place: the bias may broadcast a 1-D result
    return [fold_act(y, attrs, "Matmul")]


def _few_rows_of_ints(a: np.ndarray, b: np.ndarray) -> bool:
    """Integer codes (not fakeQf floats), a weight matrix and at most `FEW_ROWS` rows."""
    return a.dtype.kind in "iu" and b.dtype.kind in "iu" and a.ndim >= 2 and b.ndim == 2 \
        and a.size // max(a.shape[-1], 1) <= FEW_ROWS and a.size > 0


def matmul_int(inputs, attrs, in_types, out_types, *, fake=False):
    """Integer Matmul: acc = a_q @ b_q + bias_q (exact), requantized with
    requant_multiplier(s_a, s_b[n], s_out) per output column n (per tensor if b is)."""
    from xir.quant.fixed_point import requant_multiplier

    from ._common import folded_act, requant_channels, scale1, tscale
    from .conv import _mm, _work_dtype

    work, kchunk = _work_dtype(in_types[0], in_types[1], fake=fake)
    a, b = np.asarray(inputs[0]), np.asarray(inputs[1])
    if attrs.get("transpose_a", False):
        a = _t(a)
    if attrs.get("transpose_b", False):
        b = _t(b)
    if _few_rows_of_ints(a, b):  # a fully connected layer: read the integer weights once
        acc = int_rows_matmul(a.reshape(-1, a.shape[-1]), b).reshape(*a.shape[:-1],
                                                                      b.shape[1])
    elif a.ndim == 1 or b.ndim == 1:
        acc = np.matmul(a.astype(np.float64), b.astype(np.float64))
    else:
        acc = _mm(a.astype(work), b.astype(work), kchunk)
    s_a, s_out = scale1(in_types[0]), scale1(out_types[0])
    s_b = tscale(in_types[1])
    mult, shift = requant_multiplier(s_a, s_b, s_out)
    real = (np.float64(s_a) * s_b) / np.float64(s_out)
    act = folded_act(attrs, real, s_out)
    bias = np.asarray(inputs[2], dtype=np.int64) if len(inputs) > 2 else None
    acc = np.asarray(acc)
    if acc.ndim == 0:
        acc = acc.reshape(1)
    return [requant_channels(acc, bias, mult, shift, out_types[0].numpy_dtype, fake=fake, **act)]

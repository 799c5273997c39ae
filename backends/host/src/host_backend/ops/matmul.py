"""Matmul, float32: numpy matmul semantics with optional transposes and bias."""

from __future__ import annotations

import numpy as np

from ._common import f32, fold_act, out32


def _t(x: np.ndarray) -> np.ndarray:
    return np.swapaxes(x, -1, -2) if x.ndim >= 2 else x


def matmul(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """a (..., M, K) @ b (..., K, N) [+ bias (N,)], then the folded act; batches broadcast."""
    a, b = f32(inputs[0]), f32(inputs[1])
    if attrs.get("transpose_a", False):
        a = _t(a)
    if attrs.get("transpose_b", False):
        b = _t(b)
    y = out32(np.matmul(a, b))
    if len(inputs) > 2:
        y = out32(y + f32(inputs[2]))  # not in place: the bias may broadcast a 1-D result
    return [fold_act(y, attrs, "Matmul")]

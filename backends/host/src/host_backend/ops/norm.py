"""BatchNorm2d (inference), float32, NHWC: folded into one multiply-add per channel."""

from __future__ import annotations

import numpy as np

from ._common import f32, out32


def batch_norm2d(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """y = (x - mean) / sqrt(var + epsilon) * scale + bias over the last (C) axis."""
    x = f32(inputs[0])
    scale, bias, mean, var = (np.asarray(v, dtype=np.float64) for v in inputs[1:5])
    eps = float(attrs.get("epsilon", 1e-5))
    a = scale / np.sqrt(var + eps)
    b = bias - mean * a
    y = x * a.astype(np.float32)
    y += b.astype(np.float32)
    return [out32(y)]

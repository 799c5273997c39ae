"""Normalizations, float32: BatchNorm2d (inference, NHWC: one multiply-add per channel) and
LayerNorm (statistics over the trailing axes, in float64)."""

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


def layer_norm(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """y = (x - mean) / sqrt(var + epsilon) * scale (+ bias) over the axes [axis, rank);
    with `stats`, also the mean and 1/sqrt(var + epsilon) (the normalized axes kept as 1)."""
    x = np.asarray(inputs[0], dtype=np.float64)
    axes = tuple(range(int(attrs.get("axis", -1)) % max(x.ndim, 1), x.ndim))
    eps = float(attrs.get("epsilon", 1e-5))
    mean = x.mean(axis=axes, keepdims=True)
    inv = 1.0 / np.sqrt(np.square(x - mean).mean(axis=axes, keepdims=True) + eps)
    y = (x - mean) * inv * np.asarray(inputs[1], dtype=np.float64)
    if len(inputs) > 2:
        y = y + np.asarray(inputs[2], dtype=np.float64)
    outs = [out32(y)]
    if attrs.get("stats", False):
        outs += [out32(mean), out32(inv)]
    return outs

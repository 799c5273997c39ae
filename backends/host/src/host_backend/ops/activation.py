"""Relu (with alpha / max_value / threshold), Sigmoid, Silu, Hardswish, Softmax, float32."""

from __future__ import annotations

import numpy as np

from ._common import f32, out32


def relu(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """y = x if x >= threshold else alpha*(x - threshold); then min(y, max_value).

    Covers ReLU, ReLU6 (max_value=6) and LeakyReLU (alpha = negative slope).
    """
    x = f32(inputs[0])
    alpha = np.float32(attrs.get("alpha", 0.0))
    max_value = float(attrs.get("max_value", np.inf))
    threshold = np.float32(attrs.get("threshold", 0.0))
    if alpha == 0 and threshold == 0:
        y = np.maximum(x, np.float32(0))
    elif threshold == 0:
        y = np.where(x >= 0, x, alpha * x)
    else:
        y = np.where(x >= threshold, x, alpha * (x - threshold))
    if max_value != np.inf:
        np.minimum(y, np.float32(max_value), out=y)
    return [out32(y)]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # exp(-|x|) never overflows: no warning for large negative inputs.
    e = np.exp(-np.abs(x))
    y = 1 / (1 + e)
    return np.where(x >= 0, y, e * y)


def sigmoid(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    return [out32(_sigmoid(f32(inputs[0])))]


def silu(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    x = f32(inputs[0])
    return [out32(x * _sigmoid(x))]


def hardswish(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    x = f32(inputs[0])
    r6 = np.clip(x + np.float32(3), np.float32(0), np.float32(6))
    return [out32(x * r6 / np.float32(6))]


def softmax(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    x = f32(inputs[0])
    axis = int(attrs.get("axis", -1))
    y = x - x.max(axis=axis, keepdims=True)
    np.exp(y, out=y)
    y /= y.sum(axis=axis, keepdims=True)
    return [out32(y)]

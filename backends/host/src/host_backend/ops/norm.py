"""Normalizations, float32: BatchNorm2d (inference, NHWC: one multiply-add per channel),
LayerNorm (statistics over the trailing axes), GroupNorm (statistics per channel group) and
LRN (a window of squares across channels); statistics in float64."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from xir.quant.rownorm import layer_norm_codes, layer_norm_consts

from ._common import f32, out32, scale1


def batch_norm2d(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """y = (x - mean) / sqrt(var + epsilon) * scale + bias over the last (C) axis."""
    x = f32(inputs[0])
    c = x.shape[-1] if x.ndim else 1
    a32, b32 = batch_norm_scale_shift(inputs[1:5], attrs, c)
    y = np.empty(x.shape, dtype=np.float32)
    _scale_shift_rows(np.ascontiguousarray(x).reshape(-1, c), a32, b32, y.reshape(-1, c))
    return [y]


def batch_norm_scale_shift(params: list[np.ndarray], attrs: dict,
                           c: int) -> tuple[np.ndarray, np.ndarray]:
    """BatchNorm2d as ``y = x * a + b`` per channel: (a, b), float32 (c,), from scale, bias,
    mean and var (computed in float64); the HostBackend's fused chains use the same."""
    eps = float(attrs.get("epsilon", 1e-5))
    if all(isinstance(v, np.ndarray) and v.shape == (c,) and v.dtype == np.float32
           for v in params):  # the usual case in one compiled call (a dozen numpy calls cost
        # 60 us, x20 per resnet18 forward); the same float64 operations, the same bits
        a32, b32 = np.empty(c, np.float32), np.empty(c, np.float32)
        _scale_shift_consts(*params, eps, a32, b32)
        return a32, b32
    scale, bias, mean, var = (np.asarray(v, dtype=np.float64) for v in params)
    a = scale / np.sqrt(var + eps)
    b = bias - mean * a
    a32, b32 = (np.ascontiguousarray(np.broadcast_to(v.astype(np.float32).reshape(-1), (c,)))
                for v in (a, b))
    return a32, b32


@njit(cache=True)
def _scale_shift_consts(scale, bias, mean, var, eps, a32, b32):
    """`batch_norm_scale_shift` for float32 (c,) params: ``a = scale / sqrt(var + eps)``,
    ``b = bias - mean * a`` in float64, each rounded to float32 once at the end."""
    for j in range(a32.shape[0]):
        a = np.float64(scale[j]) / np.sqrt(np.float64(var[j]) + eps)
        a32[j] = np.float32(a)
        b32[j] = np.float32(np.float64(bias[j]) - np.float64(mean[j]) * a)


@njit(cache=True)
def _scale_shift_rows(x, a, b, y):
    """``y = x * a + b`` per row in float32, rounded after the multiply and after the add (as
    numpy's two ufuncs; no fused multiply-add): one pass instead of numpy's two."""
    for p in range(x.shape[0]):
        xr = x[p]
        yr = y[p]
        for j in range(xr.shape[0]):
            yr[j] = xr[j] * a[j] + b[j]


def layer_norm(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """y = (x - mean) / sqrt(var + epsilon) * scale (+ bias) over the axes [axis, rank);
    with `stats`, also the mean and 1/sqrt(var + epsilon) (the normalized axes kept as 1)."""
    x = np.asarray(inputs[0])
    if x.dtype != np.float32:
        x = x.astype(np.float64)
    axes = tuple(range(int(attrs.get("axis", -1)) % max(x.ndim, 1), x.ndim))
    eps = float(attrs.get("epsilon", 1e-5))
    if not attrs.get("stats", False) and axes and x.size:
        # one pass per row in float64, no temporaries (a [1, 64, 128] map: 67 -> ~10 us)
        inner = x.shape[axes[0]:]
        n = math.prod(inner)
        sc = _per_row(inputs[1], inner, n)
        b = _per_row(inputs[2], inner, n) if len(inputs) > 2 else np.zeros(1)
        y = np.empty(x.shape, dtype=np.float32)
        _layer_norm_rows(np.ascontiguousarray(x).reshape(-1, n), sc, b, eps, y.reshape(-1, n))
        return [y]
    x = x.astype(np.float64)
    mean = x.mean(axis=axes, keepdims=True)
    inv = 1.0 / np.sqrt(np.square(x - mean).mean(axis=axes, keepdims=True) + eps)
    y = (x - mean) * inv * np.asarray(inputs[1], dtype=np.float64)
    if len(inputs) > 2:
        y = y + np.asarray(inputs[2], dtype=np.float64)
    outs = [out32(y)]
    if attrs.get("stats", False):
        outs += [out32(mean), out32(inv)]
    return outs


def _per_row(v: np.ndarray, inner: tuple[int, ...], n: int) -> np.ndarray:
    """A LayerNorm scale or bias as one float32/float64 value per element of a row, or one
    value for all (the kernel reads index 0 then); float64 products either way."""
    a = np.asarray(v)
    if a.dtype not in (np.float32, np.float64):
        a = a.astype(np.float64)
    if a.size == 1 or (a.size == n and a.shape == inner[len(inner) - a.ndim:]):
        return np.ascontiguousarray(a).reshape(-1)
    return np.ascontiguousarray(np.broadcast_to(a, inner)).reshape(-1)


@njit(cache=True)
def _layer_norm_rows(x, scale, bias, eps, y):
    """Each row of `x` (float32 or float64) normalized with float64 statistics, times
    `scale`, plus `bias` (each one value per row element, or a single value)."""
    n = x.shape[1]
    ks = 1 if scale.shape[0] > 1 else 0
    kb = 1 if bias.shape[0] > 1 else 0
    for r in range(x.shape[0]):
        row = x[r]
        mean, inv = _row_stats(row, eps)
        out = y[r]
        for j in range(n):
            out[j] = (row[j] - mean) * inv * np.float64(scale[j * ks]) + np.float64(bias[j * kb])


@njit(cache=True, fastmath={"reassoc"})
def _row_stats(row, eps):
    """(mean, 1 / sqrt(variance + eps)) of a row in float64. The sums may be reassociated
    (and so vectorised, many partial sums in a fixed order): a [1, 64, 128] LayerNorm's
    statistics 7.4 -> 2.8 us; the normalization itself keeps its order."""
    n = row.shape[0]
    s = 0.0
    for j in range(n):
        s += np.float64(row[j])
    mean = s / n
    q = 0.0
    for j in range(n):
        e = np.float64(row[j]) - mean
        q += e * e
    return mean, 1.0 / np.sqrt(q / n + eps)


def group_norm(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """y = (x - mean_g) / sqrt(var_g + epsilon) * scale + bias, statistics over (H, W, the
    channels of group g) of an NHWC map."""
    x = np.asarray(inputs[0], dtype=np.float64)
    n, h, w, c = x.shape
    g = int(attrs["num_groups"])
    xg = x.reshape(n, h, w, g, c // g)
    mean = xg.mean(axis=(1, 2, 4), keepdims=True)
    var = np.square(xg - mean).mean(axis=(1, 2, 4), keepdims=True)
    y = ((xg - mean) / np.sqrt(var + float(attrs.get("epsilon", 1e-5)))).reshape(x.shape)
    y = y * np.asarray(inputs[1], np.float64) + np.asarray(inputs[2], np.float64)
    return [out32(y)]


def lrn(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """y = x / (bias + alpha / size * sum of x**2 over the channel window) ** beta (NHWC)."""
    x = np.asarray(inputs[0], dtype=np.float64)
    size = int(attrs["size"])
    lo, hi = (size - 1) // 2, size // 2
    sq = np.square(x)
    c = x.shape[-1]
    cum = np.concatenate([np.zeros(x.shape[:-1] + (1,)), np.cumsum(sq, axis=-1)], axis=-1)
    idx = np.arange(c)
    win = cum[..., np.minimum(idx + hi + 1, c)] - cum[..., np.maximum(idx - lo, 0)]
    alpha, beta, bias = (float(attrs.get(k, d)) for k, d in
                         (("alpha", 1e-4), ("beta", 0.75), ("bias", 1.0)))
    return [out32(x / np.power(bias + alpha / size * win, beta))]


def layer_norm_int(inputs, attrs, in_types, out_types, *, fake=False):
    """LayerNorm over the last axis in integers: exact integer row statistics, one float64
    scale per row, float gamma and beta (xir.quant.rownorm)."""
    x = np.asarray(inputs[0])
    axis = int(attrs.get("axis", -1))
    if axis % max(x.ndim, 1) != x.ndim - 1 or attrs.get("stats", False):
        raise ValueError("LayerNorm: the integer form normalizes the last axis only, "
                         "without the stats outputs")
    s_in, s_out = scale1(in_types[0]), scale1(out_types[0])
    eps = float(attrs.get("epsilon", 1e-5))
    if fake:
        y = layer_norm([x.astype(np.float64) * s_in, *inputs[1:]], attrs)[0]
        return [y.astype(np.float64) / s_out]
    consts = layer_norm_consts(s_in, s_out, eps, x.shape[-1], *inputs[1:3])
    return [layer_norm_codes(x, consts, out_types[0].numpy_dtype)]

"""Relu (with alpha / max_value / threshold), Sigmoid, Silu, Hardswish, Gelu, Erf, Power,
Softmax, float32; the integer forms of the lookup-table activations."""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from xir.numba_target import njit
from xir.quant.rownorm import softmax_codes, softmax_consts

from ._common import f32, out32, scale1


def relu(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """y = x if x >= threshold else alpha*(x - threshold); then min(y, max_value).

    Covers ReLU, ReLU6 (max_value=6) and LeakyReLU (alpha = negative slope).
    """
    x = f32(inputs[0])
    alpha = np.float32(attrs.get("alpha", 0.0))
    max_value = float(attrs.get("max_value", np.inf))
    threshold = np.float32(attrs.get("threshold", 0.0))
    if alpha == 0 and threshold == 0:
        y = np.empty(x.shape, dtype=np.float32)
        _relu_flat(np.ascontiguousarray(x).reshape(-1), y.reshape(-1))
    elif threshold == 0:
        y = np.where(x >= 0, x, alpha * x)
    else:
        y = np.where(x >= threshold, x, alpha * (x - threshold))
    if max_value != np.inf:
        np.minimum(y, np.float32(max_value), out=y)
    return [out32(y)]


@njit(cache=True)
def _relu_flat(x, y):
    """``y = np.maximum(x, 0)`` exactly (NaN passes, -0.0 becomes 0.0), one vectorised pass:
    4x numpy's on a float32 map."""
    for i in range(x.shape[0]):
        v = x[i]
        y[i] = v if (v > 0 or v != v) else np.float32(0)


@njit(cache=True)
def _logistic_rest(x, e, out, times_x):
    """After ``e = exp(-|x|)``: ``y = 1 / (1 + e)``, ``y if x >= 0 else e * y``, times ``x``
    with `times_x` (Silu), in one pass; each float32 operation as numpy's ufuncs do it."""
    one = np.float32(1)
    for i in range(x.size):
        ei = e[i]
        y = one / (one + ei)
        r = y if x[i] >= 0 else ei * y
        out[i] = x[i] * r if times_x else r


def _sigmoid(x: np.ndarray, times_x: bool = False) -> np.ndarray:
    """The logistic of float32 `x` (times `x` with `times_x`): exp(-|x|) never overflows, no
    warning for large negative inputs. The exp is numpy's (its bits are the reference's); the
    rest is one Numba pass instead of five numpy passes and their temporaries, the same bits
    (yolov5s-640's Silu: 4x faster; its calibration runs ~1,600 of them)."""
    flat = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    e = np.abs(flat)
    np.negative(e, out=e)
    np.exp(e, out=e)
    out = np.empty_like(flat)
    _logistic_rest(flat, e, out, times_x)
    return out.reshape(np.shape(x))


def sigmoid(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    return [out32(_sigmoid(f32(inputs[0])))]


def tanh(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    return [out32(np.tanh(f32(inputs[0])))]


def silu(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    return [_sigmoid(f32(inputs[0]), times_x=True)]


def gelu(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """GELU, exact (erf) or its tanh form (approximate="tanh"), in float64."""
    from xir.quant.lut import lut_function, lut_params

    fn = lut_function("gelu", lut_params("Gelu", attrs))
    return [out32(fn(np.asarray(inputs[0], np.float64)))]


def erf(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    x = np.asarray(inputs[0], np.float64)
    return [out32(np.frompyfunc(math.erf, 1, 1)(x).astype(np.float64))]


def hardswish(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    x = f32(inputs[0])
    r6 = np.clip(x + np.float32(3), np.float32(0), np.float32(6))
    return [out32(x * r6 / np.float32(6))]


def softmax(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    x = f32(inputs[0])
    axis = int(attrs.get("axis", -1))
    with np.errstate(invalid="ignore"):  # a fully masked row (-inf everywhere) gives NaN
        y = x - x.max(axis=axis, keepdims=True)
        np.exp(y, out=y)
        y /= y.sum(axis=axis, keepdims=True)
    return [out32(y)]


# --------------------------------------------------------------------------------------------
# Integer kernels (docs/quantization.md, "Integer ops")
# --------------------------------------------------------------------------------------------


def relu_int(inputs, attrs, in_types, out_types, *, fake=False):
    """A standalone Relu (threshold 0): requantize(q, requant_multiplier(s_in, 1.0, s_out))
    with the Relu folded in (ReLU floor, max_value clip, LeakyReLU pair)."""
    from xir.quant.fixed_point import requant_multiplier

    from ._common import folded_act, rq_any

    if float(attrs.get("threshold", 0.0)) != 0.0:
        raise ValueError("Relu with a non-zero threshold has no integer form; keep it float")
    s_in, s_out = scale1(in_types[0]), scale1(out_types[0])
    m, s = requant_multiplier(s_in, 1.0, s_out)
    act = folded_act(attrs, (np.float64(s_in) * 1.0) / np.float64(s_out), s_out,
                     alpha_key="alpha", max_key="max_value", enabled=True)
    x = np.asarray(inputs[0])
    return [rq_any(x if fake else x.astype(np.int64), m, s, out_types[0].numpy_dtype,
                   fake=fake, **act)]


def power(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """y = (shift + scale * x) ** power (Caffe's Power layer; NaN/inf where numpy gives them)."""
    base = np.float32(attrs.get("shift", 0.0)) + np.float32(attrs.get("scale", 1.0)) * f32(
        inputs[0])
    with np.errstate(divide="ignore", invalid="ignore"):
        return [out32(np.power(base, np.float32(attrs["power"])))]


@lru_cache(maxsize=256)
def _table(fn: str, s_in: float, s_out: float, in_dt: str, out_dt: str,
           params: tuple[float, ...]) -> np.ndarray:
    from xir.quant.lut import build_lut

    return build_lut(fn, s_in, s_out, np.dtype(in_dt), np.dtype(out_dt), params)


def _lut_kernel(op_type: str, fn_name: str):
    def kernel(inputs, attrs, in_types, out_types, *, fake=False):
        from xir.quant.lut import apply_lut, lut_function, lut_params

        s_in, s_out = scale1(in_types[0]), scale1(out_types[0])
        params = lut_params(op_type, attrs)
        if fake:
            x = np.asarray(inputs[0], dtype=np.float64) * s_in
            return [lut_function(fn_name, params)(x) / s_out]
        in_dt, out_dt = in_types[0].numpy_dtype, out_types[0].numpy_dtype
        return [apply_lut(np.asarray(inputs[0]), _table(fn_name, s_in, s_out, in_dt.str,
                                                        out_dt.str, params), in_dt)]

    kernel.__name__ = f"{fn_name}_int"
    kernel.__doc__ = (f"{fn_name} as a table over every input code: "
                      f"xir.quant.build_lut('{fn_name}', s_in, s_out, in_dtype, out_dtype, "
                      f"lut_params('{op_type}', attrs)).")
    return kernel


sigmoid_int = _lut_kernel("Sigmoid", "sigmoid")
tanh_int = _lut_kernel("Tanh", "tanh")
silu_int = _lut_kernel("Silu", "silu")
hardswish_int = _lut_kernel("Hardswish", "hardswish")
gelu_int = _lut_kernel("Gelu", "gelu")
power_int = _lut_kernel("Power", "power")


@lru_cache(maxsize=64)
def _softmax_consts(s_in: float, s_out: float, in_dt: str) -> tuple[np.ndarray, int, int]:
    return softmax_consts(s_in, s_out, np.dtype(in_dt))


def softmax_int(inputs, attrs, in_types, out_types, *, fake=False):
    """Softmax over the last axis in integers: an exponential table indexed by the distance
    to the row's maximum, exact row sums, a rounded division (xir.quant.rownorm)."""
    x = np.asarray(inputs[0])
    axis = int(attrs.get("axis", -1))
    if axis % max(x.ndim, 1) != x.ndim - 1:
        raise ValueError(f"Softmax: the integer form runs over the last axis, not axis {axis}")
    s_in, s_out = scale1(in_types[0]), scale1(out_types[0])
    if fake:
        return [softmax([x.astype(np.float64) * s_in], attrs)[0].astype(np.float64) / s_out]
    in_dt = in_types[0].numpy_dtype
    table, r, f = _softmax_consts(s_in, s_out, in_dt.str)
    return [softmax_codes(x, table, r, f, out_types[0].numpy_dtype)]

"""Host kernels of xir.ops.pointwise: Unary, Binary, Where and PRelu (after onnx/reference).

Float kernels compute in the inputs' own dtype, as ONNX specifies: integers stay integers
(wrapping as two's complement, like onnxruntime), float16 / float64 stay themselves, comparisons
and logic give bool. Integer kernels (docs/quantization.md, "Integer ops: pointwise") run
PRelu, element-wise Max / Min of quantised maps, and the `Unary` functions of
`xir.ops.pointwise.UNARY_LUT_FUNCS` as lookup tables.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import numpy as np

from xir.ops.pointwise import UNARY_LUT_FUNCS, unary_lut, unary_lut_function

from ._common import rescale, rq_any, scale1, tscale


def _is_int(x: np.ndarray) -> bool:
    return x.dtype.kind in "iu"


def _sigmoid(z: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(z))  # never overflows
    return np.where(z >= 0, 1 / (1 + e), e / (1 + e))


def _f(x: np.ndarray, value: float) -> np.generic:
    """A parameter in x's float dtype (float64 for integer x)."""
    return (x.dtype.type if x.dtype.kind == "f" else np.float64)(value)


def _elu(x, at):
    a = _f(x, at.get("alpha", 1.0))
    return np.where(x > 0, x, a * np.expm1(np.minimum(x, 0)))


def _selu(x, at):
    a, g = _f(x, at.get("alpha", 1.0)), _f(x, at.get("gamma", 1.0))
    return g * np.where(x > 0, x, a * np.expm1(np.minimum(x, 0)))


def _celu(x, at):
    a = _f(x, at.get("alpha", 1.0))
    return np.maximum(x.dtype.type(0), x) + np.minimum(x.dtype.type(0), a * np.expm1(x / a))


def _shrink(x, at):
    lambd, bias = float(at.get("alpha", 0.5)), float(at.get("beta", 0.0))
    lo = np.where(x < -lambd, x + _f(x, bias), 0)
    return np.where(x > lambd, x - _f(x, bias), lo)


def _isinf(x, at):
    if not np.issubdtype(x.dtype, np.floating):
        return np.zeros(x.shape, np.bool_)
    pos, neg = bool(at.get("detect_positive", True)), bool(at.get("detect_negative", True))
    if pos and neg:
        return np.isinf(x)
    if pos:
        return np.isposinf(x)
    if neg:
        return np.isneginf(x)
    return np.zeros(x.shape, np.bool_)


def _isnan(x, at):
    if not np.issubdtype(x.dtype, np.floating):
        return np.zeros(x.shape, np.bool_)
    return np.isnan(x)


def _swish(x, at):
    return x * _sigmoid(_f(x, at.get("alpha", 1.0)) * x)


def _mish(x, at):
    return x * np.tanh(np.logaddexp(x.dtype.type(0), x))


def _reciprocal(x, at):
    return np.reciprocal(x) if not _is_int(x) else np.floor_divide(1, x)


#: func -> kernel(x, attrs); the result is cast to the output dtype by the caller.
_UNARY: dict[str, Callable[[np.ndarray, dict], np.ndarray]] = {
    "abs": lambda x, at: np.abs(x),
    "neg": lambda x, at: np.negative(x),
    "exp": lambda x, at: np.exp(x),
    "log": lambda x, at: np.log(x),
    "reciprocal": _reciprocal,
    "sqrt": lambda x, at: np.sqrt(x),
    "floor": lambda x, at: np.floor(x) if not _is_int(x) else x.copy(),
    "ceil": lambda x, at: np.ceil(x) if not _is_int(x) else x.copy(),
    "round": lambda x, at: np.round(x) if not _is_int(x) else x.copy(),  # half to even
    "sign": lambda x, at: np.sign(x),
    "sin": lambda x, at: np.sin(x),
    "cos": lambda x, at: np.cos(x),
    "tan": lambda x, at: np.tan(x),
    "asin": lambda x, at: np.arcsin(x),
    "acos": lambda x, at: np.arccos(x),
    "atan": lambda x, at: np.arctan(x),
    "sinh": lambda x, at: np.sinh(x),
    "cosh": lambda x, at: np.cosh(x),
    "asinh": lambda x, at: np.arcsinh(x),
    "acosh": lambda x, at: np.arccosh(x),
    "atanh": lambda x, at: np.arctanh(x),
    "isnan": _isnan,
    "isinf": _isinf,
    "not": lambda x, at: np.logical_not(x),
    "bitwise_not": lambda x, at: np.invert(x),
    "elu": _elu,
    "selu": _selu,
    "celu": _celu,
    "thresholded_relu": lambda x, at: np.where(x > _f(x, at.get("alpha", 1.0)), x, 0),
    "softplus": lambda x, at: np.logaddexp(x.dtype.type(0), x),
    "softsign": lambda x, at: x / (x.dtype.type(1) + np.abs(x)),
    "mish": _mish,
    "shrink": _shrink,
    "swish": _swish,
}

_BOOL_OUT = ("isnan", "isinf", "not")


def unary(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """``func(x)`` in x's dtype (bool for isnan / isinf / not); see xir.ops.pointwise.Unary."""
    x = np.asarray(inputs[0])
    func = str(attrs["func"])
    try:
        fn = _UNARY[func]
    except KeyError:
        raise ValueError(f"Unary: unknown func {func!r}") from None
    if func in ("not", "bitwise_not") and x.dtype.kind == "f":
        raise ValueError(f"Unary {func}: needs a bool or integer input, not {x.dtype}")
    dt = np.dtype(np.bool_) if func in _BOOL_OUT else x.dtype
    if x.dtype == np.float16:  # in float32, rounded once (as onnxruntime)
        x = x.astype(np.float32)
    with np.errstate(all="ignore"):
        y = np.asarray(fn(x, attrs))
    return [np.ascontiguousarray(y.astype(dt, copy=False))]


# --------------------------------------------------------------------------------------------
# Binary
# --------------------------------------------------------------------------------------------

def _div(a, b):
    if _is_int(a) and _is_int(b):
        # truncation toward zero (C, onnxruntime, onnx.reference); x / 0 gives 0
        q = np.floor_divide(a, b)
        fix = (np.remainder(a, b) != 0) & ((a < 0) ^ (b < 0))
        return q + fix.astype(q.dtype)
    return np.divide(a, b)


def _pow(a, b):
    if _is_int(a):
        if _is_int(b) and (b.size == 0 or b.min() >= 0):
            return np.power(a, b.astype(a.dtype))  # exact, wrapping
        # a float (or negative) exponent: in float64, truncated to a's type as ONNX Pow
        return np.trunc(np.power(a.astype(np.float64), b.astype(np.float64)))
    return np.power(a, b.astype(a.dtype, copy=False))


def _shift(a, b, left: bool):
    bits = a.dtype.itemsize * 8
    valid = (b >= 0) & (b < bits)
    sh = np.where(valid, b, 0).astype(a.dtype)
    r = np.left_shift(a, sh) if left else np.right_shift(a, sh)
    fill = 0 if left or a.dtype.kind == "u" else np.where(a < 0, -1, 0)
    return np.where(valid, r, fill)


def _same(fn):
    """A numeric binary function computed in a's dtype (b cast to it first)."""
    return lambda a, b: fn(a, b.astype(a.dtype, copy=False))


_BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "max": _same(np.maximum),
    "min": _same(np.minimum),
    "mod": _same(np.mod),
    "fmod": _same(np.fmod),
    "pow": _pow,
    "add": _same(np.add),
    "sub": _same(np.subtract),
    "mul": _same(np.multiply),
    "div": lambda a, b: _div(a, b.astype(a.dtype, copy=False)),
    "equal": np.equal,
    "less": np.less,
    "less_equal": np.less_equal,
    "greater": np.greater,
    "greater_equal": np.greater_equal,
    "and": np.logical_and,
    "or": np.logical_or,
    "xor": np.logical_xor,
    "bitwise_and": _same(np.bitwise_and),
    "bitwise_or": _same(np.bitwise_or),
    "bitwise_xor": _same(np.bitwise_xor),
    "shift_left": lambda a, b: _shift(a, b, True),
    "shift_right": lambda a, b: _shift(a, b, False),
}

_BOOL_BINARY = ("equal", "less", "less_equal", "greater", "greater_equal", "and", "or", "xor")


def binary(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """``func(a, b)`` with numpy broadcasting, in a's dtype (bool for comparisons and logic);
    see xir.ops.pointwise.Binary."""
    a, b = np.asarray(inputs[0]), np.asarray(inputs[1])
    func = str(attrs["func"])
    try:
        fn = _BINARY[func]
    except KeyError:
        raise ValueError(f"Binary: unknown func {func!r}") from None
    if func.startswith(("bitwise", "shift")) and not (_is_int(a) and _is_int(b)):
        raise ValueError(f"Binary {func}: needs integer operands, not {a.dtype}, {b.dtype}")
    dt = np.dtype(np.bool_) if func in _BOOL_BINARY else a.dtype
    if a.dtype == np.float16 and b.dtype.kind == "f":  # in float32, rounded once
        a, b = a.astype(np.float32), b.astype(np.float32)
    with np.errstate(all="ignore"):
        y = np.asarray(fn(a, b))
    shape = np.broadcast_shapes(a.shape, b.shape)
    return [np.ascontiguousarray(np.broadcast_to(y.astype(dt, copy=False), shape))]


def where(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """``cond ? x : y`` with three-way broadcasting, in x's dtype."""
    cond, x, y = (np.asarray(a) for a in inputs)
    return [np.ascontiguousarray(np.where(cond.astype(np.bool_, copy=False), x,
                                          y.astype(x.dtype, copy=False)))]


def prelu(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """``x if x > 0 else slope * x`` (slope broadcast to x), in x's dtype."""
    x, slope = np.asarray(inputs[0]), np.asarray(inputs[1])
    with np.errstate(all="ignore"):
        y = np.where(x > 0, x, x * slope.astype(x.dtype, copy=False))
    return [np.ascontiguousarray(np.broadcast_to(y, x.shape).astype(x.dtype, copy=False))]


# --------------------------------------------------------------------------------------------
# Integer kernels (docs/quantization.md, "Integer ops: pointwise")
# --------------------------------------------------------------------------------------------

def _real(data: np.ndarray, t) -> np.ndarray:
    """The real values of a constant input: codes times their scale, or the float data."""
    d = np.asarray(data, np.float64)
    if getattr(t.element_dtype, "is_quantized", False):
        s = tscale(t)
        if s.size != 1:
            raise ValueError("PRelu: a per-axis quantized slope has no integer form here")
        zp = float(np.asarray(t.element_dtype.zero_point)[0])
        return (d - zp) * float(s[0])
    return d


def prelu_int(inputs, attrs, in_types, out_types, *, fake=False):
    """y = requantize(q, m_pos, sh_pos) where q >= 0, requantize(q, m_neg, sh_neg) where q < 0:
    (m_pos, sh_pos) = requant_multiplier(s_in, 1.0, s_out) and, per slope element,
    (m_neg, sh_neg) = quantize_multiplier(slope * s_in / s_out) (the LeakyReLU pair of a
    folded activation, one per channel). The slope's real value is its codes times its scale
    (or its float data)."""
    from xir.quant.fixed_point import quantize_multiplier, requant_multiplier

    s_in, s_out = scale1(in_types[0]), scale1(out_types[0])
    x = np.asarray(inputs[0])
    slope = _real(inputs[1], in_types[1])
    real = np.float64(s_in) / np.float64(s_out)
    m, s = requant_multiplier(s_in, 1.0, s_out)
    mn, sn = quantize_multiplier(slope * real)
    mn = np.broadcast_to(np.asarray(mn, np.int64).reshape(slope.shape), x.shape)
    sn = np.broadcast_to(np.asarray(sn, np.int64).reshape(slope.shape), x.shape)
    return [rq_any(x if fake else x.astype(np.int64), m, s, out_types[0].numpy_dtype,
                   leaky=(mn, sn), fake=fake)]


def binary_int(inputs, attrs, in_types, out_types, *, fake=False):
    """Max / Min of two quantised inputs: each is first moved to the output scale
    (requantize(q, requant_multiplier(s_in, 1.0, s_out)), saturating), then the element-wise
    max / min of the codes: exact, and the same as max / min of the requantised reals."""
    func = str(attrs["func"])
    if func not in ("max", "min"):
        raise ValueError(f"Binary {func}: no integer form (only max and min); keep it float")
    s_out = scale1(out_types[0])
    out_dt = out_types[0].numpy_dtype
    a = rescale(np.asarray(inputs[0]), scale1(in_types[0]), s_out, out_dt, fake)
    b = rescale(np.asarray(inputs[1]), scale1(in_types[1]), s_out, out_dt, fake)
    y = np.maximum(a, b) if func == "max" else np.minimum(a, b)
    return [np.ascontiguousarray(y)]


@lru_cache(maxsize=256)
def _unary_table(key: tuple, s_in: float, s_out: float, in_dt: str, out_dt: str) -> np.ndarray:
    return unary_lut(dict(key), s_in, s_out, np.dtype(in_dt), np.dtype(out_dt))


def unary_int(inputs, attrs, in_types, out_types, *, fake=False):
    """A quantised `Unary` as a table over every input code:
    xir.ops.pointwise.unary_lut(attrs, s_in, s_out, in_dtype, out_dtype), indexed by
    q - qmin (int8 / int16 inputs)."""
    from xir.quant.lut import apply_lut

    func = str(attrs["func"])
    if func not in UNARY_LUT_FUNCS:
        raise ValueError(f"Unary {func}: no lookup-table form; keep it float")
    s_in, s_out = scale1(in_types[0]), scale1(out_types[0])
    if fake:
        x = np.asarray(inputs[0], np.float64) * s_in
        return [unary_lut_function(attrs)(x) / s_out]
    in_dt, out_dt = in_types[0].numpy_dtype, out_types[0].numpy_dtype
    if in_dt not in (np.dtype(np.int8), np.dtype(np.int16)):
        raise ValueError(f"Unary {func}: lookup tables take int8 or int16 inputs, not {in_dt}")
    key = tuple(sorted((k, v) for k, v in attrs.items()))
    return [apply_lut(np.asarray(inputs[0]), _unary_table(key, s_in, s_out, in_dt.str,
                                                          out_dt.str), in_dt)]


FLOAT_KERNELS: dict = {"Unary": unary, "Binary": binary, "Where": where, "PRelu": prelu}
INT_KERNELS: dict = {"PRelu": prelu_int, "Binary": binary_int, "Unary": unary_int}

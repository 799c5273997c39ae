"""Element-wise math, comparison and logic ops beyond the arithmetic of `elementwise`.

Four op types cover the ONNX element-wise set (docs/ops.md, "Pointwise ops"):

- `Unary` ``func(x)``: math (abs, exp, sin, round, ...), logic (not, bitwise_not), the
  predicates isnan / isinf (bool outputs) and the parametrised activations (elu, selu, celu,
  thresholded_relu, softplus, softsign, mish, shrink, swish). Attributes ``alpha``, ``beta``,
  ``gamma`` carry the function's parameters (their meaning per function is in
  `UNARY_PARAMS`); ``detect_positive`` / ``detect_negative`` are IsInf's flags.
- `Binary` ``func(a, b)`` with numpy broadcasting: max/min, mod/fmod, pow, the integer
  arithmetic add/sub/mul/div (div truncates toward zero on integers), comparisons and logic
  (bool outputs), bitwise ops and shifts.
- `Where` ``cond ? x : y`` with three-way broadcasting, and `PRelu` ``x > 0 ? x : slope * x``
  with the slope broadcast against x (per channel in the usual case).

The output element type is the first data input's (x for Where), except the predicates and
comparisons, which give bool. The float64 definitions of the functions a quantised network can
run as a lookup table are `UNARY_LUT_FUNCS` (used by the HostBackend's integer kernel and by a
chip's lowering alike).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..errors import FieldTypeError
from ..types import ScalarType, TensorType
from .base import REQUIRED, Operation, broadcast, fail, register_op

BOOL = ScalarType("bool", 8)

#: Unary functions; the ones after "bitwise_not" are activations with parameters.
UNARY_FUNCS = (
    "abs", "neg", "exp", "log", "reciprocal", "floor", "ceil", "round", "sign",
    "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
    "sqrt", "isnan", "isinf", "not", "bitwise_not",
    "elu", "selu", "celu", "thresholded_relu", "softplus", "softsign", "mish", "shrink",
    "swish",
)

#: What alpha / beta / gamma mean for the functions that read them (ONNX attribute names).
UNARY_PARAMS: dict[str, dict[str, str]] = {
    "elu": {"alpha": "alpha"},
    "selu": {"alpha": "alpha", "gamma": "gamma"},
    "celu": {"alpha": "alpha"},
    "thresholded_relu": {"alpha": "alpha"},
    "shrink": {"alpha": "lambd", "beta": "bias"},
    "swish": {"alpha": "alpha"},
}

#: Unary functions defined on bool / integer inputs only, and those for every numeric type.
BOOL_FUNCS = ("not",)
INT_ONLY_FUNCS = ("bitwise_not",)
PREDICATES = ("isnan", "isinf")

ARITH_FUNCS = ("add", "sub", "mul", "div")
COMPARE_FUNCS = ("equal", "less", "less_equal", "greater", "greater_equal")
LOGIC_FUNCS = ("and", "or", "xor")
BITWISE_FUNCS = ("bitwise_and", "bitwise_or", "bitwise_xor", "shift_left", "shift_right")
BINARY_FUNCS = ("max", "min", "mod", "fmod", "pow") + ARITH_FUNCS + COMPARE_FUNCS + \
    LOGIC_FUNCS + BITWISE_FUNCS


def _need_inputs(op: Operation, shapes: list, n: int) -> None:
    """Shape inference runs before the arity check: refuse a wrong input count first."""
    if len(shapes) != n:
        raise fail(op, f"takes {n} inputs, got {len(shapes)}", "inputs")


class _Elementwise(Operation):
    """Shared: outputs keep the first data input's element type and layout."""

    def _out_type(self, types: list[TensorType], shape: tuple[int, ...], element) -> TensorType:
        first = types[0]
        return TensorType(element, shape, self.output_layout(first.layout, len(shape)))


@register_op
class Unary(_Elementwise):
    """``func(x)`` element-wise; `UNARY_FUNCS` lists the functions, `UNARY_PARAMS` what
    alpha / beta / gamma mean for each. Float functions compute in the input's float type,
    abs / neg / sign / not / bitwise_not keep integers exact; isnan / isinf give bool."""

    op_type = "Unary"
    ATTRS = {"func": (str, REQUIRED), "alpha": (float, 1.0), "beta": (float, 0.0),
             "gamma": (float, 1.0), "detect_positive": (bool, True),
             "detect_negative": (bool, True)}
    CHOICES = {**Operation.CHOICES, "func": UNARY_FUNCS}

    def check_attr_values(self) -> None:
        super().check_attr_values()
        for key in ("alpha", "beta", "gamma"):
            if math.isnan(self.attrs[key]):
                raise FieldTypeError(f"{key} must be a number, not NaN", op_id=self.op_id,
                                     field=key)
        if self.attrs["func"] == "celu" and self.attrs["alpha"] == 0.0:
            raise FieldTypeError("celu's alpha must not be 0 (it divides by it)",
                                 op_id=self.op_id, field="alpha")

    def infer_types(self, types: list[TensorType]) -> list[TensorType]:
        shape = self.infer_shapes([t.shape for t in types])[0]
        func = self.attrs["func"]
        el = BOOL if func in PREDICATES else types[0].element_dtype
        return [self._out_type(types, shape, el)]


@register_op
class Binary(_Elementwise):
    """``func(a, b)`` element-wise with numpy broadcasting (`BINARY_FUNCS`). Comparisons and
    and / or / xor give bool; every other function gives a's element type (pow with a float
    exponent on an integer base included, as ONNX Pow)."""

    op_type = "Binary"
    ATTRS = {"func": (str, REQUIRED)}
    CHOICES = {**Operation.CHOICES, "func": BINARY_FUNCS}
    MIN_INPUTS = 2
    MAX_INPUTS = 2

    def infer_shapes(self, shapes):
        _need_inputs(self, shapes, 2)
        return [broadcast(self, shapes[0], shapes[1])]

    def infer_types(self, types: list[TensorType]) -> list[TensorType]:
        shape = self.infer_shapes([t.shape for t in types])[0]
        func = self.attrs["func"]
        el = BOOL if func in COMPARE_FUNCS + LOGIC_FUNCS else types[0].element_dtype
        return [self._out_type(types, shape, el)]


@register_op
class Where(_Elementwise):
    """``cond ? x : y`` element-wise, the three inputs broadcast together (cond is bool); the
    output has x's element type."""

    op_type = "Where"
    MIN_INPUTS = 3
    MAX_INPUTS = 3

    def infer_shapes(self, shapes):
        _need_inputs(self, shapes, 3)
        return [broadcast(self, broadcast(self, shapes[0], shapes[1]), shapes[2])]

    def infer_types(self, types: list[TensorType]) -> list[TensorType]:
        shape = self.infer_shapes([t.shape for t in types])[0]
        return [self._out_type(types, shape, types[1].element_dtype)]

    def output_layout(self, layout, rank):
        return None


@register_op
class PRelu(_Elementwise):
    """``x if x > 0 else slope * x``; the slope broadcasts to x's shape (ONNX's
    unidirectional broadcasting: the output has x's shape)."""

    op_type = "PRelu"
    MIN_INPUTS = 2
    MAX_INPUTS = 2

    def infer_shapes(self, shapes):
        _need_inputs(self, shapes, 2)
        out = broadcast(self, shapes[0], shapes[1])
        if tuple(out) != tuple(shapes[0]):
            raise fail(self, f"slope {list(shapes[1])} does not broadcast to x "
                             f"{list(shapes[0])}", "inputs")
        return [tuple(shapes[0])]


# --------------------------------------------------------------------------------------------
# Float64 definitions of the unary functions a quantised network runs as lookup tables
# --------------------------------------------------------------------------------------------

def _softplus(x, a, b, g):
    return np.logaddexp(0.0, x)


def _mish(x, a, b, g):
    return x * np.tanh(np.logaddexp(0.0, x))


def _sigmoid(z):
    e = np.exp(-np.abs(z))
    return np.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _celu(x, a, b, g):
    return np.maximum(0.0, x) + np.minimum(0.0, a * np.expm1(x / a))


_BIG = 1e30  # beyond any table's range: saturates every int8 / int16 output scale


def _finite(fn: Callable) -> Callable:
    """`fn` with NaN mapped to 0 and magnitudes beyond 1e30 (infinities) clipped to 1e30, so
    that table entries saturate instead of overflowing."""
    def wrapped(x, a, b, g):
        with np.errstate(all="ignore"):
            y = fn(x, a, b, g)
        return np.clip(np.nan_to_num(np.asarray(y, np.float64), nan=0.0), -_BIG, _BIG)
    return wrapped


#: func -> f(x, alpha, beta, gamma) in float64, for the functions whose table is exact (a
#: float function of one float32 feature map). Out-of-domain inputs (log of a negative code)
#: give 0, infinities saturate (see `_finite`).
UNARY_LUT_FUNCS: dict[str, Callable] = {name: _finite(fn) for name, fn in {
    "abs": lambda x, a, b, g: np.abs(x),
    "neg": lambda x, a, b, g: -x,
    "exp": lambda x, a, b, g: np.exp(np.minimum(x, 709.0)),
    "log": lambda x, a, b, g: np.log(x),
    "reciprocal": lambda x, a, b, g: 1.0 / x,
    "sqrt": lambda x, a, b, g: np.sqrt(x),
    "sin": lambda x, a, b, g: np.sin(x),
    "cos": lambda x, a, b, g: np.cos(x),
    "tan": lambda x, a, b, g: np.tan(x),
    "asin": lambda x, a, b, g: np.arcsin(x),
    "acos": lambda x, a, b, g: np.arccos(x),
    "atan": lambda x, a, b, g: np.arctan(x),
    "sinh": lambda x, a, b, g: np.sinh(x),
    "cosh": lambda x, a, b, g: np.cosh(x),
    "asinh": lambda x, a, b, g: np.arcsinh(x),
    "acosh": lambda x, a, b, g: np.arccosh(x),
    "atanh": lambda x, a, b, g: np.arctanh(x),
    "sign": lambda x, a, b, g: np.sign(x),
    "floor": lambda x, a, b, g: np.floor(x),
    "ceil": lambda x, a, b, g: np.ceil(x),
    "round": lambda x, a, b, g: np.round(x),  # half to even, as ONNX Round
    "elu": lambda x, a, b, g: np.where(x > 0, x, a * np.expm1(np.minimum(x, 0.0))),
    "selu": lambda x, a, b, g: g * np.where(x > 0, x, a * np.expm1(np.minimum(x, 0.0))),
    "celu": _celu,
    "thresholded_relu": lambda x, a, b, g: np.where(x > a, x, 0.0),
    "softplus": _softplus,
    "softsign": lambda x, a, b, g: x / (1.0 + np.abs(x)),
    "mish": _mish,
    "shrink": lambda x, a, b, g: np.where(x < -a, x + b, np.where(x > a, x - b, 0.0)),
    "swish": lambda x, a, b, g: x * _sigmoid(a * x),
}.items()}


def unary_lut_function(attrs: dict) -> Callable[[np.ndarray], np.ndarray]:
    """The float64 function of a `Unary` op's attributes, parameters bound (KeyError for a
    function with no table: check ``attrs['func'] in UNARY_LUT_FUNCS`` first)."""
    fn = UNARY_LUT_FUNCS[attrs["func"]]
    a = float(attrs.get("alpha", 1.0))
    b = float(attrs.get("beta", 0.0))
    g = float(attrs.get("gamma", 1.0))
    return lambda x: fn(np.asarray(x, np.float64), a, b, g)


def unary_lut(attrs: dict, in_scale: float, out_scale: float, in_dtype, out_dtype
              ) -> np.ndarray:
    """The table of a quantised `Unary`: entry ``i`` is
    ``saturate(round_half_away(f((i + qmin) * in_scale) / out_scale))`` for every int8 / int16
    input code (the addressing of `xir.quant.lut`)."""
    from ..quant.fixed_point import qrange, quantize

    in_dt = np.dtype(in_dtype)
    if in_dt not in (np.dtype(np.int8), np.dtype(np.int16)):
        raise FieldTypeError(f"lookup tables take int8 or int16 inputs, not {in_dt}",
                             field="dtype")
    qmin, qmax = qrange(in_dt)
    x = np.arange(qmin, qmax + 1, dtype=np.int64).astype(np.float64) * np.float64(in_scale)
    return quantize(unary_lut_function(attrs)(x), out_scale, np.dtype(out_dtype))

"""ONNX handlers: element-wise math, comparison, logic and activations (xir.ops.pointwise).

Unary math (Exp, Log, Abs, Floor, Sin, ...), IsNaN / IsInf, Not, BitwiseNot and the
parametrised activations (Elu, Selu, Celu, ThresholdedRelu, Softplus, Softsign, Mish, Shrink,
Swish) become a `Unary`; Max / Min / Mean of N inputs, Mod, comparisons, And / Or / Xor,
BitShift and the Bitwise ops a chain of `Binary`; Where a `Where`, PRelu a `PRelu`. Every
operand is brought into the view a computed full-rank input already has (`_broadcast_values`),
so these ops on NHWC maps need no Transpose. A dtype ONNX does not define an op for is refused
with the reason (the importer then lists the node, or hands it to a generic fallback).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from xcompile.frontend.onnx_import.handlers.elementwise import _binary, _float_ops
from xcompile.frontend.onnx_import.registry import _handles, _Unsupported
from xcompile.frontend.onnx_import.tensor import _T, NHWC

if TYPE_CHECKING:
    from xcompile.frontend.onnx_import.importer import _Importer


def unary(im: _Importer, x: _T, func: str, **attrs: Any) -> _T:
    """A `Unary` ``func`` of x in the view x already has."""
    perm = x.base if not x.is_const else None
    layout = "NHWC" if perm == NHWC else None
    return im.result(im.emit1("Unary", [im.value(x, perm)], layout, func=func, **attrs), perm)


def binary(im: _Importer, func: str, ins: list[_T]) -> _T:
    """A `Binary` ``func`` of two broadcasting operands."""
    return _binary(im, "Binary", ins, func=func)


def _need(x: _T, kinds: str, what: str) -> None:
    if x.dtype.kind not in kinds:
        raise _Unsupported(f"{what} of a {x.dtype} tensor")


_UNARY_ONNX = {
    "Abs": "abs", "Exp": "exp", "Log": "log", "Reciprocal": "reciprocal", "Floor": "floor",
    "Ceil": "ceil", "Round": "round", "Sign": "sign", "Sin": "sin", "Cos": "cos", "Tan": "tan",
    "Asin": "asin", "Acos": "acos", "Atan": "atan", "Sinh": "sinh", "Cosh": "cosh",
    "Asinh": "asinh", "Acosh": "acosh", "Atanh": "atanh", "IsNaN": "isnan", "Not": "not",
    "BitwiseNot": "bitwise_not", "Softplus": "softplus", "Softsign": "softsign",
    "Mish": "mish",
}


@_handles(*_UNARY_ONNX)
def _unary(im: _Importer, node, a, ins):
    func = _UNARY_ONNX[node.op_type]
    x = ins[0]
    if func == "not":
        _need(x, "b", "Not")
    elif func == "bitwise_not":
        _need(x, "iu", "BitwiseNot")
    elif func not in ("abs", "sign", "isnan"):
        _need(x, "f", node.op_type)  # ONNX defines the rest on floats only
    return [unary(im, x, func)]


@_handles("IsInf")
def _isinf(im: _Importer, node, a, ins):
    return [unary(im, ins[0], "isinf", detect_positive=bool(a.get("detect_positive", 1)),
                  detect_negative=bool(a.get("detect_negative", 1)))]


# --- activations with parameters --------------------------------------------------------------

@_handles("Elu")
def _elu(im: _Importer, node, a, ins):
    _need(ins[0], "f", "Elu")
    return [unary(im, ins[0], "elu", alpha=float(a.get("alpha", 1.0)))]


@_handles("Selu")
def _selu(im: _Importer, node, a, ins):
    _need(ins[0], "f", "Selu")
    return [unary(im, ins[0], "selu", alpha=float(a.get("alpha", 1.67326319217681884765625)),
                  gamma=float(a.get("gamma", 1.05070102214813232421875)))]


@_handles("Celu")
def _celu(im: _Importer, node, a, ins):
    _need(ins[0], "f", "Celu")
    alpha = float(a.get("alpha", 1.0))
    if alpha == 0.0:
        raise _Unsupported("Celu with alpha = 0 (it divides by alpha)")
    return [unary(im, ins[0], "celu", alpha=alpha)]


@_handles("ThresholdedRelu")
def _thresholded_relu(im: _Importer, node, a, ins):
    _need(ins[0], "f", "ThresholdedRelu")
    return [unary(im, ins[0], "thresholded_relu", alpha=float(a.get("alpha", 1.0)))]


@_handles("Shrink")
def _shrink(im: _Importer, node, a, ins):
    return [unary(im, ins[0], "shrink", alpha=float(a.get("lambd", 0.5)),
                  beta=float(a.get("bias", 0.0)))]


@_handles("Swish")
def _swish(im: _Importer, node, a, ins):
    _need(ins[0], "f", "Swish")
    alpha = float(a.get("alpha", 1.0))
    if alpha == 1.0 and ins[0].dtype == np.float32:
        from xcompile.frontend.onnx_import.handlers.activation import _unary as act

        return [act(im, ins[0], "Silu")]  # the quantisable x * sigmoid(x)
    return [unary(im, ins[0], "swish", alpha=alpha)]


@_handles("PRelu")
def _prelu(im: _Importer, node, a, ins):
    x, slope = ins
    try:
        shape = np.broadcast_shapes(x.shape, slope.shape)
    except ValueError as err:
        raise _Unsupported(f"slope {list(slope.shape)} does not broadcast to x "
                           f"{list(x.shape)}") from err
    if shape != x.shape:
        raise _Unsupported(f"slope {list(slope.shape)} broadcasts x {list(x.shape)} to "
                           f"{list(shape)} (ONNX broadcasts the slope to x only)")
    if slope.is_const and slope.const.dtype != x.dtype:
        slope = _T.constant(slope.const.astype(x.dtype))
    return [_binary(im, "PRelu", [x, slope])]


# --- N-ary and binary -------------------------------------------------------------------------

def _chain(im: _Importer, func: str, ins: list[_T]) -> _T:
    acc = ins[0]  # Max(x) is x
    for t in ins[1:]:
        acc = binary(im, func, [acc, t])
    return acc


@_handles("Max", "Min")
def _max_min(im: _Importer, node, a, ins):
    ins = [t for t in ins if t is not None]
    if not ins:
        raise _Unsupported(f"{node.op_type} with no inputs")
    return [_chain(im, node.op_type.lower(), ins)]


@_handles("Mean")
def _mean(im: _Importer, node, a, ins):
    """The sum, then a divide by N: a Multiply by 1/N on float32 / float16 (it quantizes)."""
    ins = [t for t in ins if t is not None]
    if not ins:
        raise _Unsupported("Mean with no inputs")
    _need(ins[0], "f", "Mean")
    from xcompile.frontend.onnx_import.handlers.elementwise import _arith2

    acc = ins[0]
    for t in ins[1:]:
        acc = _arith2(im, "add", [acc, t])
    if len(ins) == 1:
        return [acc]
    n = np.array(len(ins), dtype=ins[0].dtype)
    if _float_ops([acc]):
        return [_binary(im, "Multiply", [acc, _T.constant((1 / n).astype(n.dtype))])]
    return [binary(im, "div", [acc, _T.constant(n)])]


@_handles("Mod")
def _mod(im: _Importer, node, a, ins):
    fmod = int(a.get("fmod", 0))  # 0: the divisor's sign (Python %), 1: the dividend's (C)
    return [binary(im, "fmod" if fmod else "mod", ins)]


_BINARY_ONNX = {
    "Equal": "equal", "Less": "less", "LessOrEqual": "less_equal", "Greater": "greater",
    "GreaterOrEqual": "greater_equal", "And": "and", "Or": "or", "Xor": "xor",
    "BitwiseAnd": "bitwise_and", "BitwiseOr": "bitwise_or", "BitwiseXor": "bitwise_xor",
}


@_handles(*_BINARY_ONNX)
def _binary_onnx(im: _Importer, node, a, ins):
    func = _BINARY_ONNX[node.op_type]
    if func in ("and", "or", "xor"):
        for t in ins:
            _need(t, "b", node.op_type)
    elif func.startswith("bitwise"):
        for t in ins:
            _need(t, "iu", node.op_type)
    return [binary(im, func, ins)]


@_handles("BitShift")
def _bitshift(im: _Importer, node, a, ins):
    direction = str(a.get("direction", ""))
    if direction not in ("LEFT", "RIGHT"):
        raise _Unsupported(f"BitShift direction {direction!r} (LEFT or RIGHT)")
    for t in ins:
        _need(t, "iu", "BitShift")
    return [binary(im, "shift_left" if direction == "LEFT" else "shift_right", ins)]


@_handles("Where")
def _where(im: _Importer, node, a, ins):
    cond, x, y = ins
    _need(cond, "b", "Where's condition")
    if y.dtype != x.dtype:
        raise _Unsupported(f"Where of {x.dtype} and {y.dtype} (ONNX needs one type)")
    return [_binary(im, "Where", [cond, x, y])]

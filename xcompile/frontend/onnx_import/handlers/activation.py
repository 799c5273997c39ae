"""Activations: Relu, LeakyRelu, Sigmoid, Tanh, HardSwish, HardSigmoid, Clip (as a bounded
Relu) and Softmax.

They work in whatever view their input has; Softmax remaps its axis to that view.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from xcompile.frontend.onnx_import.handlers.elementwise import _binary
from xcompile.frontend.onnx_import.registry import _handles, _Unsupported
from xcompile.frontend.onnx_import.tensor import _T, NHWC

if TYPE_CHECKING:
    from xcompile.frontend.onnx_import.importer import _Importer


def _unary(im: _Importer, x: _T, op_type: str, **attrs: Any) -> _T:
    perm = x.base if not x.is_const else None
    layout = "NHWC" if perm == NHWC else None
    return im.result(im.emit1(op_type, [im.value(x, perm)], layout, **attrs), perm)


@_handles("Relu")
def _relu(im, node, a, ins):
    return [_unary(im, ins[0], "Relu")]


@_handles("LeakyRelu")
def _leaky(im, node, a, ins):
    return [_unary(im, ins[0], "Relu", alpha=float(a.get("alpha", 0.01)))]


@_handles("Sigmoid")
def _sigmoid(im, node, a, ins):
    return [_unary(im, ins[0], "Sigmoid")]


@_handles("HardSwish")
def _hardswish(im, node, a, ins):
    return [_unary(im, ins[0], "Hardswish")]


@_handles("Clip")
def _clip(im: _Importer, node, a, ins):
    x = ins[0]
    if im.opset < 11:
        lo, hi = a.get("min", -np.inf), a.get("max", np.inf)
    else:
        lo_c = im.const_of(ins[1] if len(ins) > 1 else None, "Clip min")
        hi_c = im.const_of(ins[2] if len(ins) > 2 else None, "Clip max")
        lo = -np.inf if lo_c is None else float(lo_c)
        hi = np.inf if hi_c is None else float(hi_c)
    if not np.issubdtype(x.dtype, np.floating):
        raise _Unsupported(f"Clip of an integer tensor ({x.dtype})")
    if lo == 0.0:
        return [_unary(im, x, "Relu", max_value=float(hi))]
    if not np.isfinite(lo):
        raise _Unsupported(f"Clip(min={lo}) with no lower bound has no xir Relu form")
    # clip(x, lo, hi) = relu(x - lo, max = hi - lo) + lo (the shifts become affines later)
    shift = _T.constant(np.array(-lo, dtype=x.dtype))
    r = _unary(im, _binary(im, "Add", [x, shift]), "Relu", max_value=float(hi - lo))
    return [_binary(im, "Add", [r, _T.constant(np.array(lo, dtype=x.dtype))])]


@_handles("Erf")
def _erf(im, node, a, ins):
    return [_unary(im, ins[0], "Erf")]


@_handles("Gelu")
def _gelu(im, node, a, ins):
    return [_unary(im, ins[0], "Gelu", approximate=str(a.get("approximate", "none")))]


@_handles("Tanh")
def _tanh(im, node, a, ins):
    return [_unary(im, ins[0], "Tanh")]


@_handles("HardSigmoid")
def _hardsigmoid(im: _Importer, node, a, ins):
    """clip(alpha * x + beta, 0, 1) as Multiply, Add and a Relu bounded at 1 (all of which
    quantize); MobileNetV3's squeeze-excite gate."""
    x = ins[0]
    if not np.issubdtype(x.dtype, np.floating):
        raise _Unsupported("non-float input")
    alpha = _T.constant(np.asarray(a.get("alpha", 0.2), dtype=x.dtype))
    beta = _T.constant(np.asarray(a.get("beta", 0.5), dtype=x.dtype))
    y = _binary(im, "Add", [_binary(im, "Multiply", [x, alpha]), beta])
    return [_unary(im, y, "Relu", max_value=1.0)]


@_handles("Softmax")
def _softmax(im: _Importer, node, a, ins):
    x = ins[0]
    r = x.rank
    axis = int(a.get("axis", -1 if im.opset >= 13 else 1)) % max(r, 1)
    if im.opset >= 13 or axis == r - 1 or all(d == 1 for d in x.shape[axis + 1:]):
        perm = x.base
        layout = "NHWC" if perm == NHWC else None
        v = im.emit1("Softmax", [im.value(x, perm)], layout, axis=perm.index(axis))
        return [im.result(v, perm)]
    flat = [math.prod(x.shape[:axis]), math.prod(x.shape[axis:])]
    v = im.emit1("Reshape", [im.value(x)], shape=flat)
    v = im.emit1("Softmax", [v], axis=-1)
    return [im.result(im.emit1("Reshape", [v], shape=list(x.shape)))]

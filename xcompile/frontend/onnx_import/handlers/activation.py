"""Activations: Relu, LeakyRelu, Sigmoid, Tanh, HardSwish, HardSigmoid, Clip (as a bounded
Relu) and Softmax.

They work in whatever view their input has; Softmax remaps its axis to that view. Relu, Clip and
LeakyRelu of other dtypes than float32 / float16 (integers, float64) become the exact `Binary`
max / min and `PRelu` (the Relu kernels compute in float32).
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


def _float_relu(x: _T) -> bool:
    """True when x's dtype keeps the quantisable Relu (its kernel computes in float32)."""
    return x.dtype in (np.dtype(np.float32), np.dtype(np.float16))


@_handles("Relu")
def _relu(im, node, a, ins):
    if not _float_relu(ins[0]):
        zero = _T.constant(np.zeros((), ins[0].dtype))
        return [_binary(im, "Binary", [ins[0], zero], func="max")]  # integer Relu, float64
    return [_unary(im, ins[0], "Relu")]


@_handles("LeakyRelu")
def _leaky(im, node, a, ins):
    alpha = float(a.get("alpha", 0.01))
    x = ins[0]
    if not _float_relu(x):
        return [_binary(im, "PRelu", [x, _T.constant(np.array(alpha, dtype=x.dtype))])]
    return [_unary(im, x, "Relu", alpha=alpha)]


@_handles("Sigmoid")
def _sigmoid(im, node, a, ins):
    return [_unary(im, ins[0], "Sigmoid")]


@_handles("HardSwish")
def _hardswish(im, node, a, ins):
    return [_unary(im, ins[0], "Hardswish")]


@_handles("Clip")
def _clip(im: _Importer, node, a, ins):
    """float32 with a constant lower bound: a bounded Relu (shifted when min != 0), which the
    chips fold; otherwise (integers, float64, no lower bound, bounds computed at run time)
    Binary max then min, exact in the dtype (max / min are integer ops once quantized)."""
    x = ins[0]
    if im.opset < 11:
        bounds = [_T.constant(np.array(a.get(k, d), dtype=x.dtype))
                  for k, d in (("min", -np.inf), ("max", np.inf))]
    else:
        bounds = [ins[k] if len(ins) > k and ins[k] is not None else None for k in (1, 2)]
    lo_t, hi_t = bounds
    lo = None if lo_t is None or not lo_t.is_const else float(lo_t.const.reshape(-1)[0])
    hi = None if hi_t is None or not hi_t.is_const else float(hi_t.const.reshape(-1)[0])
    if _float_relu(x) and lo is not None and np.isfinite(lo) and \
            (hi_t is None or hi is not None):
        hi = np.inf if hi is None else hi
        if lo == 0.0:
            return [_unary(im, x, "Relu", max_value=float(hi))]
        # clip(x, lo, hi) = relu(x - lo, max = hi - lo) + lo (the shifts become affines later)
        shift = _T.constant(np.array(-lo, dtype=x.dtype))
        r = _unary(im, _binary(im, "Add", [x, shift]), "Relu", max_value=float(hi - lo))
        return [_binary(im, "Add", [r, _T.constant(np.array(lo, dtype=x.dtype))])]
    y = x
    for t, v, func in ((lo_t, lo, "max"), (hi_t, hi, "min")):
        if t is None or (v is not None and np.isinf(v)):
            continue  # no bound on that side
        if t.is_const:
            t = _T.constant(t.const.reshape(()).astype(x.dtype))
        y = _binary(im, "Binary", [y, t], func=func)
    return [y]


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

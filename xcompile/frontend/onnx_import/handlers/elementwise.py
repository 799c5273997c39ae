"""Broadcasting arithmetic: Add, Sub, Mul, Sum, Div, Neg and Pow.

`_binary` brings every operand into one view, the one a computed full-rank input already has,
so element-wise ops on NHWC maps need no Transpose. BatchNorm and Gemm build on it too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from xcompile.frontend.onnx_import.registry import _handles, _Unsupported
from xcompile.frontend.onnx_import.tensor import _T, NHWC, _ident
from xir.values import Value

if TYPE_CHECKING:
    from xcompile.frontend.onnx_import.importer import _Importer


def _broadcast_values(im: _Importer, ins: list[_T]) -> tuple[list[Value], tuple[int, ...],
                                                             tuple[int, ...]]:
    """Values for a broadcasting element-wise op, all in one view; returns (values, perm,
    onnx output shape)."""
    try:
        out_shape = tuple(np.broadcast_shapes(*[t.shape for t in ins]))
    except ValueError as err:
        raise _Unsupported(f"shapes {[list(t.shape) for t in ins]} do not broadcast") from err
    rank = len(out_shape)
    ident = _ident(rank)
    perm = ident
    for t in ins:
        if not t.is_const and t.rank == rank and t.base != ident:
            perm = t.base
            break
    values = []
    for t in ins:
        if t.is_const:
            c = t.const
            if perm != ident:
                c = np.transpose(c.reshape((1,) * (rank - c.ndim) + c.shape), perm)
            values.append(im.params(c))
        elif t.rank == rank or perm == ident:
            values.append(im.value(t, perm if t.rank == rank else None))
        else:
            padded = (1,) * (rank - t.rank) + t.shape
            v = im.emit1("Reshape", [im.value(t)], shape=list(padded))
            values.append(im.value(_T(padded, value=v), perm))
    return values, perm, out_shape


def _binary(im: _Importer, op_type: str, ins: list[_T]) -> _T:
    values, perm, _ = _broadcast_values(im, ins)
    layout = "NHWC" if perm == NHWC else None
    return im.result(im.emit1(op_type, values, layout), perm)


@_handles("Add", "Sub", "Mul")
def _arith(im: _Importer, node, a, ins):
    return [_binary(im, {"Add": "Add", "Sub": "Sub", "Mul": "Multiply"}[node.op_type], ins)]


@_handles("Sum")
def _sum(im: _Importer, node, a, ins):
    acc = ins[0]
    for t in ins[1:]:
        acc = _binary(im, "Add", [acc, t])
    return [acc]


@_handles("Div")
def _div(im: _Importer, node, a, ins):
    x, d = ins
    if not np.issubdtype(d.dtype, np.floating):
        raise _Unsupported("integer division")
    if not d.is_const:
        return [_binary(im, "Div", [x, d])]  # a float op (LayerNorm's divide by the std)
    return [_binary(im, "Multiply", [x, _T.constant((1 / d.const).astype(d.dtype))])]


@_handles("Sqrt")
def _sqrt(im: _Importer, node, a, ins):
    x = ins[0]
    if not np.issubdtype(x.dtype, np.floating):
        raise _Unsupported("an integer input")
    perm = x.base if not x.is_const else None
    layout = "NHWC" if perm == NHWC else None
    return [im.result(im.emit1("Sqrt", [im.value(x, perm)], layout), perm)]


@_handles("Neg")
def _neg(im: _Importer, node, a, ins):
    x = ins[0]
    return [_binary(im, "Multiply", [x, _T.constant(np.array(-1, dtype=x.dtype))])]


@_handles("Pow")
def _pow(im: _Importer, node, a, ins):
    x, e = ins
    if not (e.is_const and e.const.size == 1
            and np.broadcast_shapes(x.shape, e.shape) == x.shape):
        raise _Unsupported("only a constant scalar exponent")
    p = float(e.const.reshape(-1)[0])
    if not np.issubdtype(x.dtype, np.floating):
        raise _Unsupported("an integer base")
    if x.is_const:
        return [_T.constant(np.power(x.const, x.const.dtype.type(p)))]
    if p in (1.0, 2.0):
        return [x] if p == 1.0 else [_binary(im, "Multiply", [x, x])]
    perm = x.base
    layout = "NHWC" if perm == NHWC else None
    return [im.result(im.emit1("Power", [im.value(x, perm)], layout, power=p), perm)]

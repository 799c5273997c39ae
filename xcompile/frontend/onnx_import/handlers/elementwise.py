"""Broadcasting arithmetic: Add, Sub, Mul, Sum, Div, Neg and Pow.

`_binary` brings every operand into one view, the one a computed full-rank input already has,
so element-wise ops on NHWC maps need no Transpose. BatchNorm and Gemm build on it too.

float32 (and float16) tensors keep the quantisable xir ops Add / Sub / Multiply / Div / Power;
every other dtype (integers, float64) goes to `Binary` (add, sub, mul, div, pow), which computes
in the tensor's own dtype: ONNX integer Div truncates toward zero, integers wrap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from xcompile.frontend.onnx_import.registry import _handles, _Unsupported
from xcompile.frontend.onnx_import.tensor import _T, NHWC, _ident
from xcompile.refit.provenance import SRC, leaf
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
            if t.src is not None:  # provenance for a refit (xcompile.refit.provenance)
                values[-1].tags[SRC] = leaf(t.src, perm if perm != ident else None,
                                            rank=rank if perm != ident else None)
        elif t.rank == rank or perm == ident:
            values.append(im.value(t, perm if t.rank == rank else None))
        else:
            padded = (1,) * (rank - t.rank) + t.shape
            v = im.emit1("Reshape", [im.value(t)], shape=list(padded))
            values.append(im.value(_T(padded, value=v), perm))
    return values, perm, out_shape


def _binary(im: _Importer, op_type: str, ins: list[_T], **attrs) -> _T:
    values, perm, out_shape = _broadcast_values(im, ins)
    layout = "NHWC" if perm == NHWC else None
    v = im.emit1(op_type, values, layout, **attrs)
    if not out_shape and v.shape != ():
        # xir Params hold a 0-d constant as [1]: a scalar op's result goes back to rank 0
        v = im.emit1("Reshape", [v], shape=[])
    return im.result(v, perm)


#: dtypes whose arithmetic stays on the quantisable float ops (the kernels compute in float32,
#: exact for one float16 operation too)
_FLOAT_OPS_DTYPES = (np.dtype(np.float32), np.dtype(np.float16))


def _float_ops(ins: list[_T]) -> bool:
    """True when every operand is float32 / float16: Add/Sub/Multiply/Div, else `Binary`."""
    return all(t.dtype in _FLOAT_OPS_DTYPES for t in ins)


def _arith2(im: _Importer, func: str, ins: list[_T]) -> _T:
    """a `func` b for func in add / sub / mul: the float op or a `Binary` in the dtype."""
    if _float_ops(ins):
        return _binary(im, {"add": "Add", "sub": "Sub", "mul": "Multiply"}[func], ins)
    return _binary(im, "Binary", ins, func=func)


@_handles("Add", "Sub", "Mul")
def _arith(im: _Importer, node, a, ins):
    return [_arith2(im, node.op_type.lower(), ins)]


@_handles("Sum")
def _sum(im: _Importer, node, a, ins):
    acc = ins[0]
    for t in ins[1:]:
        acc = _arith2(im, "add", [acc, t])
    return [acc]


@_handles("Div")
def _div(im: _Importer, node, a, ins):
    x, d = ins
    if not _float_ops(ins):
        return [_binary(im, "Binary", ins, func="div")]  # integers truncate toward zero
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
    """float32 maps: a Multiply by -1 (it quantizes); every other dtype a `Unary` neg."""
    x = ins[0]
    if x.dtype != np.float32:
        perm = x.base if not x.is_const else None
        layout = "NHWC" if perm == NHWC else None
        return [im.result(im.emit1("Unary", [im.value(x, perm)], layout, func="neg"), perm)]
    return [_binary(im, "Multiply", [x, _T.constant(np.array(-1, dtype=x.dtype))])]


@_handles("Pow")
def _pow(im: _Importer, node, a, ins):
    """A float32 map to a constant scalar power: Caffe's Power (a table once quantized);
    everything else (feature-map exponents, integer bases, other dtypes) a `Binary` pow."""
    x, e = ins
    if not (e.is_const and e.const.size == 1 and x.dtype == np.float32
            and bool(np.isfinite(e.const).all())
            and np.broadcast_shapes(x.shape, e.shape) == x.shape):
        return [_binary(im, "Binary", [x, e], func="pow")]
    p = float(e.const.reshape(-1)[0])
    if x.is_const:
        return [_T.constant(np.power(x.const, x.const.dtype.type(p)))]
    if p in (1.0, 2.0):
        return [x] if p == 1.0 else [_binary(im, "Multiply", [x, x])]
    perm = x.base
    layout = "NHWC" if perm == NHWC else None
    return [im.result(im.emit1("Power", [im.value(x, perm)], layout, power=p), perm)]

"""Reductions over axes: Reduce, ArgReduce, TopK, CumSum/CumProd, row-wise Hardmax/LogSoftmax.

Their semantics are ONNX's (opsets 7-21), with everything the importer can decide fixed as
attributes: the reduced axes are a list (empty = every axis), TopK's k is a number. The
element type of the result is the input's (ArgReduce and TopK's indices are int64).
"""

from __future__ import annotations

import math

from ..types import INT64, TensorType
from .base import REQUIRED, Operation, fail, norm_axis, register_op

#: Reduce's functions, named as the ONNX ops without "Reduce" (ReduceLogSumExp -> log_sum_exp)
REDUCE_FUNCS = ("sum", "mean", "max", "min", "prod", "l1", "l2", "log_sum", "log_sum_exp",
                "sum_square")


def _reduced_shape(op: Operation, shape: tuple[int, ...], axes: list[int],
                   keepdims: bool) -> tuple[int, ...]:
    rank = len(shape)
    picked = {norm_axis(op, int(a), rank, "axes") for a in axes} if axes else set(range(rank))
    if len(picked) != len(axes) and axes:
        raise fail(op, f"repeated axes {axes}", "axes")
    if keepdims:
        return tuple(1 if i in picked else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in picked)


@register_op
class Reduce(Operation):
    """`func` over `axes` (empty: every axis), keeping them as length 1 when `keepdims`.

    An empty reduction gives the function's identity (sum 0, prod 1, max -inf / the type's
    lowest value, min +inf / its highest, log_sum -inf), as ONNX and numpy define them.
    """

    op_type = "Reduce"
    KEEPS_LAYOUT = False
    ATTRS = {"func": (str, REQUIRED), "axes": (list, []), "keepdims": (bool, True)}
    CHOICES = {**Operation.CHOICES, "func": REDUCE_FUNCS}

    def infer_shapes(self, shapes):
        return [_reduced_shape(self, tuple(shapes[0]), list(self.attrs["axes"]),
                               self.attrs["keepdims"])]


@register_op
class ArgReduce(Operation):
    """The int64 index of the largest (`func` "max") or smallest entry along `axis`; ties give
    the first index, or the last with `select_last_index` (ONNX ArgMax / ArgMin)."""

    op_type = "ArgReduce"
    KEEPS_LAYOUT = False
    ATTRS = {"func": (str, REQUIRED), "axis": (int, 0), "keepdims": (bool, True),
             "select_last_index": (bool, False)}
    CHOICES = {**Operation.CHOICES, "func": ("max", "min")}

    def infer_shapes(self, shapes):
        x = tuple(shapes[0])
        ax = norm_axis(self, self.attrs["axis"], len(x))
        if x[ax] == 0:
            raise fail(self, f"axis {ax} is empty: no entry to pick", "axis")
        return [_reduced_shape(self, x, [ax], self.attrs["keepdims"])]

    def infer_types(self, types: list[TensorType]) -> list[TensorType]:
        return [TensorType(INT64, self.infer_shapes([types[0].shape])[0])]


@register_op
class TopK(Operation):
    """The `k` largest (or smallest, `largest` False) entries along `axis` and their int64
    indices. Equal values keep index order (the smaller index first), as ONNX requires;
    `sorted` False still returns them sorted (ONNX leaves that order to the backend)."""

    op_type = "TopK"
    KEEPS_LAYOUT = False
    N_OUTPUTS = 2
    ATTRS = {"k": (int, REQUIRED), "axis": (int, -1), "largest": (bool, True),
             "sorted": (bool, True)}

    def infer_shapes(self, shapes):
        x = list(shapes[0])
        ax = norm_axis(self, self.attrs["axis"], len(x))
        k = self.attrs["k"]
        if not 0 <= k <= x[ax]:
            raise fail(self, f"k = {k} outside 0..{x[ax]} (axis {ax} of {x})", "k")
        x[ax] = k
        return [tuple(x), tuple(x)]

    def infer_types(self, types: list[TensorType]) -> list[TensorType]:
        vals, idx = self.infer_shapes([types[0].shape])
        return [TensorType(types[0].element_dtype, vals), TensorType(INT64, idx)]


@register_op
class CumSum(Operation):
    """The running sum along `axis`; `exclusive` leaves the current entry out, `reverse` sums
    from the end (ONNX CumSum). A second input (one integer), when present, is the axis,
    read when the op runs (ONNX's axis is a tensor); the attribute is then unused."""

    op_type = "CumSum"
    MAX_INPUTS = 2
    ATTRS = {"axis": (int, 0), "exclusive": (bool, False), "reverse": (bool, False)}

    def infer_shapes(self, shapes):
        if len(shapes) > 1 and math.prod(shapes[1]) != 1:
            raise fail(self, f"the axis input must hold one number, not shape "
                             f"{list(shapes[1])}", "inputs")
        if not shapes[0]:
            raise fail(self, "needs an input of rank >= 1", "inputs")
        norm_axis(self, self.attrs["axis"], len(shapes[0]))
        return [tuple(shapes[0])]


@register_op
class CumProd(CumSum):
    """The running product along `axis` (exclusive: the empty product 1 first; ONNX
    CumProd, opset 26)."""

    op_type = "CumProd"


class _RowOp(Operation):
    ATTRS = {"axis": (int, -1)}

    def infer_shapes(self, shapes):
        norm_axis(self, self.attrs["axis"], len(shapes[0]))
        return [tuple(shapes[0])]


@register_op
class Hardmax(_RowOp):
    """1 at the first largest entry along `axis`, 0 elsewhere (ONNX Hardmax, opset 13)."""

    op_type = "Hardmax"


@register_op
class LogSoftmax(_RowOp):
    """``x - max - log(sum(exp(x - max)))`` along `axis` (ONNX LogSoftmax, opset 13)."""

    op_type = "LogSoftmax"

"""Reductions: every Reduce*, ArgMax/ArgMin, TopK, CumSum/CumProd, Hardmax and LogSoftmax.

All of them are axis-local, so they work in whatever view their input has (an NHWC feature
map stays NHWC) with the axes remapped. Axes arrive as an attribute or, from opset 13
(ReduceSum) / 18 (the others), as an input that must be constant.

ReduceMean / ReduceMax of a float map over its space become a global AvgPool2d / MaxPool2d,
which the chips run: over H and W of a 4-D map (its NHWC view), and over the length of a
rank-3 (N, C, L) or (N, L, C) tensor (the (N, 1, L, C) map the 1-D Conv and pools read,
`handlers.conv_pool`) when the tensor is already held in that view: where it would take a
Transpose, the axis-local `Reduce` stays.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from xcompile.frontend.onnx_import.registry import _handles, _Unsupported
from xcompile.frontend.onnx_import.tensor import _T, NHWC

if TYPE_CHECKING:
    from xcompile.frontend.onnx_import.importer import _Importer

_REDUCE = {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max", "ReduceMin": "min",
           "ReduceProd": "prod", "ReduceL1": "l1", "ReduceL2": "l2", "ReduceLogSum": "log_sum",
           "ReduceLogSumExp": "log_sum_exp", "ReduceSumSquare": "sum_square"}
#: functions whose reduction over one entry is that entry
_IDENTITY_ON_ONE = {"sum", "mean", "max", "min", "prod", "log_sum_exp"}


def _layout(perm) -> str | None:
    return "NHWC" if perm == NHWC else None


def _dropped_perm(perm: tuple[int, ...], axes: set[int]) -> tuple[int, ...]:
    """The view permutation left when the ONNX axes `axes` are removed (renumbered)."""
    return tuple(p - sum(1 for a in axes if a < p) for p in perm if p not in axes)


def _axis_local(im: _Importer, x: _T, op_type: str, dropped: list[int], keep: bool,
                n_out: int = 1, **attrs) -> list[_T]:
    """Emit `op_type` on x's current view, its "axes" (a list) or "axis" attribute remapped to
    that view; wrap the outputs (the ONNX axes `dropped` removed unless `keep`)."""
    perm = x.base if not x.is_const else tuple(range(x.rank))
    if "axis" in attrs:
        attrs["axis"] = perm.index(attrs["axis"])
    if "axes" in attrs:
        attrs["axes"] = sorted(perm.index(a) for a in attrs["axes"])
    outs = im.emit(op_type, [im.value(x, perm)], [_layout(perm) if keep else None] * n_out,
                   **attrs)
    out_perm = perm if keep else _dropped_perm(perm, set(dropped))
    return [im.result(v, out_perm) for v in outs]


def _reduce_axes(im: _Importer, node, a: dict, ins: list) -> list[int] | None:
    """The ONNX axes (None: not given or empty)."""
    since = 13 if node.op_type == "ReduceSum" else 18
    if im.opset >= since:
        t = ins[1] if len(ins) > 1 else None
        axes = im.const_of(t, f"{node.op_type} axes")
    else:
        axes = a.get("axes")
    if axes is None or np.size(axes) == 0:
        return None
    return [int(v) for v in np.ravel(axes)]


@_handles(*_REDUCE)
def _reduce(im: _Importer, node, a, ins):
    x = ins[0]
    func = _REDUCE[node.op_type]
    keep = bool(int(a.get("keepdims", 1)))
    axes = _reduce_axes(im, node, a, ins)
    if axes is None and int(a.get("noop_with_empty_axes", 0)):
        if func in _IDENTITY_ON_ONE:
            return [x]
        # the per-entry part of the function (|x|, x*x, log x): a reduction over a unit axis
        v = im.emit1("Reshape", [im.value(x)], shape=list(x.shape) + [1])
        return [im.result(im.emit1("Reduce", [v], func=func, axes=[x.rank], keepdims=False))]
    r = max(x.rank, 1)
    axes = list(range(x.rank)) if axes is None else [v % r for v in axes]
    if len(set(axes)) != len(axes):
        raise _Unsupported(f"repeated axes {axes}")
    if func in ("mean", "max") and x.dtype == np.float32 and 0 not in axes and \
            math.prod(x.shape[a] for a in axes) > 0:
        if x.rank == 4 and sorted(axes) == [2, 3]:
            return [_global_pool(im, x, func, keep)]
        if x.rank == 3:
            pooled = _global_pool_1d(im, x, func, sorted(axes), keep)
            if pooled is not None:
                return [pooled]
    if x.rank == 0:
        return _axis_local(im, x, "Reduce", [], keep, func=func, axes=[], keepdims=keep)
    return _axis_local(im, x, "Reduce", axes, keep, func=func, axes=axes, keepdims=keep)


def _pool(im: _Importer, v, func: str, height: int, width: int):
    """The global pool of NHWC map `v` (its whole H x W plane): AvgPool2d for "mean",
    MaxPool2d (a window of the plane's size, stride 1) for "max"."""
    if func == "mean":
        return im.emit1("AvgPool2d", [v], "NHWC", is_global=True, pool_height=height,
                        pool_width=width)
    return im.emit1("MaxPool2d", [v], "NHWC", pool_height=height, pool_width=width)


def _global_pool(im: _Importer, x: _T, func: str, keep: bool) -> _T:
    """The mean / max over H and W of an NCHW map (PyTorch's `x.mean((2, 3))`): a global
    AvgPool2d / MaxPool2d, reshaped when keepdims is 0."""
    v = _pool(im, im.nhwc(x), func, x.shape[2], x.shape[3])
    if keep:
        return im.result(v, NHWC)
    return im.result(im.emit1("Reshape", [v], None, shape=[x.shape[0], x.shape[1]]))


def _global_pool_1d(im: _Importer, x: _T, func: str, axes: list[int], keep: bool
                    ) -> _T | None:
    """The mean / max of a rank-3 tensor over its axis `a` (1 or 2) as the global pool of the
    (N, 1, L, C) map (L = axis a, C the other); None for other axes, or unless x is held in
    the (N, L, C) view this needs (a Transpose would cost more than it saves)."""
    if len(axes) != 1:
        return None
    a = axes[0]
    perm = (0, a, 3 - a)
    if x.is_const or perm not in x.views:
        return None
    n, length, c = (x.shape[p] for p in perm)
    v = im.emit1("Reshape", [x.views[perm]], "NHWC", shape=[n, 1, length, c])
    v = _pool(im, v, func, 1, length)
    if not keep:
        return im.result(im.emit1("Reshape", [v], None, shape=[n, c]))
    return im.result(im.emit1("Reshape", [v], None, shape=[n, 1, c]), perm)


@_handles("ArgMax", "ArgMin")
def _arg(im: _Importer, node, a, ins):
    x = ins[0]
    if x.rank == 0:
        raise _Unsupported("a scalar input (no axis to search)")
    axis = int(a.get("axis", 0)) % x.rank
    keep = bool(int(a.get("keepdims", 1)))
    return _axis_local(im, x, "ArgReduce", [axis], keep, func=node.op_type[3:].lower(),
                       axis=axis, keepdims=keep,
                       select_last_index=bool(int(a.get("select_last_index", 0))))


@_handles("TopK")
def _topk(im: _Importer, node, a, ins):
    x = ins[0]
    if x.rank == 0:
        raise _Unsupported("a scalar input")
    if im.opset < 10:
        k = int(a["k"])
    else:
        kc = im.const_of(ins[1], "TopK K")
        if np.size(kc) != 1:
            raise _Unsupported(f"K must hold one number, not shape {list(np.shape(kc))}")
        k = int(np.ravel(kc)[0])
    axis = int(a.get("axis", -1)) % x.rank
    return _axis_local(im, x, "TopK", [axis], True, n_out=2, k=k, axis=axis,
                       largest=bool(int(a.get("largest", 1))),
                       sorted=bool(int(a.get("sorted", 1))))


@_handles("CumSum", "CumProd")
def _cumsum(im: _Importer, node, a, ins):
    x = ins[0]
    if x.rank == 0:
        raise _Unsupported("a scalar input")
    attrs = {"exclusive": bool(int(a.get("exclusive", 0))),
             "reverse": bool(int(a.get("reverse", 0)))}
    if np.prod(ins[1].shape) != 1:
        raise _Unsupported(f"axis must hold one number, not shape {list(ins[1].shape)}")
    if not ins[1].is_const:  # the axis is data: read when the op runs, in ONNX order
        return [im.result(im.emit1(node.op_type, [im.value(x), im.value(ins[1])], **attrs))]
    axis = int(np.ravel(ins[1].const)[0])
    if not -x.rank <= axis < x.rank:
        raise _Unsupported(f"axis {axis} out of range for rank {x.rank}")
    axis %= x.rank
    return _axis_local(im, x, node.op_type, [axis], True, axis=axis, **attrs)


@_handles("Hardmax", "LogSoftmax")
def _row(im: _Importer, node, a, ins):
    """Opset 13: along `axis`. Before: over the input coerced to 2-D at `axis` (default 1)."""
    x = ins[0]
    if x.rank == 0:
        raise _Unsupported("a scalar input")
    axis = int(a.get("axis", -1 if im.opset >= 13 else 1)) % x.rank
    if im.opset >= 13 or axis == x.rank - 1 or all(d == 1 for d in x.shape[axis + 1:]):
        return _axis_local(im, x, node.op_type, [axis], True, axis=axis)
    flat = [math.prod(x.shape[:axis]), math.prod(x.shape[axis:])]
    v = im.emit1("Reshape", [im.value(x)], shape=flat)
    v = im.emit1(node.op_type, [v], axis=1)
    return [im.result(im.emit1("Reshape", [v], shape=list(x.shape)))]

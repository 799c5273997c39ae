"""Reshape, Flatten, Squeeze, Unsqueeze and Transpose.

The first four are layout-sensitive and read the ONNX-order view. Transpose emits nothing: it
relabels the views of its input.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from xcompile.frontend.onnx_import.registry import _handles, _Unsupported
from xcompile.frontend.onnx_import.tensor import _T
from xir.errors import OnnxImportError

if TYPE_CHECKING:
    from xcompile.frontend.onnx_import.importer import _Importer


def _reshape_to(im: _Importer, x: _T, shape: list[int]) -> _T:
    if tuple(shape) == x.shape:
        return x
    if x.is_const:
        return _T.constant(x.const.reshape(shape))
    return im.result(im.emit1("Reshape", [im.value(x)], shape=[int(d) for d in shape]))


@_handles("Reshape")
def _reshape(im: _Importer, node, a, ins):
    x = ins[0]
    if im.opset < 5:
        want = [int(d) for d in a["shape"]]
    else:
        want = [int(d) for d in im.const_of(ins[1], "Reshape shape")]
    allowzero = int(a.get("allowzero", 0))
    if allowzero and 0 in want:
        raise _Unsupported("a literal 0 dimension (allowzero=1); xir Reshape reads 0 as 'copy'")
    out = []
    for i, d in enumerate(want):
        out.append(x.shape[i] if d == 0 and not allowzero else d)
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        out[out.index(-1)] = math.prod(x.shape) // known if known else 0
    if math.prod(out) != math.prod(x.shape):
        raise OnnxImportError(f"node '{node.name}': cannot reshape {list(x.shape)} to {want}")
    return [_reshape_to(im, x, out)]


@_handles("Flatten")
def _flatten(im: _Importer, node, a, ins):
    x = ins[0]
    axis = int(a.get("axis", 1))
    if axis < 0:
        axis += x.rank
    return [_reshape_to(im, x, [math.prod(x.shape[:axis]), math.prod(x.shape[axis:])])]


@_handles("Squeeze")
def _squeeze(im: _Importer, node, a, ins):
    x = ins[0]
    if im.opset < 13:
        axes = a.get("axes")
    else:
        c = im.const_of(ins[1] if len(ins) > 1 else None, "Squeeze axes")
        axes = None if c is None else [int(v) for v in c]
    if axes is None:
        axes = [i for i, d in enumerate(x.shape) if d == 1]
    axes = {int(v) % x.rank for v in axes}
    return [_reshape_to(im, x, [d for i, d in enumerate(x.shape) if i not in axes])]


@_handles("Unsqueeze")
def _unsqueeze(im: _Importer, node, a, ins):
    x = ins[0]
    if im.opset < 13:
        axes = list(a["axes"])
    else:
        axes = [int(v) for v in im.const_of(ins[1], "Unsqueeze axes")]
    r = x.rank + len(axes)
    shape = list(x.shape)
    for ax in sorted(int(v) % r for v in axes):
        shape.insert(ax, 1)
    return [_reshape_to(im, x, shape)]


@_handles("Transpose")
def _transpose(im: _Importer, node, a, ins):
    x = ins[0]
    q = tuple(int(p) % x.rank for p in a.get("perm", range(x.rank - 1, -1, -1)))
    if x.is_const:
        return [_T.constant(np.transpose(x.const, q))]
    # No op here: every view of x is also a view of y = transpose(x, q).
    y = _T(tuple(x.shape[p] for p in q))
    for pv, v in x.views.items():
        y.views[tuple(q.index(i) for i in pv)] = v
    y.base = tuple(q.index(i) for i in x.base)
    return [y]

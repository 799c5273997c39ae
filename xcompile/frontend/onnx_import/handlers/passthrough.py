"""Ops that emit no xir op: Identity, inference Dropout and no-op Cast pass their input on,
Shape and Size give constants from the static shape. A Cast that changes the element type of a
computed tensor is a Convert (handlers/index.py).
"""

from __future__ import annotations

import math

import numpy as np

from xcompile.frontend.onnx_import.handlers.index import cast_to
from xcompile.frontend.onnx_import.registry import _handles, _Unsupported
from xcompile.frontend.onnx_import.tensor import _T


@_handles("Identity", "Dropout")
def _identity(im, node, a, ins):
    if node.op_type == "Dropout" and im.reads(node, 1):
        raise _Unsupported("the mask output")
    if node.op_type == "Dropout" and a.get("training_mode"):
        raise _Unsupported("training mode")
    if node.op_type == "Dropout" and len(ins) > 2 and ins[2] is not None:
        if not ins[2].is_const:
            raise _Unsupported("a non-constant training_mode")
        if bool(ins[2].const):
            raise _Unsupported("training mode")
    return [ins[0]]


@_handles("Cast")
def _cast(im, node, a, ins):
    return [cast_to(im, node, a, ins[0])]


@_handles("Shape")
def _shape(im, node, a, ins):
    """The static shape, cut to [start, end) (opset 15: negative counts from the end, both
    clamped to the rank, as Python slicing does)."""
    shape = np.array(ins[0].shape, dtype=np.int64)
    start, end = int(a.get("start", 0)), a.get("end", None)
    return [_T.constant(shape[start:None if end is None else int(end)])]


@_handles("Size")
def _size(im, node, a, ins):
    return [_T.constant(np.array(math.prod(ins[0].shape), dtype=np.int64))]

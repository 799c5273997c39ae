"""Ops that emit no xir op: Identity, inference Dropout and no-op Cast pass their input on,
Shape and Size give constants from the static shape.
"""

from __future__ import annotations

import math

import numpy as np

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
    onnx = im.onnx
    to = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(a["to"]))
    if to != ins[0].dtype:
        raise _Unsupported(f"a Cast of computed data ({ins[0].dtype} -> {to})")
    return [ins[0]]


@_handles("Shape")
def _shape(im, node, a, ins):
    shape = np.array(ins[0].shape, dtype=np.int64)
    start, end = a.get("start", 0), a.get("end", None)
    return [_T.constant(shape[start:end])]


@_handles("Size")
def _size(im, node, a, ins):
    return [_T.constant(np.array(math.prod(ins[0].shape), dtype=np.int64))]

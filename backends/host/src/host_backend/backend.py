"""HostBackend: runs every registry op except HardOp on the CPU with numpy kernels.

Kernels are pure functions of numpy arrays (`host_backend.ops`); this class only adapts them to
the runtime: Params come from the op, feature maps from the input tensors, results become host
tensors (or are written into caller-allocated ones).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xrt.backend import Backend
from xrt.errors import TensorError, UnsupportedOpError
from xrt.tensor import Tensor

from .ops import FLOAT_KERNELS


def _forward_input(op, inputs, outputs, backend):
    return list(inputs)


def _forward_output(op, inputs, outputs, backend):
    return []


def _forward_kernel(op, inputs, outputs, backend: HostBackend):
    kernel = backend.kernelFor(op)
    arrays: list[np.ndarray] = []
    feed = iter(inputs)
    for k, v in enumerate(op.inputs):
        if v.is_params:
            if v.data is None:
                raise TensorError(f"op {op.op_id} ({op.op_type}) params v_id {v.v_id} have no "
                                  f"data: call network.loadParamsFromFile(raw) first")
            arrays.append(v.data)
        else:
            arrays.append(np.asarray(next(feed)))
    results = kernel(arrays, op.attrs)
    tensors = []
    for i, (value, arr) in enumerate(zip(op.outputs, results)):
        arr = np.asarray(arr)
        if arr.dtype != value.dtype.numpy_dtype:
            arr = arr.astype(value.dtype.numpy_dtype)
        if i < len(outputs):
            dst = outputs[i]
            np.copyto(np.asarray(dst), arr.reshape(value.dtype.shape))
            tensors.append(dst)
        else:
            tensors.append(Tensor(np.ascontiguousarray(arr).reshape(value.dtype.shape),
                                  value.dtype))
    return tensors


class HostBackend(Backend):
    """The CPU reference backend (seed 002's HostBackend)."""

    name = "Host"
    default_url = "host://"
    FORWARDS = {"Input": _forward_input, "Output": _forward_output,
                **{op_type: _forward_kernel for op_type in FLOAT_KERNELS}}

    def kernelFor(self, op: Any):
        """The numpy kernel that computes `op` (float, or integer for quantized ops)."""
        kernel = FLOAT_KERNELS.get(op.op_type)
        if kernel is None:
            raise UnsupportedOpError(f"HostBackend has no kernel for {op.op_type} "
                                     f"(op {op.op_id})")
        return kernel

    def memRegion(self):
        from xrt.device import HostDevice

        return HostDevice.MemRegion()

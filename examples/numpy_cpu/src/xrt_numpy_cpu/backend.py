"""`NumpyCpuBackend` (name "NumpyCpu"): runs float32 Conv2d, Relu, Add and MaxPool2d with this
plugin's kernels on an `npcpu://` device; every other op is left to the next backend of the
session (the HostBackend in ``Session.Create([NumpyCpuBackend, HostBackend], ...)``).

What an xrt backend implements (docs/plugin-guide.md): `name` and `default_url`; `FORWARDS`
(op type -> forward function with the vendor signature); `isOpSupported` to narrow the claim
per op; the lifecycle hooks it needs (`_bind` checks the device here; the base class checks the
call order and owns the state). Outputs are xrt Tensors in this backend's memory region, or the
caller's tensors when the session hands some in.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from xrt import Backend, InvalidArgumentError, Tensor

from .device import NumpyCpuDevice
from .kernels import KERNELS, supports


def _forward(op: Any, inputs: list[Tensor], outputs: list[Tensor], backend: NumpyCpuBackend
             ) -> list[Tensor]:
    """The forward function of every op of this backend: gather the arrays (params from the
    op, feature maps from the tensors, in the op's input order), run the kernel, hand the
    results back as tensors."""
    feed = iter(inputs)
    arrays = [v.data if v.is_params else np.asarray(next(feed)) for v in op.inputs]
    t0 = time.perf_counter()
    results = KERNELS[op.op_type](arrays, op.attrs)
    kernel_ms = (time.perf_counter() - t0) * 1e3
    if backend.time_profile:  # the kernel's time is this device's "hard" time
        backend.setTimeElapses(op.op_id, 0.0, kernel_ms)
    return [backend.result(v, r, outputs[i] if i < len(outputs) else None)
            for i, (v, r) in enumerate(zip(op.outputs, results))]


class NumpyCpuBackend(Backend):
    """A CPU backend with its own kernels for four float32 ops."""

    name = "NumpyCpu"
    default_url = "npcpu://"
    FORWARDS = {op_type: _forward for op_type in KERNELS}
    #: the dtypes the conformance kit tries the claimed ops in
    conformance_dtypes = ("float32",)

    def isOpSupported(self, op: Any) -> bool:
        """Claimed: an op type of `KERNELS`, float32 values only, attributes the kernel
        computes exactly."""
        if op.op_type not in KERNELS:
            return False
        values = [*op.inputs, *op.outputs]
        if any(v.dtype.element_dtype.is_quantized or v.dtype.numpy_dtype != np.float32
               for v in values):
            return False
        return supports(op.op_type, op.attrs)

    def _bind(self, network_view: Any, device: Any) -> Any:
        if not isinstance(device, NumpyCpuDevice):
            raise InvalidArgumentError(f"NumpyCpuBackend runs on an npcpu:// device "
                                       f"(Device.Open('npcpu://')), not {device!r}")
        return network_view

    def result(self, value: Any, array: np.ndarray, given: Tensor | None) -> Tensor:
        """`array` as the tensor of `value`: written into the caller's tensor when given, else
        into a new tensor in this backend's memory region."""
        out = given if given is not None else Tensor.empty(value.dtype, self.memRegion())
        np.copyto(out.numpy(), array.reshape(tuple(value.dtype.shape)), casting="same_kind")
        return out

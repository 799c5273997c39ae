"""Input, Output and HardOp: the ops whose meaning is the network's edge or a backend's."""

from __future__ import annotations

from typing import Any

from ..types import TensorType
from .base import Operation, fail, register_op


@register_op
class Input(Operation):
    """A network input: no inputs, one output value that the caller provides."""

    op_type = "Input"
    MIN_INPUTS = 0
    MAX_INPUTS = 0

    def infer_shapes(self, shapes):
        return [tuple(self.outputs[0].shape)] if self.outputs else []

    def infer_types(self, types: list[TensorType]) -> list[TensorType]:
        return [self.outputs[0].dtype] if self.outputs else []


@register_op
class Output(Operation):
    """The network outputs: its inputs are the values the network returns."""

    op_type = "Output"
    MIN_INPUTS = 1
    MAX_INPUTS = None
    N_OUTPUTS = 0

    def infer_shapes(self, shapes):
        return []

    def infer_types(self, types):
        return []


@register_op
class HardOp(Operation):
    """Ops fused and lowered for an NPU: instruction words and weights a backend understands.

    `instr` (uint64 instruction words) and `params` (weights) are Params held by the op beside
    its feature-map inputs, listed in the json under `instr` / `params`. The HardOp does not
    infer its output shapes: the lowering pass declares them.
    """

    op_type = "HardOp"
    MIN_INPUTS = 0
    MAX_INPUTS = None
    N_OUTPUTS = None
    ATTRS = {
        "origin_ops_id": (list, []),
        "device_info": (dict, {}),
        "layer_count": (int, 0),
        "sub_hard_ops": (list, []),
    }

    def __init__(self, inputs=(), outputs=(), *, instr=None, params=(), **kw: Any) -> None:
        super().__init__(inputs, outputs, **kw)
        self.instr = instr
        self.params = list(params)

    def n_outputs(self) -> int:
        return len(self.outputs)

    def hard_params(self) -> list:
        return ([self.instr] if self.instr is not None else []) + self.params

    def infer_shapes(self, shapes):
        return [tuple(v.shape) for v in self.outputs]

    def infer_types(self, types):
        return [v.dtype for v in self.outputs]

    def check_types(self) -> None:
        if self.instr is not None and self.instr.dtype.numpy_dtype.itemsize != 8:
            raise fail(self, "instr params must be 64-bit words", "instr")

    def clone_with(self, inputs, outputs):
        return type(self)(inputs, outputs, instr=self.instr, params=self.params,
                          op_id=self.op_id, name=self.name,
                          compile_target=self.compile_target, tags=self.tags, **self.attrs)

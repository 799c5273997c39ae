"""OnnxGraph: an op that carries a small ONNX graph (the long tail of the ONNX op set).

The ONNX op set has ~200 ops; the ones a network computes on (convolutions, matmuls, the
element-wise and index ops) have their own xir ops and numpy kernels. The rest -- control flow
(If, Loop, Scan), Einsum, Attention, the quantized-linear ops, DFT/STFT, RoiAlign, GridSample
and the like -- import as one OnnxGraph op each: a serialized ONNX ModelProto holding the node
(with its subgraphs, the constants it reads as initializers and the model's opset imports),
run by a backend that can run ONNX (the HostBackend: onnxruntime, else onnx's reference).

The model lives in the .raw file like every other constant: it is the op's *last input*, a
rank-1 uint8 Params, so the raw's size and md5 checks cover it; the op also records the
sha256 of those bytes (`digest`), checked whenever the bytes are at hand (`model_bytes`,
`check_types`), so a blob swapped or damaged in memory, or in a raw rewritten with a fresh md5,
is still refused. The feature inputs come first, in the order of the carried graph's inputs;
the outputs, in the order of the graph's outputs, carry the types ONNX shape inference gave at
import (the op declares them, like a HardOp; the backend checks them against the model).

xir only holds the bytes: nothing here imports onnx.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import numpy as np

from ..errors import FieldTypeError, RawChecksumError
from ..types import TensorType
from .base import REQUIRED, Operation, fail, register_op

_DIGEST_RE = re.compile(r"^[0-9a-f]{64}$")


def model_digest(data: bytes | bytearray | memoryview | np.ndarray) -> str:
    """The sha256 (hex) an OnnxGraph records for its serialized model."""
    if isinstance(data, np.ndarray):
        data = np.ascontiguousarray(data).view(np.uint8).data
    return hashlib.sha256(data).hexdigest()


@register_op
class OnnxGraph(Operation):
    """A small ONNX graph run as one op.

    inputs: the graph's inputs (feature maps or Params), then the serialized ModelProto as a
    rank-1 uint8 Params. outputs: the graph's outputs, typed at import.

    Attributes: `onnx_ops` the ONNX op types carried (domain-qualified outside the standard
    domain, e.g. "com.microsoft.Attention"), `onnx_nodes` their node names, `opset` the
    standard-domain opset the model imports, `digest` the sha256 of the model bytes.
    """

    op_type = "OnnxGraph"
    MIN_INPUTS = 1
    MAX_INPUTS = None
    N_OUTPUTS = None
    KEEPS_LAYOUT = False
    ATTRS = {
        "onnx_ops": (list, REQUIRED),
        "onnx_nodes": (list, []),
        "opset": (int, REQUIRED),
        "digest": (str, REQUIRED),
    }
    LIST_ITEMS = {"onnx_ops": str, "onnx_nodes": str}

    def check_attr_values(self) -> None:
        super().check_attr_values()
        ops = self.attrs["onnx_ops"]
        if not ops or not all(isinstance(t, str) and t for t in ops):
            raise FieldTypeError("onnx_ops must list the carried ONNX op types (non-empty "
                                 f"strings), not {ops!r}", op_id=self.op_id, field="onnx_ops")
        if not all(isinstance(n, str) for n in self.attrs["onnx_nodes"]):
            raise FieldTypeError("onnx_nodes must be a list of strings", op_id=self.op_id,
                                 field="onnx_nodes")
        if self.attrs["opset"] < 1:
            raise FieldTypeError(f"opset must be >= 1, not {self.attrs['opset']}",
                                 op_id=self.op_id, field="opset")
        if not _DIGEST_RE.match(self.attrs["digest"]):
            raise FieldTypeError(f"digest must be 64 lowercase hex digits (sha256), not "
                                 f"{self.attrs['digest']!r}", op_id=self.op_id, field="digest")

    # --- what it carries ---------------------------------------------------------------
    @property
    def label(self) -> str:
        """What a summary or profile calls it: ``OnnxGraph(If)``, ``OnnxGraph(Einsum)``."""
        return f"OnnxGraph({'+'.join(self.attrs['onnx_ops'])})"

    @property
    def model(self):
        """The Params holding the serialized ONNX model (the last input)."""
        return self.inputs[-1] if self.inputs else None

    def graph_inputs(self) -> list:
        """The values fed to the carried graph's inputs, in order."""
        return list(self.inputs[:-1])

    def model_bytes(self) -> bytes:
        """The serialized ModelProto, checked against `digest`."""
        p = self.model
        if p is None or not p.is_params:
            raise fail(self, "the last input must be the model Params", "inputs")
        if p.data is None:
            raise FieldTypeError(f"{self.label}: the model params (v_id {p.v_id}) have no data "
                                 f"loaded", op_id=self.op_id, field="inputs")
        data = p.data.tobytes()
        got = model_digest(data)
        if got != self.attrs["digest"]:
            raise RawChecksumError(
                f"{self.label}: the carried ONNX model (params v_id {p.v_id}, {len(data)} "
                f"bytes) has sha256 {got[:16]}..., the op records {self.attrs['digest'][:16]}"
                f"...: the blob is corrupt or belongs to another op", op_id=self.op_id,
                field="digest")
        return data

    # --- semantics -------------------------------------------------------------------------
    def n_outputs(self) -> int:
        return len(self.outputs)

    def infer_shapes(self, shapes):
        return [tuple(v.shape) for v in self.outputs]

    def infer_types(self, types: list[TensorType]) -> list[TensorType]:
        return [v.dtype for v in self.outputs]

    def check_types(self) -> None:
        if not self.inputs:
            raise fail(self, "needs the model Params as its last input", "inputs")
        if not self.outputs:
            raise fail(self, "has no outputs", "outputs")
        p = self.inputs[-1]
        if not p.is_params or p.dtype.numpy_dtype != np.uint8 or len(p.shape) != 1:
            raise fail(self, f"the last input must be the serialized model: a rank-1 uint8 "
                             f"Params, not {p!r}", "inputs")
        if p.data is not None:
            self.model_bytes()

    def clone_with(self, inputs, outputs) -> Operation:
        return type(self)(inputs, outputs, op_id=self.op_id, name=self.name,
                          compile_target=self.compile_target, tags=self.tags, **self.attrs)


def make_onnx_graph(inputs: list, outputs: list, model: Any, *, onnx_ops: list[str],
                    opset: int, onnx_nodes: list[str] | None = None, op_id: int = -1,
                    name: str = "") -> OnnxGraph:
    """An OnnxGraph over `inputs` (values) whose model Params is `model` (its digest computed
    from the Params' data)."""
    if model.data is None:
        raise FieldTypeError("the model params have no data", field="inputs")
    return OnnxGraph(list(inputs) + [model], list(outputs), op_id=op_id, name=name,
                     onnx_ops=list(onnx_ops), onnx_nodes=list(onnx_nodes or []),
                     opset=int(opset), digest=model_digest(model.data))

"""ONNX convolution graphs as exporters write them, built node by node for the quantizer's unit
tests: He-normal weights with a per-output-channel gain where a folded BatchNorm leaves
channels far apart in range, biases as initializers, opset 17."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class ConvGraph:
    """Nodes and initializers of one graph; `seed` draws every weight in call order.

    `bias`, `bias_std`: the mean and spread of each convolution's bias. `name_nodes`: give each
    Conv node its output's name (paddle2onnx and torch name their nodes; a graph without node
    names imports ops named after their outputs)."""

    def __init__(self, seed: int, bias: float = 0.0, bias_std: float = 0.2,
                 name_nodes: bool = True) -> None:
        self.rng = np.random.default_rng(seed)
        self.bias, self.bias_std, self.name_nodes = bias, bias_std, name_nodes
        self.inits: list[onnx.TensorProto] = []
        self.nodes: list[onnx.NodeProto] = []

    def const(self, name: str, a, dtype: type = np.float32) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(a, dtype), name))
        return name

    def node(self, op_type: str, inputs: list[str], outputs: list[str], **attrs) -> str:
        self.nodes.append(helper.make_node(op_type, inputs, outputs, **attrs))
        return outputs[0]

    def conv(self, x: str, cin: int, cout: int, k: int, name: str, groups: int = 1,
             stride: int = 1, gain: np.ndarray | None = None, bias: float | None = None) -> str:
        """A k x k convolution `name` (zero padding k // 2) reading `x`; `gain` scales each
        output channel (a folded BatchNorm)."""
        r = self.rng
        w = r.normal(0, np.sqrt(2 / (cin // groups * k * k)), (cout, cin // groups, k, k))
        if gain is not None:
            w *= np.asarray(gain).reshape(-1, 1, 1, 1)
        b = r.normal(self.bias if bias is None else bias, self.bias_std, cout)
        attrs = {"pads": [k // 2] * 4, "group": groups}
        if stride != 1:
            attrs["strides"] = [stride, stride]
        if self.name_nodes:
            attrs["name"] = name
        return self.node("Conv", [x, self.const(name + ".w", w), self.const(name + ".b", b)],
                         [name], **attrs)

    def hardswish(self, x: str, name: str) -> str:
        """x * clip(x + 3, 0, 6) / 6 spelled out as paddle2onnx writes it; the Div is `name`."""
        a = self.node("Add", [x, self.const(name + ".3", 3.0)], [name + ".a"])
        c = self.node("Clip", [a, self.const(name + ".lo", 0.0), self.const(name + ".hi", 6.0)],
                      [name + ".c"])
        m = self.node("Mul", [x, c], [name + ".m"])
        return self.node("Div", [m, self.const(name + ".6", 6.0)], [name], name=name)

    def model(self, name: str, inputs: dict[str, list[int]], outputs: dict[str, list[int]],
              opset: int = 17) -> onnx.ModelProto:
        vi = lambda d: [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)  # noqa: E731
                        for n, s in d.items()]
        g = helper.make_graph(self.nodes, name, vi(inputs), vi(outputs), self.inits)
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])

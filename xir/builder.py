"""Build networks in Python: each call creates an op and its output values by shape inference.

    b = NetworkBuilder("tiny")
    x = b.input([1, 32, 32, 3], layout="NHWC")
    y = b.conv2d(x, w, bias, stride_height=2, stride_width=2, pad_top=1, ...)
    b.output(b.relu(y))
    net = b.build()

numpy arrays passed as inputs become Params. Methods are the snake_case op names
(`conv2d`, `max_pool2d`, `batch_norm2d`, `align_axis`, ...) or the generic `op("Conv2d", ...)`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from .errors import OpAttributeError, UnknownTypeKeyError
from .network import Network
from .ops.base import HOST_TARGET, OP_REGISTRY, Operation
from .types import FP32, Layout, QuantizedType, ScalarType, TensorType
from .values import Params, Value


def _snake(name: str) -> str:
    s = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()
    return re.sub(r"(\d)d$", r"\1d", s)


class NetworkBuilder:
    """Creates ops with inferred output types and appends them to a Network."""

    def __init__(self, name: str = "network", **meta: Any) -> None:
        self.net = Network(name, **meta)

    def input(self, shape: Sequence[int], dtype: ScalarType | QuantizedType | Any = FP32,
              layout: Layout | str | None = None, name: str = "") -> Value:
        """Add an Input op; returns the value the caller will feed."""
        value = self.net.newValue(TensorType(dtype, shape, layout), name)
        self.net.addOp(OP_REGISTRY["Input"]([], [value], name=name))
        return value

    def params(self, array: np.ndarray, name: str = "", layout: Layout | str | None = None,
               element: ScalarType | QuantizedType | None = None) -> Params:
        """Wrap constant data as Params (weights, biases, tables)."""
        return self.net.newParams(np.asarray(array), name, layout, element)

    def op(self, op_type: str, inputs: Sequence[Value | np.ndarray], *, name: str = "",
           compile_target: str = HOST_TARGET, out_types: Sequence[TensorType] | None = None,
           tags: dict | None = None, **attrs: Any) -> Value | list[Value]:
        """Create an op of `op_type`; returns its output (a list if it has several)."""
        cls = OP_REGISTRY.get(op_type)
        if cls is None:
            raise UnknownTypeKeyError(f"no op type {op_type!r}; known: {sorted(OP_REGISTRY)}",
                                      field="op_type")
        ins = [v if isinstance(v, Value) else self.params(np.asarray(v)) for v in inputs]
        op: Operation = cls(ins, [], name=name, compile_target=compile_target, tags=tags,
                            **attrs)
        op.op_id = self.net.newOpId()
        if out_types is None:
            out_types = op.infer_types([v.dtype for v in ins])
        op.outputs = [self.net.newValue(t) for t in out_types]
        op.check_arity()
        self.net.addOp(op)
        return op.outputs[0] if len(op.outputs) == 1 else list(op.outputs)

    def output(self, *values: Value) -> Operation:
        """Add the Output op returning `values`."""
        op = OP_REGISTRY["Output"](list(values), [])
        return self.net.addOp(op)

    def build(self, validate: bool = True) -> Network:
        if validate:
            self.net.validate()
        return self.net

    def __getattr__(self, name: str):
        op_type = next((t for t in OP_REGISTRY if _snake(t) == name), None)
        if op_type is None:
            raise OpAttributeError(f"NetworkBuilder has no op method '{name}'", field=name)

        def make(*inputs: Any, **attrs: Any) -> Value | list[Value]:
            return self.op(op_type, list(inputs), **attrs)
        make.__name__ = name
        return make

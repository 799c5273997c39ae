"""Element-wise ops: arithmetic with broadcasting, activations, Softmax and Cast."""

from __future__ import annotations

import math

from ..errors import FieldTypeError
from ..types import TensorType
from .base import REQUIRED, Operation, broadcast, norm_axis, register_op


class _Binary(Operation):
    MIN_INPUTS = 2
    MAX_INPUTS = 2

    def infer_shapes(self, shapes):
        return [broadcast(self, shapes[0], shapes[1])]


@register_op
class Add(_Binary):
    """a + b with numpy broadcasting (optionally with a folded Relu-family activation)."""

    op_type = "Add"
    ATTRS = {"act": (str, "none"), "act_alpha": (float, 0.0), "act_max": (float, float("inf"))}


@register_op
class Sub(_Binary):
    """a - b with numpy broadcasting."""

    op_type = "Sub"


@register_op
class Div(_Binary):
    """a / b with numpy broadcasting (a float op: a constant divisor imports as a Multiply)."""

    op_type = "Div"


@register_op
class Sqrt(Operation):
    """The square root, elementwise (float)."""

    op_type = "Sqrt"


@register_op
class Power(Operation):
    """Caffe's Power layer, elementwise: ``y = (shift + scale * x) ** power``. ONNX Pow with a
    constant exponent imports as one, and LRN's denominator is one; once quantized it runs as
    a lookup table, so any exponent costs the same."""

    op_type = "Power"
    ATTRS = {"power": (float, REQUIRED), "scale": (float, 1.0), "shift": (float, 0.0)}

    def check_attr_values(self) -> None:
        super().check_attr_values()
        for key in ("power", "scale", "shift"):
            if not math.isfinite(self.attrs[key]):
                raise FieldTypeError(f"{key} must be a finite number, not {self.attrs[key]}",
                                     op_id=self.op_id, field=key)


@register_op
class Multiply(_Binary):
    """a * b with numpy broadcasting."""

    op_type = "Multiply"


@register_op
class Relu(Operation):
    """ReLU family: y = x if x >= threshold else alpha*(x-threshold), then min(y, max_value).

    alpha > 0 gives LeakyReLU, max_value = 6 gives ReLU6.
    """

    op_type = "Relu"
    ATTRS = {"alpha": (float, 0.0), "max_value": (float, float("inf")),
             "threshold": (float, 0.0)}


@register_op
class Sigmoid(Operation):
    op_type = "Sigmoid"


@register_op
class Tanh(Operation):
    op_type = "Tanh"


@register_op
class Silu(Operation):
    """x * sigmoid(x)."""

    op_type = "Silu"


@register_op
class Gelu(Operation):
    """0.5 * x * (1 + erf(x / sqrt(2))), the exact GELU, or with approximate="tanh"
    0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x**3))) (ONNX Gelu's two forms)."""

    op_type = "Gelu"
    ATTRS = {"approximate": (str, "none")}
    CHOICES = {**Operation.CHOICES, "approximate": ("none", "tanh")}


@register_op
class Erf(Operation):
    """The error function, elementwise (float only: inside GELU it becomes a Gelu op)."""

    op_type = "Erf"


@register_op
class Hardswish(Operation):
    """x * relu6(x + 3) / 6."""

    op_type = "Hardswish"


@register_op
class Softmax(Operation):
    op_type = "Softmax"
    ATTRS = {"axis": (int, -1)}

    def infer_shapes(self, shapes):
        norm_axis(self, self.attrs["axis"], len(shapes[0]))
        return [shapes[0]]


@register_op
class Cast(Operation):
    """Convert element type and layout; the output value's dtype says to what.

    Float <-> quantized goes through the quantized side's scale and zero point; a tiled layout
    on one side means the data is re-tiled (e.g. NHWC <-> NCHWc16).
    """

    op_type = "Cast"

    def infer_shapes(self, shapes):
        return [tuple(self.outputs[0].shape)] if self.outputs else [shapes[0]]

    def infer_types(self, types: list[TensorType]) -> list[TensorType]:
        return [self.outputs[0].dtype] if self.outputs else [types[0]]

    def check_types(self) -> None:
        self.check_arity()
        src, dst = self.inputs[0].dtype, self.outputs[0].dtype
        if src.numel() > dst.numel():
            from .base import fail

            raise fail(self, f"cannot cast {list(src.shape)} into fewer elements "
                             f"{list(dst.shape)}", "outputs")

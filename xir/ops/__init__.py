"""The op registry: one module per op family; importing this registers them all."""

from . import index, onnx_graph, pointwise, recurrent, reduce  # noqa: F401 - registers
from .base import HOST_TARGET, OP_REGISTRY, REQUIRED, Operation, register_op
from .elementwise import Add, Cast, Hardswish, Multiply, Relu, Sigmoid, Silu, Softmax, Sub, Tanh
from .io import HardOp, Input, Output
from .nn import (
    AvgPool2d,
    BatchNorm2d,
    Conv2d,
    ConvTranspose2d,
    Matmul,
    MaxPool2d,
    Resize,
    Upsample,
    conv_macs,
)
from .shape import (
    AlignAxis,
    ChannelShuffle,
    Concat,
    Pad,
    PruneAxis,
    Reshape,
    Slice,
    Split,
    Squeeze,
    Transpose,
    Unsqueeze,
)

__all__ = [
    "HOST_TARGET", "OP_REGISTRY", "REQUIRED", "Operation", "register_op", "conv_macs",
    "Add", "Sub", "Multiply", "Relu", "Sigmoid", "Tanh", "Silu", "Hardswish", "Softmax", "Cast",
    "Input", "Output", "HardOp",
    "Conv2d", "ConvTranspose2d", "Matmul", "MaxPool2d", "AvgPool2d", "BatchNorm2d", "Resize",
    "Upsample",
    "Concat", "Split", "Slice", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Pad",
    "AlignAxis", "PruneAxis", "ChannelShuffle",
]

"""HostBackend kernels, one module per op family (after onnx/reference).

Each kernel is a pure function ``kernel(inputs: list[np.ndarray], attrs: dict) ->
list[np.ndarray]`` following docs/ops.md: attributes missing from ``attrs`` take their
documented defaults, inputs are never modified and outputs never share memory with them.
Compute kernels return float32 C-contiguous arrays; data-movement kernels (shape, layout)
keep the input dtype.

Integer kernels (``INT_KERNELS``) sit beside the float ones in the same modules and run ops
whose values carry quantized element types (docs/quantization.md, "Integer ops"). They also
need the value types, whose scales fix every multiplier::

    kernel(inputs: list[np.ndarray], attrs: dict, in_types: list[TensorType],
           out_types: list[TensorType], *, fake: bool = False) -> list[np.ndarray]

``in_types`` covers every input (Params included), ``out_types`` every output. Integer inputs
arrive as their storage dtype (int8/int16 feature maps, int8/int16 weights, int32/int64 biases)
and outputs leave as the output's storage dtype. ``fake=True`` is the fakeQf mode: quantized
feature maps are float64 arrays in integer units and nothing is rounded or saturated. Cast is
only an integer kernel (it needs the destination type even between float types).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from . import (
    activation,
    cast,
    conv,
    elementwise,
    index,
    layout,
    matmul,
    norm,
    onnx_graph,
    pointwise,
    pool,
    recurrent,
    reduce,
    resize,
    shape,
)

Kernel = Callable[[list[np.ndarray], dict], list[np.ndarray]]

FLOAT_KERNELS: dict[str, Kernel] = {
    "Conv2d": conv.conv2d,
    "ConvTranspose2d": conv.conv_transpose2d,
    "Matmul": matmul.matmul,
    "Add": elementwise.add,
    "Sub": elementwise.sub,
    "Multiply": elementwise.multiply,
    "Div": elementwise.div,
    "Sqrt": elementwise.sqrt,
    "ReduceMean": elementwise.reduce_mean,
    "Concat": shape.concat,
    "Split": shape.split,
    "Slice": shape.slice_,
    "Reshape": shape.reshape,
    "Transpose": shape.transpose,
    "ChannelShuffle": shape.channel_shuffle,
    "Squeeze": shape.squeeze,
    "Unsqueeze": shape.unsqueeze,
    "Pad": shape.pad,
    "MaxPool2d": pool.max_pool2d,
    "AvgPool2d": pool.avg_pool2d,
    "Relu": activation.relu,
    "Sigmoid": activation.sigmoid,
    "Tanh": activation.tanh,
    "Silu": activation.silu,
    "Gelu": activation.gelu,
    "Erf": activation.erf,
    "Hardswish": activation.hardswish,
    "Power": activation.power,
    "Softmax": activation.softmax,
    "Resize": resize.resize,
    "Upsample": resize.upsample,
    "BatchNorm2d": norm.batch_norm2d,
    "LayerNorm": norm.layer_norm,
    "GroupNorm": norm.group_norm,
    "LRN": norm.lrn,
    "AlignAxis": layout.align_axis,
    "PruneAxis": layout.prune_axis,
}

# the op families added for the whole ONNX op set keep their own tables
for _family in (pointwise, reduce, index, recurrent, onnx_graph):
    FLOAT_KERNELS.update(_family.FLOAT_KERNELS)

IntKernel = Callable[..., list[np.ndarray]]

INT_KERNELS: dict[str, IntKernel] = {
    "Cast": cast.cast,
    "Conv2d": conv.conv2d_int,
    "ConvTranspose2d": conv.conv_transpose2d_int,
    "Matmul": matmul.matmul_int,
    "Add": elementwise.add_int,
    "Sub": elementwise.sub_int,
    "Multiply": elementwise.multiply_int,
    "Concat": shape.concat_int,
    "Split": shape.split_int,
    "Slice": shape.slice_int,
    "Reshape": shape.reshape_int,
    "Transpose": shape.transpose_int,
    "ChannelShuffle": shape.channel_shuffle_int,
    "Squeeze": shape.squeeze_int,
    "Unsqueeze": shape.unsqueeze_int,
    "Pad": shape.pad_int,
    "MaxPool2d": pool.max_pool2d_int,
    "AvgPool2d": pool.avg_pool2d_int,
    "Relu": activation.relu_int,
    "Sigmoid": activation.sigmoid_int,
    "Tanh": activation.tanh_int,
    "Silu": activation.silu_int,
    "Hardswish": activation.hardswish_int,
    "Gelu": activation.gelu_int,
    "Power": activation.power_int,
    "Softmax": activation.softmax_int,
    "LayerNorm": norm.layer_norm_int,
    "Resize": resize.resize_int,
    "Upsample": resize.upsample_int,
    "AlignAxis": layout.align_axis_int,
    "PruneAxis": layout.prune_axis_int,
}

for _family in (pointwise, reduce, index, recurrent, onnx_graph):
    INT_KERNELS.update(_family.INT_KERNELS)

__all__ = ["FLOAT_KERNELS", "INT_KERNELS", "IntKernel", "Kernel"]

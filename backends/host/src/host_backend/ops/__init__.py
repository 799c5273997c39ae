"""HostBackend kernels, one module per op family (after onnx/reference).

Each kernel is a pure function ``kernel(inputs: list[np.ndarray], attrs: dict) ->
list[np.ndarray]`` following docs/ops.md: attributes missing from ``attrs`` take their
documented defaults, inputs are never modified and outputs never share memory with them.
Compute kernels return float32 C-contiguous arrays; data-movement kernels (shape, layout)
keep the input dtype.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from . import activation, conv, elementwise, layout, matmul, norm, pool, resize, shape

Kernel = Callable[[list[np.ndarray], dict], list[np.ndarray]]

FLOAT_KERNELS: dict[str, Kernel] = {
    "Conv2d": conv.conv2d,
    "ConvTranspose2d": conv.conv_transpose2d,
    "Matmul": matmul.matmul,
    "Add": elementwise.add,
    "Sub": elementwise.sub,
    "Multiply": elementwise.multiply,
    "Concat": shape.concat,
    "Split": shape.split,
    "Slice": shape.slice_,
    "Reshape": shape.reshape,
    "Transpose": shape.transpose,
    "Squeeze": shape.squeeze,
    "Unsqueeze": shape.unsqueeze,
    "Pad": shape.pad,
    "MaxPool2d": pool.max_pool2d,
    "AvgPool2d": pool.avg_pool2d,
    "Relu": activation.relu,
    "Sigmoid": activation.sigmoid,
    "Silu": activation.silu,
    "Hardswish": activation.hardswish,
    "Softmax": activation.softmax,
    "Resize": resize.resize,
    "Upsample": resize.upsample,
    "BatchNorm2d": norm.batch_norm2d,
    "AlignAxis": layout.align_axis,
    "PruneAxis": layout.prune_axis,
}

__all__ = ["FLOAT_KERNELS", "Kernel"]

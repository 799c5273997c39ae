"""Handlers for ONNX ops, one module per op family.

Importing this package imports every family module, which registers its handlers in
`registry._HANDLERS`; `SUPPORTED_ONNX_OPS` is read from the registry afterwards.
"""

from __future__ import annotations

from xcompile.frontend.onnx_import.handlers import (  # noqa: F401 - registers
    activation,
    batchnorm,
    conv_pool,
    elementwise,
    generic,
    index,
    layernorm,
    matmul,
    normalization,
    passthrough,
    pointwise,
    recurrent,
    reduce,
    reshape,
    resize,
    slicing,
)
from xcompile.frontend.onnx_import.registry import _HANDLERS

SUPPORTED_ONNX_OPS = frozenset(_HANDLERS)
"""ONNX op types the importer maps to xir ops (any op whose inputs are constant also folds)."""

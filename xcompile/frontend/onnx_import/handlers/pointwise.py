"""ONNX handlers: pointwise ops."""

from __future__ import annotations

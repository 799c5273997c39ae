"""ONNX handlers: reduce ops."""

from __future__ import annotations

"""ONNX handlers: index ops."""

from __future__ import annotations

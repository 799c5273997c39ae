"""ONNX handlers: recurrent ops."""

from __future__ import annotations

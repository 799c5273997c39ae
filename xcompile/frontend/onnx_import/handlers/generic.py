"""ONNX handlers: generic ops."""

from __future__ import annotations

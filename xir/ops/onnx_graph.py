"""OnnxGraph: an op that carries a small ONNX graph (the long tail of the ONNX op set)."""

from __future__ import annotations

"""The npu_runtime tests share tests/backends/npu_chip_lib.py (compile an ONNX model for a chip)."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

"""xcompile: the compile pipeline above the runtime -- ONNX import and export, graph passes,
quantisation (calibration, GPTQ, accuracy report), the model zoo and the staged driver
(`pipeline.compile_model`: parse -> optimize -> quantize -> adapt -> generate).

It works on `xir` networks and runs them through a `runner.Runner` (the HostBackend by
default, found through the xrt plugins); compile targets come from the plugins' target hook.
"""

from __future__ import annotations

__version__ = "0.1.0"

"""Front ends: turn models of other frameworks into float xir networks."""

from xcompile.frontend.onnx_import import SUPPORTED_ONNX_OPS, import_onnx

__all__ = ["import_onnx", "SUPPORTED_ONNX_OPS"]

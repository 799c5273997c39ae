"""Import an ONNX model as a float xir network.

How the import works:
- Every ONNX tensor becomes an `_T`: either a numpy constant (initializers and everything that
  folds: Shape/Gather/Concat/Cast/... chains are evaluated with numpy while importing) or an xir
  Value. A Value holds `transpose(onnx_tensor, perm)` for some `perm`; a tensor can have several
  such views, each made once and cached.
- 2-D ops (Conv, pools, BatchNorm, Resize) read the NHWC view (perm 0,2,3,1) and produce NHWC.
  Axis-generic ops (element-wise, Concat, Split, Slice, Pad, Softmax) work in whatever view their
  input has, with remapped axes; ONNX Transpose only relabels views. Layout-sensitive ops
  (Reshape, Flatten, Squeeze, Unsqueeze, MatMul, Gemm) and graph outputs read the ONNX-order
  view, so a Transpose back is emitted only there (a Reshape when only unit axes move).
- Afterwards: BatchNorm folding into the Conv before it, x*Sigmoid(x) -> Silu, composition of
  consecutive Transposes/Reshapes and removal of dead ops.

Where the parts live:
- `loading.py` reads and checks the model file; `importer.py` walks the graph (`_Importer`);
  `tensor.py` holds `_T`, the imported-tensor record.
- `registry.py` maps ONNX op types to handlers; `handlers/` holds one module per op family, and
  importing it registers them all.
- `cleanup.py` holds the xir-level passes that run after the graph is imported.
"""

from __future__ import annotations

import os
from typing import Any

from xcompile.frontend.onnx_import.handlers import SUPPORTED_ONNX_OPS
from xcompile.frontend.onnx_import.importer import _Importer
from xcompile.frontend.onnx_import.loading import _check, _load
from xir.errors import OnnxModelError, XirError
from xir.network import Network

__all__ = ["import_onnx", "SUPPORTED_ONNX_OPS"]


def import_onnx(model: str | os.PathLike | bytes | Any,
                input_shapes: dict[str, list[int]] | None = None,
                name: str | None = None,
                input_values: dict[str, Any] | None = None) -> Network:
    """Import an ONNX model (path, bytes or ModelProto) as a float xir network.

    `input_shapes` fixes symbolic/unknown input dimensions by input name. `input_values`
    fixes graph inputs to constants (a voice-activity detector's sample rate): they leave the
    network's inputs, and what they decide folds (an If on them keeps only its branch).
    Feature maps of the 2-D ops are NHWC inside the network; inputs and outputs keep ONNX's
    layout and shape.
    Raises UnsupportedOnnxOpError listing every node xir cannot express, DynamicShapeError for
    unresolved input dimensions and OnnxModelError for unreadable files.
    """
    proto, file = _load(model)
    proto = _check(proto, file)
    try:
        return _Importer(proto, input_shapes, name, file, input_values).run()
    except XirError:
        raise
    except Exception as exc:  # noqa: BLE001 - a malformed model may break any step
        raise OnnxModelError(f"the model cannot be imported ({type(exc).__name__}: {exc}); is "
                             f"it a valid ONNX model?", file=file) from exc

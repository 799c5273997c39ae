"""Read an ONNX model from a path, bytes or a ModelProto, and check it before import.

The onnx package is optional, so it is imported here on first use: a missing package then
fails with a MissingDependencyError that says how to install it.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from xir.errors import MissingDependencyError, OnnxImportError, OnnxModelError

log = logging.getLogger(__name__)


def _onnx():
    try:
        import onnx
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingDependencyError(
            "ONNX import needs the onnx package: pip install 'onnx>=1.15' "
            "(or pip install icraft-xrt-sim[onnx])") from exc
    return onnx


def _load(model: Any) -> tuple[Any, str | None]:
    onnx = _onnx()
    if isinstance(model, onnx.ModelProto):
        return model, None
    if isinstance(model, (bytes, bytearray, memoryview)):
        file, data = "<bytes>", bytes(model)
        base_dir = None
    elif isinstance(model, (str, os.PathLike)):
        file = os.fspath(model)
        try:
            with open(file, "rb") as fh:
                data = fh.read()
        except OSError as exc:
            raise OnnxModelError(f"cannot read the ONNX file: {exc.strerror or exc}",
                                 file=file) from exc
        base_dir = os.path.dirname(os.path.abspath(file))
    else:
        raise OnnxImportError(f"import_onnx takes a path, bytes or onnx.ModelProto, not "
                              f"{type(model).__name__}")
    if not data:
        raise OnnxModelError("the file is empty", file=file)
    try:
        proto = onnx.ModelProto()
        proto.ParseFromString(data)
    except Exception as exc:  # noqa: BLE001 - protobuf raises DecodeError, RuntimeError, ...
        raise OnnxModelError(f"not a readable ONNX model (corrupt or truncated): {exc}",
                             file=file) from exc
    if base_dir is not None:
        try:
            from onnx.external_data_helper import load_external_data_for_model

            if any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer):
                load_external_data_for_model(proto, base_dir)
        except Exception as exc:  # noqa: BLE001
            raise OnnxModelError(f"external tensor data cannot be loaded: {exc}",
                                 file=file) from exc
    return proto, file


def _check(model: Any, file: str | None) -> Any:
    onnx = _onnx()
    if not model.HasField("graph") or not model.graph.output:
        raise OnnxModelError("the model has no graph outputs (corrupt, truncated or not an "
                             "ONNX model)", file=file)
    # a file without external data is checked from its path: the checker reads it in C++
    # instead of a re-serialization of the whole model in Python (vgg19: ~1.7 s of CPU)
    external = any(t.data_location == onnx.TensorProto.EXTERNAL
                   for t in model.graph.initializer)
    on_disk = file is not None and not external and os.path.isfile(file)
    try:
        onnx.checker.check_model(file if on_disk else model)
    except Exception as exc:  # noqa: BLE001 - ValidationError and protobuf errors
        # The checker is stricter than exporters and runtimes (e.g. outputs without shapes);
        # a model that is really broken fails below with a located error instead.
        log.warning("%s: the ONNX checker rejects the model (%s); importing anyway",
                    file or "model", str(exc).splitlines()[0] if str(exc) else exc)
    if model.functions:
        try:
            model = onnx.inliner.inline_local_functions(model)
        except Exception as exc:  # noqa: BLE001
            log.debug("could not inline local functions: %s", exc)
    return model

"""onnxruntime's own int8 as the yardstick of ours: `quantize_static` (QDQ, per-channel int8
weights, int8 activations, the same calibration samples) of the float ONNX model, and the
cosine of its outputs against onnxruntime's float run, for `xrt quant-report --onnx`."""

from __future__ import annotations

import os
import tempfile
from typing import Any

import numpy as np

from xcompile.quant.report import cosine
from xir.errors import MissingDependencyError

__all__ = ["quantize_static_int8", "output_cosines", "attach"]


def quantize_static_int8(model_path: str, samples: list[list[np.ndarray]], out_path: str
                         ) -> str:
    """`quantize_static` of `model_path` calibrated on `samples` (one array per input, NCHW
    as the model takes them); returns `out_path`. Models below opset 13 are converted first
    (per-channel DequantizeLinear needs it)."""
    try:
        import onnx
        from onnx import version_converter
        from onnxruntime.quantization import (
            CalibrationDataReader,
            QuantFormat,
            QuantType,
            quantize_static,
        )
    except ImportError as exc:  # pragma: no cover - optional dependency
        raise MissingDependencyError(f"comparing with onnxruntime's int8 needs onnx and "
                                     f"onnxruntime ({exc})") from exc
    model = onnx.load(model_path)
    names = [i.name for i in model.graph.input
             if i.name not in {t.name for t in model.graph.initializer}]
    if model.opset_import[0].version < 13:
        model = version_converter.convert_version(model, 13)
        model_path = out_path + ".opset13.onnx"
        onnx.save(model, model_path)

    class _Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._it = iter([dict(zip(names, s)) for s in samples])

        def get_next(self) -> dict | None:
            return next(self._it, None)

    quantize_static(model_path, out_path, _Reader(), quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8)
    return out_path


def output_cosines(model_path: str, calibration: list[list[np.ndarray]],
                   inputs: list[list[np.ndarray]]) -> list[float]:
    """Per network output: the cosine of onnxruntime's int8 run against its float run over
    `inputs` (every sample together)."""
    import onnxruntime as ort

    def run(path: str) -> list[np.ndarray]:
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        names = [i.name for i in sess.get_inputs()]
        outs = [sess.run(None, dict(zip(names, s))) for s in inputs]
        return [np.concatenate([o[k].ravel() for o in outs]) for k in range(len(outs[0]))]

    with tempfile.TemporaryDirectory() as tmp:
        q = quantize_static_int8(model_path, calibration, os.path.join(tmp, "int8.onnx"))
        ref, got = run(model_path), run(q)
    return [cosine(g, r) for g, r in zip(got, ref)]


def attach(report: Any, model_path: str, calibration: list[list[np.ndarray]],
           inputs: list[list[np.ndarray]]) -> None:
    """Add onnxruntime's int8 output cosines to `report.outputs` (key "onnxruntime_int8")."""
    for o, c in zip(report.outputs, output_cosines(model_path, calibration, inputs)):
        o["onnxruntime_int8"] = c

"""The refit tests' case: tiny_cnn exported to ONNX twice (seeds 0 and 1, the same graph with
other weights) and a network quantized from the first export with nearest weight rounding, so
a refit's codes can be compared with a fresh quantization; and the independent network copy
the refresh, refit, bundle and socket tests deploy."""

from __future__ import annotations

import functools

import numpy as np

import xir
from xcompile import zoo
from xcompile.frontend import import_onnx
from xcompile.frontend.onnx_export import export_onnx
from xcompile.quant.quantize import quantize_network


@functools.cache
def tiny_exports() -> tuple:
    """(m0, m1): tiny_cnn's ONNX exports at seeds 0 and 1 (built once per process; read only)."""
    return export_onnx(zoo.build("tiny_cnn")), export_onnx(zoo.build("tiny_cnn", seed=1))


def nchw(samples: list) -> list:
    """Zoo calibration samples (NHWC) as the ONNX export's NCHW inputs."""
    return [[np.transpose(s[0] if isinstance(s, list) else s, (0, 3, 1, 2))] for s in samples]


def tiny_quantized() -> xir.Network:
    """A fresh int8 network quantized from the seed-0 export (min-max scales, nearest
    weights): the caller may refit it."""
    m0, _ = tiny_exports()
    return quantize_network(import_onnx(m0), nchw(zoo.calibration_set("tiny_cnn", count=2)),
                            bits=8, method="minmax", weight_rounding="nearest")


def copy_network(net: xir.Network) -> xir.Network:
    """An independent copy of `net` (json + params through memory)."""
    c = xir.Network.CreateFromJsonStr(net.dumpJsonToStr())
    c.loadParamsFromBuffer(net.dumpParamsToBuffer())
    return c

"""Quantization of float networks: observers, calibration, quantize_network, GPTQ weight
rounding and the accuracy report (docs/quantization.md). The integer arithmetic they target is
the IR's (`xir.quant.fixed_point`, `xir.quant.lut`)."""

from __future__ import annotations

from xcompile.quant.observers import (
    MIN_SCALE,
    KLObserver,
    MinMaxObserver,
    Observer,
    PercentileObserver,
    make_observer,
    weight_scales,
)

__all__ = ["MIN_SCALE", "KLObserver", "MinMaxObserver", "Observer", "PercentileObserver",
           "make_observer", "weight_scales"]

"""Target-independent quantization math (pure numpy): see docs/quantization.md."""

from __future__ import annotations

from xir.quant.fixed_point import (
    DEFAULT_MULT_BITS,
    MAX_SHIFT,
    clip_bounds,
    dequantize,
    fake_requantize,
    quantize,
    quantize_bias,
    quantize_multiplier,
    requant_multiplier,
    requantize,
    requantize_nb,
    requantize_one,
)
from xir.quant.lut import LUT_FUNCTIONS, apply_lut, build_lut
from xir.quant.observers import (
    MIN_SCALE,
    KLObserver,
    MinMaxObserver,
    Observer,
    PercentileObserver,
    make_observer,
    weight_scales,
)

__all__ = [
    "DEFAULT_MULT_BITS",
    "MAX_SHIFT",
    "MIN_SCALE",
    "LUT_FUNCTIONS",
    "KLObserver",
    "MinMaxObserver",
    "Observer",
    "PercentileObserver",
    "apply_lut",
    "build_lut",
    "clip_bounds",
    "dequantize",
    "fake_requantize",
    "make_observer",
    "quantize",
    "quantize_bias",
    "quantize_multiplier",
    "requant_multiplier",
    "requantize",
    "requantize_nb",
    "requantize_one",
    "weight_scales",
]

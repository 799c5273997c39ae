"""The integer semantics of quantized ops (pure numpy): fixed-point requantization and lookup
tables, what every backend computes bit for bit (docs/quantization.md). Choosing scales --
observers, calibration, quantizing a network -- is the compile pipeline's (`xcompile.quant`)."""

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

__all__ = [
    "DEFAULT_MULT_BITS",
    "MAX_SHIFT",
    "LUT_FUNCTIONS",
    "apply_lut",
    "build_lut",
    "clip_bounds",
    "dequantize",
    "fake_requantize",
    "quantize",
    "quantize_bias",
    "quantize_multiplier",
    "requant_multiplier",
    "requantize",
    "requantize_nb",
    "requantize_one",
]

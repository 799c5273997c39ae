"""Where each output pixel of a Resize reads: source coordinates, nearest indices and the
integer bilinear taps. One definition, shared by every kernel that computes a Resize (the host
reference's float and integer kernels, a chip's lowering), so they pick the same pixels.

Source coordinates reproduce onnxruntime 1.31's picks in the nearest modes (checked for every
size pair up to 24): the two round_* modes resolve exact ties (k + 1/2 as a rational) per their
name, so they use float64, where such ties stay exact; floor / ceil and bilinear use float32
with scale = out/in, as onnxruntime computes it.
"""

from __future__ import annotations

import numpy as np

from ..quant.fixed_point import round_half_away

COORDINATE_MODES = ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
#: Fraction bits of the integer bilinear weights (docs/quantization.md, "Integer ops").
BILINEAR_FRAC_BITS = 10

__all__ = ["COORDINATE_MODES", "NEAREST_MODES", "BILINEAR_FRAC_BITS", "source_coords",
           "nearest_index", "linear_weights", "integer_taps"]


def source_coords(out_size: int, in_size: int, coordinate_mode: str,
                  exact: bool = False) -> np.ndarray:
    """Output index -> (fractional) input coordinate: float32 with scale = out/in; ``exact``
    uses float64 and multiplies by in/out, so that a coordinate that is rationally k + 1/2
    stays a tie."""
    if coordinate_mode not in COORDINATE_MODES:
        raise ValueError(
            f"Resize: coordinate_mode {coordinate_mode!r} is not one of {COORDINATE_MODES}")
    if out_size == 1 and coordinate_mode in ("align_corners", "pytorch_half_pixel"):
        return np.zeros(1, dtype=np.float64 if exact else np.float32)
    if exact:
        xo = np.arange(out_size, dtype=np.float64)
        if coordinate_mode == "asymmetric":
            return xo * in_size / out_size
        if coordinate_mode == "align_corners":
            return xo * (in_size - 1) / (out_size - 1)
        return (xo + 0.5) * in_size / out_size - 0.5
    xo = np.arange(out_size, dtype=np.float32)
    scale = np.float32(out_size) / np.float32(in_size)
    half = np.float32(0.5)
    if coordinate_mode == "asymmetric":
        return xo / scale
    if coordinate_mode == "align_corners":
        return xo * np.float32(in_size - 1) / np.float32(out_size - 1)
    return (xo + half) / scale - half


def nearest_index(coords: np.ndarray, in_size: int, nearest_mode: str) -> np.ndarray:
    """The input index each coordinate rounds to, clamped to the map."""
    half = coords.dtype.type(0.5)
    if nearest_mode == "round_prefer_floor":
        idx = np.ceil(coords - half)
    elif nearest_mode == "round_prefer_ceil":
        idx = np.floor(coords + half)
    elif nearest_mode == "floor":
        idx = np.floor(coords)
    elif nearest_mode == "ceil":
        idx = np.ceil(coords)
    else:
        raise ValueError(f"Resize: nearest_mode {nearest_mode!r} is not one of {NEAREST_MODES}")
    return np.clip(idx, 0, in_size - 1).astype(np.intp)


def linear_weights(coords: np.ndarray, in_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Neighbour indices and the weight of the upper one; coordinates clamp to the edges."""
    c = np.clip(coords, np.float32(0), np.float32(in_size - 1))
    i0 = np.floor(c).astype(np.intp)
    i1 = np.minimum(i0 + 1, in_size - 1)
    frac = (c - i0).astype(np.float32)
    return i0, i1, frac


def integer_taps(out_size: int, in_size: int, mode: str, coordinate_mode: str,
                 nearest_mode: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(i0, i1, w1) int64 per output index along one axis: the output blends
    ``q[i0] * (2**BILINEAR_FRAC_BITS - w1) + q[i1] * w1``. Nearest is the blend with w1 = 0."""
    exact = mode == "nearest" and nearest_mode.startswith("round_prefer_")
    coords = source_coords(out_size, in_size, coordinate_mode, exact)
    if mode == "nearest":
        i = nearest_index(coords, in_size, nearest_mode).astype(np.int64)
        return i, i.copy(), np.zeros(out_size, np.int64)
    if mode != "bilinear":
        raise ValueError(f"Resize: mode {mode!r} is not 'nearest' or 'bilinear'")
    i0, i1, frac = linear_weights(coords, in_size)
    w1 = round_half_away(frac.astype(np.float64) * (1 << BILINEAR_FRAC_BITS)).astype(np.int64)
    return i0.astype(np.int64), i1.astype(np.int64), w1

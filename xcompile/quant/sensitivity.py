"""Output sensitivity of each 8-bit op: what the network's outputs lose when only that op
computes as the integer network computes it, everything else float (docs/quantization.md
section 10).

The report's `alone` cosine measures an op's own output error: a local figure. Where a feature
map's channels are far apart in range -- a trained stem with folded BatchNorms -- it is carried
by the loud channels, while the quiet ones, which later per-channel weights amplify, lose most
of their codes unseen; and an error in front of a head counts as much as one that the head
hardly reads. PaddleOCR's PP-OCRv4 detector is the case measured: its stem's hard-swish
(`p2o.Div.1`), which costs the probability map about 0.009 of cosine on its own, ranks 5th by
`alone`, behind two head ops (an Add and a Resize of the FPN) that cost the map almost
nothing, and the pointwise convolution before it (`p2o.Conv.2`) 9th.

How: the float network runs once per sample with every value kept (the report already does);
for each candidate op, its outputs are replaced by the op's `alone` run (its inputs the float
values rounded to its input types, its integer weights and requantization: the report computes
it anyway) read back with their scales, and only the ops downstream of them are run again, one
by one (`Runner.run_op`). The figure is the mean over the samples of 1 - the worst output part
(`xcompile.quant.parts`). The cost is one partial forward per op, bounded by `MAX_MACS`: the
MACs of every op run again, summed over the candidates and samples.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from xcompile.quant.dw_equalize import channel_gain
from xcompile.runner import Runner

__all__ = ["MAX_MACS", "output_sensitivity", "rerun_macs"]

#: the most MACs the measure may run again over all candidates and samples (about 10 s on
#: this machine's HostBackend at 1e10; PP-OCRv4's detector at 128x256: 1.2e10 for one sample,
#: yolov5s-640: some 6e11, where the `alone` ranking stays)
MAX_MACS = 4e10


def _macs(op: Any) -> int:
    from xir.ops.nn import conv_macs

    return int(conv_macs(op))


def _writes(quant_net: Any) -> dict[int, dict[int, Any]]:
    """{op_id: {float v_id: real value of one code}} of the per-tensor quantized outputs of
    each integer op of `quant_net` that reads 8-bit codes (the ops a raise to 16 bits may
    widen): the scale, divided per channel by the channel factor of an evened-out map
    (`dw_equalize`)."""
    out: dict[int, dict[int, Any]] = {}
    for op in quant_net.ops:
        if op.op_type in ("Cast", "Input", "Output") or not op.is_quantized():
            continue
        eight = [v for v in op.feature_inputs()
                 if getattr(v.dtype.element_dtype, "is_quantized", False)
                 and v.dtype.element_dtype.storage.bits == 8]
        writes = {}
        for v in op.outputs:
            el = v.dtype.element_dtype
            if getattr(el, "is_quantized", False) and el.scale.size == 1 and \
                    "float_v_id" in v.tags:
                g = channel_gain(v)
                writes[int(v.tags["float_v_id"])] = float(el.scale[0]) if g is None else \
                    float(el.scale[0]) / g
        if eight and writes and len(writes) == len(op.outputs):
            out[op.op_id] = writes
    return out


def _downstream(float_net: Any, vids: set[int]) -> list[Any]:
    """The ops of `float_net` (in order) that depend on any of `vids`."""
    dirty = set(vids)
    ops = []
    for op in float_net.ops:
        if op.op_type in ("Input", "Output"):
            continue
        if any(v.v_id in dirty for v in op.feature_inputs()):
            ops.append(op)
            dirty.update(v.v_id for v in op.outputs)
    return ops


def rerun_macs(float_net: Any, quant_net: Any, samples: int) -> int:
    """The MACs `output_sensitivity` would run again for `samples` samples."""
    return samples * sum(sum(_macs(op) for op in _downstream(float_net, set(writes)))
                         for writes in _writes(quant_net).values())


def output_sensitivity(float_net: Any, quant_net: Any, values: dict[int, list[np.ndarray]],
                       outputs: list[list[np.ndarray]], runner: Runner,
                       alone: Callable[[Any], list[list[np.ndarray]] | None],
                       parts: Any = None) -> dict[int, float] | None:
    """{op_id: mean over samples of 1 - the worst output part's figure} with only that op
    computed as the integer network computes it (`alone(op)`: its output codes per sample
    and output, from the float network's values rounded to its input types: its input
    rounding, weights and requantization) and everything else float, for every integer op of
    `quant_net` reading 8-bit codes. `values`: the float network's values per v_id, one array
    per sample (the report's capture); `outputs`: its outputs per sample. None when the
    runner cannot run an op alone."""
    from .parts import compare_parts, output_parts

    if parts is None:
        parts = output_parts(float_net, reference=outputs[0] if outputs else None)
    out_ids = [v.v_id for v in float_net.outputs()]
    by_id = {op.op_id: op for op in quant_net.ops}
    result: dict[int, float] = {}
    for op_id, writes in _writes(quant_net).items():
        runs = alone(by_id[op_id])
        if runs is None or len(runs) != len(outputs):
            continue
        cone = _downstream(float_net, set(writes))
        losses = []
        for s, codes in enumerate(runs):
            live = {vid: (np.asarray(c, np.float64) * scale).astype(np.float32)
                    .reshape(np.shape(values[vid][s]))
                    for (vid, scale), c in zip(writes.items(), codes) if vid in values}
            for op in cone:
                feeds = [live[v.v_id] if v.v_id in live else values[v.v_id][s]
                         for v in op.feature_inputs()]
                res = runner.run_op(op, feeds)
                if res is None:
                    return None
                for v, a in zip(op.outputs, res):
                    live[v.v_id] = np.asarray(a).reshape(v.shape)
            got = [live[vid] if vid in live else outputs[s][k] for k, vid in enumerate(out_ids)]
            figs = [float(r.figure) for r in compare_parts(outputs[s], got, parts)]
            losses.append(1.0 - min(figs, default=1.0))
        result[op_id] = float(np.mean(losses))
    return result

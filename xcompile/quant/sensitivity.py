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

__all__ = ["BLOCKS", "BLOCK_MAX_MACS", "MAX_MACS", "Block", "block_ranking",
           "block_sensitivity", "blocks", "blocks_macs", "output_sensitivity", "rerun_macs"]

#: the most MACs the measure may run again over all candidates and samples (about 10 s on
#: this machine's HostBackend at 1e10; PP-OCRv4's detector at 128x256: 1.2e10 for one sample,
#: yolov5s-640: some 6e11, where the `alone` ranking stays)
MAX_MACS = 4e10


def _macs(op: Any) -> int:
    from xir.ops.nn import conv_macs

    return int(conv_macs(op))


def _writes(quant_net: Any) -> dict[int, dict[int, Any]]:
    """`_integer_writes` of the integer ops of `quant_net` that read 8-bit codes (the ops a
    raise to 16 bits may widen): per float value, the scale of its per-tensor code, divided
    per channel by the channel factor of an evened-out map (`dw_equalize`)."""
    ops = {op.op_id: op for op in quant_net.ops}
    return {op_id: writes for op_id, writes in _integer_writes(quant_net).items()
            if any(getattr(v.dtype.element_dtype, "is_quantized", False)
                   and v.dtype.element_dtype.storage.bits == 8
                   for v in ops[op_id].feature_inputs())}


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


# --- per block: a stretch of the network in integers, the rest float -------------------------
#
# Where the per-op partial forwards exceed `MAX_MACS` (ddddocr's YOLOX text detector at
# 416x416: 3.1e11 MACs for its 205 integer ops), the same measure is taken per *block*: a
# stretch of consecutive integer ops (a residual block, a CSP stage, cut where the network
# narrows to one tensor, long stretches cut into `BLOCKS` pieces), all computed as the integer
# network computes them, each from the values the block's earlier ops wrote, the rest of the
# network float. One partial forward per block, not per op: the detector's 26 blocks 4.4e10
# MACs. Its stem -- the error the per-op `alone` ranking misses, behind head ops that cost
# the output nothing (docs/quantization.md section 8) -- is a block of its own.

#: how many blocks a network is cut into at most (more, where it narrows to one tensor more
#: often); a block keeps at least `MIN_BLOCK` integer ops
BLOCKS = 24
MIN_BLOCK = 4
#: the most MACs the block measure may run again, of the order of `MAX_MACS` (ddddocr's
#: detector: 26 blocks, 4.4e10 MACs, 29 s at load 12, where its per-op measure would run
#: 3.0e11; the zoo's yolov5s-640: 22 blocks, 8.7e10, kept out of a compile that should take
#: two minutes, where per op it needs 5.2e11)
BLOCK_MAX_MACS = 5e10


class Block:
    """Consecutive integer ops of the quantized network (`op_ids`, in network order) and the
    output loss of computing them all in integers (`loss`, set by `block_sensitivity`)."""

    def __init__(self, op_ids: list[int]) -> None:
        self.op_ids = list(op_ids)
        self.loss: float | None = None

    def __repr__(self) -> str:
        return f"Block({self.op_ids[0]}..{self.op_ids[-1]}, {len(self.op_ids)} ops, " \
               f"loss={self.loss})"


def _integer_writes(quant_net: Any) -> dict[int, dict[int, Any]]:
    """{op_id: {float v_id: real value of one code}} of every integer op of `quant_net` whose
    outputs are all per-tensor codes standing for a float value (whatever bits it reads)."""
    out: dict[int, dict[int, Any]] = {}
    for op in quant_net.ops:
        if op.op_type in ("Cast", "Input", "Output") or not op.is_quantized():
            continue
        writes = {}
        for v in op.outputs:
            el = v.dtype.element_dtype
            if getattr(el, "is_quantized", False) and el.scale.size == 1 and \
                    "float_v_id" in v.tags:
                g = channel_gain(v)
                writes[int(v.tags["float_v_id"])] = float(el.scale[0]) if g is None else \
                    float(el.scale[0]) / g
        if writes and len(writes) == len(op.outputs):
            out[op.op_id] = writes
    return out


def blocks(float_net: Any, quant_net: Any, count: int = BLOCKS) -> list[Block]:
    """`quant_net`'s integer ops in network order, cut into blocks of about `len / count`
    ops: cut after every op where the float network narrows to one live value (a stage
    boundary), stretches longer than that cut evenly, then consecutive stretches joined while
    they stay within it or are shorter than `MIN_BLOCK`."""
    writes = _integer_writes(quant_net)
    ids = [op.op_id for op in quant_net.ops if op.op_id in writes]
    if not ids:
        return []
    # the float op after which each float value is last read
    last: dict[int, int] = {}
    for k, op in enumerate(float_net.ops):
        for v in op.feature_inputs():
            last[v.v_id] = k
    made = {v.v_id: k for k, op in enumerate(float_net.ops) for v in op.outputs}
    narrow: set[int] = set()  # float value ids after whose producer only they are live
    live: set[int] = set()
    for k, op in enumerate(float_net.ops):
        live -= {v for v in live if last.get(v, -1) <= k}
        live |= {v.v_id for v in op.outputs if last.get(v.v_id, -1) > k}
        if len(live) == 1:
            narrow |= live
    cuts = [i for i, op_id in enumerate(ids, 1)
            if any(made.get(f) is not None and f in narrow for f in writes[op_id])]
    pieces, start = [], 0
    longest = max(MIN_BLOCK, -(-len(ids) // max(count, 1)))
    for end in sorted(set(cuts) | {len(ids)}):
        span = ids[start:end]
        n = -(-len(span) // longest)
        for j in range(n):
            pieces.append(span[j * len(span) // n:(j + 1) * len(span) // n])
        start = end
    merged: list[list[int]] = []
    for piece in pieces:  # stretches joined up to `len / count` ops, at least MIN_BLOCK
        if merged and (len(merged[-1]) < MIN_BLOCK or
                       len(merged[-1]) + len(piece) <= longest):
            merged[-1] += piece
        elif piece:
            merged.append(list(piece))
    if len(merged) > 1 and len(merged[-1]) < MIN_BLOCK:
        tail = merged.pop()
        merged[-1] += tail
    return [Block(b) for b in merged]


def _cone_with(float_net: Any, quant_net: Any, block: Block) -> tuple[list[Any], dict]:
    """The float ops to run for `block` in network order, each paired with the quantized op
    that stands for it (None: run float): the block's ops wherever the float network writes
    what they write, then every float op downstream of them."""
    writes = _integer_writes(quant_net)
    by_id = {op.op_id: op for op in quant_net.ops}
    stands: dict[int, Any] = {}  # float op id -> quantized op
    producer = {v.v_id: op for op in float_net.ops for v in op.outputs}
    for op_id in block.op_ids:
        for fvid in writes.get(op_id, {}):
            if fvid in producer:
                stands[producer[fvid].op_id] = by_id[op_id]
    dirty: set[int] = set()
    plan = []
    for op in float_net.ops:
        if op.op_type in ("Input", "Output"):
            continue
        q = stands.get(op.op_id)
        if q is not None or any(v.v_id in dirty for v in op.feature_inputs()):
            plan.append((op, q))
            dirty.update(v.v_id for v in op.outputs)
    return plan, writes


def blocks_macs(float_net: Any, quant_net: Any, found: list[Block], samples: int) -> int:
    """The MACs `block_sensitivity` would run for `found` and `samples` samples."""
    return samples * sum(sum(_macs(op) for op, _ in _cone_with(float_net, quant_net, b)[0])
                         for b in found)


def _integer_op(qop: Any, writes: dict[int, Any], live: dict[int, np.ndarray],
                values: dict[int, list[np.ndarray]], s: int, runner: Runner
                ) -> dict[int, np.ndarray] | None:
    """`qop` run as the integer network runs it on the float values at hand (`live`, else the
    float network's own), each rounded to its input type; its outputs read back as float
    values keyed by the float value ids they stand for. None where it cannot run here."""
    from xir.quant.fixed_point import quantize

    feeds = []
    for x in qop.feature_inputs():
        el = x.dtype.element_dtype
        fid = int(x.tags.get("float_v_id", -1))
        a = live.get(fid) if fid in live else (values[fid][s] if fid in values else None)
        if a is None or not getattr(el, "is_quantized", False) or el.scale.size != 1 or \
                x.dtype.layout.is_tiled():
            return None
        g = channel_gain(x)
        a = a if g is None else np.asarray(a, np.float64) * g
        feeds.append(quantize(a, float(el.scale[0]), el.numpy_dtype).reshape(x.shape))
    if not feeds:
        return None
    res = runner.run_op(qop, feeds)
    if res is None:
        return None
    out = {}
    for v, c in zip(qop.outputs, res):
        fid = int(v.tags["float_v_id"])
        shape = np.shape(values[fid][s]) if fid in values else v.shape
        out[fid] = (np.asarray(c, np.float64) * writes[fid]).astype(np.float32).reshape(shape)
    return out


def block_sensitivity(float_net: Any, quant_net: Any, values: dict[int, list[np.ndarray]],
                      outputs: list[list[np.ndarray]], runner: Runner,
                      found: list[Block] | None = None, parts: Any = None
                      ) -> list[Block] | None:
    """The blocks of `quant_net` (`blocks`, or `found`) with their `loss`: the mean over
    samples of 1 - the worst output part's figure with that block's ops computed as the
    integer network computes them (each from its block's earlier ops' values, rounded to its
    input types) and everything else float. `values`, `outputs`: the float network's values
    per v_id and its outputs, per sample (one forward capturing every value). None when an op
    cannot run alone here."""
    from ..runner import HostRunner
    from .parts import compare_parts, output_parts

    found = blocks(float_net, quant_net) if found is None else found
    if parts is None:
        parts = output_parts(float_net, reference=outputs[0] if outputs else None)
    # quantized ops on a runner of their own: a backend plans one op per op_id, and the float
    # and the quantized networks share ids
    qrunner = HostRunner() if isinstance(runner, HostRunner) else runner
    out_ids = [v.v_id for v in float_net.outputs()]
    for block in found:
        plan, writes = _cone_with(float_net, quant_net, block)
        losses = []
        for s in range(len(outputs)):
            live: dict[int, np.ndarray] = {}
            for op, q in plan:
                if q is not None and q.op_id in writes:
                    got = _integer_op(q, writes[q.op_id], live, values, s, qrunner)
                    if got is None:
                        return None
                    live.update(got)
                    if all(v.v_id in live for v in op.outputs):
                        continue
                feeds = [live[v.v_id] if v.v_id in live else values[v.v_id][s]
                         for v in op.feature_inputs()]
                res = runner.run_op(op, feeds)
                if res is None:
                    return None
                for v, a in zip(op.outputs, res):
                    live[v.v_id] = np.asarray(a).reshape(v.shape)
            got_out = [live[vid] if vid in live else outputs[s][k]
                       for k, vid in enumerate(out_ids)]
            figs = [float(r.figure) for r in compare_parts(outputs[s], got_out, parts)]
            losses.append(1.0 - min(figs, default=1.0))
        block.loss = float(np.mean(losses))
    return found


def block_ranking(float_net: Any, quant_net: Any, samples: list[list[np.ndarray]],
                  ranked: list[Any], runner: Runner, max_macs: float | None = None
                  ) -> tuple[list[Any], dict[int, float], list[Block]] | None:
    """`ranked` (report rows: `op_id`, `alone`) ranked by each op's share of what its block
    costs the output: the block's `loss` (`block_sensitivity` on `samples`) shared over its
    rows in proportion to their own error, 1 - `alone` (evenly where that is 0) -- an
    estimate of the op's `output_loss` from one partial forward per block -- the highest
    first (ties in `ranked`'s order), rows outside every block last. Returns that order,
    `{op_id: share}` and the blocks measured; None where the blocks' partial forwards exceed
    `max_macs` (default `BLOCK_MAX_MACS`) or an op cannot run alone.

    Measured on ddddocr's detector (raised from its outlier-aware int8, 20 ops, 9.8% of the
    MACs, 12 held-out inputs, objectness part): by these shares probe 0.9911, held out mean
    1 - cosine 0.0094, 8 of 12 at 0.99; the costliest block's ops first, then the next
    block's: probe 0.9884 (the search does not keep it), held out 0.0100, 7 of 12; by
    `alone` (14 ops, 5.1%): 0.9900, 0.0129, 7 of 12."""
    from .calibrate import run_float

    found = blocks(float_net, quant_net)
    budget = BLOCK_MAX_MACS if max_macs is None else max_macs
    if not found or blocks_macs(float_net, quant_net, found, len(samples)) > budget:
        return None
    values: dict[int, list[np.ndarray]] = {}

    def keep(v: Any, a: np.ndarray) -> None:
        values.setdefault(v.v_id, []).append(np.array(a))

    outputs = run_float(float_net, samples, keep, runner, what="block sensitivity, float")
    if block_sensitivity(float_net, quant_net, values, outputs, runner, found) is None:
        return None
    values.clear()
    where = {op_id: b for b in found for op_id in b.op_ids}
    errors: dict[int, float] = {}
    for b in found:
        rows = [r for r in ranked if where.get(r.op_id) is b]
        own = [max(0.0, 1.0 - float(r.alone)) for r in rows]
        total = sum(own)
        for r, e in zip(rows, own):
            errors[r.op_id] = (b.loss or 0.0) * (e / total if total > 0 else 1.0 / len(rows))
    pos = {r.op_id: k for k, r in enumerate(ranked)}
    order = sorted((r for r in ranked if r.op_id in errors),
                   key=lambda r: (-errors[r.op_id], pos[r.op_id]))
    order += [r for r in ranked if r.op_id not in errors]
    return order, errors, found

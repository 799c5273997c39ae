"""A detector's class-score branch: the values whose channels reach the network's outputs only
as scores (issue 27, docs/quantization.md section 11).

A YOLOv8 head computes, per level, a box branch (`cv2.*`: DFL logits) and a class branch
(`cv3.*`: two 3x3 Conv + SiLU, a 1x1 Conv to the class logits); the levels' box | class
Concats are reshaped, joined on the anchor axis and Split into the DFL and the Sigmoid. The
largest activations of the class branch are the objects, and four calibration images show few
of them: the squared-error ("mse") thresholds clipped them, and the detection went (the trained
YOLOv8n of tests/corpus/test_yolov8_trained.py: the cameraman's face read 0.18 for
onnxruntime's 0.53; `/model.22/cv3.0/cv3.0.1` reaches 16.0 on it against a threshold of 10.1
and a calibrated maximum of 12.9). So `quantize_network` widens them (`widen_scores`, default
on): a score value whose calibrated range exceeds its squared-error threshold by `SPARSE_TAIL`
or more (that threshold clipped a sparse tail: the objects) keeps at least `SCORE_HEADROOM`
times it at 8 bits, whatever observer chose its threshold, and the branch's probabilities
their bound 1.0. The face reads 0.61, and all 7 held-out images (23
of 23 more) agree. Maps whose threshold keeps their range are left alone: headroom only
coarsens a dense map's step (the seeded YOLOv8 head of tests/support/yolov8_head.py lost a
detection with it). Calibrating the branch by its range instead kept less (0.43) and moved
ddddocr's YOLOX detector further from float (0.39 read 0.24); the headroom leaves it as it was
(its outlier-aware thresholds keep its score maps' ranges within 1.11: nothing is widened;
docs/quantization.md section 8, "A detector's score branch").

`score_branch_values(net)` finds them from the graph, not from names: from every Sigmoid or
Softmax whose probabilities leave the network as they are, backwards, the elements that feed it
are followed (a box of index ranges) through Split / Slice (an offset), Concat (the branch
inside the range) and code-moving ops (Reshape, Transpose, ... when the axis maps unchanged);
a value wholly inside such a box is a *score value*, and so is any
value all of whose readers write only score values. The result: the score values written by
compute ops (convolutions, activations, ...), not the Concats, Splits and code-moving ops that
only carry them and share their scale with other branches, nor the Sigmoid / Softmax
themselves (their own rule already calibrates them by range). A branch hangs off a trunk that
feeds other outputs too: a classifier, whose every value ends in its Softmax, has none.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["CARRY_OPS", "SCORE_HEADROOM", "SCORE_OPS", "SPARSE_TAIL", "score_branch_values",
           "score_ops", "score_values", "widen_scores"]

#: Ops whose output is a probability: what a score branch ends in.
SCORE_OPS = frozenset({"Sigmoid", "Softmax"})
#: The least amax of a widened score value, in multiples of its squared-error threshold
#: (`widen_scores`): its largest activations are the objects, and a held-out object exceeds
#: what four calibration images showed (see the module docstring). 1.25 read the trained
#: YOLOv8n's cameraman 0.41, 1.5 0.61-0.64, 2.0 0.66 (onnxruntime 0.53)
SCORE_HEADROOM = 1.5
#: A score value is widened where its calibrated range exceeds its squared-error threshold by
#: this much or more: that threshold clipped a sparse tail, the objects. The trained YOLOv8n's
#: class branch reads 1.17-1.39 on its stride-8 level and first layer of stride 16, 1.02-1.10
#: elsewhere; the seeded YOLOv8 head of tests/support/yolov8_head.py (random weights, dense
#: maps) 1.00-1.09, where the headroom costs detections (recall 0.95 -> 0.90)
SPARSE_TAIL = 1.15
#: Ops that only move or select channels: a score range is followed through them, and the
#: values they write are not returned (they share scale groups with other branches).
CARRY_OPS = frozenset({"Cast", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "AlignAxis",
                       "PruneAxis", "Split", "Slice", "Concat"})


def _axis(op: Any, rank: int) -> int:
    return int(op.attrs.get("axis", 0 if op.op_type in ("Split", "Slice") else -1)) % rank


Box = tuple[tuple[int, int], ...]


def _full(v: Any) -> Box:
    return tuple((0, int(d)) for d in v.shape)


def _slice_starts(op: Any) -> dict[int, int] | None:
    """{axis: start} of a unit-step Slice; None when its attributes do not say."""
    starts, axes, steps = op.attrs.get("starts"), op.attrs.get("axes"), op.attrs.get("steps")
    if starts is None:
        return None
    n = len(op.inputs[0].shape)
    axes = list(range(len(starts))) if axes is None else [int(a) % n for a in axes]
    if steps is not None and any(int(x) != 1 for x in steps):
        return None
    out = {}
    for a, lo in zip(axes, starts):
        dim = int(op.inputs[0].shape[a])
        lo = int(lo)
        out[a] = max(0, min(dim, lo + dim if lo < 0 else lo))
    return out


def _back(op: Any, out_index: int, box: Box) -> list[tuple[Any, Box]]:
    """The input boxes (value, per-axis [lo, hi)) of `op` whose elements become `box` of its
    output `out_index`; [] where that cannot be told."""
    ins = op.feature_inputs()
    if not ins:
        return []
    out = op.outputs[out_index]
    rank = len(out.shape)
    t = op.op_type
    if t == "Split":
        ax = _axis(op, rank)
        off = sum(int(o.shape[ax]) for o in op.outputs[:out_index])
        b = list(box)
        b[ax] = (box[ax][0] + off, box[ax][1] + off)
        return [(ins[0], tuple(b))]
    if t == "Slice":
        starts = _slice_starts(op)
        if starts is None:
            return []
        return [(ins[0], tuple((lo + starts.get(a, 0), hi + starts.get(a, 0))
                               for a, (lo, hi) in enumerate(box)))]
    if t == "Concat":
        ax = _axis(op, rank)
        found, off = [], 0
        lo, hi = box[ax]
        for v in ins:
            n = int(v.shape[ax])
            a, b = max(lo, off), min(hi, off + n)
            if a < b:
                nb = list(box)
                nb[ax] = (a - off, b - off)
                found.append((v, tuple(nb)))
            off += n
        return found
    if t == "Transpose":
        perm = [int(p) % rank for p in op.attrs["perm"]]
        b = [(0, 0)] * rank
        for j, p in enumerate(perm):
            b[p] = box[j]
        return [(ins[0], tuple(b))]
    src = tuple(int(d) for d in ins[0].shape)
    if src == tuple(int(d) for d in out.shape):
        return [(ins[0], box)]
    # Reshape and the like: whole, or cut on one axis that maps back unchanged (the elements
    # before it and the axis itself the same on both sides, row-major)
    cut = [a for a, (lo, hi) in enumerate(box) if (lo, hi) != (0, int(out.shape[a]))]
    if not cut:
        return [(ins[0], _full(ins[0]))]
    if len(cut) > 1:
        return []
    axis = cut[0]
    before = 1
    for d in out.shape[:axis]:
        before *= int(d)
    acc = 1
    for j, d in enumerate(src):
        if acc == before and d == int(out.shape[axis]):
            b = list(_full(ins[0]))
            b[j] = box[axis]
            return [(ins[0], tuple(b))]
        acc *= d
        if acc > before:
            break
    return []


def _leaves(net: Any, op: Any, outputs: set[int]) -> bool:
    """Whether all of `op`'s probabilities leave the network as they are: every path from its
    outputs reaches a network output through carrying ops only (a score part; not a DFL
    Softmax whose expectation a convolution takes, nor YOLOv5's Sigmoid over boxes and scores
    alike, whose box channels are decoded further)."""
    todo, seen, reached = list(op.outputs), set(), False
    while todo:
        v = todo.pop()
        if v.v_id in seen:
            continue
        seen.add(v.v_id)
        reached |= v.v_id in outputs
        for r in net.consumers(v):
            if r.op_type == "Output":
                reached = True
                continue
            if r.op_type not in CARRY_OPS:
                return False
            todo.extend(r.outputs)
    return reached


def score_ops(net: Any) -> list[Any]:
    """The Sigmoid / Softmax ops of `net` whose probabilities leave the network as they are."""
    outputs = {v.v_id for v in net.outputs()}
    return [op for op in net.ops if op.op_type in SCORE_OPS and op.feature_inputs()
            and _leaves(net, op, outputs)]


def score_branch_values(net: Any) -> set[int]:
    """Value ids of `net` (a float network) written by compute ops whose channels reach the
    network outputs only through a Sigmoid or Softmax (see the module docstring)."""
    outputs = {v.v_id for v in net.outputs()}
    score: set[int] = set()
    work: list[tuple[Any, Box]] = []
    for op in score_ops(net):
        v = op.feature_inputs()[0]
        work.append((v, _full(v)))
    seen: set[tuple[int, Box]] = set()
    while work:  # the elements feeding a score op, backwards through carrying ops
        v, box = work.pop()
        if (v.v_id, box) in seen or v.v_id in outputs:
            continue
        seen.add((v.v_id, box))
        if box == _full(v):
            score.add(v.v_id)
        prod = v.producer
        if prod is None or prod.op_type not in CARRY_OPS:
            continue
        k = next(i for i, o in enumerate(prod.outputs) if o.v_id == v.v_id)
        work.extend(_back(prod, k, box))
    # values all of whose readers write only score values (reverse op order: readers first)
    for op in reversed(list(net.ops)):
        if not op.outputs or not all(o.v_id in score for o in op.outputs):
            continue
        for v in op.feature_inputs():
            if v.v_id in outputs or v.producer is None:
                continue
            readers = net.consumers(v)
            if readers and all(r.outputs and all(o.v_id in score for o in r.outputs)
                               for r in readers):
                score.add(v.v_id)
    # a branch: score values below a trunk that also feeds other outputs (a classifier whose
    # every value ends in its Softmax has no score branch: its whole network would be one)
    branch: set[int] = set()
    for op in net.ops:  # topological order
        feeds = op.feature_inputs()
        if any(v.v_id not in score or v.v_id in branch for v in feeds):
            branch.update(o.v_id for o in op.outputs if o.v_id in score)
    return {v.v_id for op in net.ops for v in op.outputs if v.v_id in branch
            and op.op_type not in CARRY_OPS and op.op_type not in SCORE_OPS}


def score_values(net: Any) -> dict[int, float]:
    """`{v_id: bound}` of the values `widen_scores` widens: the score branch's
    (`score_branch_values`, bound inf) and, where there is a branch, the probabilities its
    score ops write (bound 1.0: a score above the calibrated maximum is an object more certain
    than any the calibration saw). A network without a score branch has none."""
    branch = score_branch_values(net)
    if not branch:
        return {}
    out = {vid: float("inf") for vid in branch}
    out.update({v.v_id: 1.0 for op in score_ops(net) for v in op.outputs})
    return out


def widen_scores(amax: dict[int, float], scores: dict[int, float], ranges: dict[int, float],
                 squared: dict[int, float], eight_bit: Callable,
                 factor: float = SCORE_HEADROOM) -> list[int]:
    """Widen the thresholds `amax` of the 8-bit score values (`score_values`) whose calibrated
    range (`ranges`, max |x|) exceeds their squared-error threshold (`squared`: the "mse"
    observer's at int8) by `SPARSE_TAIL` or more to at least `factor` times that threshold,
    and the probabilities to their bound once one of those is (in place); returns the v_ids
    widened. Where the squared-error threshold keeps the whole range (within `SPARSE_TAIL`)
    the map's largest values are not a sparse tail, and headroom would only coarsen its step.
    Measured against the squared-error threshold whatever observer chose `amax`: the
    outlier-aware thresholds (cubed errors) keep more of a tail, and so hide it."""
    done = []
    for vid, bound in scores.items():
        ref = squared.get(vid, 0.0)
        if bound == float("inf") and vid in amax and eight_bit(vid) and ref > 0.0 and \
                ranges.get(vid, 0.0) >= SPARSE_TAIL * ref:
            amax[vid] = max(amax[vid], factor * ref)
            done.append(vid)
    if done:
        for vid, bound in scores.items():
            if bound < float("inf") and vid in amax and eight_bit(vid):
                amax[vid] = max(amax[vid], bound)
                done.append(vid)
    return sorted(done)

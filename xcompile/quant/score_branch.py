"""A detector's class-score branch: the values whose channels reach the network's outputs only
as scores (issue 27, docs/quantization.md section 11).

A YOLOv8 head computes, per level, a box branch (`cv2.*`: DFL logits) and a class branch
(`cv3.*`: two 3x3 Conv + SiLU, a 1x1 Conv to the class logits); the levels' box | class
Concats are reshaped, joined on the anchor axis and Split into the DFL and the Sigmoid. The
largest activations of the class branch are the objects: the squared-error ("mse") thresholds
clip exactly those, and the detection goes (the trained YOLOv8n of
tests/corpus/test_yolov8_trained.py: the cameraman's face reads 0.18 for onnxruntime's 0.53;
`/model.22/cv3.0/cv3.0.1` reaches 16.0 on it against a threshold of 10.1). Calibrating those
values by their range, as a Softmax's are, keeps them (0.43; over 26 held-out images the
detections agree on 23 instead of 21). It is not the quantizer's default: on ddddocr's YOLOX
text detector the same rule moves scores further from the float run (0.39 read 0.24, 0.37 with
the thresholds as they are); a compile would have to choose it by measure, and its probe
cosine does not see the gain on the YOLOv8n (0.8547 -> 0.8575). So far only the tests
use it (tests/corpus/test_yolov8_trained.py, tests/unit/xcompile/test_score_branch.py); the
place to wire it is `quantize_network`'s per-value observers, where a Softmax's values already
get `{"method": "minmax"}`.

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

from typing import Any

__all__ = ["CARRY_OPS", "SCORE_OPS", "score_branch_values"]

#: Ops whose output is a probability: what a score branch ends in.
SCORE_OPS = frozenset({"Sigmoid", "Softmax"})
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


def score_branch_values(net: Any) -> set[int]:
    """Value ids of `net` (a float network) written by compute ops whose channels reach the
    network outputs only through a Sigmoid or Softmax (see the module docstring)."""
    outputs = {v.v_id for v in net.outputs()}
    score: set[int] = set()
    work: list[tuple[Any, Box]] = []
    for op in net.ops:
        if op.op_type in SCORE_OPS and op.feature_inputs() and _leaves(net, op, outputs):
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

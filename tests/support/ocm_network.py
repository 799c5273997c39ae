"""OCM planning instances of xir networks: one buffer per feature map, aliased values joined,
sized, given a lifetime and scored by the ETM traffic that residency saves."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from npu_model.planners.ocm.driver import plan_ocm
from npu_model.planners.ocm.problem import OcmOpt, OcmPlan

#: ops that move no data on the NPU: their values share one buffer (a Reshape is a new view of
#: its input; Concat inputs are written as channel slices of the Concat output, with a pitch;
#: Split outputs are read as channel slices of the Split input)
DEFAULT_ALIAS_OPS = ("Reshape", "Concat", "Split")


@dataclass
class OcmInstance:
    """Buffers of one network: sizes (bytes, aligned), lifetimes, scores and where they come
    from (`members[i]`: the v_ids sharing buffer i, owner first)."""

    sizes: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    scores: np.ndarray
    num_ops: int
    members: list[tuple[int, ...]] = field(default_factory=list)
    names: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return int(self.sizes.shape[0])

    def plan(self, capacity: int, option: Any = OcmOpt.BEST_SCORE, **kw: Any) -> OcmPlan:
        return plan_ocm(self.sizes, self.starts, self.ends, self.scores, capacity, option,
                        num_ops=self.num_ops, **kw)


def instance_from_network(net: Any, *, alignment: int = 64,
                          alias_ops: Iterable[str] = DEFAULT_ALIAS_OPS,
                          element_bytes: int | None = None,
                          read_weight: float = 1.0) -> OcmInstance:
    """The OCM planning instance of a network (or view): one buffer per feature map, values
    joined into one buffer where an alias op moves no data (`alias_ops`: a Reshape's output is
    its input's bytes; a Concat's inputs are written as channel slices, with a pitch, of its
    output; a Split's outputs are channel slices of its input; an op one of whose pieces is
    already a piece elsewhere copies instead).

    - size: the largest member's `storageBytes()` (or elements x `element_bytes`, e.g. 1 to plan
      the int8 deployment of a float network), rounded up to `alignment`;
    - lifetime: from the first producing op's position to the last consuming op's position;
    - score: ETM bytes saved = bytes written by real producers + `read_weight` x bytes read by
      real consumers (a map with one producer and r readers: size x (1 + r));
    - network inputs and outputs stay out (they are the INPUT/OUTPUT segments the host reads
      and writes in ETM); Params are not feature maps."""
    ops = list(net)
    alias = set(alias_ops)
    pos = {id(op): i for i, op in enumerate(ops)}
    values: dict[int, Any] = {}
    for op in ops:
        for v in list(op.inputs) + list(op.outputs):
            if not v.is_params:
                values.setdefault(v.v_id, v)
    parent = {v: v for v in values}

    def find(v: int) -> int:
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    pieces_of: set[int] = set()  # v_ids already a piece of some alias op
    aliasing: set[int] = set()    # id() of the alias ops that do alias (move no data)
    for op in ops:
        if op.op_type not in alias:
            continue
        ins = [v.v_id for v in op.inputs if not v.is_params]
        outs = [v.v_id for v in op.outputs if not v.is_params]
        if op.op_type == "Split":  # the outputs are channel slices of the input
            wholes, pieces = ins, outs
        else:                      # Concat, Reshape: the inputs are (slices of) the output
            wholes, pieces = outs, ins
        if len(wholes) != 1 or not pieces or len(set(pieces)) != len(pieces) or \
                any(v in pieces_of for v in pieces) or wholes[0] in pieces:
            continue  # a piece cannot sit in two buffers at once: this op copies
        aliasing.add(id(op))
        for v in pieces:
            pieces_of.add(v)
            ra, rb = find(wholes[0]), find(v)
            if ra != rb:
                parent[rb] = ra

    def nbytes(v: Any) -> int:
        if element_bytes is None:
            return int(v.storageBytes())
        return int(np.prod(v.shape, dtype=np.int64)) * int(element_bytes)

    groups: dict[int, list[int]] = {}
    for v in values:
        groups.setdefault(find(v), []).append(v)
    sizes, starts, ends, scores, members, names = [], [], [], [], [], []
    for root, vs in groups.items():
        io = False
        lo, hi = None, None
        score = 0.0
        size = 0
        for vid in vs:
            v = values[vid]
            b = nbytes(v)
            size = max(size, b)
            prod = v.producer
            if prod is None or id(prod) not in pos or prod.op_type == "Input":
                io = True
            else:
                p = pos[id(prod)]
                lo = p if lo is None else min(lo, p)
                hi = p if hi is None else max(hi, p)
                if id(prod) not in aliasing:
                    score += b
            for c in v.consumers:
                if id(c) not in pos:
                    continue
                if c.op_type == "Output":
                    io = True
                    continue
                p = pos[id(c)]
                hi = p if hi is None else max(hi, p)
                if id(c) not in aliasing:
                    score += read_weight * b
        if io or lo is None:
            continue
        members.append(tuple([root] + sorted(v for v in vs if v != root)))
        names.append(values[root].name)
        sizes.append(-(-size // alignment) * alignment)
        starts.append(lo)
        ends.append(hi)
        scores.append(score)
    order = np.lexsort((np.array([m[0] for m in members], np.int64), np.array(starts, np.int64)))
    pick = lambda xs, dt: np.asarray(xs, dt)[order] if len(xs) else np.zeros(0, dt)  # noqa: E731
    return OcmInstance(sizes=pick(sizes, np.int64), starts=pick(starts, np.int64),
                       ends=pick(ends, np.int64), scores=pick(scores, np.float64),
                       num_ops=len(ops), members=[members[i] for i in order],
                       names=[names[i] for i in order])

"""Concat branches of far-apart ranges (docs/quantization.md, "Concat"): which share the
Concat's scale, which are requantized into it, and which Concats stay float at an output."""

from __future__ import annotations

from typing import Any

import numpy as np

from xcompile.quant.scale_groups import UnionFind, scale_groups
from xir.network import Network
from xir.ops.base import Operation

#: Ops a Concat's output may pass on its way to a network output and still be "at the output".
OUTPUT_MOVE_OPS = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "AlignAxis",
                             "PruneAxis"})
#: A Concat branch whose range is this many times below the largest branch's loses too many
#: codes at one shared scale (4 of int8's 7 bits): it keeps its own scale (`concat_plan`).
BRANCH_SPREAD = 16.0
#: The same at a network output, where keeping every branch costs only a host Concat.
OUTPUT_SPREAD = 4.0


def _output_tail(op: Operation) -> list[Operation] | None:
    """The code-moving ops from `op`'s output to a network output, when that is all its output
    reaches (the chain a Concat's output passes on its way out, a Concat joining several heads
    included); None otherwise."""
    tail: list[Operation] = []
    v = op.outputs[0]
    while True:
        if not v.consumers:
            return None
        if all(c.op_type == "Output" for c in v.consumers):
            return tail
        if len(v.consumers) != 1:
            return None
        c = v.consumers[0]
        if (c.op_type not in OUTPUT_MOVE_OPS and c.op_type != "Concat") or \
                len(c.outputs) != 1:
            return None
        tail.append(c)
        v = c.outputs[0]


def concat_plan(net: Network, int_ops: set[int], amax: dict[int, float],
                 bits_of: Any = None, far: set[tuple[int, int]] | None = None,
                 widen: bool = True
                 ) -> tuple[UnionFind, set[tuple[int, int]], set[int], dict[str, dict],
                            set[int]]:
    """How each integer Concat keeps its branches' ranges (docs/quantization.md, "Concat").

    A branch's *spread* is the largest range among the Concat's branches over its own (group
    amax, measured by calibration): at one shared scale it keeps `qmax / spread` of its codes.
    - every branch within `BRANCH_SPREAD` (16x: at most 4 of int8's 7 bits lost): one shared
      scale, the codes move unchanged (an NPU alias);
    - a network output (the Concat reaches the Output through code-moving ops only) with a
      branch beyond `OUTPUT_SPREAD` (4x: 2 bits): the Concat, and the ops after it, stay float
      at the host edge; each branch leaves the integer part at its own scale (a detector's box
      pixels and class probabilities);
    - elsewhere, a branch beyond `BRANCH_SPREAD` keeps its own scale (its producer and other
      readers keep their resolution) and is requantized into the Concat's by a Cast, and the
      Concat's group is stored in 16 bits (form "int16"; the readers compute at 16 bits):
      there the branch keeps `32767 / spread` codes instead of `127 / spread`. A spread beyond
      `BRANCH_SPREAD * 256` is lost in 16 bits too: then only requantized ("requantized").
    `bits_of(v_id)`: the value's storage bits (default 8); `far`: the requantized branches of
    an earlier plan, kept (a second plan after the 16-bit calibration must not unite a branch
    with a group of other bits). `widen=False`: no Concat is stored in 16 bits for its far
    branches: a far branch the Concat alone reads shares its scale, one with other readers
    keeps its own for them and is requantized into the Concat's int8 one (form
    "requantized"), for a compile that measured the widening buys nothing
    (`xcompile.pipeline`). Returns (the scale groups, the requantized (concat op_id,
    input index) pairs, the ops made float, the record for `tags["quantization"]["concats"]`,
    the Concat outputs to store in 16 bits that are not yet)."""
    uf = scale_groups(net, int_ops, concat=False)
    gmax: dict[int, float] = {}
    for vid, a in amax.items():
        r = uf.find(vid)
        gmax[r] = max(gmax.get(r, 0.0), a)
    requant: set[tuple[int, int]] = set()
    floats: set[int] = set()
    record: dict[str, dict] = {}
    wide: set[int] = set()
    bits_of = bits_of or (lambda vid: 8)
    for op in net.ops:
        if op.op_type != "Concat" or op.op_id not in int_ops or op.op_id in floats:
            continue
        feats, y = op.feature_inputs(), op.outputs[0]
        ranges = [gmax.get(uf.find(v.v_id), 0.0) for v in feats]
        top = max(ranges + [gmax.get(uf.find(y.v_id), 0.0)])
        spread = [top / a if a > 0 else (1.0 if top == 0 else float("inf")) for a in ranges]
        at = [i for i, v in enumerate(op.inputs) if not v.is_params]  # inputs' own indices
        tail = _output_tail(op)
        form = "shared"
        if tail is not None and max(spread, default=1.0) > OUTPUT_SPREAD:
            form = "float"
            floats.update([op.op_id] + [t.op_id for t in tail])
        else:
            for i, v, sp in zip(at, feats, spread):
                keep = ((op.op_id, i) in far) if far is not None else sp > BRANCH_SPREAD
                if keep and not widen and bits_of(y.v_id) < 16 and \
                        all(c is op for c in v.consumers):
                    keep = False  # read by the Concat only: its own scale would serve no one
                if keep:
                    requant.add((op.op_id, i))
                    if bits_of(y.v_id) >= 16:
                        form = "int16"
                    elif widen and sp <= BRANCH_SPREAD * 256:
                        wide.add(y.v_id)
                        form = "int16"
                    elif form != "int16":
                        form = "requantized"
                else:
                    ry, rv = uf.find(y.v_id), uf.find(v.v_id)
                    a = max(gmax.get(ry, 0.0), gmax.get(rv, 0.0))
                    uf.union(ry, rv)
                    gmax[uf.find(ry)] = a
        if len(feats) > 1:
            record[str(op.op_id)] = {
                "name": op.name, "form": form, "at_output": tail is not None,
                "spread": [round(float(x), 2) if np.isfinite(x) else None for x in spread]}
    return uf, requant, floats, record, wide

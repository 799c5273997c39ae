"""ETM planner instances of xir networks: one buffer per feature map, with lifetimes from the op
order and Reshape, Concat and Split pieces aliased into their whole where the bytes allow."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from npu_model.planners.etm.instance import DEFAULT_ALIGNMENT


def _align_up(x: int, a: int) -> int:
    return -(-x // a) * a


def _outer_is_unit(shape: Sequence[int], axis: int) -> bool:
    """True if every axis before `axis` has extent 1: pieces along `axis` are contiguous."""
    return all(int(d) == 1 for d in shape[:axis])


def instance_from_network(net: Any, alignment: int = DEFAULT_ALIGNMENT) -> dict[str, Any]:
    """Planner input for the feature maps of an xir Network or NetworkView.

    Every non-Params value gets a buffer: lifetime from its producer's position to its last
    consumer's (network inputs from 0, network outputs to the last position), size
    ``storageBytes`` aligned up. Aliases, in op order:

    - Reshape: the output is a member of its input at offset 0;
    - Concat: the inputs are members of the output at their running byte offsets, but only when
      every axis before the concat axis has extent 1 (the pieces are then contiguous in row-major
      memory; an NHWC channel concat with H*W > 1 interleaves them, so it gets no alias);
    - Split: likewise, the outputs are members of the input.

    A Concat or Split aliases all of its pieces or none: none if a piece is already a member
    elsewhere, appears twice, or would sit at an offset that is not a multiple of `alignment`.
    Returns a dict of int64 arrays ``sizes, starts, ends, alias_owner, alias_offset, v_ids`` and
    ``alignment``, ready for ``plan_etm(**instance)``.
    """
    ops = list(net.ops)
    last = max(len(ops) - 1, 0)
    index: dict[int, int] = {}
    sizes: list[int] = []
    raw: list[int] = []
    starts: list[int] = []
    ends: list[int] = []
    v_ids: list[int] = []
    values: list[Any] = []

    def buf(v: Any, pos: int) -> int:
        k = index.get(v.v_id)
        if k is None:
            k = index[v.v_id] = len(sizes)
            nbytes = int(v.storageBytes())
            raw.append(nbytes)
            sizes.append(_align_up(nbytes, alignment))
            starts.append(pos)
            ends.append(pos)
            v_ids.append(int(v.v_id))
            values.append(v)
        return k

    for pos, op in enumerate(ops):
        for v in op.inputs:
            if not v.is_params:
                k = buf(v, 0)  # produced outside: a view's input, live from the start
                ends[k] = max(ends[k], pos)
        for v in op.outputs:
            if not v.is_params:
                k = buf(v, pos)
                starts[k] = min(starts[k], pos)
    for v in net.inputs():
        if not v.is_params:
            starts[buf(v, 0)] = 0
    for v in net.outputs():
        if not v.is_params:
            ends[buf(v, last)] = last

    n = len(sizes)
    owner = np.full(n, -1, dtype=np.int64)
    offset = np.zeros(n, dtype=np.int64)

    def try_pieces(whole: Any, pieces: Sequence[Any], axis: int) -> None:
        if any(p.is_params for p in pieces) or whole.is_params:
            return
        ks = [index[p.v_id] for p in pieces]
        w = index[whole.v_id]
        if len(set(ks)) != len(ks) or w in ks or any(owner[k] >= 0 for k in ks):
            return
        if not _outer_is_unit(whole.shape, axis):
            return
        if sum(raw[k] for k in ks) != raw[w]:
            return
        offs, acc = [], 0
        for k in ks:
            offs.append(acc)
            acc += raw[k]
        if any(o % alignment for o in offs):
            return
        for k, o in zip(ks, offs):
            owner[k] = w
            offset[k] = o

    for op in ops:
        kind = op.op_type
        if kind == "Reshape" and op.inputs and op.outputs:
            x, y = op.inputs[0], op.outputs[0]
            if not x.is_params and not y.is_params:
                kx, ky = index[x.v_id], index[y.v_id]
                if owner[ky] < 0 and raw[ky] == raw[kx] and kx != ky:
                    owner[ky] = kx
        elif kind in ("Concat", "Split") and op.inputs and op.outputs:
            whole, pieces = ((op.outputs[0], op.inputs) if kind == "Concat"
                             else (op.inputs[0], op.outputs))
            rank = len(whole.shape)
            axis = int(op.attrs.get("axis", -1))
            axis = axis + rank if axis < 0 else axis
            if 0 <= axis < rank:
                try_pieces(whole, list(pieces), axis)

    return {
        "sizes": np.asarray(sizes, dtype=np.int64),
        "starts": np.asarray(starts, dtype=np.int64),
        "ends": np.asarray(ends, dtype=np.int64),
        "alias_owner": owner,
        "alias_offset": offset,
        "alignment": int(alignment),
        "v_ids": np.asarray(v_ids, dtype=np.int64),
    }

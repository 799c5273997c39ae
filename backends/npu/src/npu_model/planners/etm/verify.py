"""`verify_plan`: an independent check of any plan (alignment, members at their owner's offset
plus their own, no bytes shared by live buffers of different alias groups)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...kernels.jit import kernel
from .errors import PlanError
from .instance import DEFAULT_ALIGNMENT, _check, _int_array, _name


@kernel
def _conflicts(offsets, sizes, starts, ends, root, srt):
    """First pair (i, j) of buffers from different alias groups that overlap in time and in
    bytes, or (-1, -1); `srt` orders the buffers by start (stable)."""
    n = sizes.shape[0]
    for p in range(n):
        i = srt[p]
        if sizes[i] == 0:
            continue
        q = p + 1
        while q < n and starts[srt[q]] <= ends[i]:
            j = srt[q]
            q += 1
            if sizes[j] == 0 or root[i] == root[j]:
                continue
            if offsets[i] < offsets[j] + sizes[j] and offsets[j] < offsets[i] + sizes[i]:
                return i, j
    return -1, -1


def verify_plan(offsets: Any, sizes: Any, starts: Any, ends: Any, alias_owner: Any = None,
                alias_offset: Any = None, alignment: int = DEFAULT_ALIGNMENT,
                v_ids: Any = None, total: int | None = None) -> None:
    """Raise `PlanError` unless the plan is valid: every root aligned, every member at its
    owner's offset plus its own, no two buffers of different alias groups sharing bytes while
    both are live, and (if given) every buffer inside `total` bytes."""
    inst = _check(sizes, starts, ends, alias_owner, alias_offset, alignment, v_ids)
    n = inst.sizes.shape[0]
    off = _int_array(offsets, "offsets", n)
    ids = inst.v_ids
    bad = np.flatnonzero(off < 0)
    if bad.size:
        raise PlanError(f"{_name(int(bad[0]), ids)} has a negative offset {int(off[bad[0]])}")
    bad = np.flatnonzero(off % inst.alignment != 0)
    if bad.size:
        i = int(bad[0])
        raise PlanError(f"{_name(i, ids)} at offset {int(off[i])} is not "
                        f"{inst.alignment}-byte aligned")
    member = inst.owner >= 0
    want = np.where(member, off[np.where(member, inst.owner, 0)] + inst.offset, off)
    bad = np.flatnonzero(want != off)
    if bad.size:
        i = int(bad[0])
        raise PlanError(f"{_name(i, ids)} at offset {int(off[i])}, but its owner "
                        f"{_name(int(inst.owner[i]), ids)} puts it at {int(want[i])}")
    if total is not None:
        bad = np.flatnonzero(off + inst.gsize > total)
        if bad.size:
            raise PlanError(f"{_name(int(bad[0]), ids)} ends beyond the {total}-byte segment")
    # Groups are checked as blocks: a root covers its aligned size over the union lifetime.
    i, j = _conflicts(off, inst.gsize, inst.gstart, inst.gend, inst.root,
                      np.argsort(inst.gstart, kind="mergesort"))
    if i >= 0:
        raise PlanError(f"{_name(int(i), ids)} and {_name(int(j), ids)} are live at the same "
                        f"time and share bytes")

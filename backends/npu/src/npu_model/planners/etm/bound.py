"""The lower bound, the planner's certificate: the peak bytes of alias groups live at once. No
plan can use less, so a plan that meets it is optimal and the search stops there."""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from .instance import DEFAULT_ALIGNMENT, _check, _roots


@njit(cache=True)
def _peak(size, start, end):
    """Peak of the summed sizes of the intervals live at once (inclusive ends)."""
    m = size.shape[0]
    if m == 0:
        return 0
    by_start = np.argsort(start, kind="mergesort")
    by_end = np.argsort(end, kind="mergesort")
    live = 0
    best = 0
    a = 0
    r = 0
    while a < m:
        if end[by_end[r]] < start[by_start[a]]:
            live -= size[by_end[r]]
            r += 1
        else:
            live += size[by_start[a]]
            a += 1
            if live > best:
                best = live
    return best


def lower_bound(sizes: Any, starts: Any, ends: Any, alias_owner: Any = None,
                alias_offset: Any = None, alignment: int = DEFAULT_ALIGNMENT,
                v_ids: Any = None) -> int:
    """Peak bytes live at once over the execution order, alias groups merged into their root
    (union lifetime, root size aligned up): no valid plan is smaller."""
    inst = _check(sizes, starts, ends, alias_owner, alias_offset, alignment, v_ids)
    r = _roots(inst)
    return int(_peak(inst.gsize[r], inst.gstart[r], inst.gend[r]))

"""The lower bound, the planner's certificate: the peak bytes of alias groups live at once. No
plan can use less, so a plan that meets it is optimal and the search stops there."""

from __future__ import annotations

from typing import Any

import numpy as np

from .instance import DEFAULT_ALIGNMENT, _check, _roots


def _peak(size, start, end):
    """Peak of the summed sizes of the intervals live at once (inclusive ends).

    Plain numpy (runs once per plan): a sweep over the +size events at the starts and the
    -size events one past the ends, removals first where the two meet."""
    m = size.shape[0]
    if m == 0:
        return 0
    pos = np.concatenate((end + 1, start))
    delta = np.concatenate((-size, size))
    adds_last = np.concatenate((np.zeros(m, np.int8), np.ones(m, np.int8)))
    live = np.cumsum(delta[np.lexsort((adds_last, pos))])
    return max(0, int(live.max()))


def lower_bound(sizes: Any, starts: Any, ends: Any, alias_owner: Any = None,
                alias_offset: Any = None, alignment: int = DEFAULT_ALIGNMENT,
                v_ids: Any = None) -> int:
    """Peak bytes live at once over the execution order, alias groups merged into their root
    (union lifetime, root size aligned up): no valid plan is smaller."""
    inst = _check(sizes, starts, ends, alias_owner, alias_offset, alignment, v_ids)
    r = _roots(inst)
    return int(_peak(inst.gsize[r], inst.gstart[r], inst.gend[r]))

"""The plans: `plan_etm_detailed` (greedy passes, then the annealed search, with the bound as
certificate), `plan_etm` (its offsets and total) and `plan_no_reuse` (the ``disableEtmOptimize``
layout)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...kernels.jit import tiered
from . import search
from .bound import _peak
from .errors import PlanError
from .instance import DEFAULT_ALIGNMENT, _check, _expand, _roots
from .search import (
    _ORDERINGS,
    ANNEAL_T0,
    DEFAULT_MAX_ITERS,
    _excess_np,
    _orderings,
    _overlap_graph,
)


def _small_climb(order, size, off, placed, indptr, nbr, first_fit, bound, max_iters, seed,
                 temp0, lo, hi) -> bool:
    """Whether `search._improve` runs as Python in a fraction of its compile time: its steps
    times the buffers and their overlaps (each step re-places a suffix of the order)."""
    return max_iters * (order.shape[0] + nbr.shape[0]) <= 40_000


# The kernels as the planner calls them: interpreted on small plans while not compiled (a
# fresh install plans tiny networks without compiling them; `jit.Tiered`). A greedy pass
# costs milliseconds as Python on hundreds of buffers.
_place = tiered(search._place)
_improve = tiered(search._improve, _small_climb)


@dataclass(frozen=True)
class EtmPlan:
    """A plan with its certificate: `total` bytes against the `lower_bound`."""

    offsets: np.ndarray
    total: int
    lower_bound: int
    strategy: str
    iterations: int

    @property
    def ratio(self) -> float:
        """total / lower_bound (1.0 means provably optimal)."""
        return self.total / self.lower_bound if self.lower_bound else 1.0

    @property
    def optimal(self) -> bool:
        return self.total == self.lower_bound


def plan_no_reuse(sizes: Any, starts: Any, ends: Any, alias_owner: Any = None,
                  alias_offset: Any = None, alignment: int = DEFAULT_ALIGNMENT,
                  v_ids: Any = None) -> tuple[np.ndarray, int]:
    """One slot per alias group, in buffer order (the ``disableEtmOptimize`` layout); the total
    is the sum of the roots' aligned sizes (members live inside their owner)."""
    inst = _check(sizes, starts, ends, alias_owner, alias_offset, alignment, v_ids)
    n = inst.sizes.shape[0]
    is_root = inst.root == np.arange(n)
    slots = np.where(is_root, inst.gsize, 0)
    root_off = np.concatenate(([0], np.cumsum(slots)[:-1])).astype(np.int64) if n else slots
    return _expand(inst, root_off), int(slots.sum())


def plan_etm(sizes: Any, starts: Any, ends: Any, alias_owner: Any = None,
             alias_offset: Any = None, alignment: int = DEFAULT_ALIGNMENT,
             v_ids: Any = None, *, max_iters: int = DEFAULT_MAX_ITERS) -> tuple[np.ndarray, int]:
    """Offsets (int64, one per buffer; members = owner offset + member offset) and the total
    segment size of a feature-map reuse plan. See `plan_etm_detailed` for the certificate."""
    plan = plan_etm_detailed(sizes, starts, ends, alias_owner, alias_offset, alignment, v_ids,
                             max_iters=max_iters)
    return plan.offsets, plan.total


def plan_etm_detailed(sizes: Any, starts: Any, ends: Any, alias_owner: Any = None,
                      alias_offset: Any = None, alignment: int = DEFAULT_ALIGNMENT,
                      v_ids: Any = None, *, max_iters: int = DEFAULT_MAX_ITERS,
                      seed: int = 1) -> EtmPlan:
    """`plan_etm` with its certificate: the lower bound, the winning greedy ordering and the
    number of local-search steps taken (0 when a greedy pass met the bound)."""
    if max_iters < 0:
        raise PlanError(f"max_iters must be >= 0, not {max_iters}")
    inst = _check(sizes, starts, ends, alias_owner, alias_offset, alignment, v_ids)
    n = inst.sizes.shape[0]
    r = _roots(inst)
    size = np.ascontiguousarray(inst.gsize[r])
    start = np.ascontiguousarray(inst.gstart[r])
    end = np.ascontiguousarray(inst.gend[r])
    bound = int(_peak(size, start, end))
    m = size.shape[0]
    root_off = np.zeros(n, dtype=np.int64)
    if m == 0:
        return EtmPlan(_expand(inst, root_off), 0, 0, "empty", 0)

    indptr, nbr = _overlap_graph(start, end)
    lo = np.empty(m, dtype=np.int64)
    hi = np.empty(m, dtype=np.int64)
    placed = np.zeros(m, dtype=np.bool_)
    best: tuple[int, int, np.ndarray, np.ndarray, bool, str] | None = None
    for name, order in zip(_ORDERINGS, _orderings(size, start, end)):
        for first_fit in (False, True):
            off = np.zeros(m, dtype=np.int64)
            order = np.ascontiguousarray(order, dtype=np.int64)
            total = int(_place(order, 0, size, off, placed, indptr, nbr, first_fit, lo, hi))
            key = (total, _excess_np(size, off, bound))
            if best is None or key < best[:2]:
                label = f"{name}/{'first' if first_fit else 'best'}-fit"
                best = (key[0], key[1], order.copy(), off, first_fit, label)
            if total == bound:
                break
        if best[0] == bound:
            break

    total, _, order, off, _, label = best
    iters = 0
    if total > bound and max_iters > 0:
        # Climb with first-fit decoding: placing in increasing order of any optimal plan's
        # offsets, first fit reproduces a plan at least as good, so no optimum is out of reach.
        climb_order = order.copy()
        climb_off = off.copy()
        _place(climb_order, 0, size, climb_off, placed, indptr, nbr, True, lo, hi)
        climbed, iters = _improve(climb_order, size, climb_off, placed, indptr, nbr, True, bound,
                                  int(max_iters), int(seed), ANNEAL_T0 * bound, lo, hi)
        if climbed < total:
            total, off = int(climbed), climb_off
        iters = int(iters)
        label += "+climb"
    root_off[r] = off
    return EtmPlan(_expand(inst, root_off), int(total), bound, label, iters)

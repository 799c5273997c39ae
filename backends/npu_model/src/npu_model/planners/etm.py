"""ETM feature-map reuse planner: offsets for every feature map in one FTMP segment.

The problem (dynamic storage allocation on an interval graph): buffer ``i`` has ``sizes[i]``
bytes and is live over the inclusive positions ``[starts[i], ends[i]]`` of the execution order
(produced at ``start``, last read at ``end``). Two buffers whose lifetimes overlap must not share
bytes. A buffer may instead be an alias *member* of an owner (``alias_owner[i] >= 0``): it then
sits at ``alias_offset[i]`` inside its owner (concat inputs in the concat output, split outputs
in the split input, a reshape output at offset 0 of its input). Alias chains and trees are
allowed. Every placed buffer starts on an ``alignment`` boundary (64 bytes on ZG330).

An alias group (a root owner with all its direct and indirect members) is placed as one block of
``align_up(size of the root)`` bytes, live over the union of its members' lifetimes.

- `lower_bound` is the peak, over the execution order, of the bytes of the groups live at once:
  no plan can use less, so a plan that meets it is optimal and the search stops there.
- `plan_etm` packs the groups: greedy by size (TFLite's "greedy by size" offset calculation,
  best fit and first fit) over several orderings, then an annealed local search over the
  placement order (groups that rise above the bound move earlier, their time neighbours later;
  only the suffix after the first change is re-placed).
- `plan_no_reuse` gives every group its own slot (the ``disableEtmOptimize`` layout).
- `instance_from_network` turns an xir network (or view) into the planner's input.

Inputs are checked in layers (shapes and types, then sizes and lifetimes, then the alias
structure); every failure is a `PlanError` (a `ValueError`) naming the buffer at fault. The hot
loops are module-level ``@njit(cache=True)`` functions of plain arrays, so
``NUMBA_DISABLE_JIT=1`` runs them as Python with the same results (the search's random numbers
come from a Park-Miller generator on int64, identical in both modes). See docs/etm-planner.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

__all__ = [
    "AliasError",
    "BufferSpecError",
    "EtmPlan",
    "PlanError",
    "instance_from_network",
    "lower_bound",
    "plan_etm",
    "plan_etm_detailed",
    "plan_no_reuse",
    "random_network_instance",
    "verify_plan",
]

DEFAULT_ALIGNMENT = 64
DEFAULT_MAX_ITERS = 6000
"""Search steps after the greedy passes (each re-places a suffix of the placement order)."""
ANNEAL_T0 = 0.05
"""Starting temperature of the search as a fraction of the bound (linear cooling to 0)."""

_MAX_POSITION = 1 << 62
_MINSTD_M = 2147483647
_MINSTD_A = 48271


# --- errors ------------------------------------------------------------------------------------
class PlanError(ValueError):
    """The planner's input or a plan is invalid (the backend wraps this into an xrt error)."""


class BufferSpecError(PlanError):
    """A buffer's size or lifetime is invalid (negative size, end before start, bad array)."""


class AliasError(PlanError):
    """The alias structure is invalid: unknown owner, cycle, member outside or misaligned."""


# --- result ------------------------------------------------------------------------------------
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


# --- Numba kernels -----------------------------------------------------------------------------
@njit(cache=True)
def _resolve_roots(owner, offset):
    """Root of every buffer and its offset inside the root; third result: a buffer on an alias
    cycle, or -1."""
    n = owner.shape[0]
    root = np.arange(n)
    roff = np.zeros(n, dtype=np.int64)
    state = np.zeros(n, dtype=np.int8)  # 0 new, 1 on the current walk, 2 resolved
    stack = np.empty(n, dtype=np.int64)
    for i in range(n):
        if state[i] == 2:
            continue
        depth = 0
        j = i
        while j >= 0 and state[j] != 2:
            if state[j] == 1:
                return root, roff, j
            state[j] = 1
            stack[depth] = j
            depth += 1
            j = owner[j]
        if j < 0:  # the walk ended at a root
            depth -= 1
            top = stack[depth]
            root[top] = top
            roff[top] = 0
            state[top] = 2
        for k in range(depth - 1, -1, -1):
            v = stack[k]
            o = owner[v]
            root[v] = root[o]
            roff[v] = roff[o] + offset[v]
            state[v] = 2
    return root, roff, -1


@njit(cache=True)
def _group_lifetimes(sizes, starts, ends, root, alignment):
    """Aligned size (0 for members) and union lifetime of every alias group, at its root."""
    n = sizes.shape[0]
    gsize = np.zeros(n, dtype=np.int64)
    gstart = starts.copy()
    gend = ends.copy()
    for i in range(n):
        r = root[i]
        if r == i:
            gsize[i] = (sizes[i] + alignment - 1) // alignment * alignment
        else:
            if starts[i] < gstart[r]:
                gstart[r] = starts[i]
            if ends[i] > gend[r]:
                gend[r] = ends[i]
    return gsize, gstart, gend


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


@njit(cache=True)
def _overlap_graph(start, end):
    """CSR adjacency (indptr, indices) of the interval overlap graph."""
    m = start.shape[0]
    srt = np.argsort(start, kind="mergesort")
    deg = np.zeros(m, dtype=np.int64)
    for p in range(m):
        i = srt[p]
        q = p + 1
        while q < m and start[srt[q]] <= end[i]:
            deg[i] += 1
            deg[srt[q]] += 1
            q += 1
    indptr = np.zeros(m + 1, dtype=np.int64)
    for i in range(m):
        indptr[i + 1] = indptr[i] + deg[i]
    fill = indptr[:-1].copy()
    nbr = np.empty(indptr[m], dtype=np.int64)
    for p in range(m):
        i = srt[p]
        q = p + 1
        while q < m and start[srt[q]] <= end[i]:
            j = srt[q]
            nbr[fill[i]] = j
            fill[i] += 1
            nbr[fill[j]] = i
            fill[j] += 1
            q += 1
    return indptr, nbr


@njit(cache=True)
def _place(order, k0, size, off, placed, indptr, nbr, first_fit, lo, hi):
    """Greedy placement of order[k0:] around the already placed order[:k0]; returns the total.

    Each buffer goes into the lowest (first fit) or the smallest (best fit) gap between the
    placed buffers it overlaps in time, or above all of them when no gap fits."""
    m = order.shape[0]
    for k in range(k0, m):
        placed[order[k]] = False
    for k in range(k0, m):
        i = order[k]
        c = 0
        for p in range(indptr[i], indptr[i + 1]):
            j = nbr[p]
            if placed[j]:
                a = off[j]
                b = a + size[j]
                t = c  # insertion sort by offset: neighbour lists are short
                while t > 0 and lo[t - 1] > a:
                    lo[t] = lo[t - 1]
                    hi[t] = hi[t - 1]
                    t -= 1
                lo[t] = a
                hi[t] = b
                c += 1
        prior_end = 0
        best = -1
        best_gap = 0
        for t in range(c):
            gap = lo[t] - prior_end
            if gap >= size[i]:
                if first_fit:
                    best = prior_end
                    break
                if best < 0 or gap < best_gap:
                    best = prior_end
                    best_gap = gap
            if hi[t] > prior_end:
                prior_end = hi[t]
        if best < 0:
            best = prior_end
        off[i] = best
        placed[i] = True
    total = 0
    for i in range(m):
        if off[i] + size[i] > total:
            total = off[i] + size[i]
    return total


@njit(cache=True)
def _excess(size, off, bound):
    """Bytes that stick out above the bound line, summed over the buffers."""
    e = 0
    for i in range(size.shape[0]):
        t = off[i] + size[i] - bound
        if t > 0:
            e += t
    return e


@njit(cache=True)
def _next_random(state):
    """Park-Miller minimal standard generator (no overflow in int64)."""
    return state * _MINSTD_A % _MINSTD_M


@njit(cache=True)
def _move(order, p, q):
    """Move order[p] to position q, shifting the entries in between by one."""
    c = order[p]
    if q < p:
        for k in range(p, q, -1):
            order[k] = order[k - 1]
    else:
        for k in range(p, q):
            order[k] = order[k + 1]
    order[q] = c


@njit(cache=True)
def _improve(order, size, off, placed, indptr, nbr, first_fit, bound, max_iters, seed, temp0,
             lo, hi):
    """Annealed local search over the placement order; returns the best (total, iterations)
    and leaves the best offsets in `off`.

    A step picks a random buffer c above the bound and either moves it to a random earlier
    position, or moves a random buffer placed before c that overlaps it in time to just after
    c, or (one step in eight) swaps two random positions; then it re-places the suffix from the
    first changed position. A step is kept if neither the total nor, at an equal total, the
    bytes above the bound grew; a worse step is kept with probability exp(-delta / T), T
    cooling linearly from `temp0` to 0. The search stops as soon as the total meets the bound.
    """
    m = order.shape[0]
    total = 0
    for i in range(m):
        if off[i] + size[i] > total:
            total = off[i] + size[i]
    excess = _excess(size, off, bound)
    saved_order = order.copy()
    saved_off = off.copy()
    pos = np.empty(m, dtype=np.int64)
    cand = np.empty(m, dtype=np.int64)
    state = seed % (_MINSTD_M - 1) + 1
    best_total = total
    best_off = off.copy()
    for it in range(max_iters):
        for k in range(m):
            pos[order[k]] = k
        nc = 0
        for i in range(m):
            if off[i] + size[i] > bound:
                cand[nc] = i
                nc += 1
        state = _next_random(state)
        c = cand[state % nc]
        p = pos[c]
        state = _next_random(state)
        kind = state % 8
        q = -1
        if kind < 4 and p > 0:  # c earlier
            state = _next_random(state)
            q = state % p
            _move(order, p, q)
        elif kind < 7:  # a time neighbour placed before c: after c
            nb = 0
            for t in range(indptr[c], indptr[c + 1]):
                if pos[nbr[t]] < p:
                    nb += 1
            if nb > 0:
                state = _next_random(state)
                pick = state % nb
                for t in range(indptr[c], indptr[c + 1]):
                    j = nbr[t]
                    if pos[j] < p:
                        if pick == 0:
                            q = pos[j]
                            _move(order, q, p)
                            break
                        pick -= 1
        if q < 0:  # swap two random positions
            state = _next_random(state)
            a = state % m
            state = _next_random(state)
            b = state % m
            t = order[a]
            order[a] = order[b]
            order[b] = t
            q = min(a, b)
        new_total = _place(order, q, size, off, placed, indptr, nbr, first_fit, lo, hi)
        new_excess = _excess(size, off, bound)
        accept = new_total < total or (new_total == total and new_excess <= excess)
        if not accept and temp0 > 0:
            delta = (new_total - total) + (new_excess - excess) / m
            temp = temp0 * (1.0 - it / max_iters)
            state = _next_random(state)
            if temp > 0 and delta / temp < 30:
                accept = state / _MINSTD_M < np.exp(-delta / temp)
        if accept:
            total = new_total
            excess = new_excess
            for k in range(q, m):
                saved_order[k] = order[k]
                saved_off[order[k]] = off[order[k]]
            if total < best_total:
                best_total = total
                best_off[:] = off
                if total <= bound:
                    return total, it + 1
        else:
            for k in range(q, m):
                order[k] = saved_order[k]
                off[order[k]] = saved_off[order[k]]
                placed[order[k]] = True
    off[:] = best_off
    return best_total, max_iters


@njit(cache=True)
def _conflicts(offsets, sizes, starts, ends, root):
    """First pair (i, j) of buffers from different alias groups that overlap in time and in
    bytes, or (-1, -1)."""
    n = sizes.shape[0]
    srt = np.argsort(starts, kind="mergesort")
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


# --- input checks ------------------------------------------------------------------------------
def _name(i: int, v_ids: np.ndarray | None) -> str:
    return f"buffer {i}" + (f" (v_id {int(v_ids[i])})" if v_ids is not None else "")


def _int_array(x: Any, what: str, n: int | None) -> np.ndarray:
    arr = np.asarray(x)
    if arr.ndim != 1:
        raise BufferSpecError(f"{what} must be a 1-D array, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        if np.issubdtype(arr.dtype, np.floating) and np.all(np.isfinite(arr)) and np.all(
                arr == np.round(arr)):
            arr = arr.astype(np.int64)
        else:
            raise BufferSpecError(f"{what} must hold integers, got dtype {arr.dtype}")
    if n is not None and arr.shape[0] != n:
        raise BufferSpecError(f"{what} has {arr.shape[0]} entries, sizes has {n}")
    if arr.dtype == np.uint64 and arr.size and arr.max() > np.iinfo(np.int64).max:
        raise BufferSpecError(f"{what} holds values beyond int64")
    return np.ascontiguousarray(arr, dtype=np.int64)


@dataclass(frozen=True)
class _Instance:
    sizes: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    owner: np.ndarray
    offset: np.ndarray
    alignment: int
    root: np.ndarray
    root_offset: np.ndarray
    gsize: np.ndarray
    gstart: np.ndarray
    gend: np.ndarray
    v_ids: np.ndarray | None


def _check(sizes: Any, starts: Any, ends: Any, alias_owner: Any, alias_offset: Any,
           alignment: int, v_ids: Any) -> _Instance:
    """Layered checks: arrays and types, then sizes and lifetimes, then the alias structure."""
    if isinstance(alignment, bool) or not isinstance(alignment, (int, np.integer)) or \
            alignment < 1:
        raise BufferSpecError(f"alignment must be a positive integer, not {alignment!r}")
    alignment = int(alignment)
    sz = _int_array(sizes, "sizes", None)
    n = sz.shape[0]
    st = _int_array(starts, "starts", n)
    en = _int_array(ends, "ends", n)
    ids = None if v_ids is None else np.asarray(v_ids)
    if ids is not None and ids.shape != (n,):
        raise BufferSpecError(f"v_ids has shape {ids.shape}, sizes has {n} entries")
    owner = (np.full(n, -1, dtype=np.int64) if alias_owner is None
             else _int_array(alias_owner, "alias_owner", n))
    offset = (np.zeros(n, dtype=np.int64) if alias_offset is None
              else _int_array(alias_offset, "alias_offset", n))

    bad = np.flatnonzero(sz < 0)
    if bad.size:
        i = int(bad[0])
        raise BufferSpecError(f"{_name(i, ids)} has a negative size {int(sz[i])}")
    bad = np.flatnonzero(en < st)
    if bad.size:
        i = int(bad[0])
        raise BufferSpecError(f"{_name(i, ids)} ends at position {int(en[i])} before it starts "
                              f"at {int(st[i])}: lifetimes are [start, end], inclusive")
    bad = np.flatnonzero((np.abs(st) >= _MAX_POSITION) | (np.abs(en) >= _MAX_POSITION))
    if bad.size:
        raise BufferSpecError(f"{_name(int(bad[0]), ids)} has a position beyond +-2**62")
    if n and int(sz.max()) >= _MAX_POSITION // max(n, 1):
        raise BufferSpecError(f"sizes up to {int(sz.max())} bytes overflow the segment arithmetic")

    bad = np.flatnonzero((owner < -1) | (owner >= n))
    if bad.size:
        i = int(bad[0])
        raise AliasError(f"{_name(i, ids)} names alias owner {int(owner[i])}, not a buffer "
                         f"index in 0..{n - 1} (use -1 for no owner)")
    bad = np.flatnonzero(owner == np.arange(n))
    if bad.size:
        raise AliasError(f"{_name(int(bad[0]), ids)} is its own alias owner")
    member = owner >= 0
    bad = np.flatnonzero(member & (offset < 0))
    if bad.size:
        i = int(bad[0])
        raise AliasError(f"{_name(i, ids)} has a negative offset {int(offset[i])} in its owner")
    bad = np.flatnonzero(member & (offset % alignment != 0))
    if bad.size:
        i = int(bad[0])
        raise AliasError(f"{_name(i, ids)} sits at offset {int(offset[i])} in its owner, not a "
                         f"multiple of the {alignment}-byte alignment")
    safe_owner = np.where(member, owner, 0)
    bad = np.flatnonzero(member & (offset + sz > sz[safe_owner]))
    if bad.size:
        i = int(bad[0])
        o = int(owner[i])
        raise AliasError(f"{_name(i, ids)} ({int(sz[i])} bytes at offset {int(offset[i])}) does "
                         f"not fit in its owner {_name(o, ids)} of {int(sz[o])} bytes")
    root, roff, cyc = _resolve_roots(owner, np.where(member, offset, 0))
    if cyc >= 0:
        raise AliasError(f"{_name(int(cyc), ids)} is on an alias cycle (owner of its own owner)")
    gsize, gstart, gend = _group_lifetimes(sz, st, en, root, alignment)
    return _Instance(sz, st, en, owner, offset, alignment, root, roff, gsize, gstart, gend, ids)


def _roots(inst: _Instance) -> np.ndarray:
    """Indices of the groups that take space (roots of positive aligned size)."""
    return np.flatnonzero((inst.root == np.arange(inst.sizes.shape[0])) & (inst.gsize > 0))


def _expand(inst: _Instance, root_offsets: np.ndarray) -> np.ndarray:
    """Offsets of every buffer from the offsets of the roots (members: root + offset)."""
    return root_offsets[inst.root] + inst.root_offset


# --- public API --------------------------------------------------------------------------------
def lower_bound(sizes: Any, starts: Any, ends: Any, alias_owner: Any = None,
                alias_offset: Any = None, alignment: int = DEFAULT_ALIGNMENT,
                v_ids: Any = None) -> int:
    """Peak bytes live at once over the execution order, alias groups merged into their root
    (union lifetime, root size aligned up): no valid plan is smaller."""
    inst = _check(sizes, starts, ends, alias_owner, alias_offset, alignment, v_ids)
    r = _roots(inst)
    return int(_peak(inst.gsize[r], inst.gstart[r], inst.gend[r]))


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


_ORDERINGS = ("size", "area", "length", "start")


def _orderings(size: np.ndarray, start: np.ndarray, end: np.ndarray) -> list[np.ndarray]:
    """Placement orders to try, each a total order (ties broken by start, then index)."""
    length = end - start + 1
    idx = np.arange(size.shape[0])
    area = size.astype(np.float64) * length
    return [
        np.lexsort((idx, start, -length, -size)),  # greedy by size (TFLite)
        np.lexsort((idx, start, -size, -area)),    # size x lifetime
        np.lexsort((idx, start, -size, -length)),  # longest lifetime first
        np.lexsort((idx, -size, start)),           # execution order, large first
    ]


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
            key = (total, int(_excess(size, off, bound)))
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
    i, j = _conflicts(off, inst.gsize, inst.gstart, inst.gend, inst.root)
    if i >= 0:
        raise PlanError(f"{_name(int(i), ids)} and {_name(int(j), ids)} are live at the same "
                        f"time and share bytes")


# --- instances ---------------------------------------------------------------------------------
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


def random_network_instance(n_ops: int, seed: int = 0, *, alias: bool = True,
                            irregular: bool = False,
                            alignment: int = DEFAULT_ALIGNMENT) -> dict[str, Any]:
    """A synthetic network-shaped instance for tests and benchmarks.

    Ops in execution order: each reads one to three recent values (skips reach back a few ops
    now and then) and writes one value; with `alias`, some ops are concats (inputs aliased into
    the output), reshapes (output at offset 0 of the input) or splits (outputs aliased into the
    input). Feature-map sizes follow resolution stages like a CNN's, in multiples of
    `alignment`. With `irregular`, sizes are uniform in 1..4095 units instead and three ops in
    ten also read a value up to 40 values back: a stress family, harder than real networks.
    The last value is the network output, live to the end.
    """
    if n_ops < 2:
        raise BufferSpecError(f"a random network needs at least 2 ops, not {n_ops}")
    rng = np.random.default_rng(seed)
    sizes: list[int] = []
    starts: list[int] = []
    ends: list[int] = []
    owner: list[int] = []
    offset: list[int] = []

    def new(size: int, pos: int, own: int = -1, off: int = 0) -> int:
        sizes.append(int(size))
        starts.append(pos)
        ends.append(pos)
        owner.append(own)
        offset.append(off)
        return len(sizes) - 1

    def read(k: int, pos: int) -> None:
        ends[k] = max(ends[k], pos)

    stage_units = int(rng.integers(256, 4096))  # units of `alignment` at full resolution
    live: list[int] = [new(stage_units * alignment, 0)]
    for pos in range(1, n_ops - 1):
        u = rng.random()
        if u < 0.03:  # a new resolution stage: down, or (FPN-like) up now and then
            stage_units = max(1, stage_units // int(rng.choice([2, 4])))
        elif u < 0.04:
            stage_units = min(8192, stage_units * 2)
        units = max(1, int(stage_units * rng.choice([0.25, 0.5, 1.0, 1.0, 2.0, 3.0])))
        back = min(len(live), 1 + int(rng.geometric(0.35)))
        if irregular:
            units = int(rng.integers(1, 4096))
            if rng.random() < 0.3:
                back = min(len(live), int(rng.integers(2, 41)))
        recent = live[-back:]
        u = rng.random()
        if alias and u < 0.08 and len(recent) >= 2:  # concat of 2-3 fresh-ish values
            parts = [k for k in dict.fromkeys(recent[-3:]) if owner[k] < 0]
            if len(parts) >= 2:
                out = new(sum(sizes[k] for k in parts), pos)
                acc = 0
                for k in parts:
                    read(k, pos)
                    owner[k], offset[k] = out, acc
                    acc += sizes[k]
                live.append(out)
                continue
        if alias and u < 0.14:  # reshape of the newest value
            k = live[-1]
            read(k, pos)
            live.append(new(sizes[k], pos, k, 0))
            continue
        if alias and u < 0.18:  # split of the newest value into 2-3 pieces
            k = live[-1]
            read(k, pos)
            pieces = int(rng.integers(2, 4))
            units_k = sizes[k] // alignment
            if units_k >= pieces:
                cuts = np.sort(rng.choice(np.arange(1, units_k), pieces - 1, replace=False))
                bounds = [0, *cuts.tolist(), units_k]
                for a, b in zip(bounds[:-1], bounds[1:]):
                    live.append(new((b - a) * alignment, pos, k, a * alignment))
                continue
        n_in = 1 + int(rng.random() < 0.3) + int(rng.random() < 0.1)
        srcs = {live[-1]} | {int(rng.choice(recent)) for _ in range(n_in - 1)}
        for k in srcs:
            read(k, pos)
        live.append(new(units * alignment, pos))
    out = live[-1]
    read(out, n_ops - 1)
    ends[out] = n_ops - 1
    return {
        "sizes": np.asarray(sizes, dtype=np.int64),
        "starts": np.asarray(starts, dtype=np.int64),
        "ends": np.asarray(ends, dtype=np.int64),
        "alias_owner": np.asarray(owner, dtype=np.int64),
        "alias_offset": np.asarray(offset, dtype=np.int64),
        "alignment": int(alignment),
    }

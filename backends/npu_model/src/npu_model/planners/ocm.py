"""OCM planners: which feature maps live in on-chip memory, and at which OCM address.

The problem (docs/ocm-planner.md has the long story). A network's feature maps are buffers with a
size, a lifetime ``[start, end]`` (positions in the execution order, both ends inclusive) and a
score: what keeping the map in OCM instead of ETM saves. A plan picks a set of *resident* buffers
and gives each an OCM offset such that

- two resident buffers whose lifetimes intersect do not intersect in address;
- every resident buffer lies in ``[0, capacity)`` (so the live bytes never exceed the OCM);
- offsets and sizes are multiples of ``alignment``.

Lifetimes are closed intervals, so a layer's inputs and its output are live together at the
layer's position: a layer whose input and output are both resident has them side by side in OCM.
That is the "a layer needs its operands whole" constraint, with no extra rule. A buffer larger
than the OCM, or with no positive score, is never resident.

The options mirror the vendor's `OcmOpt`:

- OPTION1, global scoring: rank every buffer by several keys (score density first), place
  greedily with best-fit offsets (as TFLite's arena planner does), then a local search that
  inserts a missing buffer by ejecting lower-scored ones at the best address and refilling; the
  best of the keys is repaired (repack from scratch to admit a missing buffer) and improved by
  an iterated local search (deterministic, `search_iters` rounds);
- OPTION2, local-optimal dynamic programming: walk the buffers in execution order keeping the top
  M partial plans (states: resident set and offsets of the buffers still live); skipped (empty
  plan, flagged) for networks over 500 ops, as the vendor does;
- OPTION3, sequential evict-by-score: walk the buffers in order; when a buffer does not fit and
  scores higher, evict the first lower-scored live residents until it fits (never trading away
  more score than it brings);
- BEST_SCORE runs the three and keeps the best (ties go to the lower option number).

Every option ends with the same refill pass (a buffer that still fits somewhere is added), and
every plan is checked by `check_plan` before it is returned. Hot loops are module-level
``@njit(cache=True)`` kernels taking arrays only; ``NUMBA_DISABLE_JIT=1`` runs them as Python.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numba import njit

log = logging.getLogger(__name__)

__all__ = ["OcmOption", "OcmInstance", "OcmPlan", "OcmPlanError", "plan_ocm", "check_plan",
           "instance_from_network", "selection_optimum", "address_optimum",
           "OPTION2_MAX_OPS", "DEFAULT_ALIAS_OPS"]

#: the vendor skips OPTION2 (local dynamic programming) above this many ops
OPTION2_MAX_OPS = 500
#: ops that move no data on the NPU: their values share one buffer (a Reshape is a new view of
#: its input; Concat inputs are written as channel slices of the Concat output, with a pitch;
#: Split outputs are read as channel slices of the Split input)
DEFAULT_ALIAS_OPS = ("Reshape", "Concat", "Split")


class OcmOption(enum.IntEnum):
    """OCM planning option; values equal `zg330backend.OcmOpt`'s, so either may be passed."""

    NONE = 0
    OPTION1 = 1
    OPTION2 = 2
    OPTION3 = 3
    BEST_SCORE = -1


class OcmPlanError(ValueError):
    """An OCM instance or plan breaks an invariant (the message names the buffers at fault)."""


# =============================================================================================
# Numba kernels. Buffers are indexed 0..n-1; `offsets[i] = -1` means not resident. `adj_ptr`,
# `adj_idx` list, for each buffer, the other buffers whose lifetimes intersect its own (CSR).
# =============================================================================================

@njit(cache=True)
def _conflicts(starts, ends):
    """CSR lists of lifetime-intersecting pairs (i != j)."""
    n = starts.shape[0]
    cnt = np.zeros(n + 1, np.int64)
    for i in range(n):
        for j in range(n):
            if i != j and starts[i] <= ends[j] and starts[j] <= ends[i]:
                cnt[i + 1] += 1
    for i in range(n):
        cnt[i + 1] += cnt[i]
    idx = np.empty(cnt[n], np.int64)
    k = 0
    for i in range(n):
        for j in range(n):
            if i != j and starts[i] <= ends[j] and starts[j] <= ends[i]:
                idx[k] = j
                k += 1
    return cnt, idx


@njit(cache=True)
def _fit(u, sizes, offsets, adj_ptr, adj_idx, capacity, mode):
    """An offset for buffer `u` among the placed buffers that are live with it, or -1.

    mode 0: best fit (the smallest gap that holds it, lowest address on ties; TFLite's arena
    planner rule); mode 1: the highest address that holds it (packs from the top)."""
    a, b = adj_ptr[u], adj_ptr[u + 1]
    lo = np.empty(b - a, np.int64)
    hi = np.empty(b - a, np.int64)
    k = 0
    for t in range(a, b):
        j = adj_idx[t]
        if offsets[j] >= 0:
            lo[k] = offsets[j]
            hi[k] = offsets[j] + sizes[j]
            k += 1
    order = np.argsort(lo[:k], kind="mergesort")
    s = sizes[u]
    best = -1
    best_gap = capacity + 1
    cur = 0
    for t in range(k + 1):
        if t < k:
            nxt = lo[order[t]]
        else:
            nxt = capacity
        if nxt > cur:
            gap = nxt - cur
            if gap >= s:
                if mode == 0:
                    if gap < best_gap:
                        best_gap = gap
                        best = cur
                else:
                    best = nxt - s
        if t < k and hi[order[t]] > cur:
            cur = hi[order[t]]
    return best


@njit(cache=True)
def _refill(order, sizes, eligible, offsets, adj_ptr, adj_idx, capacity):
    """Greedy pass: every eligible non-resident buffer, in `order`, gets a best-fit offset if
    one exists. Returns the number added."""
    added = 0
    for t in range(order.shape[0]):
        u = order[t]
        if offsets[u] < 0 and eligible[u]:
            o = _fit(u, sizes, offsets, adj_ptr, adj_idx, capacity, 0)
            if o >= 0:
                offsets[u] = o
                added += 1
    return added


@njit(cache=True)
def _total(scores, offsets):
    s = 0.0
    for i in range(offsets.shape[0]):
        if offsets[i] >= 0:
            s += scores[i]
    return s


@njit(cache=True)
def _eject_search(order, sizes, scores, eligible, offsets, adj_ptr, adj_idx, capacity,
                  max_moves):
    """Local search: insert a missing buffer at the address where the live residents it
    overlaps score least, if they score less than it; evict those, refill, repeat until no
    move gains. Every move strictly raises the total, so it ends. Returns the moves made."""
    moves = 0
    improved = True
    while improved and moves < max_moves:
        improved = False
        for t in range(order.shape[0]):
            u = order[t]
            if offsets[u] >= 0 or not eligible[u]:
                continue
            su = sizes[u]
            a, b = adj_ptr[u], adj_ptr[u + 1]
            ncand = 2
            for q in range(a, b):
                if offsets[adj_idx[q]] >= 0:
                    ncand += 2
            cand = np.empty(ncand, np.int64)
            cand[0] = 0
            cand[1] = capacity - su
            c = 2
            for q in range(a, b):
                j = adj_idx[q]
                if offsets[j] >= 0:
                    cand[c] = offsets[j] + sizes[j]
                    cand[c + 1] = offsets[j] - su
                    c += 2
            best_gain = 0.0
            best_o = -1
            for ci in range(ncand):
                o = cand[ci]
                if o < 0 or o + su > capacity:
                    continue
                loss = 0.0
                for q in range(a, b):
                    j = adj_idx[q]
                    oj = offsets[j]
                    if oj >= 0 and oj < o + su and oj + sizes[j] > o:
                        loss += scores[j]
                        if loss >= scores[u]:
                            break
                gain = scores[u] - loss
                if gain > best_gain * (1.0 + 1e-12) + 1e-9:
                    best_gain = gain
                    best_o = o
            if best_o >= 0:
                for q in range(a, b):
                    j = adj_idx[q]
                    oj = offsets[j]
                    if oj >= 0 and oj < best_o + su and oj + sizes[j] > best_o:
                        offsets[j] = -1
                offsets[u] = best_o
                _refill(order, sizes, eligible, offsets, adj_ptr, adj_idx, capacity)
                moves += 1
                improved = True
                if moves >= max_moves:
                    break
    return moves


@njit(cache=True)
def _repack_search(order, pack_orders, sizes, scores, eligible, offsets, adj_ptr, adj_idx,
                   capacity):
    """Repair pass: a missing buffer is added if the residents plus it can be packed again from
    scratch (best fit, in one of the `pack_orders`: start, size, lifetime). Finds layouts the
    incremental passes cannot reach, where making room needs moving many residents a little.
    Returns the buffers added."""
    n = sizes.shape[0]
    tmp = np.empty(n, np.int64)
    added = 0
    for t in range(order.shape[0]):
        u = order[t]
        if offsets[u] >= 0 or not eligible[u]:
            continue
        if _fit(u, sizes, offsets, adj_ptr, adj_idx, capacity, 0) >= 0:
            offsets[u] = _fit(u, sizes, offsets, adj_ptr, adj_idx, capacity, 0)
            added += 1
            continue
        for r in range(pack_orders.shape[0]):
            for i in range(n):
                tmp[i] = -1
            ok = True
            for q in range(n):
                i = pack_orders[r, q]
                if offsets[i] >= 0 or i == u:
                    o = _fit(i, sizes, tmp, adj_ptr, adj_idx, capacity, 0)
                    if o < 0:
                        ok = False
                        break
                    tmp[i] = o
            if ok:
                for i in range(n):
                    offsets[i] = tmp[i]
                added += 1
                break
    return added


@njit(cache=True)
def _rand(x):
    """Park-Miller style LCG step in [0, 2^31): the same sequence with and without the JIT."""
    return (x * 1103515245 + 12345) % 2147483648


@njit(cache=True)
def _perturb_search(order, sizes, scores, starts, ends, eligible, offsets, adj_ptr, adj_idx,
                    capacity, iters, seed, max_moves):
    """Iterated local search from `offsets` (modified in place to the best plan found): drop
    part of the residents live with a random buffer, refill in the key order or a random order,
    eject-search; keep the trial if it scores at least as well (plateaus are walked)."""
    n = sizes.shape[0]
    cand = np.empty(n, np.int64)
    nc = 0
    for i in range(n):
        if eligible[i]:
            cand[nc] = i
            nc += 1
    if nc == 0 or iters <= 0:
        return 0
    cur = offsets.copy()
    cur_s = _total(scores, cur)
    best_s = cur_s
    trial = cur.copy()
    perm = order.copy()
    x = (seed % 2147483647) + 1
    for _ in range(iters):
        for i in range(n):
            trial[i] = cur[i]
        x = _rand(x)
        p = cand[x % nc]
        x = _rand(x)
        keep_pct = x % 60  # drop each overlapping resident with probability 40..100 %
        a, b = adj_ptr[p], adj_ptr[p + 1]
        for q in range(a, b):
            j = adj_idx[q]
            if trial[j] >= 0:
                x = _rand(x)
                if x % 100 >= keep_pct:
                    trial[j] = -1
        if trial[p] >= 0:
            trial[p] = -1
        x = _rand(x)
        if x % 2 == 0:
            for i in range(n):
                perm[i] = order[i]
        else:
            for i in range(n):
                perm[i] = order[i]
            for i in range(n - 1, 0, -1):  # Fisher-Yates
                x = _rand(x)
                k = x % (i + 1)
                tmp = perm[i]
                perm[i] = perm[k]
                perm[k] = tmp
        # the pivot first: the point of the move is to try it with a different neighbourhood
        offs_p = _fit(p, sizes, trial, adj_ptr, adj_idx, capacity, 0)
        if offs_p >= 0:
            trial[p] = offs_p
        _refill(perm, sizes, eligible, trial, adj_ptr, adj_idx, capacity)
        _eject_search(perm, sizes, scores, eligible, trial, adj_ptr, adj_idx, capacity,
                      max_moves)
        s = _total(scores, trial)
        if s >= cur_s * (1.0 - 1e-12):
            for i in range(n):
                cur[i] = trial[i]
            cur_s = s
            if s > best_s * (1.0 + 1e-12):
                best_s = s
                for i in range(n):
                    offsets[i] = cur[i]
    return 0


@njit(cache=True)
def _evict_walk(order, sizes, scores, eligible, offsets, adj_ptr, adj_idx, capacity):
    """OPTION3: walk `order`; a buffer that does not fit evicts the first (in walk order)
    live residents that score lower than it, one at a time, until it fits. The eviction is
    rolled back if it would not fit after all, or would cost as much score as it brings."""
    n = sizes.shape[0]
    rank = np.empty(n, np.int64)
    for t in range(n):
        rank[order[t]] = t
    for t in range(n):
        u = order[t]
        if not eligible[u]:
            continue
        o = _fit(u, sizes, offsets, adj_ptr, adj_idx, capacity, 0)
        if o >= 0:
            offsets[u] = o
            continue
        a, b = adj_ptr[u], adj_ptr[u + 1]
        # live residents scoring lower, in walk order
        m = 0
        for q in range(a, b):
            j = adj_idx[q]
            if offsets[j] >= 0 and scores[j] < scores[u]:
                m += 1
        if m == 0:
            continue
        victims = np.empty(m, np.int64)
        keys = np.empty(m, np.int64)
        m = 0
        for q in range(a, b):
            j = adj_idx[q]
            if offsets[j] >= 0 and scores[j] < scores[u]:
                victims[m] = j
                keys[m] = rank[j]
                m += 1
        victims = victims[np.argsort(keys, kind="mergesort")]
        saved = np.empty(m, np.int64)
        lost = 0.0
        placed = -1
        k = 0
        while k < m:
            j = victims[k]
            saved[k] = offsets[j]
            offsets[j] = -1
            lost += scores[j]
            k += 1
            if lost >= scores[u]:
                break
            o = _fit(u, sizes, offsets, adj_ptr, adj_idx, capacity, 0)
            if o >= 0:
                placed = o
                break
        if placed >= 0:
            offsets[u] = placed
        else:
            for q in range(k):
                offsets[victims[q]] = saved[q]
    return 0


@njit(cache=True)
def _beam(order, sizes, scores, starts, ends, eligible, adj_ptr, adj_idx, capacity, top_m):
    """OPTION2: dynamic programming along the execution order keeping the top `top_m` states.

    A state is the offset vector of the buffers decided so far. At each buffer a state branches
    into: leave it in ETM, place it best-fit, place it at the highest address. Children are
    ranked by score (ties: lower peak address of the buffers still live), states equal on the
    buffers still live are merged (the better-scored survives), and the top M are kept."""
    n = sizes.shape[0]
    cur = np.full((top_m, n), -1, np.int64)
    cur_score = np.zeros(top_m)
    ncur = 1
    nxt = np.full((top_m, n), -1, np.int64)
    nxt_score = np.zeros(top_m)
    ch_parent = np.empty(3 * top_m, np.int64)
    ch_off = np.empty(3 * top_m, np.int64)
    ch_score = np.empty(3 * top_m)
    ch_peak = np.empty(3 * top_m, np.int64)
    live = np.empty(n, np.int64)
    for t in range(order.shape[0]):
        u = order[t]
        if not eligible[u]:
            continue
        # buffers decided so far that are still live at starts[u] (the part the future sees)
        nl = 0
        for q in range(t):
            j = order[q]
            if eligible[j] and ends[j] >= starts[u]:
                live[nl] = j
                nl += 1
        nch = 0
        for p in range(ncur):
            peak = 0
            for q in range(nl):
                j = live[q]
                if cur[p, j] >= 0 and cur[p, j] + sizes[j] > peak:
                    peak = cur[p, j] + sizes[j]
            ch_parent[nch] = p
            ch_off[nch] = -1
            ch_score[nch] = cur_score[p]
            ch_peak[nch] = peak
            nch += 1
            o0 = _fit(u, sizes, cur[p], adj_ptr, adj_idx, capacity, 0)
            if o0 >= 0:
                ch_parent[nch] = p
                ch_off[nch] = o0
                ch_score[nch] = cur_score[p] + scores[u]
                ch_peak[nch] = max(peak, o0 + sizes[u])
                nch += 1
                o1 = _fit(u, sizes, cur[p], adj_ptr, adj_idx, capacity, 1)
                if o1 >= 0 and o1 != o0:
                    ch_parent[nch] = p
                    ch_off[nch] = o1
                    ch_score[nch] = cur_score[p] + scores[u]
                    ch_peak[nch] = max(peak, o1 + sizes[u])
                    nch += 1
        # rank: score descending, then peak ascending (stable two-pass sort)
        o_peak = np.argsort(ch_peak[:nch], kind="mergesort")
        neg = np.empty(nch)
        for q in range(nch):
            neg[q] = -ch_score[o_peak[q]]
        rank = o_peak[np.argsort(neg, kind="mergesort")]
        nn = 0
        for q in range(nch):
            c = rank[q]
            p = ch_parent[c]
            # merge with an already kept state equal on the live buffers and on u
            dup = False
            for r in range(nn):
                if nxt[r, u] != ch_off[c]:
                    continue
                same = True
                for z in range(nl):
                    j = live[z]
                    if nxt[r, j] != cur[p, j]:
                        same = False
                        break
                if same:
                    dup = True
                    break
            if dup:
                continue
            for j in range(n):
                nxt[nn, j] = cur[p, j]
            nxt[nn, u] = ch_off[c]
            nxt_score[nn] = ch_score[c]
            nn += 1
            if nn == top_m:
                break
        cur, nxt = nxt, cur
        cur_score, nxt_score = nxt_score, cur_score
        ncur = nn
    best = 0
    for p in range(1, ncur):
        if cur_score[p] > cur_score[best]:
            best = p
    return cur[best].copy()


# =============================================================================================
# Python API
# =============================================================================================

@dataclass
class OcmPlan:
    """A planner's answer. `offsets[i]` is buffer i's OCM offset, -1 when it stays in ETM."""

    resident: np.ndarray
    offsets: np.ndarray
    score: float
    option_used: OcmOption
    per_option_scores: dict[OcmOption, float | None] = field(default_factory=dict)
    skipped: tuple[OcmOption, ...] = ()
    capacity: int = 0
    #: highest OCM byte any resident buffer reaches
    footprint: int = 0


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

    def plan(self, capacity: int, option: Any = OcmOption.BEST_SCORE, **kw: Any) -> OcmPlan:
        return plan_ocm(self.sizes, self.starts, self.ends, self.scores, capacity, option,
                        num_ops=self.num_ops, **kw)


def _as_option(option: Any) -> OcmOption:
    if isinstance(option, str):
        key = option.upper()
        if key == "NONE" or key in OcmOption.__members__:
            return OcmOption[key]
        raise OcmPlanError(f"unknown OCM option {option!r}; choose one of "
                           f"{', '.join(OcmOption.__members__)}")
    try:
        return OcmOption(int(option))
    except (TypeError, ValueError):
        raise OcmPlanError(f"unknown OCM option {option!r}; choose one of "
                           f"{', '.join(OcmOption.__members__)}") from None


def _prepare(sizes, starts, ends, scores, capacity, alignment):
    sizes = np.asarray(sizes, dtype=np.int64)
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    scores = np.asarray(scores, dtype=np.float64)
    n = sizes.shape[0]
    if not (starts.shape == ends.shape == scores.shape == (n,)) or sizes.ndim != 1:
        raise OcmPlanError(f"sizes, starts, ends and scores must be 1-D of one length; got "
                           f"{sizes.shape}, {starts.shape}, {ends.shape}, {scores.shape}")
    if alignment < 1:
        raise OcmPlanError(f"alignment must be >= 1, not {alignment}")
    if capacity < 0:
        raise OcmPlanError(f"capacity must be >= 0, not {capacity}")
    bad = np.flatnonzero(ends < starts)
    if bad.size:
        raise OcmPlanError(f"buffers {bad[:8].tolist()} end before they start")
    if (sizes < 0).any():
        raise OcmPlanError(f"buffers {np.flatnonzero(sizes < 0)[:8].tolist()} have negative size")
    if not np.isfinite(scores).all():
        raise OcmPlanError("scores must be finite")
    sizes = -(-sizes // alignment) * alignment
    cap = int(capacity) // alignment * alignment
    eligible = (sizes > 0) & (sizes <= cap) & (scores > 0)
    return sizes, starts, ends, scores, cap, eligible


def _orders(sizes, starts, ends, scores):
    """The ranking keys of OPTION1 (each a permutation, best first)."""
    n = sizes.shape[0]
    idx = np.arange(n)
    span = (ends - starts + 1).astype(np.float64)
    sz = np.maximum(sizes, 1).astype(np.float64)
    keys = [
        scores / (sz * span),   # score per byte-step of OCM "area": the global score
        scores / sz,            # score per byte
        scores,                 # raw score
        scores / np.sqrt(sz * span),
    ]
    out = []
    for k in keys:
        # descending key, ties: earlier start, then index (deterministic)
        out.append(np.lexsort((idx, starts, -k)).astype(np.int64))
    return out


def _option1(sizes, starts, ends, scores, eligible, adj_ptr, adj_idx, cap, max_moves, iters,
             seed):
    best = None
    best_score = -1.0
    best_order = None
    for order in _orders(sizes, starts, ends, scores):
        off = np.full(sizes.shape[0], -1, np.int64)
        _refill(order, sizes, eligible, off, adj_ptr, adj_idx, cap)
        _eject_search(order, sizes, scores, eligible, off, adj_ptr, adj_idx, cap, max_moves)
        s = _total(scores, off)
        if s > best_score:
            best, best_score, best_order = off, s, order
    packs = _pack_orders(sizes, starts, ends)
    _repack_search(best_order, packs, sizes, scores, eligible, best, adj_ptr, adj_idx, cap)
    _perturb_search(best_order, sizes, scores, starts, ends, eligible, best, adj_ptr, adj_idx,
                    cap, iters, seed, max_moves)
    _repack_search(best_order, packs, sizes, scores, eligible, best, adj_ptr, adj_idx, cap)
    return best


def _pack_orders(sizes, starts, ends):
    """Orders for packing a chosen set from scratch: by start, by size, by lifetime."""
    n = sizes.shape[0]
    idx = np.arange(n)
    span = ends - starts
    return np.stack([np.lexsort((idx, ends, starts)), np.lexsort((idx, starts, -sizes)),
                     np.lexsort((idx, -sizes, -span))]).astype(np.int64)


def _walk_order(starts, ends):
    n = starts.shape[0]
    return np.lexsort((np.arange(n), ends, starts)).astype(np.int64)


def _option2(sizes, starts, ends, scores, eligible, adj_ptr, adj_idx, cap, top_m):
    order = _walk_order(starts, ends)
    off = _beam(order, sizes, scores, starts, ends, eligible, adj_ptr, adj_idx, cap,
                max(1, int(top_m)))
    _refill(order, sizes, eligible, off, adj_ptr, adj_idx, cap)
    return off


def _option3(sizes, starts, ends, scores, eligible, adj_ptr, adj_idx, cap):
    order = _walk_order(starts, ends)
    off = np.full(sizes.shape[0], -1, np.int64)
    _evict_walk(order, sizes, scores, eligible, off, adj_ptr, adj_idx, cap)
    _refill(order, sizes, eligible, off, adj_ptr, adj_idx, cap)
    return off


def plan_ocm(sizes: Sequence[int] | np.ndarray, starts: Sequence[int] | np.ndarray,
             ends: Sequence[int] | np.ndarray, scores: Sequence[float] | np.ndarray,
             capacity: int, option: Any = OcmOption.BEST_SCORE, *, top_m: int = 128,
             alignment: int = 64, num_ops: int | None = None, search_iters: int = 1000,
             seed: int = 0, max_moves: int = 10_000) -> OcmPlan:
    """Plan which buffers live in OCM and where.

    `sizes` are rounded up and `capacity` down to `alignment`; lifetimes are closed intervals of
    op positions; `scores` are what residency saves (any unit, additive). `option` is an
    `OcmOption` (or `zg330backend.OcmOpt`, its int value, or its name). OPTION2 is skipped for
    networks over `OPTION2_MAX_OPS` ops (`num_ops`, default the last end + 1): alone it returns
    an empty plan with `skipped=(OPTION2,)`, under BEST_SCORE it is left out."""
    opt = _as_option(option)
    sizes, starts, ends, scores, cap, eligible = _prepare(sizes, starts, ends, scores, capacity,
                                                          alignment)
    n = sizes.shape[0]
    if num_ops is None:
        num_ops = int(ends.max()) + 1 if n else 0
    empty = np.full(n, -1, np.int64)
    if opt == OcmOption.NONE:
        return _finish(empty, sizes, starts, ends, scores, cap, opt, {}, ())
    adj_ptr, adj_idx = _conflicts(starts, ends)
    wanted = ([OcmOption.OPTION1, OcmOption.OPTION2, OcmOption.OPTION3]
              if opt == OcmOption.BEST_SCORE else [opt])
    results: dict[OcmOption, np.ndarray] = {}
    per: dict[OcmOption, float | None] = {}
    skipped: list[OcmOption] = []
    for o in wanted:
        if o == OcmOption.OPTION1:
            off = _option1(sizes, starts, ends, scores, eligible, adj_ptr, adj_idx, cap,
                           max_moves, search_iters, seed)
        elif o == OcmOption.OPTION2:
            if num_ops > OPTION2_MAX_OPS:
                log.info("OCM OPTION2 skipped: %d ops > %d", num_ops, OPTION2_MAX_OPS)
                skipped.append(o)
                per[o] = None
                continue
            off = _option2(sizes, starts, ends, scores, eligible, adj_ptr, adj_idx, cap, top_m)
        else:
            off = _option3(sizes, starts, ends, scores, eligible, adj_ptr, adj_idx, cap)
        results[o] = off
        per[o] = float(_total(scores, off))
    if not results:  # OPTION2 alone, skipped
        return _finish(empty, sizes, starts, ends, scores, cap, opt, per, tuple(skipped))
    winner = max(results, key=lambda o: (per[o], -int(o)))
    off = results[winner]
    if opt == OcmOption.BEST_SCORE and not (off >= 0).any():
        winner = OcmOption.NONE  # nothing fits: BEST_SCORE resolves to "OCM off"
    return _finish(off, sizes, starts, ends, scores, cap, winner, per, tuple(skipped))


def _finish(off, sizes, starts, ends, scores, cap, opt, per, skipped) -> OcmPlan:
    res = off >= 0
    plan = OcmPlan(resident=res, offsets=off, score=float(_total(scores, off)),
                   option_used=opt, per_option_scores=per, skipped=skipped, capacity=cap,
                   footprint=int((off + sizes)[res].max()) if res.any() else 0)
    check_plan(plan, sizes, starts, ends, scores, cap)
    return plan


def check_plan(plan: OcmPlan, sizes: Any, starts: Any, ends: Any, scores: Any, capacity: int,
               alignment: int = 64) -> None:
    """Raise `OcmPlanError` unless `plan` is valid: resident buffers inside the OCM, aligned,
    no two live together overlapping in address, live bytes never over capacity, and the score
    the sum of the residents' scores."""
    sizes = -(-np.asarray(sizes, np.int64) // alignment) * alignment
    starts = np.asarray(starts, np.int64)
    ends = np.asarray(ends, np.int64)
    scores = np.asarray(scores, np.float64)
    cap = int(capacity) // alignment * alignment
    off = np.asarray(plan.offsets, np.int64)
    res = np.flatnonzero(off >= 0)
    if not np.array_equal(plan.resident, off >= 0):
        raise OcmPlanError("plan.resident disagrees with plan.offsets")
    bad = res[(off[res] + sizes[res] > cap) | (off[res] % alignment != 0) | (sizes[res] == 0)]
    if bad.size:
        raise OcmPlanError(f"buffers {bad[:8].tolist()} lie outside the {cap}-byte OCM or are "
                           f"misaligned")
    o, s, a, b = off[res], sizes[res], starts[res], ends[res]
    both_live = (a[:, None] <= b[None, :]) & (a[None, :] <= b[:, None])
    overlap = (o[:, None] < (o + s)[None, :]) & (o[None, :] < (o + s)[:, None])
    np.fill_diagonal(both_live, False)
    clash = np.argwhere(both_live & overlap)
    if clash.size:
        i, j = res[clash[0, 0]], res[clash[0, 1]]
        raise OcmPlanError(f"buffers {i} and {j} are live together and overlap in OCM")
    if res.size:
        t_max = int(b.max()) + 1
        load = np.zeros(t_max + 1, np.int64)
        np.add.at(load, a, s)
        np.add.at(load, b + 1, -s)
        if np.cumsum(load).max() > cap:
            raise OcmPlanError("live resident bytes exceed the OCM capacity")
    total = float(scores[res].sum())
    if not np.isclose(total, plan.score, rtol=1e-9, atol=1e-6):
        raise OcmPlanError(f"plan.score {plan.score} is not the residents' total {total}")


# =============================================================================================
# Instances from networks
# =============================================================================================

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


# =============================================================================================
# Reference optima (for tests, benchmarks and docs; the planners do not use them)
# =============================================================================================

def selection_optimum(sizes: Any, starts: Any, ends: Any, scores: Any, capacity: int, *,
                      alignment: int = 64, time_limit: float = 60.0) -> float:
    """Best total score of a buffer set whose live bytes fit `capacity` at every op position,
    by MILP (scipy HiGHS). Addresses are ignored, so this bounds every valid plan from above."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    sizes, starts, ends, scores, cap, eligible = _prepare(sizes, starts, ends, scores, capacity,
                                                          alignment)
    idx = np.flatnonzero(eligible)
    if idx.size == 0:
        return 0.0
    s, a, b, w = sizes[idx], starts[idx], ends[idx], scores[idx]
    times = np.unique(a)  # the load only rises at a start: checking starts is enough
    A = ((a[None, :] <= times[:, None]) & (times[:, None] <= b[None, :])).astype(np.float64) * s
    res = milp(-w, constraints=LinearConstraint(A, -np.inf, cap),
               integrality=np.ones(idx.size), bounds=Bounds(0, 1),
               options={"time_limit": time_limit, "mip_rel_gap": 1e-9})
    if res.x is None:
        raise OcmPlanError(f"selection MILP failed: {res.message}")
    if res.status != 0:  # time limit: the dual bound is still an upper bound
        return float(-res.mip_dual_bound)
    return float(-res.fun)


def address_optimum(sizes: Any, starts: Any, ends: Any, scores: Any, capacity: int, *,
                    alignment: int = 64, time_limit: float = 60.0) -> tuple[float, bool]:
    """Best total score of a valid plan with real addresses, by MILP (x_i resident, o_i its
    offset in alignment units, one order binary per pair of buffers live together). Returns
    (value, proven): on a time limit, value is the best plan found and proven is False. Meant
    for small instances (tens of buffers)."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    sizes, starts, ends, scores, cap, eligible = _prepare(sizes, starts, ends, scores, capacity,
                                                          alignment)
    idx = np.flatnonzero(eligible)
    m = idx.size
    if m == 0:
        return 0.0, True
    s = sizes[idx] // alignment
    C = cap // alignment
    a, b, w = starts[idx], ends[idx], scores[idx]
    pairs = [(i, j) for i in range(m) for j in range(i + 1, m) if a[i] <= b[j] and a[j] <= b[i]]
    # variables: x (m), o (m), y_ij (i below j), y_ji per pair
    P = len(pairs)
    nv = 2 * m + 2 * P
    rows, lo, hi = [], [], []

    def row() -> np.ndarray:
        r = np.zeros(nv)
        rows.append(r)
        return r

    for i in range(m):  # o_i + s_i <= C
        r = row()
        r[m + i] = 1
        lo.append(-np.inf)
        hi.append(C - s[i])
    for k, (i, j) in enumerate(pairs):
        yij, yji = 2 * m + 2 * k, 2 * m + 2 * k + 1
        r = row()  # o_i + s_i <= o_j + C (1 - y_ij)
        r[m + i], r[m + j], r[yij] = 1, -1, C
        lo.append(-np.inf)
        hi.append(C - s[i])
        r = row()  # o_j + s_j <= o_i + C (1 - y_ji)
        r[m + j], r[m + i], r[yji] = 1, -1, C
        lo.append(-np.inf)
        hi.append(C - s[j])
        r = row()  # both resident -> ordered: y_ij + y_ji >= x_i + x_j - 1
        r[yij], r[yji], r[i], r[j] = 1, 1, -1, -1
        lo.append(-1)
        hi.append(np.inf)
    c = np.zeros(nv)
    c[:m] = -w
    integrality = np.ones(nv)
    integrality[m:2 * m] = 1  # offsets in alignment units are integers
    ub = np.ones(nv)
    ub[m:2 * m] = C
    res = milp(c, constraints=LinearConstraint(np.array(rows), lo, hi), integrality=integrality,
               bounds=Bounds(np.zeros(nv), ub),
               options={"time_limit": time_limit, "mip_rel_gap": 1e-9})
    if res.x is None:
        raise OcmPlanError(f"address MILP failed: {res.message}")
    return float(-res.fun), res.status == 0

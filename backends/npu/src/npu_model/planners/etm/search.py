"""Greedy placement and the annealed search over placement orders.

Greedy (TFLite's "greedy by size" offset calculation): the interval overlap graph, first-fit and
best-fit placement of groups in a given order, the orderings tried, and the bytes a placement puts
above the bound (the tie-break between equal totals). When no greedy pass meets the bound, an
annealed local search re-places suffixes of the order; its random numbers come from a Park-Miller
generator on int64, so plans are deterministic and identical under ``NUMBA_DISABLE_JIT=1`` (and
interpreted, `jit.Tiered`): its acceptance test takes ``math.exp``, libm's exp both compiled and
in Python, not ``np.exp``, whose numpy loop may differ from libm in the last bit.

One module because the search kernel calls the placement kernel: Numba's on-disk cache of a
kernel is invalidated only by changes to the kernel's own file, so Numba kernels that call each
other live in one file.
"""

from __future__ import annotations

import math

import numpy as np

from ...kernels.jit import helper, kernel


def _overlap_graph(start, end):
    """CSR adjacency (indptr, indices) of the interval overlap graph, each buffer's neighbours
    in (stable) start order. Plain numpy: it runs once per plan."""
    m = start.shape[0]
    srt = np.argsort(start, kind="mergesort")
    rank = np.arange(m)
    # the buffers after rank p in start order that start by its end: ranks p+1 .. last[p]-1
    last = np.searchsorted(start[srt], end[srt], side="right")
    cnt = np.maximum(last - rank - 1, 0)
    p = np.repeat(rank, cnt)
    q = p + 1 + np.arange(p.shape[0]) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    src = srt[np.concatenate((p, q))]
    dst = np.concatenate((q, p))
    by = np.lexsort((dst, src))
    indptr = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=m), out=indptr[1:])
    return indptr, srt[dst[by]].astype(np.int64)


@kernel
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


@helper
def _excess(size, off, bound):
    """Bytes that stick out above the bound line, summed over the buffers (in `_improve`;
    the greedy passes use `_excess_np`)."""
    e = 0
    for i in range(size.shape[0]):
        t = off[i] + size[i] - bound
        if t > 0:
            e += t
    return e


def _excess_np(size, off, bound):
    """`_excess` in numpy, for the greedy passes run from Python: the same int64 sum without
    compiling a kernel for it on a cold start."""
    return int(np.maximum(off + size - bound, 0).sum())


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


DEFAULT_MAX_ITERS = 6000
"""Search steps after the greedy passes (each re-places a suffix of the placement order)."""
ANNEAL_T0 = 0.05
"""Starting temperature of the search as a fraction of the bound (linear cooling to 0)."""

_MINSTD_M = 2147483647
_MINSTD_A = 48271


@helper
def _next_random(state):
    """Park-Miller minimal standard generator (no overflow in int64)."""
    return state * _MINSTD_A % _MINSTD_M


@helper
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


@kernel
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
                accept = state / _MINSTD_M < math.exp(-delta / temp)
        if accept:
            total = new_total
            excess = new_excess
            for k in range(q, m):
                saved_order[k] = order[k]
                saved_off[order[k]] = off[order[k]]
            if total < best_total:
                best_total = total
                for i in range(m):  # a loop, not best_off[:] = off: no shape-check code
                    best_off[i] = off[i]
                if total <= bound:
                    return total, it + 1
        else:
            for k in range(q, m):
                order[k] = saved_order[k]
                off[order[k]] = saved_off[order[k]]
                placed[order[k]] = True
    for i in range(m):
        off[i] = best_off[i]
    return best_total, max_iters

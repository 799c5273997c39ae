"""The Python drivers of the three OCM options (their Numba kernels are in `kernels`).

- OPTION1, global scoring: rank every buffer by several keys (score density first), place
  greedily with best-fit offsets (as TFLite's arena planner does), then eject-search each; the best
  of the keys is repaired (repack from scratch to admit a missing buffer) and improved by an
  iterated local search (deterministic, `search_iters` rounds).
- OPTION2, local-optimal dynamic programming: walk the buffers in execution order keeping the
  top M partial plans (states: resident set and offsets of the buffers still live). The vendor skips
  it for networks over `OPTION2_MAX_OPS` ops, and so does `plan_ocm`.
- OPTION3, sequential evict-by-score: walk the buffers in order; when a buffer does not fit and
  scores higher, evict the first lower-scored live residents until it fits (never trading away more
  score than it brings).
"""

from __future__ import annotations

import numpy as np

from ...kernels import compile_pool
from ...kernels.jit import tiered
from . import kernels
from .kernels import _walk_order


def _small_search(order, sizes, scores, starts, ends, eligible, offsets, adj_ptr, adj_idx,
                  capacity, iters, seed, max_moves) -> bool:
    """Whether `kernels._perturb_search` runs as Python in a fraction of its compile time:
    its rounds times the conflict pairs (tiny_cnn: 1000 x 70, ~0.06 s; the worst measured
    cost is ~5 us a unit, so the limit keeps a call under ~0.5 s)."""
    return iters * adj_idx.shape[0] <= 100_000


def _small_beam(order, sizes, scores, starts, ends, eligible, adj_ptr, adj_idx, capacity,
                top_m) -> bool:
    """Whether `kernels._beam` runs as Python in a fraction of its compile time: states kept
    times conflict pairs (tiny_cnn: 128 x 70, ~0.08 s; under ~0.2 s at the limit)."""
    return top_m * adj_idx.shape[0] <= 40_000


# The kernels as the drivers call them: interpreted on small plans while not compiled (a
# fresh install plans tiny networks without compiling the planner; `jit.Tiered`). The
# passes that cost milliseconds as Python on hundreds of buffers are always small.
_refill = tiered(kernels._refill)
_total = tiered(kernels._total)
_eject_search = tiered(kernels._eject_search)
_repack_search = tiered(kernels._repack_search)
_evict_walk = tiered(kernels._evict_walk)
_perturb_search = tiered(kernels._perturb_search, _small_search)
_beam = tiered(kernels._beam, _small_beam)

#: the vendor skips OPTION2 (local dynamic programming) above this many ops
OPTION2_MAX_OPS = 500


def _prefetch(want1, want2, sizes, starts, ends, scores, eligible, adj_ptr, adj_idx, cap,
              max_moves, iters, seed, top_m):
    """Start compiling, in worker processes, the search kernels OPTION1 (`want1`) and OPTION2
    (`want2`) will compile (their calls too big to run as Python, and not compiled yet), so
    that the two compile side by side (`compile_pool`; a fresh install planning yolov5s
    compiles both, ~1.5 s each). Same arguments as the options pass them."""
    order = _walk_order(starts, ends)
    off = np.full(sizes.shape[0], -1, np.int64)
    calls = []
    if want1:
        args = (order, sizes, scores, starts, ends, eligible, off, adj_ptr, adj_idx, cap,
                iters, seed, max_moves)
        if _perturb_search.will_compile(*args):
            calls.append((kernels._perturb_search, args))
    if want2:
        args = (order, sizes, scores, starts, ends, eligible, adj_ptr, adj_idx, cap,
                max(1, int(top_m)))
        if _beam.will_compile(*args):
            calls.append((kernels._beam, args))
    if len(calls) > 1:
        compile_pool.prefetch(calls)


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
    """OPTION1's offsets (-1: stays in ETM)."""
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


def _option2(sizes, starts, ends, scores, eligible, adj_ptr, adj_idx, cap, top_m):
    """OPTION2's offsets (-1: stays in ETM): the best beam state, refilled."""
    order = _walk_order(starts, ends)
    off = _beam(order, sizes, scores, starts, ends, eligible, adj_ptr, adj_idx, cap,
                max(1, int(top_m)))
    _refill(order, sizes, eligible, off, adj_ptr, adj_idx, cap)
    return off


def _option3(sizes, starts, ends, scores, eligible, adj_ptr, adj_idx, cap):
    """OPTION3's offsets (-1: stays in ETM): the evicting walk, refilled."""
    order = _walk_order(starts, ends)
    off = np.full(sizes.shape[0], -1, np.int64)
    _evict_walk(order, sizes, scores, eligible, off, adj_ptr, adj_idx, cap)
    _refill(order, sizes, eligible, off, adj_ptr, adj_idx, cap)
    return off

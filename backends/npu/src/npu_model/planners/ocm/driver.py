"""`plan_ocm`, the entry point: checks the input, runs the chosen option (or, for BEST_SCORE,
all three, keeping the best; ties go to the lower option number) and returns a checked plan."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from .kernels import _conflicts
from .options import OPTION2_MAX_OPS, _option1, _option2, _option3, _prefetch, _total
from .problem import OcmOpt, OcmPlan, _as_option, _prepare, check_plan

log = logging.getLogger(__name__)


def plan_ocm(sizes: Sequence[int] | np.ndarray, starts: Sequence[int] | np.ndarray,
             ends: Sequence[int] | np.ndarray, scores: Sequence[float] | np.ndarray,
             capacity: int, option: Any = OcmOpt.BEST_SCORE, *, top_m: int = 128,
             alignment: int = 64, num_ops: int | None = None, search_iters: int = 1000,
             seed: int = 0, max_moves: int = 10_000) -> OcmPlan:
    """Plan which buffers live in OCM and where.

    `sizes` are rounded up and `capacity` down to `alignment`; lifetimes are closed intervals of
    op positions; `scores` are what residency saves (any unit, additive). `option` is an
    `OcmOpt` (or its int value, or its name). OPTION2 is skipped for
    networks over `OPTION2_MAX_OPS` ops (`num_ops`, default the last end + 1): alone it returns
    an empty plan with `skipped=(OPTION2,)`, under BEST_SCORE it is left out."""
    opt = _as_option(option)
    sizes, starts, ends, scores, cap, eligible = _prepare(sizes, starts, ends, scores, capacity,
                                                          alignment)
    n = sizes.shape[0]
    if num_ops is None:
        num_ops = int(ends.max()) + 1 if n else 0
    empty = np.full(n, -1, np.int64)
    if opt == OcmOpt.NONE:
        return _finish(empty, sizes, starts, ends, scores, cap, opt, {}, ())
    adj_ptr, adj_idx = _conflicts(starts, ends)
    wanted = ([OcmOpt.OPTION1, OcmOpt.OPTION2, OcmOpt.OPTION3]
              if opt == OcmOpt.BEST_SCORE else [opt])
    _prefetch(OcmOpt.OPTION1 in wanted, OcmOpt.OPTION2 in wanted and num_ops <= OPTION2_MAX_OPS,
              sizes, starts, ends, scores, eligible, adj_ptr, adj_idx, cap, max_moves,
              search_iters, seed, top_m)
    results: dict[OcmOpt, np.ndarray] = {}
    per: dict[OcmOpt, float | None] = {}
    skipped: list[OcmOpt] = []
    for o in wanted:
        if o == OcmOpt.OPTION1:
            off = _option1(sizes, starts, ends, scores, eligible, adj_ptr, adj_idx, cap,
                           max_moves, search_iters, seed)
        elif o == OcmOpt.OPTION2:
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
    if opt == OcmOpt.BEST_SCORE and not (off >= 0).any():
        winner = OcmOpt.NONE  # nothing fits: BEST_SCORE resolves to "OCM off"
    return _finish(off, sizes, starts, ends, scores, cap, winner, per, tuple(skipped))


def _finish(off, sizes, starts, ends, scores, cap, opt, per, skipped) -> OcmPlan:
    """The `OcmPlan` of `off`, checked before anyone sees it."""
    res = off >= 0
    plan = OcmPlan(resident=res, offsets=off, score=float(_total(scores, off)),
                   option_used=opt, per_option_scores=per, skipped=skipped, capacity=cap,
                   footprint=int((off + sizes)[res].max()) if res.any() else 0)
    check_plan(plan, sizes, starts, ends, scores, cap)
    return plan

"""The OCM planning problem's vocabulary: the options, the plan, the error, the input
normalisation every entry point shares, and `check_plan`, the validity check every plan passes
before a planner returns it (and that tests and callers may run on any plan)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

import numpy as np


class OcmOpt(enum.IntEnum):
    """The OCM planning options, the vendor's `OcmOpt` (C++ `None` is NONE): the one definition,
    used from the planner to the backends' `ocmOptimize` and the snapshot state. BEST_SCORE
    tries OPTION1..3 and keeps the best."""

    NONE = 0
    OPTION1 = 1
    OPTION2 = 2
    OPTION3 = 3
    BEST_SCORE = -1


class OcmPlanError(ValueError):
    """An OCM instance or plan breaks an invariant (the message names the buffers at fault)."""


@dataclass
class OcmPlan:
    """A planner's answer. `offsets[i]` is buffer i's OCM offset, -1 when it stays in ETM."""

    resident: np.ndarray
    offsets: np.ndarray
    score: float
    option_used: OcmOpt
    per_option_scores: dict[OcmOpt, float | None] = field(default_factory=dict)
    skipped: tuple[OcmOpt, ...] = ()
    capacity: int = 0
    #: highest OCM byte any resident buffer reaches
    footprint: int = 0


def _as_option(option: Any) -> OcmOpt:
    """The `OcmOpt` of an option given as itself, its int value or its name."""
    if isinstance(option, str):
        key = option.upper()
        if key in OcmOpt.__members__:
            return OcmOpt[key]
    else:
        try:
            return OcmOpt(int(option))
        except (TypeError, ValueError):
            pass
    raise OcmPlanError(f"unknown OCM option {option!r}; choose one of "
                       f"{', '.join(OcmOpt.__members__)}")


def _prepare(sizes, starts, ends, scores, capacity, alignment):
    """Checked arrays, sizes rounded up and the capacity down to `alignment`, and which buffers
    may be resident at all (positive size and score, no larger than the OCM)."""
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

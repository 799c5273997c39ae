"""Reference optima by MILP (scipy HiGHS), for tests, benchmarks and docs/ocm-planner.md: the
planners never call them. `selection_optimum` ignores addresses and so bounds every plan from
above; `address_optimum` solves small instances exactly."""

from __future__ import annotations

from typing import Any

import numpy as np

from npu_model.planners.ocm.problem import OcmPlanError, _prepare


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

"""Table inputs calibrated to where the table still changes (docs/quantization.md section 8).

A Sigmoid or Tanh table maps every input beyond a few units to the same saturated output code,
yet a range observer sizes its input's scale by the whole input range. A detector's objectness
logits are the usual case: background anchors sit at -15 to -20 and set a step of 0.17 per
code, while every decision is made between -5 and 5, where one such step moves the probability
by up to 0.04 (ddddocr's YOLOX-style detector: objectness cosine 0.96 held out, detections lost
at a 0.5 score). Inputs past the point where the function stays within half an output step of
its value at the range's end produce that same code anyway (to within one code), so clipping
the input's range there costs nothing and buys the codes back for the region that decides.

`saturation_point(fn, amax, out_step)` finds that point on each side of zero for any table
function (an unbounded side keeps the whole range: SiLU's, GELU's and Hardswish's positive
side, so their thresholds never move). `clip_table_inputs` applies it to values that only
tables read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from xir.quant.lut import LUT_OPS, lut_function, lut_params

__all__ = ["saturation_point", "clip_table_inputs"]

#: grid points per side on which the function is evaluated
_GRID = 4096


def saturation_point(fn: Callable[[np.ndarray], np.ndarray], amax: float, out_step: float,
                     in_qmax: int = 127) -> float:
    """The smallest threshold `t <= amax` such that `fn` on `[t, amax]` stays within half of
    `out_step` of `fn(amax)` and on `[-amax, -t]` within half of it of `fn(-amax)`: clipping
    the input to `[-t, t]` moves no output by more than one code. `amax` itself where the
    function keeps changing on either side (an unbounded side), i.e. where the flat part is
    narrower than one input code (`amax / in_qmax`)."""
    if not (amax > 0 and out_step > 0 and np.isfinite(amax)):
        return amax
    x = np.linspace(0.0, amax, _GRID + 1)
    tol = out_step / 2
    t = 0.0
    with np.errstate(all="ignore"):
        for sign in (1.0, -1.0):
            y = np.asarray(fn(sign * x), np.float64)
            if not np.isfinite(y).all():
                return amax
            moving = np.nonzero(np.abs(y - y[-1]) > tol)[0]
            if moving.size:  # the last grid point still away from the end value, one step on
                t = max(t, x[min(int(moving[-1]) + 1, _GRID)])
    if t > amax - amax / in_qmax:
        return amax
    return float(max(t, amax / _GRID))


def clip_table_inputs(net: Any, int_ops: set[int], amax: dict[int, float],
                      group_of: Callable[[int], int], dtype_qmax: Callable[[int], int]
                      ) -> dict[int, tuple[float, float]]:
    """Lower `amax` (in place) of the values read only by integer table ops (`LUT_OPS`) to
    where those tables saturate (`saturation_point`, at each table output's group range).
    Only values that are their scale group's sole member, written by an integer op and not a
    network output, nor fixed by a QDQ model (`qdq_amax`), move. Returns {v_id: (before,
    after)} for the values clipped."""
    members: dict[int, int] = {}
    for vid in amax:
        r = group_of(vid)
        members[r] = members.get(r, 0) + 1
    gmax: dict[int, float] = {}
    for vid, a in amax.items():
        r = group_of(vid)
        gmax[r] = max(gmax.get(r, 0.0), a)
    done: dict[int, tuple[float, float]] = {}
    for op in net.ops:
        for v in op.outputs:
            vid = v.v_id
            readers = list(v.consumers)
            if (op.op_id not in int_ops or vid not in amax or "qdq_amax" in v.tags
                    or members.get(group_of(vid), 0) != 1 or not readers
                    or not all(c.op_type in LUT_OPS and c.op_id in int_ops for c in readers)):
                continue
            t = 0.0
            for c in readers:
                y = c.outputs[0].v_id
                if y not in amax:
                    t = amax[vid]
                    break
                step = gmax[group_of(y)] / dtype_qmax(y)
                fn = lut_function(LUT_OPS[c.op_type], lut_params(c.op_type, c.attrs))
                t = max(t, saturation_point(fn, amax[vid], step, dtype_qmax(vid)))
            if t < amax[vid]:
                done[vid] = (amax[vid], t)
                amax[vid] = t
    return done

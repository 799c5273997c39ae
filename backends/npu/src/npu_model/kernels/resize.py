"""UPSAMPLE TABLE (bilinear resize by a table of taps) on the thread pool.

The same integers as `vector.resize_taps` (the definition: two input rows blended, then two
columns, exactly in int64, then ``xir.quant.fixed_point.requantize_one``), computed in an
order that does less work and splits: for each output row the two input rows are blended once
over every input column the taps read (a line), and each output pixel then blends two pixels
of that line. The row blend of an input column is the same integer whichever output pixel
reads it, so computing it once per output row instead of twice per output pixel changes no
bit; a 4x upsample of 64 x 64 x 32 to 256 x 256 blended 2 x 256 columns per output row and
now blends 64. Output rows are independent, so the pool cuts them into parts (`pool.Split`,
``oh_lo`` .. ``oh_hi``): every output element is computed from its inputs alone, whatever
the part, so the result is byte-identical for any thread count.
"""

from __future__ import annotations

import numpy as np

from .jit import helper, kernel
from .pool import Split


@helper
def _rows_narrow(x, xrs, xpitch, xcoff, y, yrs, ypitch, ycoff, oh_n, ow_n, c_n, taps, one,
                 m, rnd, sh, lo, hi, oh_lo, oh_hi, c0, ncol):
    """`resize_taps_rows` in int32 lanes (int8 maps, ``one <= 2**11``, `m` fits int32)."""
    line = np.empty(ncol * c_n, dtype=np.int32)
    acc = np.empty(ow_n * c_n, dtype=np.int32)
    m64 = np.int64(np.int32(m))
    runs = 1 if ypitch == c_n else ow_n
    w = ow_n * c_n // runs
    for oh in range(oh_lo, oh_hi):
        wy1 = np.int32(taps[oh, 2])
        wy0 = np.int32(one - taps[oh, 2])
        ra = taps[oh, 0] * xrs + xcoff + c0 * xpitch
        rb = taps[oh, 1] * xrs + xcoff + c0 * xpitch
        for j in range(ncol):
            xa = x[ra + j * xpitch:ra + j * xpitch + c_n]
            xb = x[rb + j * xpitch:rb + j * xpitch + c_n]
            lj = line[j * c_n:(j + 1) * c_n]
            for c in range(c_n):
                lj[c] = np.int32(xa[c]) * wy0 + np.int32(xb[c]) * wy1
        for ow in range(ow_n):
            t = oh_n + ow
            wx1 = np.int32(taps[t, 2])
            wx0 = np.int32(one - taps[t, 2])
            la = line[(taps[t, 0] - c0) * c_n:(taps[t, 0] - c0 + 1) * c_n]
            lb = line[(taps[t, 1] - c0) * c_n:(taps[t, 1] - c0 + 1) * c_n]
            ac = acc[ow * c_n:(ow + 1) * c_n]
            for c in range(c_n):
                ac[c] = la[c] * wx0 + lb[c] * wx1
        for r in range(runs):
            dst = oh * yrs + r * ypitch + ycoff
            ys = y[dst:dst + w]
            av = acc[r * w:(r + 1) * w]
            for i in range(w):
                p = (np.int64(av[i]) * m64 + rnd) >> sh
                p = lo if p < lo else p
                ys[i] = hi if p > hi else p


@helper
def _rows_wide(x, xrs, xpitch, xcoff, y, yrs, ypitch, ycoff, oh_n, ow_n, c_n, taps, one,
               m, rnd, sh, lo, hi, oh_lo, oh_hi, c0, ncol):
    """`resize_taps_rows` in int64 lanes (any map, any multiplier)."""
    line = np.empty(ncol * c_n, dtype=np.int64)
    acc = np.empty(ow_n * c_n, dtype=np.int64)
    runs = 1 if ypitch == c_n else ow_n
    w = ow_n * c_n // runs
    for oh in range(oh_lo, oh_hi):
        wy1 = taps[oh, 2]
        wy0 = one - wy1
        ra = taps[oh, 0] * xrs + xcoff + c0 * xpitch
        rb = taps[oh, 1] * xrs + xcoff + c0 * xpitch
        for j in range(ncol):
            xa = x[ra + j * xpitch:ra + j * xpitch + c_n]
            xb = x[rb + j * xpitch:rb + j * xpitch + c_n]
            lj = line[j * c_n:(j + 1) * c_n]
            for c in range(c_n):
                lj[c] = np.int64(xa[c]) * wy0 + np.int64(xb[c]) * wy1
        for ow in range(ow_n):
            t = oh_n + ow
            wx1 = taps[t, 2]
            wx0 = one - wx1
            la = line[(taps[t, 0] - c0) * c_n:(taps[t, 0] - c0 + 1) * c_n]
            lb = line[(taps[t, 1] - c0) * c_n:(taps[t, 1] - c0 + 1) * c_n]
            ac = acc[ow * c_n:(ow + 1) * c_n]
            for c in range(c_n):
                ac[c] = la[c] * wx0 + lb[c] * wx1
        for r in range(runs):
            dst = oh * yrs + r * ypitch + ycoff
            ys = y[dst:dst + w]
            av = acc[r * w:(r + 1) * w]
            for i in range(w):
                p = (av[i] * m + rnd) >> sh
                p = lo if p < lo else p
                ys[i] = hi if p > hi else p


@kernel(nogil=True)
def resize_taps_rows(x, xrs, xpitch, xcoff, y, yrs, ypitch, ycoff, oh_n, ow_n, c_n, taps, one,
                     m, s, lo, hi, oh_lo, oh_hi):
    """`vector.resize_taps` for output rows ``oh_lo..oh_hi``: `taps` (int64, the rows' then the
    columns' (i0, i1, w1)) blend ``q[i0] * (one - w1) + q[i1] * w1``, rows first, then
    ``requantize_one(acc, m, s, m, s, lo, hi)`` (one multiplier: written out branch-free, so it
    vectorises), pixel runs straight into y.

    The weights lie in ``[0, one]`` (the chip checks its table), so a blend is at most
    ``max|q| * one`` and the whole sum ``max|q| * one**2``: for int8 maps with ``one <= 2**11``
    that fits int32 and the blends run in int32 lanes (twice as many per vector), the product
    with a multiplier that fits int32 made exactly in int64 (`_rows_narrow`); anything else
    runs in int64 (`_rows_wide`)."""
    c0 = taps[oh_n, 0]
    c1 = taps[oh_n, 0]
    for ow in range(ow_n):
        for k in range(2):
            col = taps[oh_n + ow, k]
            c0 = min(c0, col)
            c1 = max(c1, col)
    ncol = c1 - c0 + 1
    rnd = (np.int64(1) << np.int64(s - 1)) if s > 0 else np.int64(0)
    sh = np.int64(s) if s > 0 else np.int64(0)
    lo64 = np.int64(lo)
    hi64 = np.int64(hi)
    m64 = np.int64(m)
    if x.itemsize == 1 and one <= 2048 and -(1 << 31) <= m < (1 << 31):
        _rows_narrow(x, xrs, xpitch, xcoff, y, yrs, ypitch, ycoff, oh_n, ow_n, c_n, taps, one,
                     m64, rnd, sh, lo64, hi64, oh_lo, oh_hi, c0, ncol)
    else:
        _rows_wide(x, xrs, xpitch, xcoff, y, yrs, ypitch, ycoff, oh_n, ow_n, c_n, taps, one,
                   m64, rnd, sh, lo64, hi64, oh_lo, oh_hi, c0, ncol)
    return y


#: the resize on the pool, cut over output rows; a unit (an output element: two blends and
#: a requantization) costs more than a multiply-add, so parts may hold less of them
RESIZE_TAPS = Split(resize_taps_rows, extent=("oh_n",), work=("oh_n", "ow_n", "c_n"),
                    min_work=1 << 16)

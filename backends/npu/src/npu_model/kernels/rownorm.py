"""NORM-unit kernels: Softmax and LayerNorm over each pixel's channels.

The integers are those of `xir.quant.rownorm` (its docstring is the definition; the HostBackend
reference computes them with numpy); the operand convention is `kernels.vector`'s: flat
int8/int16 views plus row stride, pitch and first channel, in elements. One row is one pixel.
"""

from __future__ import annotations

import numpy as np

from .jit import kernel


@kernel
def softmax_rows(x, xrs, xpitch, xcoff, table, r, f, hi, y, yrs, ypitch, ycoff, h_n, w_n, c_n):
    """``y = min(floor((2 e R + S 2**F) / (S 2**(F+1))), hi)`` with ``e = table[min(max - x,
    len - 1)]`` and ``S`` the row's sum of ``e``.

    The floor division is not an integer division per element (a 64-bit ``idiv`` each, and
    no vectorising): the quotient is estimated as ``num * (1 / den)`` in float64 and corrected
    by its exact remainder. ``q = floor(num / den) < 2**31`` (``e <= S``, ``R < 2**30``), and
    the estimate's relative error is below ``2**-50`` (three roundings), so it is off by at most
    one either way; ``num - q den`` (exact in int64) says which, and the result is the exact
    quotient's bits. The row's maximum, the table indices and the entries are int32 (codes of
    int8 / int16 maps, an int32 table): 64x64 int16 rows 8.1 -> 7.5 us."""
    last = np.int32(table.shape[0] - 1)
    e = np.empty(c_n, dtype=np.int32)  # table entries: int32
    r2 = 2 * r
    for h in range(h_n):
        for w in range(w_n):
            src = h * xrs + w * xpitch + xcoff
            dst = h * yrs + w * ypitch + ycoff
            xr = x[src:src + c_n]
            m = np.int32(xr[0])  # int8 / int16 codes: their differences fit int32
            for c in range(1, c_n):
                m = max(m, np.int32(xr[c]))
            s = np.int64(0)
            for c in range(c_n):
                v = table[min(m - np.int32(xr[c]), last)]
                e[c] = v
                s += np.int64(v)
            add = s << f
            den = s << (f + 1)
            inv = 1.0 / np.float64(den)
            yr = y[dst:dst + c_n]
            for c in range(c_n):
                num = np.int64(e[c]) * r2 + add
                q = np.int64(np.float64(num) * inv)
                rem = num - q * den
                q += (1 if rem >= den else 0) - (1 if rem < 0 else 0)
                yr[c] = min(q, hi)
    return


@kernel
def layer_norm_rows(x, xrs, xpitch, xcoff, prm, lo, hi, y, yrs, ypitch, ycoff, h_n, w_n, c_n):
    """Exact int64 row sums, one float64 scale per row, then ``round_half_away(((x - mean) *
    a) * G[c] + Bt[c])`` clipped to ``[lo, hi]``; `prm` is s_in, s_in**2, eps, (G, Bt)...

    G and Bt are read out of their interleaved pairs once per call and the per-element step
    is written branch-free (selects), so it vectorises: the same float64 operations in the
    same order, the same bits."""
    s_in = prm[0]
    s2 = prm[1]
    eps = prm[2]
    n = np.int64(c_n)
    fn = np.float64(n)
    fnn = np.float64(n * n)
    g = np.empty(c_n, dtype=np.float64)
    bt = np.empty(c_n, dtype=np.float64)
    for c in range(c_n):
        g[c] = prm[3 + 2 * c]
        bt[c] = prm[4 + 2 * c]
    flo = np.float64(lo)
    fhi = np.float64(hi)
    for h in range(h_n):
        for w in range(w_n):
            src = h * xrs + w * xpitch + xcoff
            dst = h * yrs + w * ypitch + ycoff
            xr = x[src:src + c_n]
            a_sum = np.int64(0)
            b_sum = np.int64(0)
            for c in range(c_n):
                q = np.int64(xr[c])
                a_sum += q
                b_sum += q * q
            mean = np.float64(a_sum) / fn
            var = np.float64(n * b_sum - a_sum * a_sum) / fnn
            a = s_in * (1.0 / np.sqrt(var * s2 + eps))
            yr = y[dst:dst + c_n]
            for c in range(c_n):
                v = ((np.float64(xr[c]) - mean) * a) * g[c] + bt[c]
                av = abs(v)
                fl = np.floor(av)
                fl = fl + (1.0 if av - fl >= 0.5 else 0.0)
                fl = -fl if v < 0 else fl
                fl = flo if fl < flo else fl
                fl = fhi if fl > fhi else fl
                yr[c] = np.int64(fl)
    return

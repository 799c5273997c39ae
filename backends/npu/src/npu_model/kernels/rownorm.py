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
    len - 1)]`` and ``S`` the row's sum of ``e``."""
    last = table.shape[0] - 1
    e = np.empty(c_n, dtype=np.int64)
    for h in range(h_n):
        for w in range(w_n):
            src = h * xrs + w * xpitch + xcoff
            dst = h * yrs + w * ypitch + ycoff
            m = np.int64(x[src])
            for c in range(1, c_n):
                v = np.int64(x[src + c])
                if v > m:
                    m = v
            s = np.int64(0)
            for c in range(c_n):
                d = m - np.int64(x[src + c])
                if d > last:
                    d = last
                v = np.int64(table[d])
                e[c] = v
                s += v
            add = s << f
            den = s << (f + 1)
            for c in range(c_n):
                q = (2 * e[c] * r + add) // den
                y[dst + c] = q if q < hi else hi
    return y


@kernel
def layer_norm_rows(x, xrs, xpitch, xcoff, prm, lo, hi, y, yrs, ypitch, ycoff, h_n, w_n, c_n):
    """Exact int64 row sums, one float64 scale per row, then ``round_half_away(((x - mean) *
    a) * G[c] + Bt[c])`` clipped to ``[lo, hi]``; `prm` is s_in, s_in**2, eps, (G, Bt)..."""
    s_in = prm[0]
    s2 = prm[1]
    eps = prm[2]
    n = np.int64(c_n)
    fn = np.float64(n)
    fnn = np.float64(n * n)
    for h in range(h_n):
        for w in range(w_n):
            src = h * xrs + w * xpitch + xcoff
            dst = h * yrs + w * ypitch + ycoff
            a_sum = np.int64(0)
            b_sum = np.int64(0)
            for c in range(c_n):
                q = np.int64(x[src + c])
                a_sum += q
                b_sum += q * q
            mean = np.float64(a_sum) / fn
            var = np.float64(n * b_sum - a_sum * a_sum) / fnn
            a = s_in * (1.0 / np.sqrt(var * s2 + eps))
            for c in range(c_n):
                v = ((np.float64(x[src + c]) - mean) * a) * prm[3 + 2 * c] + prm[4 + 2 * c]
                av = abs(v)
                fl = np.floor(av)
                if av - fl >= 0.5:
                    fl += 1.0
                if v < 0:
                    fl = -fl
                if fl < lo:
                    fl = lo
                elif fl > hi:
                    fl = hi
                y[dst + c] = np.int64(fl)
    return y

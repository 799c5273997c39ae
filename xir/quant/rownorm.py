"""Integer Softmax and LayerNorm over the last axis (docs/quantization.md, "Row ops").

Both normalise one row (the last axis: an NHWC pixel's channels) by statistics of that row,
so they have no per-element table and no per-tensor multiplier. Their integer forms here are
the definition: the HostBackend integer reference and the NPU's NORM unit compute exactly
these integers (bit-exact by construction, every rounding spelt out).

**Softmax** (codes ``q``, scale ``s_in`` -> codes ``y``, scale ``s_out``)::

    d    = max(q_row) - q                      # >= 0, exact
    e    = EXP[min(d, L - 1)]                  # EXP[d] = round(2**EXP_BITS * exp(-d * s_in))
    S    = sum(e_row)                          # int64, exact
    y    = floor((2 * e * R + S * 2**F) / (S * 2**(F + 1)))   # round(e / S / s_out), half up
    y    = min(y, qmax)

``EXP`` ends at its first zero entry (every larger ``d`` reads that 0); ``R = round(2**F /
s_out)`` with ``F <= 16`` chosen so that ``R < 2**30``: every product fits int64 for rows of
up to 65535 elements.

**LayerNorm** (codes ``q``, scale ``s_in``; float gamma, beta over the row -> codes ``y``,
scale ``s_out``): the row statistics are exact integers, the normalisation one float64 scale
per row, and the per-element arithmetic a fixed sequence of float64 operations (IEEE
round-to-nearest, no fused multiply-add), so every implementation that follows it gets the
same bits::

    A = sum(q_row), B = sum(q_row**2), n = len(row)          # int64, exact
    mean = A / n
    var  = (n * B - A * A) / (n * n)                          # exact integer over n**2
    a    = s_in * (1 / sqrt(var * s_in**2 + eps))
    y    = round_half_away(((q - mean) * a) * G[c] + Bt[c])   # G = gamma / s_out,
    y    = clip(y, qmin, qmax)                                # Bt = beta / s_out
"""

from __future__ import annotations

import numpy as np

from xir.quant.fixed_point import qrange, round_half_away

__all__ = ["EXP_BITS", "softmax_consts", "softmax_codes", "layer_norm_consts",
           "layer_norm_codes", "LN_HEADER"]

#: fraction bits of the exponential table (EXP[0] = 2**EXP_BITS)
EXP_BITS = 20
#: float64 words before the per-channel (G, Bt) pairs of a LayerNorm constant block:
#: s_in, s_in**2, eps
LN_HEADER = 3


def softmax_consts(s_in: float, s_out: float, in_dtype) -> tuple[np.ndarray, int, int]:
    """``(EXP table as int32, R, F)`` of the integer Softmax for these scales."""
    qmin, qmax = qrange(np.dtype(in_dtype))
    d = np.arange(qmax - qmin + 1, dtype=np.float64)
    table = round_half_away(np.ldexp(np.exp(-d * np.float64(s_in)), EXP_BITS)).astype(np.int64)
    zeros = np.flatnonzero(table == 0)
    if zeros.size:
        table = table[:zeros[0] + 1]
    if table.size % 2:  # whole 8-byte words in memory; the extra 0 is never indexed
        table = np.append(table, 0)
    f = 16
    while f > 0 and round(2.0**f / float(s_out)) >= 1 << 30:
        f -= 1
    r = int(round(2.0**f / float(s_out)))
    if not 0 < r < 1 << 30:
        raise ValueError(f"Softmax output scale {s_out} has no integer form (R = {r})")
    return table.astype(np.int32), r, f


def softmax_codes(q: np.ndarray, table: np.ndarray, r: int, f: int, out_dtype) -> np.ndarray:
    """The integer Softmax of codes `q` over the last axis (see the module docstring)."""
    q = np.asarray(q, dtype=np.int64)
    d = q.max(axis=-1, keepdims=True) - q
    e = np.asarray(table, dtype=np.int64)[np.minimum(d, table.shape[0] - 1)]
    s = e.sum(axis=-1, keepdims=True)
    y = (2 * e * np.int64(r) + (s << f)) // (s << (f + 1))
    return np.minimum(y, qrange(np.dtype(out_dtype))[1]).astype(out_dtype)


def layer_norm_consts(s_in: float, s_out: float, eps: float, n: int, gamma: np.ndarray,
                      beta: np.ndarray | None = None) -> np.ndarray:
    """The float64 constant block of the integer LayerNorm over rows of `n`: s_in, s_in**2,
    eps, then (gamma[c] / s_out, beta[c] / s_out) per channel (gamma and beta of one value or
    `n`; no beta: 0)."""
    per_c = []
    for name, v in (("scale", gamma), ("bias", np.zeros(1) if beta is None else beta)):
        v = np.asarray(v, dtype=np.float64).reshape(-1)
        if v.size not in (1, n):
            raise ValueError(f"LayerNorm {name} has {v.size} values for rows of {n}")
        per_c.append(np.broadcast_to(v, (n,)) / np.float64(s_out))
    g, b = per_c
    head = np.array([s_in, np.float64(s_in) * np.float64(s_in), eps], dtype=np.float64)
    pairs = np.stack([g, b], axis=1).reshape(-1)
    return np.concatenate([head, pairs])


def layer_norm_codes(q: np.ndarray, consts: np.ndarray, out_dtype) -> np.ndarray:
    """The integer LayerNorm of codes `q` over the last axis (see the module docstring)."""
    q = np.asarray(q, dtype=np.int64)
    n = q.shape[-1]
    s_in, s2, eps = consts[:LN_HEADER]
    g = consts[LN_HEADER::2]
    b = consts[LN_HEADER + 1::2]
    if g.size != n:
        raise ValueError(f"LayerNorm constants cover {g.size} channels, the rows have {n}")
    a_sum = q.sum(axis=-1, keepdims=True)
    b_sum = (q * q).sum(axis=-1, keepdims=True)
    mean = a_sum.astype(np.float64) / np.float64(n)
    var = (np.int64(n) * b_sum - a_sum * a_sum).astype(np.float64) / np.float64(n * n)
    a = s_in * (1.0 / np.sqrt(var * s2 + eps))
    y = ((q.astype(np.float64) - mean) * a) * g + b
    lo, hi = qrange(np.dtype(out_dtype))
    return np.clip(round_half_away(y), lo, hi).astype(out_dtype)


"""GPTQ's Numba inner loop (`xcompile.quant.gptq_kernels.gptq_block`) gives the codes of the
numpy loop it replaced, bit for bit: random layers of many shapes (fewer and more channels than
a tile, more inputs than a block), dead inputs, halfway values and clipped weights."""

from __future__ import annotations

import numpy as np
import pytest

from xcompile.quant import gptq
from xcompile.quant.gptq_kernels import TILE, gptq_block


def _numpy_gptq(w, scales, h, qmax, damp=0.01, block=128):
    """The numpy form of `gptq_quantize` before the kernel (one `np.outer` per input row)."""
    w = np.array(w, np.float64)
    k = w.shape[0]
    s = np.asarray(scales, np.float64)[None, :]
    h = np.array(h, np.float64)
    dead = np.diag(h).copy() <= 0.0
    h[dead, dead] = 1.0
    h += np.eye(k) * (damp * float(np.mean(np.diag(h))))
    perm = np.argsort(-np.diag(h), kind="stable")
    inv = np.argsort(perm, kind="stable")
    w, h = w[perm], h[np.ix_(perm, perm)]
    u = gptq._upper_inverse_factor(h)
    q = np.zeros_like(w)
    for b0 in range(0, k, block):
        b1 = min(b0 + block, k)
        wb = w[b0:b1].copy()
        errs = np.zeros_like(wb)
        for i in range(b1 - b0):
            qi = np.clip(np.round(wb[i] / s[0]), -qmax, qmax)
            q[b0 + i] = qi
            e = (wb[i] - qi * s[0]) / u[b0 + i, b0 + i]
            wb[i + 1:] -= np.outer(u[b0 + i, b0 + i + 1:b1], e)
            errs[i] = e
        w[b1:] -= u[b0:b1, b1:].T @ errs
    return q[inv].astype(np.int64)


def _case(rng, k, c, qmax, dead=0, halfway=False, clip=False):
    x = rng.standard_normal((max(64, 2 * k), k)) * rng.uniform(0.1, 3.0, k)
    x[:, rng.choice(k, dead, replace=False)] = 0.0
    w = rng.standard_normal((k, c)) * 0.05
    scales = np.abs(w).max(0) / qmax
    if halfway:  # weights on half steps: rint's ties-to-even must match np.round's
        w = (rng.integers(-qmax, qmax, (k, c)) + 0.5) * scales
    if clip:  # scales below max|w| / qmax: the clip to [-qmax, qmax] is exercised
        scales = scales * 0.5
    return w, scales, x.T @ x


@pytest.mark.parametrize("k,c", [(1, 1), (9, 3), (27, 16), (144, 64), (130, TILE + 5),
                                 (256, 2 * TILE), (200, 300)])
@pytest.mark.parametrize("qmax", [127, 32767])
def test_codes_identical_to_numpy_loop(k, c, qmax):
    rng = np.random.default_rng(k * 1000 + c + qmax)
    for kw in ({}, {"dead": k // 3}, {"halfway": True}, {"clip": True}):
        w, s, h = _case(rng, k, c, qmax, **kw)
        got = gptq.gptq_quantize(w, s, h, qmax)
        want = _numpy_gptq(w, s, h, qmax)
        assert got.dtype == np.int64 and got.shape == (k, c)
        np.testing.assert_array_equal(got, want, err_msg=f"{kw}")
        assert np.abs(got).max() <= qmax


def test_small_blocks_identical():
    """`block` other than the default: blocks ending mid-layer and a final short one."""
    rng = np.random.default_rng(7)
    w, s, h = _case(rng, 70, 40, 127)
    for block in (1, 16, 33):
        np.testing.assert_array_equal(gptq.gptq_quantize(w, s, h, 127, block=block),
                                      _numpy_gptq(w, s, h, 127, block=block))


def test_block_spreads_error_over_later_rows_in_place():
    """The kernel's own contract: row 0 is rounded as is, its error reaches row 1 along `u`."""
    wb = np.array([[0.26, -0.74], [0.1, 0.2]])
    s = np.array([0.1, 0.5])
    u = np.array([[2.0, 0.5], [0.0, 1.0]])
    q, errs = np.zeros((2, 2)), np.zeros((2, 2))
    gptq_block(wb, s, u, 0, 127.0, q, errs)
    np.testing.assert_array_equal(q[0], [3.0, -1.0])
    e0 = np.array([(0.26 - 3.0 * 0.1) / 2.0, (-0.74 - -1.0 * 0.5) / 2.0])
    np.testing.assert_array_equal(errs[0], e0)
    np.testing.assert_array_equal(wb[1], np.array([0.1, 0.2]) - 0.5 * e0)
    np.testing.assert_array_equal(q[1], np.round(wb[1] / s))

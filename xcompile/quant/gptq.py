"""Data-aware weight rounding: GPTQ (Frantar et al., 2022) on per-channel weight grids.

Rounding every weight to its nearest grid point minimises the weight error, not the error of
the layer's *output*. With the layer input `x` (one row per output position, the conv patch in
HWI order) the output error of output channel `c` is `||X dw_c||^2 = dw_c^T H dw_c` with
`H = X^T X`. GPTQ quantizes the weights one input row at a time and spreads each row's rounding
error over the rows not yet quantized, along `H`, so the error the layer's inputs actually
excite is compensated (e.g. a stem filter on smooth images keeps its spatial sum, which
nearest rounding breaks). The grid itself is unchanged: per output channel
`s_w[c] = max |w[..., c]| / qmax` of the float weights, codes in `[-qmax, qmax]`.

Deterministic: `H` is accumulated in float64 from evenly strided output positions (at most
`max_rows` per sample), dampened by `damp * mean(diag H)`, rows are processed in decreasing
`diag H` order (stable sort), and dead inputs (`diag H == 0`) are quantized by nearest rounding.
Layers with more than `MAX_BLOCK` inputs are solved in contiguous input blocks (block-diagonal
`H`), which bounds the cubic cost of the inversions; only those diagonal blocks of `H` are
accumulated, so memory grows as `K * MAX_BLOCK`, not `K^2` (a VGG classifier's 25088-wide
input: 51 MB instead of 5 GB).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import numpy as np

from xcompile.quant.gptq_kernels import gptq_block

log = logging.getLogger(__name__)

__all__ = ["collect_hessians", "gptq_quantize", "patches"]


def one_blas_thread() -> Any:
    """A context with BLAS on one thread (threadpoolctl, when installed): GPTQ's products and
    factorisations are of 256-wide blocks, too small to share, and a second BLAS thread
    contending with other work costs far more than it gives (a 256x256 Cholesky: 6 ms on one
    thread, 300-380 ms on two of a loaded 2-core machine, where yolov5s-640's GPTQ spent 440 s
    of wall time in Cholesky factorisations and Gram products)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # optional: BLAS as configured
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def patches(x: np.ndarray, op: Any, max_rows: int) -> np.ndarray:
    """Conv2d input patches `(rows, kh*kw, cin)` (HWI order), zero padded, at most `max_rows`
    evenly strided output positions."""
    a = op.attrs
    kh, kw = op.inputs[1].shape[0], op.inputs[1].shape[1]
    sh, sw = int(a.get("stride_height", 1)), int(a.get("stride_width", 1))
    dh, dw = int(a.get("dilation_height", 1)), int(a.get("dilation_width", 1))
    xp = np.pad(x, ((0, 0), (int(a.get("pad_top", 0)), int(a.get("pad_bottom", 0))),
                    (int(a.get("pad_left", 0)), int(a.get("pad_right", 0))), (0, 0)))
    n, _, _, c = xp.shape
    ho, wo = op.outputs[0].shape[1], op.outputs[0].shape[2]
    total = n * ho * wo
    step = max(1, -(-total // max_rows))
    idx = np.arange(0, total, step)
    b, rem = np.divmod(idx, ho * wo)
    oy, ox = np.divmod(rem, wo)
    out = np.empty((idx.size, kh * kw, c), np.float32)
    for i in range(kh):
        for j in range(kw):
            out[:, i * kw + j, :] = xp[b, oy * sh + i * dh, ox * sw + j * dw, :]
    return out


def _groups(op: Any) -> int:
    return int(op.attrs.get("groups", 1)) if op.op_type == "Conv2d" else 1


def _edges(k: int) -> list[int]:
    """The input blocks GPTQ solves jointly: at most `MAX_BLOCK` contiguous inputs each."""
    n = -(-k // MAX_BLOCK)
    return [round(i * k / n) for i in range(n + 1)]


def _block_gram(rows: np.ndarray) -> list[np.ndarray]:
    """The diagonal blocks (`_edges`) of `rows^T rows`, rows `(m, K)`, in float64."""
    e = _edges(rows.shape[1])
    return [(rows[:, a:b].T @ rows[:, a:b]).astype(np.float64) for a, b in zip(e[:-1], e[1:])]


def collect_hessians(net: Any, data: list, ops: list, max_rows: int = 16384,
                     runner: Any = None) -> dict[int, list[list[np.ndarray]]]:
    """`{op_id: H}` for Conv2d / Matmul `ops` of float `net` over the samples `data`, run
    with `runner` (`xcompile.runner`; default the HostBackend): per group, the diagonal blocks
    of the `(K, K)` input second moments with `K = kh*kw*cin/groups` (Matmul: one group, K the
    reduction size)."""
    from xcompile.quant.calibrate import run_float

    by_input: dict[int, list] = {}
    for op in ops:
        by_input.setdefault(op.inputs[0].v_id, []).append(op)
    hess: dict[int, list[list[np.ndarray]]] = {}

    def feed(v, arr):
        for op in by_input.get(v.v_id, ()):
            x = np.asarray(arr, np.float32)
            if op.op_type == "Matmul":
                rows = x.reshape(-1, x.shape[-1])
                groups = [rows[:: max(1, -(-rows.shape[0] // max_rows))]]
            else:
                p = patches(x, op, max_rows)  # (m, kk, cin)
                g = _groups(op)
                cin_g = p.shape[2] // g
                p = p.reshape(p.shape[0], p.shape[1], g, cin_g).transpose(2, 0, 1, 3)
                groups = list(p.reshape(g, p.shape[1], -1))  # (m, kk*cin_g) in HWI order
            blocks = [_block_gram(r) for r in groups]
            old = hess.get(op.op_id)
            hess[op.op_id] = blocks if old is None else \
                [[a + b for a, b in zip(og, ng)] for og, ng in zip(old, blocks)]

    with one_blas_thread():
        run_float(net, data, feed, runner, what="GPTQ statistics")
    return hess


def _upper_inverse_factor(h: np.ndarray) -> np.ndarray:
    """Upper triangular `u` with `inv(h) = u^T u`, from one Cholesky factorisation and one
    triangular inverse instead of a general inverse and a second factorisation (a third of the
    work): with `J` the index reversal and `J h J = L L^T`, `inv(h) = (J L^-1 J)^T (J L^-1 J)`
    and `J L^-1 J` is upper triangular with a positive diagonal, so it is the Cholesky factor
    of `inv(h)` itself. Raises `LinAlgError` when `h` is not positive definite."""
    low = np.linalg.cholesky(h[::-1, ::-1])
    try:
        from scipy.linalg import lapack

        inv_low, info = lapack.dtrtri(low, lower=1)
        if info != 0:
            raise np.linalg.LinAlgError(f"dtrtri: info {info}")
    except ImportError:  # scipy is optional: numpy's solve of the identity
        inv_low = np.linalg.solve(low, np.eye(low.shape[0]))
    return np.ascontiguousarray(np.triu(inv_low[::-1, ::-1]))


def gptq_quantize(w: np.ndarray, scales: np.ndarray, h: np.ndarray, qmax: int, *,
                  damp: float = 0.01, block: int = 128) -> np.ndarray:
    """Codes for `w` `(K, C)` (columns = output channels, per-column `scales`) given the input
    second moments `h` `(K, K)`; narrow range `[-qmax, qmax]`, int64."""
    w = np.array(w, np.float64)
    k = w.shape[0]
    s = np.asarray(scales, np.float64)[None, :]
    h = np.array(h, np.float64)
    d = np.diag(h).copy()
    dead = d <= 0.0
    h[dead, dead] = 1.0
    h += np.eye(k) * (damp * float(np.mean(np.diag(h))))
    perm = np.argsort(-np.diag(h), kind="stable")
    inv = np.argsort(perm, kind="stable")
    w, h = w[perm], h[np.ix_(perm, perm)]
    try:
        u = _upper_inverse_factor(h)
    except np.linalg.LinAlgError:
        log.debug("GPTQ: Hessian not positive definite, nearest rounding")
        return np.clip(np.round(w[inv] / s), -qmax, qmax).astype(np.int64)
    q = np.zeros_like(w)
    s0 = np.ascontiguousarray(s[0])
    for b0 in range(0, k, block):
        b1 = min(b0 + block, k)
        wb = w[b0:b1].copy()
        errs = np.zeros_like(wb)
        gptq_block(wb, s0, u, b0, float(qmax), q, errs)  # rows b0..b1 in place
        w[b1:] -= u[b0:b1, b1:].T @ errs
    return q[inv].astype(np.int64)


#: Largest input block solved jointly: wider layers are split into contiguous input blocks
#: with the off-diagonal blocks of H ignored, which bounds the O(K^3) inversions.
MAX_BLOCK = 256


def _gptq_blocked(w: np.ndarray, scales: np.ndarray, blocks: list[np.ndarray], qmax: int,
                  out: np.ndarray) -> None:
    """Codes of `w` (K, C) into `out`, one input block (and its float64 copy) at a time."""
    e = _edges(w.shape[0])
    for a, b, h in zip(e[:-1], e[1:], blocks):
        out[a:b] = gptq_quantize(w[a:b], scales, h, qmax)


def gptq_weights(w: np.ndarray, scales: np.ndarray, h: list[list[np.ndarray]], groups: int,
                 dtype: Any, qmax: int) -> np.ndarray:
    """GPTQ codes for an HWIO conv weight (or a (K, N) matmul weight) of `dtype`, given the
    Hessian blocks `collect_hessians` gathered for it."""
    with one_blas_thread():
        return _gptq_weights(w, scales, h, groups, dtype, qmax)


def _gptq_weights(w: np.ndarray, scales: np.ndarray, h: list[list[np.ndarray]], groups: int,
                  dtype: Any, qmax: int) -> np.ndarray:
    if w.ndim == 2:
        out = np.empty(w.shape, dtype)
        _gptq_blocked(w, scales, h[0], qmax, out)
        return out
    kh, kw, cin_g, cout = w.shape
    cout_g = cout // groups
    out = np.empty((kh * kw * cin_g, cout), dtype)
    flat = w.reshape(kh * kw * cin_g, cout)
    for g in range(groups):
        sl = slice(g * cout_g, (g + 1) * cout_g)
        _gptq_blocked(flat[:, sl], scales[sl], h[g], qmax, out[:, sl])
    return out.reshape(w.shape)

"""Exact integer products of a few rows by a weight matrix, read as the integers they are.

An integer Matmul of one or a few rows (a classifier's fully connected layers: vgg19's first
is 1 x 25088 by 25088 x 4096) is a matrix-vector product bound by reading the weights. The
float paths first convert the whole weight matrix to float32 or float64 (400-800 MB for that
layer, about a second per forward), then read it again; this kernel reads the int8/int16 codes
once and sums in int64, exact for any K the chips hold (|product| < 2**30).
"""

from __future__ import annotations

import numpy as np

from xir.numba_target import njit

#: at most this many rows go through `int_rows_matmul` (more: a GEMM does better)
FEW_ROWS = 24


@njit(cache=True, nogil=True)
def _rows_matmul(a, b, acc):  # pragma: no cover - compiled
    """``acc[i, :] += sum_k a[i, k] * b[k, :]`` in int64; rows of B whose factor is 0 are
    skipped (ReLU outputs are often half zeros)."""
    m, k = a.shape
    n = b.shape[1]
    for i in range(m):
        for kk in range(k):
            av = np.int64(a[i, kk])
            if av != 0:
                for j in range(n):
                    acc[i, j] += av * np.int64(b[kk, j])


def int_rows_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` exactly, int64 (m, n), for integer ``a`` (m, k) and ``b`` (k, n)."""
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"int_rows_matmul: shapes {a.shape} and {b.shape} do not multiply")
    acc = np.zeros((a.shape[0], b.shape[1]), np.int64)
    _rows_matmul(np.ascontiguousarray(a), np.ascontiguousarray(b), acc)
    return acc

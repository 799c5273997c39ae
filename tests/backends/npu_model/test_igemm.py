"""The integer-SIMD GEMM: exact against int64 numpy, and built from the instructions it claims."""

from __future__ import annotations

import re

import llvmlite.binding as ll
import numba
import numpy as np
import pytest

from npu_model.kernels import igemm


def _gemm(a: np.ndarray, w: np.ndarray, nr: int) -> np.ndarray:
    """``a @ w`` through `gemm_pairs` with the padding its callers give it."""
    m, k = a.shape
    n = w.shape[1]
    k2 = (k + 1) // 2
    rows = -(-m // igemm.MR) * igemm.MR
    ap = np.full((rows, 2 * k2), 99, dtype=np.int16)  # padding holds junk: its weights are 0
    ap[:m, :k] = a
    bq = igemm.pack_pairs(w[None].astype(np.int16), nr).reshape(-1)
    width = n + nr
    c = np.full((rows, width), 7, dtype=np.int32)
    igemm.gemm_pairs(ap.reshape(-1), 2 * k2, rows, bq, k2, n, nr, c.reshape(-1), 0, width)
    return c[:m, :n]


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (8, 2, 32), (13, 7, 5), (30, 577, 70),
                                   (64, 64, 16), (9, 1152, 33)])
def test_gemm_is_exact(rng, m, k, n):
    a = rng.integers(-128, 128, (m, k)).astype(np.int8)
    w = rng.integers(-128, 128, (k, n)).astype(np.int8)
    ref = a.astype(np.int64) @ w.astype(np.int64)
    for nr in (igemm.NR16, igemm.NR):
        np.testing.assert_array_equal(_gemm(a, w, nr), ref)


def test_extreme_operands_over_a_long_k_are_exact():
    """-128 * -128 everywhere: the largest pair sums, accumulated to near the int32 limit."""
    k = 120_000
    a = np.full((3, k), -128, dtype=np.int8)
    w = np.full((k, 2), -128, dtype=np.int8)
    w[::2, 1] = 127
    ref = a.astype(np.int64) @ w.astype(np.int64)
    assert k <= igemm.MAX_K and ref.max() < 2**31
    np.testing.assert_array_equal(_gemm(a, w, igemm.NR16), ref)


def test_panel_width_follows_the_output():
    assert igemm.panel_width(16) == igemm.NR16
    assert igemm.panel_width(17) == igemm.NR


def test_enabled_follows_the_environment(monkeypatch):
    monkeypatch.setenv("NPU_GEMM", "float")
    assert igemm.enabled() is False
    monkeypatch.setenv("NPU_GEMM", "int")
    assert igemm.enabled() is True


def test_micro_kernel_is_integer_simd():
    """The vector IR becomes fused multiply-add of int16 pairs: vpdpwssd where the CPU has
    VNNI, vpmaddwd where it has AVX2; never a scalar or float multiply in the K loop."""
    features = ll.get_host_cpu_features()
    if features.get("avx512vnni") or features.get("avxvnni"):
        want = "vpdpwssd"
    elif features.get("avx2"):
        want = "vpmaddwd"
    else:
        pytest.skip("no AVX2: the generic lowering is correct but not checked here")
    fresh = numba.njit(igemm.gemm_pairs.py_func)  # not from the disk cache: it keeps no asm
    c = np.zeros(igemm.MR * 64, dtype=np.int32)
    fresh(np.zeros(igemm.MR * 4, np.int16), 4, igemm.MR, np.zeros(2 * igemm.NR * 2, np.int16), 2,
          igemm.NR, igemm.NR, c, 0, 64)
    asm = "\n".join(fresh.inspect_asm().values())
    # MR rows x NR/16 lanes per pair of K, in the NR-wide kernel at least. LLVM's scheduling
    # model for some VNNI CPUs splits vpdpwssd into vpmaddwd + vpaddd (same integer result):
    # either form counts, the VNNI one must appear where the CPU has it.
    found = re.findall(r"\b(?:vpdpwssd|vpmaddwd)\b", asm)
    assert want in found
    assert len(found) >= igemm.MR * igemm.NR // 16
    assert "vfmadd" not in asm and "vmulps" not in asm

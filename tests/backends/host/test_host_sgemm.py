"""The HostBackend's own float GEMM: against numpy matmul, inside Conv2d against the BLAS path,
and built from the instructions it claims."""

from __future__ import annotations

import re

import llvmlite.binding as ll
import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from host_backend.ops import conv, matmul, sgemm


def _gemm(a: np.ndarray, b: np.ndarray, parts: int = 1) -> np.ndarray:
    """``a @ b`` through `gemm_taps` (one tap) in `parts` threads, B's columns padded to whole
    vectors as its callers do; C has a guard row past M that must stay untouched."""
    m, k = a.shape
    n = b.shape[1]
    npad = -(-n // sgemm.VW) * sgemm.VW
    bp = np.zeros((k, npad), np.float32)
    bp[:, :n] = b
    c = np.full((m + 1, npad), 0.5, np.float32)  # C is accumulated into
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sgemm, "get_num_threads", lambda: parts)
        sgemm.gemm_taps(np.ascontiguousarray(a).reshape(-1), k, np.zeros(1, np.int64), k, m,
                        bp.reshape(-1), npad, npad, c.reshape(-1), npad)
    assert (c[m] == np.float32(0.5)).all()
    return c[:m, :n] - np.float32(0.5)


def test_a_part_no_worker_started_runs_on_the_caller(rng, monkeypatch):
    """On a loaded machine a worker may not start its part before the caller finishes its
    own: the caller takes the part back and runs it (was: waited for the worker)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    busy = ThreadPoolExecutor(1)
    release = threading.Event()
    blocker = busy.submit(release.wait, 10)  # the only worker is taken: a part handed to it
    # waits
    monkeypatch.setattr(sgemm, "worker_pool", lambda parts: busy)
    a = rng.standard_normal((96, 40)).astype(np.float32)
    b = rng.standard_normal((40, 32)).astype(np.float32)
    try:
        got = _gemm(a, b, parts=3)
        assert not blocker.done()  # returned without waiting for the worker
    finally:
        release.set()
        busy.shutdown()
    np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("m,k,n,parts", [(1, 1, 1, 1), (6, 3, 16, 1), (13, 7, 5, 1),
                                         (30, 577, 70, 1), (29, 40, 64, 1), (161, 2500, 144, 3),
                                         (70, 1025, 48, 2), (49, 700, 512, 1)])
def test_gemm_matches_numpy(rng, m, k, n, parts):
    """Any M (whole tiles and rows left over, or few rows: a matrix-vector product), K past
    the K block (KC), panels of every width, the work split among parts."""
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(_gemm(a, b, parts), ref, rtol=1e-4, atol=1e-4 * np.sqrt(k))


def test_taps_sum_shifted_row_runs(rng):
    """Each tap reads A at its own offset: C = sum over taps of A_t @ B_t."""
    lda, kt, rows = 5, 4, 12
    a = rng.standard_normal(rows * lda + 40).astype(np.float32)
    offs = np.array([0, 7, 19], np.int64)
    b = rng.standard_normal((3 * kt, 16)).astype(np.float32)
    c = np.zeros((rows, 16), np.float32)
    sgemm.gemm_taps(a, lda, offs, kt, rows, b.reshape(-1), 16, 16, c.reshape(-1), 16)
    ref = sum(np.stack([a[o + r * lda:o + r * lda + kt] for r in range(rows)]) @
              b[t * kt:(t + 1) * kt] for t, o in enumerate(offs))
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-5)


_CONVS = st.fixed_dictionaries({
    "n": st.integers(1, 2), "h": st.integers(1, 19), "w": st.integers(1, 23),
    "cin": st.sampled_from([1, 3, 16, 20, 33]), "cout": st.sampled_from([1, 5, 16, 40, 64, 70]),
    "k": st.sampled_from([(1, 1), (3, 3), (2, 3), (5, 5)]), "stride": st.integers(1, 2),
    "dil": st.integers(1, 2), "pad": st.integers(0, 2), "bias": st.booleans(),
    "mode": st.sampled_from(["zeros", "zeros", "reflect"]), "act": st.booleans(),
})


@settings(max_examples=60, deadline=None)
@given(case=_CONVS, seed=st.integers(0, 2**16))
def test_conv2d_on_sgemm_matches_the_blas_path(case, seed):
    rng = np.random.default_rng(seed)
    kh, kw = case["k"]
    pad = case["pad"]
    if case["mode"] == "reflect":
        pad = min(pad, case["h"] - 1, case["w"] - 1)
    hp, wp = case["h"] + 2 * pad, case["w"] + 2 * pad
    if hp < case["dil"] * (kh - 1) + 1 or wp < case["dil"] * (kw - 1) + 1:
        return
    x = rng.standard_normal((case["n"], case["h"], case["w"], case["cin"])).astype(np.float32)
    w = rng.standard_normal((kh, kw, case["cin"], case["cout"])).astype(np.float32)
    inputs = [x, w] + ([rng.standard_normal(case["cout"]).astype(np.float32)]
                       if case["bias"] else [])
    attrs = {"stride_height": case["stride"], "stride_width": case["stride"],
             "dilation_height": case["dil"], "dilation_width": case["dil"],
             "pad_top": pad, "pad_bottom": pad, "pad_left": pad, "pad_right": pad,
             "padding_mode": case["mode"]}
    if case["act"]:
        attrs.update(act="relu", act_alpha=0.1, act_max=2.0)
    calls = []
    real = sgemm.gemm_taps

    def counted(*args):
        calls.append(args[4])
        return real(*args)

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOST_GEMM", "blas")
        ref = conv.conv2d(inputs, attrs)[0]
        mp.setenv("HOST_GEMM", "own")
        mp.setattr(sgemm, "gemm_taps", counted)
        got = conv.conv2d(inputs, attrs)[0]
    assert calls, "the convolution did not run on sgemm"
    assert got.shape == ref.shape and got.dtype == np.float32 and got.flags.c_contiguous
    scale = max(1.0, float(np.abs(ref).max()))
    np.testing.assert_allclose(got, ref, rtol=0, atol=2e-5 * scale)


@pytest.mark.parametrize("shape,k,stride,dil,pad", [
    ((1, 40, 44, 16), (3, 3), 1, 1, 1),
    ((2, 33, 35, 20), (3, 2), 1, 1, (1, 0, 2, 1)),
    ((1, 48, 48, 17), (3, 3), 1, 2, 2),
    ((1, 30, 30, 64), (1, 1), 1, 1, 0),
    ((1, 61, 64, 3), (7, 7), 2, 1, 3),
    ((2, 40, 37, 8), (3, 3), (2, 1), 1, 1),
])
def test_conv2d_reads_its_taps_from_the_padded_input(monkeypatch, rng, shape, k, stride, dil,
                                                     pad):
    """Zero-padded convolutions skip im2col: A's rows are one pixel apart (stride 1: every
    pixel of the padded grid) or one output pixel apart within an output row (any stride: one
    group of tiles per output row), and each tap, or each kernel row when dilation_width is
    1, is an offset."""
    pt, pb, pl, pr = pad if isinstance(pad, tuple) else (pad,) * 4
    sh, sw = stride if isinstance(stride, tuple) else (stride, stride)
    n, cin = shape[0], shape[3]
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((*k, cin, 24)).astype(np.float32)
    bias = rng.standard_normal(24).astype(np.float32)
    attrs = {"stride_height": sh, "stride_width": sw, "dilation_height": dil,
             "dilation_width": dil, "pad_top": pt, "pad_bottom": pb, "pad_left": pl,
             "pad_right": pr}
    monkeypatch.setenv("HOST_GEMM", "blas")
    ref = conv.conv2d([x, w, bias], attrs)[0]
    calls = []
    real = sgemm.gemm_taps
    monkeypatch.setattr(sgemm, "gemm_taps", lambda *a: calls.append(a) or real(*a))
    monkeypatch.setenv("HOST_GEMM", "own")
    got = conv.conv2d([x, w, bias], attrs)[0]
    grouped = (sh, sw) != (1, 1)
    assert len(calls) == (n if grouped else 1)
    for args in calls:
        lda, offs, kt = args[1], args[2], args[3]
        assert lda == sw * cin
        assert len(offs) == (k[0] if dil == 1 else k[0] * k[1])
        assert kt * len(offs) == k[0] * k[1] * cin
        if grouped:
            assert args[10] == ref.shape[2]
            assert args[11] == sh * (shape[2] + pl + pr) * cin
    np.testing.assert_allclose(got, ref, rtol=0, atol=2e-5 * np.abs(ref).max())


@pytest.mark.parametrize("a_shape,n,bias", [
    ((1, 7), 3, True), ((25, 7), 3, True), ((2, 19, 64), 70, False), ((1, 512), 1000, True),
    ((31, 512), 1000, True), ((3, 4, 6, 33), 16, True)])
def test_matmul_by_a_weight_matrix_runs_on_sgemm(monkeypatch, rng, a_shape, n, bias):
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal((a_shape[-1], n)).astype(np.float32)
    inputs = [a, b] + ([rng.standard_normal(n).astype(np.float32)] if bias else [])
    ref = a.astype(np.float64) @ b + (inputs[2] if bias else 0)
    calls = []
    for name in ("gemm_taps", "_gemv_taps"):  # whole tiles, or a few rows one by one
        real = getattr(sgemm, name)
        monkeypatch.setattr(sgemm, name, lambda *args, f=real: calls.append(1) or f(*args))
    monkeypatch.setenv("HOST_GEMM", "own")
    (got,) = matmul.matmul(inputs, {"act": "relu"})
    assert calls and got.shape == ref.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, np.maximum(ref, 0), rtol=1e-5, atol=1e-4)


def test_enabled_follows_the_environment(monkeypatch):
    monkeypatch.setenv("HOST_GEMM", "blas")
    assert sgemm.enabled() is False
    monkeypatch.setenv("HOST_GEMM", "own")
    assert sgemm.enabled() is True


def test_micro_kernel_is_vector_fma():
    """The K loop is fused multiply-adds of 16 float32 lanes, one per vector of the tile, on
    zmm registers (the CPUs it is enabled on by default)."""
    if not ll.get_host_cpu_features().get("avx512f"):
        pytest.skip("no AVX-512: the generic lowering is correct but not checked here")
    fresh = numba.njit(sgemm._tile.py_func)  # not from the disk cache: it keeps no asm
    k = 8
    fresh(4, np.zeros(sgemm.MR * k, np.float32), 0, k, np.zeros(k * sgemm.NR, np.float32), 0,
          sgemm.NR, np.zeros(sgemm.MR * sgemm.NR, np.float32), 0, sgemm.NR, k)
    asm = "\n".join(fresh.inspect_asm().values())
    fmas = re.findall(r"\bvfmadd\d+ps\s+[^\n]*zmm", asm)
    # the 4-lane kernel alone has MR x 4 in its loop
    assert len(fmas) >= sgemm.MR * 4


def test_work_buffers_start_on_a_cache_line():
    """Packed B and C are read and written as whole 64-byte vectors: a buffer starting off
    a cache line would make every one of them straddle two lines."""
    for tag, size in (("align-test-a", 5), ("align-test-a", 70_001), ("align-test-b", 1 << 20)):
        buf = sgemm.scratch(tag, size)
        assert buf.size == size and buf.dtype == np.float32
        assert buf.ctypes.data % sgemm.ALIGN == 0


def test_wide_b_is_packed_in_shorter_blocks():
    """A K block of all columns stays within `PACK_BYTES` (wide B: fewer rows per block)."""
    assert sgemm.block_rows(64) == sgemm.KC
    assert sgemm.block_rows(512) * 512 * 4 <= sgemm.PACK_BYTES
    assert sgemm.block_rows(10**9) == sgemm.VW

"""int16 on the integer-SIMD GEMM: weight digits, K-chunks exact in int32, int64 sums; the MPE
kernels that use it, bit-exact against int64 numpy, and the instructions it is built from."""

from __future__ import annotations

import re

import llvmlite.binding as ll
import numba
import numpy as np
import pytest
from npu_testlib import rand_requant, ref_conv_acc, ref_requant

from npu_model import asm
from npu_model.kernels import igemm, matmul, mpe


def _gemm16(a: np.ndarray, w: np.ndarray, nr: int) -> tuple[np.ndarray, int]:
    """``a @ w`` (int16) through `gemm_pairs_wide`, as the convolution calls it; also the
    chunk length it used."""
    m, k = a.shape
    n = w.shape[1]
    k2 = (k + 1) // 2
    rows = -(-m // igemm.MR) * igemm.MR
    ap = np.full((rows, 2 * k2), -32768, dtype=np.int16)  # padding: junk, its weights are 0
    ap[:m, :k] = a
    hi, lo = igemm.split_digits(w)
    dmax = int(max(np.abs(hi).max(), np.abs(lo).max()))
    bh = (igemm.pack_pairs(hi[None], nr).reshape(-1) if hi.any()
          else np.zeros(0, dtype=np.int16))
    bl = igemm.pack_pairs(lo[None], nr).reshape(-1)
    kc2 = igemm.chunk_pairs(2**15, dmax, k2)
    width = n + nr
    c = np.full((rows, width), 7, dtype=np.int64)
    igemm.gemm_pairs_wide(ap.reshape(-1), 2 * k2, rows, bh, bl, k2, kc2, n, nr,
                          np.empty(2 * igemm.MR * nr, np.int32), c.reshape(-1), 0, width)
    return c[:m, :n], kc2


def test_digits_are_exact_over_every_int16():
    w = np.arange(-32768, 32768, dtype=np.int16)
    hi, lo = igemm.split_digits(w)
    assert (hi.astype(np.int64) * 256 + lo == w).all()
    assert lo.min() == -128 and lo.max() == 127 and hi.min() == -128 and hi.max() == 128


def test_chunk_keeps_every_partial_sum_in_int32():
    assert igemm.chunk_pairs(2**15, 128, 10_000) == 255
    assert 2 * 255 * 2**15 * 128 < 2**31 <= 2 * 256 * 2**15 * 128
    assert igemm.chunk_pairs(2**15, 8, 10_000) == 4095  # small digits: longer chunks
    assert igemm.chunk_pairs(2**15, 128, 40) == 40  # short K: one chunk
    assert igemm.chunk_pairs(2**15, 0, 40) == 40  # all-zero weights


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (13, 7, 5), (30, 577, 70), (9, 1152, 33)])
def test_gemm16_is_exact(rng, m, k, n):
    a = rng.integers(-32768, 32768, (m, k)).astype(np.int16)
    w = rng.integers(-32768, 32768, (k, n)).astype(np.int16)
    ref = a.astype(np.int64) @ w.astype(np.int64)
    for nr in (igemm.NR16, igemm.NR):
        np.testing.assert_array_equal(_gemm16(a, w, nr)[0], ref)


def test_extreme_operands_need_and_get_int64():
    """-32768 * -32768 everywhere over K = 3001: every product is 2**30 (a single pair already
    wraps int32), the sums reach 2**41; K runs in 12 chunks."""
    k = 3001
    a = np.full((9, k), -32768, dtype=np.int16)
    w = np.full((k, 3), -32768, dtype=np.int16)
    w[::2, 1] = 32767
    w[:, 2] = 128  # a digit boundary: hi 1, lo -128... (128 = 256 * 1 - 128)
    ref = a.astype(np.int64) @ w.astype(np.int64)
    assert np.abs(ref).max() > 2**40
    got, kc2 = _gemm16(a, w, igemm.NR16)
    assert kc2 == 255
    np.testing.assert_array_equal(got, ref)


def test_small_weights_take_one_gemm(rng):
    """Weights inside [-128, 127]: no high digit panel, the same exact result."""
    a = rng.integers(-32768, 32768, (11, 600)).astype(np.int16)
    w = rng.integers(-128, 128, (600, 20)).astype(np.int16)
    hi, _ = igemm.split_digits(w)
    assert not hi.any()
    np.testing.assert_array_equal(_gemm16(a, w, igemm.NR16)[0],
                                  a.astype(np.int64) @ w.astype(np.int64))


def _conv16(hw, rng, h, w, cin, cout, k=3, stride=1, pad=1, groups=1, x=None, wq=None):
    info = np.iinfo(np.int16)
    if x is None:
        x = rng.integers(info.min, info.max + 1, (h, w, cin)).astype(np.int16)
    if wq is None:
        wq = rng.integers(-info.max, info.max + 1, (k, k, cin // groups, cout)).astype(np.int16)
    bias = rng.integers(-5000, 5000, cout)
    m, s = rand_requant(rng, cout, 2.0 / (k * k * cin // groups * 3000))
    fi = hw.fmap_in(x)
    oh, ow = asm.conv_out_hw(h, w, (k, k), (stride, stride), (pad,) * 4, (1, 1))
    fo = hw.fmap_out(oh, ow, cout, "int16")
    hw.run([asm.Conv(fi, fo, hw.put(asm.pack_conv_weights(wq, groups, "int16", hw.cfg)),
                     hw.put(asm.pack_requant_params(bias, m, s)), kernel=(k, k),
                     stride=(stride, stride), pad=(pad,) * 4, groups=groups,
                     clip=(info.min, info.max))])
    acc = ref_conv_acc(x, wq, bias, (stride, stride), (pad,) * 4, (1, 1), groups)
    return hw.read(fo), ref_requant(acc, m, s, info.min, info.max)


@pytest.fixture
def int16_path(dev, monkeypatch):
    """int16 convolutions and matmuls on the integer GEMM, the float64 kernels made to fail:
    the op must run on the integer path."""
    dev.sim.int_gemm16 = True

    def no_float(*a, **k):
        raise AssertionError("int16 layer took the float64 path")

    monkeypatch.setattr(mpe, "conv_dense", no_float)
    monkeypatch.setattr(matmul, "matmul_dynamic", no_float)


@pytest.mark.parametrize("case", [dict(h=7, w=6, cin=20, cout=24),
                                  dict(h=9, w=8, cin=12, cout=40, stride=2, groups=2),
                                  dict(h=5, w=5, cin=10, cout=6, k=1, pad=0, groups=2),
                                  dict(h=6, w=6, cin=64, cout=17, k=3)],  # K 576: two chunks
                         ids=["3x3", "grouped-strided", "grouped-1x1", "two-chunks"])
def test_int16_conv_on_the_integer_gemm(hw, rng, int16_path, case):
    got, ref = _conv16(hw, rng, **case)
    np.testing.assert_array_equal(got, ref)


def test_int16_conv_extreme_operands(hw, rng, int16_path):
    """Full-scale operands over K = 1152: accumulators far past int32."""
    x = np.full((4, 4, 128), -32768, dtype=np.int16)
    x[1::2, :, ::3] = 32767
    wq = np.full((3, 3, 128, 8), -32768, dtype=np.int16)
    wq[..., 1::2] = 32767
    got, ref = _conv16(hw, rng, 4, 4, 128, 8, x=x, wq=wq)
    np.testing.assert_array_equal(got, ref)


def test_int16_conv_float64_fallback_still_exact(hw, rng, dev):
    dev.sim.int_gemm16 = False
    got, ref = _conv16(hw, rng, 7, 6, 20, 24)
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("transposed", [False, True])
def test_int16_matmul_dynamic_on_the_integer_gemm(hw, rng, int16_path, transposed):
    batch, m_, k, n = 2, 13, 601, 37  # odd K over three chunks, two panels
    a = rng.integers(-32768, 32768, (batch, m_, k)).astype(np.int16)
    b = rng.integers(-32768, 32768, (batch, k, n)).astype(np.int16)
    a[0, 0] = -32768
    b[0, :, 0] = -32768
    bias = rng.integers(-3000, 3000, n)
    mult, shift = rand_requant(rng, n, 1.0 / (k * 9000))
    fa = hw.fmap_in(a)
    fb = hw.fmap_in(np.ascontiguousarray(b.transpose(0, 2, 1)) if transposed else b)
    fo = hw.fmap_out(batch, m_, n, "int16")
    hw.run([asm.Matmul(fa, fo, hw.put(asm.pack_requant_params(bias, mult, shift, n=n)), b=fb,
                       clip=(-32767, 32767), b_transposed=transposed)])
    acc = a.astype(np.int64) @ b.astype(np.int64) + bias
    np.testing.assert_array_equal(hw.read(fo), ref_requant(acc, mult, shift, -32767, 32767))


def test_enabled_int16_follows_the_environment(monkeypatch):
    monkeypatch.setenv("NPU_GEMM", "float")
    assert igemm.enabled_int16() is False
    monkeypatch.setenv("NPU_GEMM", "int")
    assert igemm.enabled_int16() is True


def test_cpus_without_avx2_keep_the_float64_path(monkeypatch):
    monkeypatch.delenv("NPU_GEMM", raising=False)
    monkeypatch.setattr(igemm.ll, "get_host_cpu_features", lambda: {"sse2": True})
    assert igemm.enabled_int16() is False
    monkeypatch.setattr(igemm.ll, "get_host_cpu_features", lambda: {"avx2": True})
    assert igemm.enabled_int16() is True


def test_wide_gemm_is_integer_simd():
    """The int16 digit GEMM runs on the same micro-kernel: vpdpwssd where the CPU has VNNI
    (or vpmaddwd + vpaddd, which LLVM may pick on some VNNI CPUs), no float multiply."""
    features = ll.get_host_cpu_features()
    if not features.get("avx2"):
        pytest.skip("no AVX2: the generic lowering is correct but not checked here")
    vnni = features.get("avx512vnni") or features.get("avxvnni")
    fresh = numba.njit(igemm.gemm_pairs_wide.py_func)  # not from the disk cache: no asm there
    nr = igemm.NR
    c = np.zeros(igemm.MR * 64, dtype=np.int64)
    b = np.zeros(2 * nr * 2, np.int16)
    fresh(np.zeros(igemm.MR * 4, np.int16), 4, igemm.MR, b, b, 2, 2, nr, nr,
          np.zeros(2 * igemm.MR * nr, np.int32), c, 0, 64)
    asm_text = "\n".join(fresh.inspect_asm().values())
    found = re.findall(r"\b(?:vpdpwssd|vpmaddwd)\b", asm_text)
    assert (vnni and found) or "vpmaddwd" in found
    assert len(found) >= igemm.MR * nr // 16
    assert "vfmadd" not in asm_text and "vmulps" not in asm_text and "vmulpd" not in asm_text


def test_int16_depthwise_extreme_operands(hw, rng):
    """Full-scale int16 depthwise: 25 taps of 2**30 products sum past int32, exactly."""
    c = 24
    x = np.full((7, 7, c), -32768, dtype=np.int16)
    x[::2, :, ::5] = 32767
    wq = np.full((5, 5, 1, c), -32768, dtype=np.int16)
    wq[..., 1::2] = 32767
    got, ref = _conv16(hw, rng, 7, 7, c, c, k=5, pad=2, groups=c, x=x, wq=wq)
    np.testing.assert_array_equal(got, ref)


def test_int16_depthwise_multiplies_32_bit_lanes():
    """int16 depthwise MACs: weights in int32, products by ``vpmuldq`` (sign-extended 32-bit
    lanes into 64), not the full 64-bit ``vpmullq``."""
    if not ll.get_host_cpu_features().get("avx512f"):
        pytest.skip("vpmuldq on zmm lanes is checked on AVX-512 CPUs")
    fresh = numba.njit(mpe._mac_run.py_func)
    fresh(np.zeros(64, np.int64), np.zeros(64, np.int16), np.zeros(64, np.int32))
    asm_text = "\n".join(fresh.inspect_asm().values())
    assert "vpmuldq" in asm_text and "vpmullq" not in asm_text

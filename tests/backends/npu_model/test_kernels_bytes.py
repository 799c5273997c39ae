"""int16 convolutions on the byte GEMM (`npu_model.kernels.bgemm`, AVX-512 VNNI ``vpdpbusd``):
exact over random and full-scale operands against int64 numpy, the layer really on that path
(and on the digit path where it is turned off or K is too long), the instruction in the
generated code, and the switch that turns it on."""

from __future__ import annotations

import re

import llvmlite.binding as ll
import numba
import numpy as np
import pytest
from npu_testlib import Harness, rand_requant, ref_conv_acc, ref_requant

from npu_model import asm
from npu_model.kernels import bgemm, grouped, igemm, implicit, mpe

VNNI = bool(ll.get_host_cpu_features().get("avx512vnni"))
needs_vnni = pytest.mark.skipif(not VNNI, reason="vpdpbusd needs AVX-512 VNNI")


def _bytes_gemm(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``x @ w`` (int16, 2-D) through `byte_planes` and `gemm_int16_bytes`, as the convolution
    calls them, rows of junk past the last one and in the odd K column."""
    m, k = x.shape
    n = w.shape[1]
    rows = -(-m // bgemm.MR) * bgemm.MR
    kp = -(-k // 4) * 4
    ldc = 2 * ((k + 1) // 2)
    colbuf = np.full((rows, ldc), -32768, dtype=np.int16)
    colbuf[:m, :k] = x
    bq, corr = bgemm.int16_weights(w[None])
    ab = np.empty(rows * 2 * kp, np.uint8)
    rsum = np.empty(rows, np.int64)
    numba.njit(bgemm.byte_planes.py_func)(colbuf.reshape(-1), ldc, rows, k, kp, ab, rsum)
    width = n + bgemm.NR
    c = np.full((rows, width), 7, dtype=np.int64)
    bgemm.gemm_int16_bytes(ab, kp, rows, bq[0], n, np.empty(3 * bgemm.MR * bgemm.NR, np.int32),
                           c.reshape(-1), 0, width, rsum)
    return c[:m, :n] + corr


@needs_vnni
@pytest.mark.parametrize(("m", "k", "n"), [(1, 1, 1), (5, 3, 7), (17, 27, 40), (64, 1152, 128),
                                           (9, 999, 33), (3, 4099, 16)])
def test_byte_gemm_is_exact(m, k, n):
    rng = np.random.default_rng(m * k + n)
    x = rng.integers(-32768, 32768, (m, k)).astype(np.int16)
    w = rng.integers(-32768, 32768, (k, n)).astype(np.int16)
    np.testing.assert_array_equal(_bytes_gemm(x, w), x.astype(np.int64) @ w.astype(np.int64))


@needs_vnni
@pytest.mark.parametrize("xv", [-32768, -1, 0, 255, 256, 32767])
@pytest.mark.parametrize("wv", [-32768, -129, -1, 128, 255, 32767])
def test_byte_gemm_extreme_operands(xv, wv):
    """Every byte boundary, at the longest K (sums far past int32, G23 at its bound)."""
    k = bgemm.MAX_K
    x = np.full((3, k), xv, dtype=np.int16)
    w = np.full((k, 2), wv, dtype=np.int16)
    np.testing.assert_array_equal(_bytes_gemm(x, w), x.astype(np.int64) @ w.astype(np.int64))


def test_max_k_keeps_every_byte_gemm_in_int32():
    assert 2 * bgemm.MAX_K * 255 * 128 < 2**31 <= 2 * (bgemm.MAX_K + 1) * 255 * 128


@needs_vnni
def test_byte_gemm_is_vpdpbusd():
    fresh = numba.njit(bgemm.gemm_int16_bytes.py_func)  # not from the disk cache: no asm there
    nr, mr = bgemm.NR, bgemm.MR
    fresh(np.zeros(mr * 8, np.uint8), 4, mr, np.zeros(2 * nr * 4, np.int8), nr,
          np.zeros(3 * mr * nr, np.int32), np.zeros(mr * 2 * nr, np.int64), 0, 2 * nr,
          np.zeros(mr, np.int64))
    text = "\n".join(fresh.inspect_asm().values())
    assert len(re.findall(r"\bvpdpbusd\b", text)) >= mr * nr // 16
    assert "vpmaddwd" not in text and "vfmadd" not in text


def test_enabled_follows_the_cpu_and_the_environment(monkeypatch):
    monkeypatch.delenv("NPU_GEMM", raising=False)
    monkeypatch.delenv("NPU_BYTE_GEMM", raising=False)
    monkeypatch.setattr(bgemm.ll, "get_host_cpu_features",
                        lambda: {"avx512vnni": True, "avx512bw": True})
    assert bgemm.enabled() is True
    monkeypatch.setenv("NPU_BYTE_GEMM", "0")
    assert bgemm.enabled() is False
    monkeypatch.delenv("NPU_BYTE_GEMM")
    monkeypatch.setenv("NPU_GEMM", "float")
    assert bgemm.enabled() is False
    monkeypatch.setenv("NPU_GEMM", "int")  # int16 on an integer GEMM: the byte one where it can
    assert bgemm.enabled() is True
    monkeypatch.setattr(bgemm.ll, "get_host_cpu_features", lambda: {"avx512vnni": False,
                                                                    "avxvnni": True,
                                                                    "avx512bw": True})
    assert bgemm.enabled() is False  # AVX-VNNI has no 512-bit vpdpbusd


@pytest.fixture
def hw16():
    from xrt import Device

    dev = Device.Open("sim://zg330")
    yield dev, Harness(dev, size=16 << 20)
    dev.close()


def _conv(hw, rng, h, w, cin, cout, k=3, stride=1, pad=1, groups=1, x=None, wq=None):
    info = np.iinfo(np.int16)
    if x is None:
        x = rng.integers(info.min, info.max + 1, (h, w, cin)).astype(np.int16)
    if wq is None:
        wq = rng.integers(info.min, info.max + 1, (k, k, cin // groups, cout)).astype(np.int16)
    bias = rng.integers(-5000, 5000, cout)
    m, s = rand_requant(rng, cout, 2.0 / (k * k * cin // groups * 3000))
    oh, ow = asm.conv_out_hw(h, w, (k, k), (stride, stride), (pad,) * 4, (1, 1))
    fo = hw.fmap_out(oh, ow, cout, "int16")
    hw.run([asm.Conv(hw.fmap_in(x), fo, hw.put(asm.pack_conv_weights(wq, groups, "int16",
                                                                    hw.cfg)),
                     hw.put(asm.pack_requant_params(bias, m, s)), kernel=(k, k),
                     stride=(stride, stride), pad=(pad,) * 4, groups=groups,
                     clip=(info.min, info.max))])
    acc = ref_conv_acc(x, wq, bias, (stride, stride), (pad,) * 4, (1, 1), groups)
    return hw.read(fo), ref_requant(acc, m, s, info.min, info.max)


def _spy(monkeypatch):
    """Names of the int16 dense kernels that ran."""
    ran: list[str] = []
    for split in (mpe.CONV_INT16, mpe.CONV_INT16_BYTES):
        def spy(*args, _k=split.kernel, _n=split.__name__):
            ran.append(_n)
            return _k(*args)

        monkeypatch.setattr(split, "kernel", spy)

    def no_float(*a, **k):
        raise AssertionError("int16 layer took the float64 path")

    monkeypatch.setattr(mpe, "conv_dense", no_float)
    return ran


CASES = {"3x3": dict(h=7, w=6, cin=20, cout=24),
         "grouped-strided": dict(h=9, w=8, cin=12, cout=40, stride=2, groups=2),
         "grouped-1x1": dict(h=5, w=5, cin=10, cout=6, k=1, pad=0, groups=2),
         "stem-6x6": dict(h=14, w=14, cin=3, cout=16, k=6, stride=2, pad=2),
         "wide": dict(h=6, w=6, cin=64, cout=70, k=3)}


@pytest.mark.parametrize("path", [pytest.param("bytes", marks=needs_vnni), "digits"])
@pytest.mark.parametrize("case", list(CASES))
def test_int16_conv_on_each_integer_path(hw16, monkeypatch, path, case):
    dev, hw = hw16
    dev.sim.int_gemm16 = True
    dev.sim.byte_gemm = path == "bytes"
    ran = _spy(monkeypatch)
    got, ref = _conv(hw, np.random.default_rng(len(case)), **CASES[case])
    np.testing.assert_array_equal(got, ref)
    assert ran and set(ran) == {"conv_dense_int16_bytes" if path == "bytes"
                                else "conv_dense_int16"}


@needs_vnni
def test_int16_conv_extreme_operands_on_bytes(hw16, monkeypatch):
    dev, hw = hw16
    dev.sim.int_gemm16 = dev.sim.byte_gemm = True
    ran = _spy(monkeypatch)
    x = np.full((4, 4, 128), -32768, dtype=np.int16)
    x[1::2, :, ::3] = 32767
    wq = np.full((3, 3, 128, 8), -32768, dtype=np.int16)
    wq[..., 1::2] = 32767
    got, ref = _conv(hw, np.random.default_rng(1), 4, 4, 128, 8, x=x, wq=wq)
    np.testing.assert_array_equal(got, ref)
    assert set(ran) == {"conv_dense_int16_bytes"}


@needs_vnni
def test_int16_conv_past_max_k_takes_the_digit_gemm(hw16, monkeypatch):
    dev, hw = hw16
    dev.sim.int_gemm16 = dev.sim.byte_gemm = True
    ran = _spy(monkeypatch)
    monkeypatch.setattr(bgemm, "MAX_K", 100)  # 3 x 3 x 20 = 180 taps past it
    got, ref = _conv(hw, np.random.default_rng(2), 5, 5, 20, 8)
    np.testing.assert_array_equal(got, ref)
    assert set(ran) == {"conv_dense_int16"}


def test_digit_path_still_default_without_vnni(monkeypatch):
    monkeypatch.setattr(bgemm.ll, "get_host_cpu_features", lambda: {"avx2": True})
    monkeypatch.delenv("NPU_GEMM", raising=False)
    assert bgemm.enabled() is False and igemm.enabled_int16() is True


# --- int8 operands: one byte GEMM, activations read as x + 128 -------------------------------

def _bytes_gemm8(x: np.ndarray, w: np.ndarray, nr: int) -> np.ndarray:
    """``x @ w`` (int8, 2-D) through `gemm_int8_bytes` plus the bias correction of
    `int8_weights`, junk in the K padding and the rows past the last one."""
    m, k = x.shape
    n = w.shape[1]
    rows = -(-m // bgemm.MR) * bgemm.MR
    kp = -(-k // 4) * 4
    a = np.full((rows, kp), -128, dtype=np.int8)
    a[:m, :k] = x
    bq, corr = bgemm.int8_weights(w[None], nr)
    width = n + nr
    c = np.full((rows, width), 7, dtype=np.int32)
    bgemm.gemm_int8_bytes(a.reshape(-1), kp, rows, bq[0], kp // 4, n, nr, c.reshape(-1), 0,
                          width)
    return c[:m, :n] + corr


@needs_vnni
@pytest.mark.parametrize("nr", [bgemm.NR, bgemm.NR16])
@pytest.mark.parametrize(("m", "k", "n"), [(1, 1, 1), (5, 3, 7), (17, 27, 40), (64, 1152, 128),
                                           (9, 999, 33)])
def test_int8_byte_gemm_is_exact(nr, m, k, n):
    rng = np.random.default_rng(m * k + n + nr)
    x = rng.integers(-128, 128, (m, k)).astype(np.int8)
    w = rng.integers(-128, 128, (k, n)).astype(np.int8)
    np.testing.assert_array_equal(_bytes_gemm8(x, w, nr), x.astype(np.int64) @ w.astype(np.int64))


@needs_vnni
@pytest.mark.parametrize("xv", [-128, -1, 0, 127])
@pytest.mark.parametrize("wv", [-128, -1, 127])
def test_int8_byte_gemm_extreme_operands(xv, wv):
    k = bgemm.MAX_K8  # (x + 128) w summed to its int32 bound
    x = np.full((2, k), xv, dtype=np.int8)
    w = np.full((k, 3), wv, dtype=np.int8)
    np.testing.assert_array_equal(_bytes_gemm8(x, w, bgemm.NR),
                                  x.astype(np.int64) @ w.astype(np.int64))


def test_max_k8_keeps_the_byte_gemm_in_int32():
    assert bgemm.MAX_K8 * 255 * 128 < 2**31 <= (bgemm.MAX_K8 + 1) * 255 * 128


@needs_vnni
def test_int8_byte_gemm_is_vpdpbusd_with_the_sign_flip():
    fresh = numba.njit(bgemm.gemm_int8_bytes.py_func)  # not from the disk cache: no asm there
    nr, mr = bgemm.NR, bgemm.MR
    fresh(np.zeros(mr * 4, np.int8), 4, mr, np.zeros(nr * 4, np.int8), 1, nr, nr,
          np.zeros(mr * nr, np.int32), 0, nr)
    text = "\n".join(fresh.inspect_asm().values())
    assert len(re.findall(r"\bvpdpbusd\b", text)) >= mr * (nr + bgemm.NR16) // 16  # both widths
    assert re.search(r"\bvpxor[dq]?\b", text)  # the sign flip, vectorised
    assert "vpmaddwd" not in text and "vfmadd" not in text


def _conv8(hw, rng, h, w, cin, cout, k=3, stride=1, pad=1, groups=1, x=None, wq=None):
    if x is None:
        x = rng.integers(-128, 128, (h, w, cin)).astype(np.int8)
    if wq is None:
        wq = rng.integers(-128, 128, (k, k, cin // groups, cout)).astype(np.int8)
    bias = rng.integers(-500, 500, cout)
    m, s = rand_requant(rng, cout, 2.0 / (k * k * cin // groups * 30))
    oh, ow = asm.conv_out_hw(h, w, (k, k), (stride, stride), (pad,) * 4, (1, 1))
    fo = hw.fmap_out(oh, ow, cout, "int8")
    hw.run([asm.Conv(hw.fmap_in(x), fo, hw.put(asm.pack_conv_weights(wq, groups, "int8",
                                                                    hw.cfg)),
                     hw.put(asm.pack_requant_params(bias, m, s)), kernel=(k, k),
                     stride=(stride, stride), pad=(pad,) * 4, groups=groups, clip=(-128, 127))])
    acc = ref_conv_acc(x, wq, bias, (stride, stride), (pad,) * 4, (1, 1), groups)
    return hw.read(fo), ref_requant(acc, m, s, -128, 127)


def _spy8(monkeypatch):
    ran: list[str] = []
    for split in (mpe.CONV_INT, mpe.CONV_INT8_BYTES, grouped.CONV_G1X1_INT8,
                  implicit.CONV_IMPLICIT):
        def spy(*args, _k=split.kernel, _n=split.__name__):
            ran.append(_n)
            return _k(*args)

        monkeypatch.setattr(split, "kernel", spy)
    return ran


@pytest.mark.parametrize("path", [pytest.param("bytes", marks=needs_vnni), "pairs"])
@pytest.mark.parametrize("case", list(CASES))
def test_int8_conv_on_each_integer_path(hw16, monkeypatch, path, case):
    dev, hw = hw16
    dev.sim.int_gemm = True
    dev.sim.byte_gemm = path == "bytes"
    ran = _spy8(monkeypatch)
    got, ref = _conv8(hw, np.random.default_rng(len(case) + 1), **CASES[case])
    np.testing.assert_array_equal(got, ref)
    # on the byte GEMM one group takes the implicit GEMM (`implicit`), a grouped 1x1 its
    # one-gather kernel (`grouped`), other grouped layers the im2col one
    on_bytes = {"grouped-1x1": "conv_grouped_1x1_int8",
                "grouped-strided": "conv_dense_int8_bytes"}.get(case, "conv_implicit_int8")
    assert ran and set(ran) == {on_bytes if path == "bytes" else "conv_dense_int"}


@needs_vnni
def test_int8_conv_past_max_k8_takes_the_pair_gemm(hw16, monkeypatch):
    dev, hw = hw16
    dev.sim.int_gemm = dev.sim.byte_gemm = True
    ran = _spy8(monkeypatch)
    monkeypatch.setattr(bgemm, "MAX_K8", 100)
    x = np.full((4, 4, 20), -128, dtype=np.int8)
    wq = np.full((3, 3, 20, 8), -128, dtype=np.int8)
    got, ref = _conv8(hw, np.random.default_rng(3), 4, 4, 20, 8, x=x, wq=wq)
    np.testing.assert_array_equal(got, ref)
    assert set(ran) == {"conv_dense_int"}


@pytest.mark.parametrize("path", [pytest.param("bytes", marks=needs_vnni), "pairs"])
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize(("batch", "m", "k", "n"),
                         [(2, 13, 61, 37), (3, 8, 3, 16), (1, 5, 130, 70)])
def test_int8_matmul_on_each_integer_path(hw16, monkeypatch, path, transposed, batch, m, k, n):
    from npu_model.kernels import matmul

    dev, hw = hw16
    dev.sim.int_gemm = True
    dev.sim.byte_gemm = path == "bytes"
    ran: list[str] = []
    for split in (matmul.MATMUL_INT, matmul.MATMUL_INT8_BYTES):
        def spy(*args, _k=split.kernel, _n=split.__name__):
            ran.append(_n)
            return _k(*args)

        monkeypatch.setattr(split, "kernel", spy)
    rng = np.random.default_rng(batch * m + k)
    a = rng.integers(-128, 128, (batch, m, k)).astype(np.int8)
    b = rng.integers(-128, 128, (batch, k, n)).astype(np.int8)
    a[0, 0], b[0, :, 0] = -128, -128
    bias = rng.integers(-3000, 3000, n)
    mult, shift = rand_requant(rng, n, 1.0 / (k * 90))
    fa = hw.fmap_in(a)
    fb = hw.fmap_in(np.ascontiguousarray(b.transpose(0, 2, 1)) if transposed else b)
    fo = hw.fmap_out(batch, m, n, "int8")
    hw.run([asm.Matmul(fa, fo, hw.put(asm.pack_requant_params(bias, mult, shift, n=n)), b=fb,
                       clip=(-128, 127), b_transposed=transposed)])
    acc = a.astype(np.int64) @ b.astype(np.int64) + bias
    np.testing.assert_array_equal(hw.read(fo), ref_requant(acc, mult, shift, -128, 127))
    assert ran and set(ran) == {"matmul_dynamic_int8_bytes" if path == "bytes"
                                else "matmul_dynamic_int"}


@pytest.mark.parametrize("path", [pytest.param("bytes", marks=needs_vnni), "digits"])
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize(("batch", "m", "k", "n"),
                         [(2, 13, 601, 37), (3, 8, 3, 16), (1, 5, 130, 70)])
def test_int16_matmul_on_each_integer_path(hw16, monkeypatch, path, transposed, batch, m, k, n):
    from npu_model.kernels import matmul

    dev, hw = hw16
    dev.sim.int_gemm16 = True
    dev.sim.byte_gemm = path == "bytes"
    ran: list[str] = []
    for split in (matmul.MATMUL_INT16, matmul.MATMUL_INT16_BYTES):
        def spy(*args, _k=split.kernel, _n=split.__name__):
            ran.append(_n)
            return _k(*args)

        monkeypatch.setattr(split, "kernel", spy)
    rng = np.random.default_rng(batch * m + k)
    a = rng.integers(-32768, 32768, (batch, m, k)).astype(np.int16)
    b = rng.integers(-32768, 32768, (batch, k, n)).astype(np.int16)
    a[0, 0], b[0, :, 0] = -32768, -32768
    a[-1, -1], b[-1, :, -1] = 32767, 32767
    bias = rng.integers(-3000, 3000, n)
    mult, shift = rand_requant(rng, n, 1.0 / (k * 9000))
    fa = hw.fmap_in(a)
    fb = hw.fmap_in(np.ascontiguousarray(b.transpose(0, 2, 1)) if transposed else b)
    fo = hw.fmap_out(batch, m, n, "int16")
    hw.run([asm.Matmul(fa, fo, hw.put(asm.pack_requant_params(bias, mult, shift, n=n)), b=fb,
                       clip=(-32767, 32767), b_transposed=transposed)])
    acc = a.astype(np.int64) @ b.astype(np.int64) + bias
    np.testing.assert_array_equal(hw.read(fo), ref_requant(acc, mult, shift, -32767, 32767))
    assert ran and set(ran) == {"matmul_dynamic_int16_bytes" if path == "bytes"
                                else "matmul_dynamic_int16"}

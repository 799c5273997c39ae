"""int8 and int16 depthwise convolutions on pairs of taps (`npu_model.kernels.depthwise`,
AVX-512 VNNI ``vpdpwssd``): the layer really on that kernel (int16 1x1 ones not), byte-for-byte
against numpy
integers through the chip over the geometries networks use (3x3 and 5x5 at strides 1, 2 and the
text models' (2, 1), dilations, asymmetric pads, even and 1-wide kernels, odd kernel rows,
channels not a multiple of 8 or 16, pitched inputs, channel windows with nothing written past
them, maps narrower than the kernel's reach, LeakyReLU, ReLU, operands at their bounds; int16
over its two byte planes), the kernel called directly against `mpe.conv_depthwise` in row
parts, and the same bytes at 1, 2 and 4 threads."""

from __future__ import annotations

import llvmlite.binding as ll
import numpy as np
import pytest
from test_kernels_implicit import _conv

from npu_model.kernels import bgemm, depthwise, mpe, pool

pytestmark = pytest.mark.skipif(not (ll.get_host_cpu_features().get("avx512vnni")
                                     and bgemm.enabled()),
                                reason="vpdpwssd needs AVX-512 VNNI (and the byte GEMM on)")


@pytest.fixture
def ran(monkeypatch):
    """Kernel name -> whole calls, for the two depthwise kernels."""
    seen: dict[str, int] = {}
    for split in (depthwise.CONV_DEPTHWISE_PAIRS, mpe.CONV_DEPTHWISE):
        def spy(*args, _k=split.kernel, _name=split.__name__):
            if args[-2] == 0:
                seen[_name] = seen.get(_name, 0) + 1
            return _k(*args)

        monkeypatch.setattr(split, "kernel", spy)
    return seen


CASES = [
    dict(h=9, w=10, c=16),  # 3x3, unit stride, dense pixels
    dict(h=11, w=13, c=24, stride=(2, 2)),  # pairs start on even columns only
    dict(h=12, w=26, c=32, k=(5, 5), stride=(2, 1), pad=(2, 2, 2, 2)),  # the text models'
    dict(h=6, w=20, c=40, k=(5, 5), pad=(2, 2, 2, 2), in_pitch=64),  # pitched input
    dict(h=13, w=9, c=20, k=(5, 5), stride=(2, 2), pad=(2, 2, 2, 2), leaky=True),
    dict(h=10, w=10, c=16, dilation=(2, 2), pad=(2, 2, 2, 2)),
    dict(h=9, w=14, c=12, dilation=(1, 3), pad=(1, 1, 3, 3)),  # dilated columns
    dict(h=9, w=11, c=13, k=(7, 7), pad=(3, 3, 3, 3)),  # odd pairs a row, 13 channels
    dict(h=8, w=9, c=19, k=(2, 2), stride=(2, 2), pad=(0, 0, 0, 0)),  # even kernel
    dict(h=7, w=12, c=8, k=(1, 3), pad=(0, 0, 1, 1)),
    dict(h=7, w=12, c=24, k=(3, 1), pad=(1, 1, 0, 0), stride=(1, 3)),
    dict(h=8, w=10, c=18, in_pitch=32, out_pitch=48, out_c_off=5),  # channel windows
    dict(h=6, w=3, c=16, pad=(0, 0, 0, 0)),  # one output column
    dict(h=5, w=2, c=16),  # narrower than the kernel's reach
    dict(h=1, w=40, c=200, k=(5, 5), pad=(2, 2, 2, 2)),  # one row: most kernel rows padding
    dict(h=9, w=17, c=33, k=(3, 3), stride=(3, 2), pad=(2, 0, 0, 2), relu=True),
    dict(h=9, w=9, c=32, k=(5, 5), pad=(2, 2, 2, 2), relu=True, dtype="int16"),  # 2 planes
    dict(h=8, w=11, c=24, k=(4, 4), stride=(2, 2), pad=(1, 2, 1, 2), leaky=True,
         dtype="int16"),
    dict(h=12, w=26, c=32, k=(5, 5), stride=(2, 1), pad=(2, 2, 2, 2), dtype="int16"),
    dict(h=9, w=12, c=21, k=(5, 3), dilation=(2, 3), pad=(4, 1, 3, 0), in_pitch=32,
         out_pitch=48, out_c_off=7, dtype="int16"),
]


def _ids(case: dict) -> str:
    return "-".join(f"{k}{v}" for k, v in case.items())


def _run(hw, rng, case, wq=None, x=None):
    case = dict(case)
    c = case.pop("c")
    kh, kw = case.get("k", (3, 3))
    if wq is None:
        info = np.iinfo(np.int16 if case.get("dtype") == "int16" else np.int8)
        wq = rng.integers(info.min, info.max + 1, (kh, kw, 1, c)).astype(info.dtype)
        wq[0, 0, 0, 0] = info.min
    return _conv(hw, rng, cin=c, cout=c, groups=c, wq=wq, x=x, **case)


@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_pairs_are_exact_and_run_there(hw, rng, ran, case):
    got, ref, fo = _run(hw, rng, case)
    np.testing.assert_array_equal(got, ref)
    assert ran == {"conv_depthwise_pairs": 1}
    every = hw.read(fo, all_channels=True)
    c_off = case.get("out_c_off", 0)
    outside = np.delete(every, np.s_[c_off:c_off + case["c"]], axis=2)
    assert (outside.view(np.uint8) == 0x5A).all()  # nothing written past the window


def test_int16_operands_at_their_bounds(hw, rng, ran):
    """int16 inputs -32768 and 32767 (low bytes 0 and 255, high -128 and 127) times weights
    -32768: each plane's products at their bound, 25 taps."""
    c = 16
    x = np.where(rng.random((5, 6, c)) < 0.5, -32768, 32767).astype(np.int16)
    wq = np.full((5, 5, 1, c), -32768, np.int16)
    got, ref, _ = _run(hw, rng, dict(h=5, w=6, c=c, k=(5, 5), pad=(2, 2, 2, 2), dtype="int16"),
                       wq=wq, x=x)
    np.testing.assert_array_equal(got, ref)
    assert ran == {"conv_depthwise_pairs": 1}


def test_operands_at_their_bounds(hw, rng, ran):
    """Every input and weight -128: each product 2^14, each pair 2^15 (one more than int16
    holds: the sums must be int32 from the first pair on), 25 taps."""
    c = 32
    x = np.full((6, 7, c), -128, np.int8)
    wq = np.full((5, 5, 1, c), -128, np.int8)
    got, ref, _ = _run(hw, rng, dict(h=6, w=7, c=c, k=(5, 5), pad=(2, 2, 2, 2)), wq=wq, x=x)
    np.testing.assert_array_equal(got, ref)
    assert ran == {"conv_depthwise_pairs": 1}


@pytest.mark.parametrize("k", [(1, 1), (3, 3)])
def test_small_int16_kernels_keep_their_kernel(hw, rng, ran, k):
    pad = (k[0] // 2,) * 4
    got, ref, _ = _conv(hw, rng, 7, 9, 16, 16, k=k, pad=pad, groups=16, dtype="int16",
                        wq=rng.integers(-32767, 32768, (*k, 1, 16)).astype(np.int16))
    np.testing.assert_array_equal(got, ref)
    assert ran == {"conv_depthwise": 1}


def test_fits():
    assert depthwise.fits("int8", 25) and depthwise.fits("int8", 1 << 16)
    assert depthwise.fits("int16", 25) and depthwise.fits("int16", 255)
    assert not depthwise.fits("int8", (1 << 16) + 1) and not depthwise.fits("int16", 256)
    assert not depthwise.fits("int16", 9) and not depthwise.fits("float32", 25)


def _packed(w: np.ndarray, cu: int) -> np.ndarray:
    """Depthwise weights ``w[taps, c]`` in the lane layout ``(NCB, KH, KW, CU)``."""
    taps, c = w.shape
    ncb = -(-c // cu)
    p = np.zeros((ncb, taps, cu), w.dtype)
    for cb in range(ncb):
        n = min(cu, c - cb * cu)
        p[cb, :, :n] = w[:, cb * cu:cb * cu + n]
    return p.ravel()


@pytest.mark.parametrize("dtype", [np.int8, np.int16])
@pytest.mark.parametrize("seed", range(10))
def test_kernel_in_row_parts_is_mpes(seed, dtype):
    """Random geometries, the kernel called directly in two row parts and whole, against
    `mpe.conv_depthwise` over every element of the output memory."""
    r = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    kh, kw = (int(v) for v in r.integers(1, 6, 2))
    sh, sw = (int(v) for v in r.integers(1, 4, 2))
    dh, dw = (int(v) for v in r.integers(1, 3, 2))
    pt, pl = int(r.integers(0, kh)), int(r.integers(0, kw))
    c = int(r.integers(1, 70))
    xpitch = c + int(r.integers(0, 9))
    ih, iw = int(r.integers(1, 12)), int(r.integers(1, 30))
    oh = (ih + 2 * pt - dh * (kh - 1) - 1) // sh + 1
    ow = (iw + 2 * pl - dw * (kw - 1) - 1) // sw + 1
    if oh < 1 or ow < 1:
        pytest.skip("no output")
    xcoff = int(r.integers(0, 5))
    x = r.integers(info.min, info.max + 1, xcoff + ih * iw * xpitch + 3).astype(dtype)
    w = r.integers(info.min, info.max + 1, (kh * kw, c)).astype(dtype)
    cu = 32 // info.bits * 8
    packed = _packed(w, cu)
    bias = r.integers(-3000, 3000, c)
    mult = r.integers(1 << 20, 1 << 30, c)
    shift = r.integers(20, 34, c)
    leaky = seed % 3 == 0
    mneg = r.integers(1 << 18, 1 << 28, c) if leaky else mult
    sneg = r.integers(20, 34, c) if leaky else shift
    ydt = np.int16 if seed % 4 == 1 else dtype  # an int8 layer may write int16
    out_range = (np.iinfo(ydt).min, np.iinfo(ydt).max)
    ypitch = c + int(r.integers(0, 5))
    ycoff = int(r.integers(0, 3))
    ysize = ycoff + oh * ow * ypitch + 2
    args = (x, iw * xpitch, xpitch, xcoff, ih, iw, packed, cu, bias, mult, shift, mneg, sneg,
            *out_range)
    tail = (ow * ypitch, ypitch, ycoff, oh, ow, c, kh, kw, sh, sw, dh, dw, pt, pl,
            mpe.depthwise_acc(info.bits // 8, kh * kw))
    ref = np.full(ysize, 0x5A, ydt)
    mpe.conv_depthwise(*args, ref, *tail, 0, oh)
    whole = np.full(ysize, 0x5A, ydt)
    wq = depthwise.pair_weights(packed, cu, kh, kw, c)
    depthwise.conv_depthwise_pairs(*args, whole, *tail, wq, 0, oh)
    np.testing.assert_array_equal(whole, ref)
    cut = int(r.integers(0, oh + 1))
    parts = np.full(ysize, 0x5A, ydt)
    depthwise.conv_depthwise_pairs(*args, parts, *tail, wq, 0, cut)
    depthwise.conv_depthwise_pairs(*args, parts, *tail, wq, cut, oh)
    np.testing.assert_array_equal(parts, ref)


@pytest.mark.parametrize(("kh", "kw", "c", "cu"), [(3, 3, 24, 32), (5, 5, 40, 32),
                                                  (2, 4, 17, 16), (1, 1, 8, 32)])
def test_pair_weights(kh, kw, c, cu):
    """The lane layout's weights as pairs of taps, word by word."""
    w = np.random.default_rng(c).integers(-32768, 32768, (kh * kw, c)).astype(np.int16)
    w[0, 0] = -32768
    got = depthwise.pair_weights(_packed(w, cu), cu, kh, kw, c)
    npr, cp = (kw + 1) // 2, -(-c // 16) * 16
    assert got.dtype == np.int32 and got.shape == (kh * npr * cp,)
    for ky in range(kh):
        for j in range(npr):
            for ch in range(cp):
                lo = int(w[ky * kw + 2 * j, ch]) if ch < c else 0
                hi = int(w[ky * kw + 2 * j + 1, ch]) if ch < c and 2 * j + 1 < kw else 0
                word = int(got[(ky * npr + j) * cp + ch])
                assert (word & 0xFFFF, word >> 16) == (lo & 0xFFFF, hi), (ky, j, ch)


def test_same_bytes_at_any_thread_count(hw, rng, monkeypatch):
    """Parts sized by work count alone: the layer cut at 2 and 4 threads, byte-identical."""
    monkeypatch.setattr(pool, "INLINE_S", 0.0)
    parts: list[int] = []
    kernel = depthwise.CONV_DEPTHWISE_PAIRS.kernel

    def spy(*args):
        parts.append(args[-2])
        return kernel(*args)

    monkeypatch.setattr(depthwise.CONV_DEPTHWISE_PAIRS, "kernel", spy)
    monkeypatch.setattr(depthwise.CONV_DEPTHWISE_PAIRS, "min_work", 1 << 12)
    out = {}
    try:
        for n in (1, 2, 4):
            pool.set_threads(n)
            parts.clear()
            got, ref, _ = _run(hw, np.random.default_rng(3), dict(h=24, w=40, c=72, k=(5, 5),
                                                                  pad=(2, 2, 2, 2)))
            np.testing.assert_array_equal(got, ref)
            assert (len(parts) > 1) == (n > 1)
            out[n] = got.tobytes()
    finally:
        pool.set_threads(None)
    assert out[1] == out[2] == out[4]


def test_the_requant8_stamp_is_current():
    """The kernel runs `grouped._requant8`, an intrinsic: when it changes, update
    depthwise.REQUANT8_STAMP (that edit makes Numba recompile the cached kernel)."""
    import sys
    from pathlib import Path

    from npu_model.kernels import grouped

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from test_kernel_stamps import source_stamp

    now = source_stamp(grouped._requant8)
    assert depthwise.REQUANT8_STAMP == now, (
        f"npu_model.kernels.grouped._requant8 changed: set REQUANT8_STAMP in "
        f"{depthwise.__file__} to {now!r}")

"""Grouped 1x1 int8 convolutions on one gather per pixel tile (`npu_model.kernels.grouped`):
the bytes of `mpe.conv_dense_int8_bytes` and of an int64 numpy reference, over group counts,
channel counts that are not multiples of 4, pitched and windowed maps, both requantization
forms, full-scale operands, parts of the pixel range and 1, 2 and 4 threads."""

from __future__ import annotations

import sys
from pathlib import Path

import llvmlite.binding as ll
import numpy as np
import pytest
from npu_testlib import rand_requant, ref_conv_acc, ref_requant
from numba import njit

from npu_model.kernels import bgemm, grouped, igemm, mpe, pool

VNNI = bool(ll.get_host_cpu_features().get("avx512vnni"))
pytestmark = pytest.mark.skipif(not VNNI, reason="the byte GEMM needs AVX-512 VNNI")


def _case(rng, h, w, groups, cin_g, cout_g, *, xpad=0, xcoff=0, ypad=0, ycoff=0, leaky=False,
          relu=False, full=False, out16=False):
    """(kernel arguments, numpy reference output (h, w, cout), output view) of one layer."""
    cin, cout = groups * cin_g, groups * cout_g
    xpitch, ypitch = xcoff + cin + xpad, ycoff + cout + ypad
    if full:
        xm = np.full((h, w, cin), -128, np.int8)
        wt = rng.choice(np.array([-127, 127], np.int8), (1, 1, cin_g, cout))
    else:
        xm = rng.integers(-128, 128, (h, w, cin)).astype(np.int8)
        wt = rng.integers(-127, 128, (1, 1, cin_g, cout)).astype(np.int8)
    xbuf = rng.integers(-128, 128, (h, w, xpitch)).astype(np.int8)  # junk around the window
    xbuf[:, :, xcoff:xcoff + cin] = xm
    bias = rng.integers(-20000, 20000, cout)
    scale = (200.0 if out16 else 1.0) / (cin_g * 300)  # out16: an int8 layer, int16 output
    m, s = rand_requant(rng, cout, scale)
    mn, sn = (rand_requant(rng, cout, 0.1 * scale) if leaky else (m, s))
    lo, hi = (0, 127) if relu else (-128, 127)
    if out16:
        lo, hi = (0 if relu else -32768), 32767
    nr = igemm.panel_width(cout_g)
    wf = np.stack([wt[0, 0, :, g * cout_g:(g + 1) * cout_g] for g in range(groups)])
    wq, corr = bgemm.int8_weights(wf, nr)
    y = np.full(h * w * ypitch, 0x5A, np.int16 if out16 else np.int8)
    args = (xbuf.reshape(-1), w * xpitch, xpitch, xcoff, h, w, wq, nr, bias + corr,
            m.astype(np.int64), s.astype(np.int64), mn.astype(np.int64), sn.astype(np.int64),
            lo, hi, y, w * ypitch, ypitch, ycoff, h, w, 1, 1, 1, 1, 1, 1, 0, 0, groups, cin_g,
            cout_g)
    ref = ref_requant(ref_conv_acc(xm, wt, bias, groups=groups), m, s, lo, hi,
                      mn if leaky else None, sn if leaky else None)
    return args, ref, y.reshape(h, w, ypitch)


CASES = [dict(h=5, w=7, groups=4, cin_g=6, cout_g=28), dict(h=3, w=4, groups=2, cin_g=1,
                                                              cout_g=5),
         dict(h=6, w=6, groups=4, cin_g=34, cout_g=34, xpad=26, ypad=24),
         dict(h=2, w=9, groups=3, cin_g=13, cout_g=40, xcoff=5, ycoff=3, leaky=True),
         dict(h=4, w=4, groups=8, cin_g=3, cout_g=16, relu=True, full=True),
         dict(h=1, w=1, groups=4, cin_g=136, cout_g=136),
         dict(h=3, w=5, groups=2, cin_g=68, cout_g=17, full=True, leaky=True),
         dict(h=4, w=3, groups=2, cin_g=20, cout_g=21, ypad=6, out16=True),
         dict(h=3, w=3, groups=4, cin_g=9, cout_g=10, ycoff=2, out16=True, leaky=True)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{v}" for v in c.values()))
def test_grouped_1x1_is_the_dense_kernel_and_numpy(case):
    rng = np.random.default_rng(len(str(case)))
    args, ref, yv = _case(rng, **case)
    h, w, cout = ref.shape
    ycoff, ypitch = args[18], args[17]
    grouped.conv_grouped_1x1_int8(*args, 0, h * w)
    got = yv.copy()
    np.testing.assert_array_equal(got[:, :, ycoff:ycoff + cout], ref)
    outside = np.ones(ypitch, bool)
    outside[ycoff:ycoff + cout] = False
    assert (got[:, :, outside] == 0x5A).all()  # nothing written outside the channels
    yv[...] = 0x5A
    mpe.conv_dense_int8_bytes(*args, 0, h * w)
    np.testing.assert_array_equal(yv, got)


def test_parts_of_the_pixel_range_and_threads_give_the_same_bytes():
    rng = np.random.default_rng(5)
    args, ref, yv = _case(rng, 23, 29, 4, 34, 34, ypad=8)  # tiles of 40 pixels: many, a tail
    h, w, cout = ref.shape
    parts = [(0, 1), (3, 70), (101, h * w)]
    for lo_, hi_ in parts:
        grouped.conv_grouped_1x1_int8(*args, lo_, hi_)
    got, want = yv[:, :, :cout].reshape(-1, cout), ref.reshape(-1, cout)
    done = np.zeros(h * w, bool)
    for lo_, hi_ in parts:
        done[lo_:hi_] = True
    np.testing.assert_array_equal(got[done], want[done])
    assert (got[~done] == 0x5A).all()  # the pixels of no part are not written
    outs = []
    try:
        for threads in (1, 2, 4):
            pool.set_threads(threads)
            yv[...] = 0x5A
            for _ in range(3):  # the pool times a shape before it cuts it
                grouped.CONV_G1X1_INT8(*args)
            outs.append(yv.copy())
    finally:
        pool.set_threads(None)
    np.testing.assert_array_equal(outs[0][:, :, :cout], ref)
    assert outs[0].tobytes() == outs[1].tobytes() == outs[2].tobytes()


@njit(cache=False)
def _folded_both_ways(src, ld, npix, ow_n, n, y1, y2, yrs, ypitch, ycoff, m32, cf, sf, lo, hi):
    p0 = np.int64(0)  # not a literal 0: one specialisation per operand type (jit's rule)
    grouped._requant_folded(src, ld, p0, npix, ow_n, n, y1, yrs, ypitch, ycoff, m32, cf, sf, lo,
                            hi)
    grouped._requant_folded8(src, ld, p0, npix, ow_n, n, y2, yrs, ypitch, ycoff, m32, cf, sf, lo,
                             hi)


@pytest.mark.parametrize("n", [1, 7, 8, 34, 136])
@pytest.mark.parametrize("dtype", [np.int8, np.int16])
def test_eight_lane_requant_is_the_loop(n, dtype):
    """`_requant_folded8` (512-bit IR) against `_requant_folded` over whole parameter ranges:
    int32 multipliers, int64 terms whose sums wrap, shifts 0..63, pitched output rows."""
    rng = np.random.default_rng(n)
    npix, ow_n, ld = 13, 5, n + 32
    src = rng.integers(-2**31, 2**31, npix * ld).astype(np.int32)
    m32 = rng.integers(-2**31, 2**31, n).astype(np.int32)
    cf = rng.integers(-2**63, 2**63 - 1, n, dtype=np.int64)
    sf = rng.integers(0, 64, n).astype(np.int64)
    info = np.iinfo(dtype)
    ypitch, ycoff = n + 3, 2
    yrs = ow_n * ypitch + 1
    y1 = np.full(3 * yrs, 0x5A, dtype)
    y2 = y1.copy()
    _folded_both_ways(src, ld, npix, ow_n, n, y1, y2, yrs, ypitch, ycoff, m32, cf, sf,
                      int(info.min) // 2, int(info.max) // 2)
    np.testing.assert_array_equal(y2, y1)
    assert (y1 != 0x5A).any()


def test_which_layers_fit():
    ok = dict(kh=1, kw=1, sh=1, sw=1, pads=(0, 0, 0, 0), groups=4, in_hw=(7, 7), out_hw=(7, 7),
              cin_g=34)
    assert grouped.fits(**ok)
    for change in (dict(kh=3), dict(sw=2), dict(pads=(0, 1, 0, 0)), dict(groups=1),
                   dict(out_hw=(7, 6)), dict(cin_g=bgemm.MAX_K8 + 1)):
        assert not grouped.fits(**dict(ok, **change)), change


def test_the_bgemm_stamp_is_current():
    """The micro-kernel intrinsics come from bgemm: when it changes, update BGEMM_STAMP (that
    edit makes Numba recompile grouped's cached kernels)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from test_kernel_stamps import source_stamp

    assert grouped.BGEMM_STAMP == source_stamp(bgemm._mk) == source_stamp(bgemm._mk16), (
        f"npu_model.kernels.bgemm changed: set BGEMM_STAMP in {grouped.__file__} to "
        f"{source_stamp(bgemm._mk)!r}")

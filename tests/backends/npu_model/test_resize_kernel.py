"""The pooled UPSAMPLE TABLE kernel (`kernels.resize`) gives `vector.resize_taps`'s bytes: int8
maps on its int32 lanes, int16 maps and wide multipliers on int64, channel windows and pitched
outputs, any cut of the output rows and any thread count."""

from __future__ import annotations

import numpy as np
import pytest

from npu_model.kernels import pool, vector
from npu_model.kernels.resize import RESIZE_TAPS, resize_taps_rows
from xir.ops.resize_taps import BILINEAR_FRAC_BITS

ONE = 1 << BILINEAR_FRAC_BITS


def _case(rng, dtype, mult_bits=30):
    ih, iw, c = (int(v) for v in rng.integers(1, 12, 3))
    oh, ow = (int(v) for v in rng.integers(1, 30, 2))
    pitch = c + int(rng.integers(0, 3))
    coff = int(rng.integers(0, pitch - c + 1))
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, ih * iw * pitch).astype(dtype)
    taps = np.concatenate([
        np.stack([rng.integers(0, ih, oh), rng.integers(0, ih, oh), rng.integers(0, ONE + 1, oh)],
                 axis=1),
        np.stack([rng.integers(0, iw, ow), rng.integers(0, iw, ow), rng.integers(0, ONE + 1, ow)],
                 axis=1)]).astype(np.int64)
    taps[0, 2], taps[oh, 2] = 0, ONE  # the end weights too
    m = int(rng.integers(1, 1 << mult_bits))
    s = int(rng.integers(0, 45))
    ypitch = c + int(rng.integers(0, 2))  # 0: dense rows, else a pitched output
    return dict(x=x, xrs=iw * pitch, xpitch=pitch, xcoff=coff, yrs=ow * ypitch, ypitch=ypitch,
                oh_n=oh, ow_n=ow, c_n=c, taps=taps, m=m, s=s, lo=int(info.min),
                hi=int(info.max), dtype=dtype)


def _run(fn, k, y, *extra):
    fn(k["x"], k["xrs"], k["xpitch"], k["xcoff"], y, k["yrs"], k["ypitch"], 0, k["oh_n"],
       k["ow_n"], k["c_n"], k["taps"], ONE, k["m"], k["s"], k["lo"], k["hi"], *extra)
    return y


def _fresh(k):
    return np.full(k["oh_n"] * k["yrs"], 77, dtype=k["dtype"])  # untouched bytes stay 77


@pytest.mark.parametrize("dtype,mult_bits", [(np.int8, 30), (np.int8, 40), (np.int16, 30)])
def test_pooled_resize_gives_the_reference_bytes(dtype, mult_bits):
    rng = np.random.default_rng(mult_bits + np.dtype(dtype).itemsize)
    for _ in range(60):
        k = _case(rng, dtype, mult_bits)
        want = _run(vector.resize_taps, k, _fresh(k))
        got = _run(resize_taps_rows, k, _fresh(k), 0, k["oh_n"])
        assert np.array_equal(got, want)
        # any cut of the output rows, parts in any order
        cut = sorted({0, k["oh_n"], *rng.integers(0, k["oh_n"] + 1, 3).tolist()})
        y = _fresh(k)
        for a, b in reversed(list(zip(cut, cut[1:]))):
            _run(resize_taps_rows, k, y, a, b)
        assert np.array_equal(y, want)


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_pooled_resize_is_byte_identical_at_any_thread_count(threads, monkeypatch):
    """A map big enough to be cut (the pool's timing threshold off: the work count decides)."""
    monkeypatch.setattr(pool, "INLINE_S", 0)
    rng = np.random.default_rng(5)
    ih, iw, c, oh, ow = 40, 40, 32, 160, 160
    x = rng.integers(-128, 128, ih * iw * c).astype(np.int8)
    src_r = np.minimum(np.arange(oh) // 4, ih - 1)
    src_c = np.minimum(np.arange(ow) // 4, iw - 1)
    taps = np.concatenate([
        np.stack([src_r, np.minimum(src_r + 1, ih - 1), rng.integers(0, ONE + 1, oh)], axis=1),
        np.stack([src_c, np.minimum(src_c + 1, iw - 1), rng.integers(0, ONE + 1, ow)], axis=1),
    ]).astype(np.int64)
    args = (x, iw * c, c, 0)
    rest = (ow * c, c, 0, oh, ow, c, taps, ONE, 20448, 34, -128, 127)
    want = np.zeros(oh * ow * c, dtype=np.int8)
    vector.resize_taps(*args, want, *rest)
    pool.set_threads(threads)
    try:
        parts = len(RESIZE_TAPS.parts(args + (want,) + rest)) - 1
        assert (parts > 1) == (threads > 1)  # cut where there are threads to take the parts
        got = np.zeros_like(want)
        RESIZE_TAPS(*args, got, *rest)
    finally:
        pool.set_threads(None)
    assert np.array_equal(got, want)

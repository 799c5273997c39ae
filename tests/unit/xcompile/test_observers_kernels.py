"""The calibration histogram's Numba kernels (`xcompile.quant.observers_kernels`) give the
histograms of the numpy form they replaced, count for count, on random batches of several
dtypes and layouts with zeros, subnormals, extremes and range growth; NaN and inf still raise."""

from __future__ import annotations

import numpy as np
import pytest

from xcompile.quant.observers import AbsHistogram, MSEObserver, PercentileObserver
from xcompile.quant.observers_kernels import abs_bin_counts, abs_max_finite


class _NumpyHistogram(AbsHistogram):
    """`AbsHistogram.update` as it was before the kernels (float64 copies and `bincount`)."""

    def update(self, x):
        a = np.abs(np.asarray(x, dtype=np.float64)).ravel()
        if not np.all(np.isfinite(a)):
            raise ValueError("calibration batch contains NaN or inf")
        if a.size == 0:
            return
        m = float(a.max())
        if self.top == 0.0:
            if m == 0.0:
                self.counts[0] += a.size
                return
            self.top = m
        k = 0
        while self.top * 2.0**k < m:
            k += 1
        if k:
            self._grow(k)
        idx = np.minimum((a * (self.bins / self.top)).astype(np.int64), self.bins - 1)
        self.counts += np.bincount(idx, minlength=self.bins)


def _batches(rng, dtype):
    f = np.finfo(dtype) if np.dtype(dtype).kind == "f" else None
    yield np.zeros((2, 3), dtype)  # zeros before any range
    yield (rng.standard_normal((1, 8, 8, 5)) * 0.01).astype(dtype)
    yield (rng.standard_normal((3, 7)) * 3.0).astype(dtype)  # range grows
    x = rng.standard_normal(1000).astype(dtype)
    x[::7] = 0.0
    x[::11] = -x[::11]
    yield x
    yield np.asarray(rng.standard_normal((6, 10)), dtype)[:, ::3]  # not contiguous
    yield np.asarray(rng.standard_normal((4, 5)), dtype).T  # Fortran order
    yield np.array([], dtype)
    if f is not None:
        yield np.array([f.tiny, -f.tiny / 4, f.eps, 1.0], dtype)  # subnormal included
        yield np.array([f.max / 4, -f.max / 4, 0.0, f.tiny], dtype)  # extreme range growth
        yield np.array([f.max, -f.max / 2], dtype)  # the largest finite value
        yield np.array(-3.5, dtype)  # 0-d


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32, np.int8])
@pytest.mark.parametrize("bins", [2, 7, 2048])
def test_histograms_identical_to_numpy(dtype, bins):
    rng = np.random.default_rng(bins)
    a, b = AbsHistogram(bins), _NumpyHistogram(bins)
    for x in _batches(rng, dtype):
        a.update(x)
        b.update(x)
        assert a.top == b.top
        np.testing.assert_array_equal(a.counts, b.counts)
    assert a.counts.dtype == np.int64 and a.total == b.total


def test_random_streams_identical_with_observers():
    rng = np.random.default_rng(3)
    for _ in range(20):
        hist, ref = AbsHistogram(int(rng.integers(2, 4096))), None
        ref = _NumpyHistogram(hist.bins)
        for _ in range(int(rng.integers(1, 6))):
            x = (rng.standard_t(3, int(rng.integers(0, 5000))) *
                 10.0 ** rng.uniform(-6, 6)).astype(rng.choice([np.float32, np.float64]))
            hist.update(x)
            ref.update(x)
        assert hist.top == ref.top
        np.testing.assert_array_equal(hist.counts, ref.counts)
    for cls in (PercentileObserver, MSEObserver):  # what calibration reads off them
        o, r = cls(), cls()
        r.hist = _NumpyHistogram(r.hist.bins)
        for _ in range(3):
            x = rng.standard_normal((1, 16, 16, 8)).astype(np.float32)
            o.update(x)
            r.update(x)
        assert o.amax() == r.amax()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nan_and_inf_raise_and_leave_the_histogram(bad, dtype):
    h = AbsHistogram(16)
    h.update(np.array([1.0, 2.0], dtype))
    before = h.counts.copy()
    x = np.array([0.5, bad, 3.0], dtype)
    with pytest.raises(ValueError, match="NaN or inf"):
        h.update(x)
    np.testing.assert_array_equal(h.counts, before)
    assert h.top == 2.0
    assert abs_max_finite(x) == (3.0, False)


def test_kernels_contract():
    assert abs_max_finite(np.array([-2.5, 1.0], np.float32)) == (2.5, True)
    assert abs_max_finite(np.array([], np.float64)) == (-1.0, True)
    counts = np.zeros(4, np.int64)
    abs_bin_counts(np.array([0.0, -0.99, 1.0, 3.9, 4.0, -4.0]), 1.0, counts)
    np.testing.assert_array_equal(counts, [2, 1, 0, 3])  # |x| == top goes to the last bin

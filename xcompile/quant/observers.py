"""Calibration observers: find a symmetric clipping threshold ``amax`` from float batches.

Every observer takes batches through ``update(x)`` and answers ``amax()`` (the threshold) and
``scale(dtype) = amax / qmax`` (qmax 127 for int8, 32767 for int16). Scales never go below
:data:`MIN_SCALE` (an all-zero tensor would otherwise get scale 0).

- ``MinMaxObserver``: exact ``max |x|``.
- ``PercentileObserver``: a percentile of ``|x|`` read off a streaming histogram.
- ``KLObserver``: TensorRT-style entropy calibration on the same histogram.
- ``MSEObserver``: the threshold that minimises the expected squared quantization error
  (rounding inside the range plus clipping beyond it), searched on the same histogram.

The histogram (``AbsHistogram``) has a fixed number of bins over ``[0, top)``; when a batch
exceeds ``top``, ``top`` doubles (as often as needed) and each pair of adjacent bins merges
into one. The merge is exact (old bins nest in new ones), so the only approximation is the
bin width, ``top / bins`` with ``top < 2 * max|x|`` once the range has grown.
"""

from __future__ import annotations

import abc
import math
from typing import Any

import numpy as np

from xcompile.quant.observers_kernels import abs_bin_counts, abs_max_finite
from xir.quant.fixed_point import qrange

__all__ = [
    "MIN_SCALE",
    "Observer",
    "MinMaxObserver",
    "PercentileObserver",
    "KLObserver",
    "MSEObserver",
    "AbsHistogram",
    "make_observer",
    "weight_scales",
    "scale_from_amax",
]

#: Smallest scale handed out (float32 epsilon, PyTorch's choice): guards amax == 0.
MIN_SCALE = float(np.finfo(np.float32).eps)


def _qmax(dtype: Any) -> int:
    dt = np.dtype(dtype)
    if dt not in (np.dtype(np.int8), np.dtype(np.int16)):
        raise TypeError(f"activation/weight dtype must be int8 or int16, not {dt}")
    return qrange(dt)[1]


def scale_from_amax(amax: float | np.ndarray, dtype: Any = np.int8) -> float | np.ndarray:
    """``max(amax / qmax, MIN_SCALE)``, elementwise."""
    s = np.maximum(np.asarray(amax, dtype=np.float64) / _qmax(dtype), MIN_SCALE)
    return float(s) if s.ndim == 0 else s


def _flat_float(x: np.ndarray) -> np.ndarray:
    """`x` as a contiguous 1-D float32 or float64 array (other dtypes widened to float64,
    exactly as `np.abs(np.asarray(x, np.float64))` would see them): the histogram kernels'
    input, without a copy when it already is one."""
    a = np.asarray(x)
    if a.dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        a = a.astype(np.float64)
    return np.ascontiguousarray(a).reshape(-1)


class Observer(abc.ABC):
    """Common interface: ``update(x)``, ``amax()``, ``scale(dtype)``."""

    @abc.abstractmethod
    def update(self, x: np.ndarray) -> None:
        """Feed one calibration batch."""

    @abc.abstractmethod
    def amax(self) -> float:
        """The symmetric clipping threshold chosen from what was seen."""

    def scale(self, dtype: Any = np.int8) -> float:
        """``amax() / qmax(dtype)``, at least :data:`MIN_SCALE`."""
        return float(scale_from_amax(self.amax(), dtype))


class MinMaxObserver(Observer):
    """Running min and max; ``amax = max(|min|, |max|)``, exact."""

    def __init__(self) -> None:
        self.min = np.inf
        self.max = -np.inf

    def update(self, x: np.ndarray) -> None:
        xf = np.asarray(x, dtype=np.float64)
        if xf.size == 0:
            return
        if not np.all(np.isfinite(xf)):
            raise ValueError("calibration batch contains NaN or inf")
        self.min = min(self.min, float(xf.min()))
        self.max = max(self.max, float(xf.max()))

    def amax(self) -> float:
        if self.min > self.max:
            return 0.0
        return max(abs(self.min), abs(self.max))


class AbsHistogram:
    """Streaming histogram of ``|x|`` with a fixed bin count and a power-of-two growing range.

    Bin ``i`` covers ``[i * width, (i + 1) * width)``, the last bin also takes ``top`` itself.
    The first non-zero batch sets ``top = max |x|``; zeros seen before it wait in bin 0.
    """

    def __init__(self, bins: int = 2048) -> None:
        if int(bins) < 2:
            raise ValueError(f"bins must be >= 2, got {bins}")
        self.bins = int(bins)
        self.counts = np.zeros(self.bins, dtype=np.int64)
        self.top = 0.0

    @property
    def width(self) -> float:
        return self.top / self.bins

    @property
    def total(self) -> int:
        return int(self.counts.sum())

    def update(self, x: np.ndarray) -> None:
        a = _flat_float(x)
        if a.size == 0:
            return
        m, finite = abs_max_finite(a)
        if not finite:
            raise ValueError("calibration batch contains NaN or inf")
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
        abs_bin_counts(a, self.bins / self.top, self.counts)  # one pass, counts in place

    def _grow(self, k: int) -> None:
        """Multiply ``top`` by ``2**k``: old bin ``i`` lies inside new bin ``i >> k``."""
        new = np.zeros(self.bins, dtype=np.int64)
        np.add.at(new, np.arange(self.bins) >> k, self.counts)
        self.counts = new
        self.top *= 2.0**k

    def order_stat(self, k: np.ndarray | int) -> np.ndarray:
        """Estimate the 0-based ``k``-th smallest ``|x|``: a point inside the bin that holds it.

        The estimate spreads a bin's ``n`` values uniformly (value ``j`` at ``(j + 1/2) / n`` of
        the bin), so it is always less than one bin width from the true order statistic.
        """
        k = np.asarray(k, dtype=np.int64)
        cum = np.cumsum(self.counts)
        b = np.searchsorted(cum, k, side="right")  # first bin with cum > k
        before = np.where(b > 0, cum[np.maximum(b - 1, 0)], 0)
        n = self.counts[b]
        return (b + (k - before + 0.5) / n) * self.width


class PercentileObserver(Observer):
    """``amax`` = the ``percentile``-th percentile of ``|x|`` over every value seen.

    Follows ``np.percentile(|x|, percentile)`` (linear interpolation between the order
    statistics at rank ``p/100 * (N - 1)``), with each order statistic estimated from the
    histogram: the result is less than one bin width (``top / bins``) from the exact value.
    """

    def __init__(self, percentile: float = 99.99, bins: int = 2048) -> None:
        if not 0.0 <= percentile <= 100.0:
            raise ValueError(f"percentile must be in [0, 100], got {percentile}")
        self.percentile = float(percentile)
        self.hist = AbsHistogram(bins)

    def update(self, x: np.ndarray) -> None:
        self.hist.update(x)

    def amax(self) -> float:
        n = self.hist.total
        if n == 0 or self.hist.top == 0.0:
            return 0.0
        h = self.percentile / 100.0 * (n - 1)
        lo = int(np.floor(h))
        hi = min(lo + 1, n - 1)
        v_lo, v_hi = self.hist.order_stat(np.array([lo, hi]))
        return float(v_lo + (h - lo) * (v_hi - v_lo))


def _smooth(c: np.ndarray, eps: float) -> np.ndarray | None:
    """MXNet's smoothing of a count vector: empty bins get ``eps``, taken evenly from the rest.

    Returns None when that would leave a bin at or below zero.
    """
    zero = c == 0
    n_zero = int(zero.sum())
    if n_zero == c.size:
        return None
    out = c + eps * zero - (eps * n_zero / (c.size - n_zero)) * ~zero
    return out if np.all(out > 0) else None


class KLObserver(Observer):
    """Entropy calibration (TensorRT, "8-bit inference with TensorRT", 2017) over ``|x|``.

    For each candidate threshold bin ``i`` from ``start_bin`` (default ``levels``) to ``bins``
    in steps of ``stride``:

    - ``P`` = histogram bins ``[0, i)`` with all counts beyond ``i`` added to bin ``i - 1``;
    - ``Q`` = bins ``[0, i)`` (without the outliers) merged into ``levels`` groups of
      ``i // levels`` bins (the last group also takes the remainder), each group's total
      spread evenly over the bins where ``P`` is non-zero (bins empty in ``P`` stay empty);
    - both smoothed (every empty bin gets ``eps`` counts, 1e-4 by default, taken evenly from
      the non-empty bins), normalised, and scored by ``KL(P || Q)``.

    This is the open port of TensorRT's algorithm used by MXNet and TVM. Without the
    smoothing, any candidate whose last bin holds only outliers would score infinity.

    ``amax`` is the upper edge ``i * width`` of the winning candidate; ties go to the larger
    threshold (as in NVIDIA's pytorch-quantization). ``levels`` is the number of positive
    quantized levels: 128 for int8 (the default via ``dtype``), 32768 for int16, which needs
    ``bins`` well above 32768 (e.g. 131072) and a ``stride`` to stay fast.
    """

    def __init__(
        self,
        bins: int = 2048,
        *,
        dtype: Any = np.int8,
        levels: int | None = None,
        start_bin: int | None = None,
        stride: int = 1,
        eps: float = 1e-4,
    ) -> None:
        self.levels = int(levels) if levels is not None else _qmax(dtype) + 1
        self.start_bin = int(start_bin) if start_bin is not None else self.levels
        self.stride = int(stride)
        self.eps = float(eps)
        if self.levels < 2 or bins < self.levels:
            raise ValueError(f"KLObserver needs bins ({bins}) >= levels ({self.levels}) >= 2")
        if not self.levels <= self.start_bin <= bins or self.stride < 1:
            raise ValueError(
                f"start_bin must be in [levels, bins] = [{self.levels}, {bins}] and stride >= 1"
            )
        self.hist = AbsHistogram(bins)
        self.divergences: np.ndarray | None = None

    def update(self, x: np.ndarray) -> None:
        self.hist.update(x)

    def _divergence(self, i: int) -> float:
        counts = self.hist.counts
        p = counts[:i].astype(np.float64)
        p[i - 1] += counts[i:].sum()
        cand = counts[:i].astype(np.float64)
        group = i // self.levels
        starts = np.arange(self.levels) * group
        sums = np.add.reduceat(cand, starts)  # last group runs to i: takes the remainder
        occupied = p > 0  # P's support, so the outlier bin i - 1 gets its share of Q
        nonzero = np.add.reduceat(occupied.astype(np.float64), starts)
        per_bin = np.divide(sums, nonzero, out=np.zeros_like(sums), where=nonzero > 0)
        sizes = np.diff(np.append(starts, i))
        q = np.repeat(per_bin, sizes) * occupied
        if q.sum() == 0.0:
            return np.inf
        p, q = _smooth(p, self.eps), _smooth(q, self.eps)
        if p is None or q is None:
            return np.inf
        p /= p.sum()
        q /= q.sum()
        return float(np.sum(p * np.log(p / q)))

    def amax(self) -> float:
        h = self.hist
        if h.total == 0 or h.top == 0.0:
            return 0.0
        cands = np.arange(self.start_bin, h.bins + 1, self.stride)
        div = np.array([self._divergence(int(i)) for i in cands])
        self.divergences = div
        if not np.isfinite(div).any():
            return h.top
        best = len(div) - 1 - int(np.argmin(div[::-1]))
        return float(cands[best] * h.width)


class MSEObserver(Observer):
    """``amax`` minimising the mean squared quantization error of ``|x|`` (TensorRT's and
    pytorch-quantization's "mse" calibration), searched over the histogram.

    Candidates are the bin edges ``i * width`` for ``i`` from ``bins // 16`` to ``bins``. For a
    candidate ``t`` with step ``s = t / qmax`` the error of the values of a bin with centre
    ``c`` is modelled as ``(c - t)**2`` when ``c > t`` (clipped), ``c**2`` when ``c < s / 2``
    (rounded to zero) and ``s**2 / 12`` otherwise (uniform rounding error). The model has no
    rounding-grid artefacts, so the search is smooth and deterministic; ties go to the larger
    threshold. ``margin`` (>= 1) multiplies the result: headroom for values beyond the
    calibration set, which the unseen data of a deployment will have.
    """

    def __init__(self, bins: int = 2048, *, dtype: Any = np.int8, margin: float = 1.0,
                 power: int = 2) -> None:
        if margin < 1.0:
            raise ValueError(f"margin must be >= 1, got {margin}")
        if power not in (2, 3, 4):
            raise ValueError(f"power must be 2, 3 or 4, got {power}")
        self.qmax = _qmax(dtype)
        self.margin = float(margin)
        self.power = int(power)
        self.hist = AbsHistogram(bins)
        self.errors: np.ndarray | None = None

    def update(self, x: np.ndarray) -> None:
        self.hist.update(x)

    def amax(self) -> float:
        h = self.hist
        if h.total == 0 or h.top == 0.0:
            return 0.0
        if self.power == 2:
            total, cands = mse_errors(h.counts, h.bins, self.qmax)
        else:
            total, cands = lp_errors(h.counts, h.bins, self.qmax, self.power)
        total = total * h.width**self.power
        self.errors = total
        best = len(total) - 1 - int(np.argmin(total[::-1]))
        return float(cands[best] * h.width * self.margin)


def lp_errors(counts: np.ndarray, bins: int, qmax: int, power: int
              ) -> tuple[np.ndarray, np.ndarray]:
    """`mse_errors` with the error measured by its `power`-th power (3 or 4): the expected
    ``|x - q(x)|**power`` of every candidate threshold, in bin widths to that power. A higher
    power weighs the few large values a threshold clips more than the many small ones it
    rounds: where those few are the signal (the activations at a detector's objects, ddddocr's
    YOLOX head) the threshold stays nearer the range (section 8 of docs/quantization.md).

    The same model as `mse_errors`: a clipped bin costs ``(c - t)**p`` per value, a bin below
    half a step ``c**p``, the others the uniform rounding error's ``(s / 2)**p / (p + 1)``.
    The clipped suffix sums come from power sums of the counts by the binomial theorem, in
    exact integers (Python ints: centres in half-bin units are odd, ``(2j + 1)**p`` times a
    count exceeds int64 for large histograms), converted to float64 at the end."""
    n = np.array([int(c) for c in np.asarray(counts).tolist()], dtype=object)
    u2 = np.array([2 * j + 1 for j in range(bins)], dtype=object)  # centres, half-bin units
    cands = np.arange(max(bins // 16, 1), bins + 1)
    t2 = np.array([2 * i for i in cands.tolist()], dtype=object)  # thresholds, same units
    acc = np.zeros(len(cands), dtype=object)
    term = n
    for k in range(power + 1):  # sum_{j >= i} n (u2 - t2)**p = sum_k C(p,k) (-t2)**(p-k) S_k
        suffix = np.concatenate([np.cumsum(term[::-1])[::-1], np.array([0], dtype=object)])
        acc = acc + math.comb(power, k) * (-t2) ** (power - k) * suffix[cands]
        term = term * u2
    clipped = np.array([float(x) for x in acc], np.float64) / float(2 ** power)
    u = np.arange(bins) + 0.5
    nf = np.asarray(counts, np.float64)
    zero_pre = np.concatenate([np.zeros(1), np.cumsum(nf * u**power)])
    c0 = np.concatenate([np.zeros(1), np.cumsum(nf)])
    i = cands.astype(np.float64)
    k0 = np.minimum(np.searchsorted(u, i / (2.0 * qmax), side="left"), cands)
    middle = (i / (2.0 * qmax)) ** power / (power + 1) * (c0[cands] - c0[k0])
    return clipped + zero_pre[k0] + middle, cands


def mse_errors(counts: np.ndarray, bins: int, qmax: int) -> tuple[np.ndarray, np.ndarray]:
    """`MSEObserver`'s modelled squared error of every candidate threshold, in squared bin
    widths, and the candidates (bin indices ``bins // 16 .. bins``).

    Bins are in bin units (centre ``j + 1/2``, candidate ``i``): the clipped bins ``j >= i``
    cost ``sum n (u - i)**2 = S2 - 2 i S1 + i**2 S0`` over that suffix, the bins whose centre is
    below half a step ``i / (2 qmax)`` cost ``sum n u**2`` over that prefix, the others
    ``(i / qmax)**2 / 12`` each: prefix sums make it O(bins) instead of a candidates x bins
    matrix (0.2 s per value at 2048 bins: 14 of a small detector's 18-second calibration). The
    sums are of integer counts times quarter-integers, exact in float64 below 2**52."""
    n = np.asarray(counts, np.float64)
    u = np.arange(bins) + 0.5
    z = np.zeros(1)
    c0 = np.concatenate([z, np.cumsum(n)])
    c1 = np.concatenate([z, np.cumsum(n * u)])
    c2 = np.concatenate([z, np.cumsum(n * u * u)])
    cands = np.arange(max(bins // 16, 1), bins + 1)
    i = cands.astype(np.float64)
    k1 = cands  # centres above the threshold: j + 1/2 > i
    k0 = np.minimum(np.searchsorted(u, i / (2.0 * qmax), side="left"), k1)
    clipped = (c2[-1] - c2[k1]) - 2.0 * i * (c1[-1] - c1[k1]) + i * i * (c0[-1] - c0[k1])
    zeroed = c2[k0]
    middle = (i / qmax) ** 2 / 12.0 * (c0[k1] - c0[k0])
    return clipped + zeroed + middle, cands


_METHODS = {"minmax": MinMaxObserver, "percentile": PercentileObserver, "kl": KLObserver,
            "mse": MSEObserver}


def make_observer(method: str, **kwargs: Any) -> Observer:
    """Build an observer by name: ``"minmax"``, ``"percentile"``, ``"kl"`` or ``"mse"`` (kwargs
    passed on)."""
    try:
        cls = _METHODS[method.lower()]
    except KeyError:
        raise ValueError(
            f"unknown calibration method {method!r}; use one of {', '.join(_METHODS)}"
        ) from None
    return cls(**kwargs)


def weight_scales(w: np.ndarray, axis: int, dtype: Any = np.int8) -> np.ndarray:
    """Per-output-channel symmetric scales: ``max |w|`` over all axes but ``axis``, over qmax.

    All-zero channels get :data:`MIN_SCALE`. Returns float64 of length ``w.shape[axis]``
    (``axis=-1`` for HWIO conv weights).
    """
    wf = np.asarray(w)
    if wf.dtype.kind != "f":
        wf = wf.astype(np.float64)
    if not np.all(np.isfinite(wf)):
        raise ValueError("weights contain NaN or inf")
    ax = axis % wf.ndim
    other = tuple(d for d in range(wf.ndim) if d != ax)
    # max |w| is exact in the weights' own precision: no float64 copy of a large layer
    amax = (np.abs(wf).max(axis=other) if other else np.abs(wf)).astype(np.float64)
    return np.asarray(scale_from_amax(amax, dtype), dtype=np.float64).reshape(-1)

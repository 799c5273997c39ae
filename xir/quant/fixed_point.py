"""Fixed-point requantization: the one definition every integer path of the project follows.

The HostBackend integer reference and the ZG330/Buyi simulators all call this module, so that
"bit-exact" means one thing. The scheme is described in docs/quantization.md; in short:

- a real multiplier ``r`` is stored as ``(mult, shift)`` with ``r ~= mult * 2**-shift``,
  ``mult`` normalised to ``[2**(mult_bits-1), 2**mult_bits)`` and ``shift`` in ``[0, 63]``;
- ``requantize`` computes ``floor((acc * mult + 2**(shift-1)) / 2**shift)`` (round half up) in
  int64, applies the folded activation, then saturates to the output dtype;
- ``fake_requantize`` is the vendor's "fakeQf": the same scales, no rounding, no saturation.

The float helpers ``quantize`` / ``dequantize`` / ``quantize_bias`` use round half away from zero
(the usual float-to-int rule of calibration tools); they are not part of the integer path.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from xir.numba_target import njit

__all__ = [
    "DEFAULT_MULT_BITS",
    "MAX_SHIFT",
    "ACC_PRODUCT_LIMIT",
    "quantize_multiplier",
    "requant_multiplier",
    "requantize",
    "fake_requantize",
    "clip_bounds",
    "requantize_nb",
    "requantize_one",
    "quantize",
    "quantize_scalar_nb",
    "dequantize",
    "dequantize_scalar_nb",
    "quantize_bias",
    "round_half_away",
    "qrange",
]

#: Default multiplier width: ``mult < 2**15`` fits a signed 16-bit register field, and an int32
#: accumulator times it stays below 2**46 (a 48-bit DSP product).
DEFAULT_MULT_BITS = 15
#: Largest right shift. ``shift`` is always in ``[0, MAX_SHIFT]``.
MAX_SHIFT = 63
#: ``|acc| * |mult|`` must stay below this so that ``acc * mult + 2**(shift-1)`` fits int64.
ACC_PRODUCT_LIMIT = 1 << 62

_SIGNED_OUT = (np.dtype(np.int8), np.dtype(np.int16), np.dtype(np.int32), np.dtype(np.int64))


def qrange(dtype: Any, *, narrow_range: bool = False) -> tuple[int, int]:
    """``(qmin, qmax)`` of a signed integer dtype; ``narrow_range`` gives ``(-qmax, qmax)``."""
    dt = np.dtype(dtype)
    if dt not in _SIGNED_OUT:
        raise TypeError(f"quantized dtype must be int8, int16, int32 or int64, not {dt}")
    info = np.iinfo(dt)
    return (-int(info.max) if narrow_range else int(info.min)), int(info.max)


_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
#: (dtype, narrow_range) -> (qmin, qmax) as floats, for the fused quantize of int8..int32
_QRANGE_F = {(dt, nr): tuple(float(v) for v in qrange(dt, narrow_range=nr))
             for dt in _SIGNED_OUT[:3] for nr in (False, True)}


def _one_scale(scale: Any) -> float | None:
    """`scale` as a float when it is a single value (a number or a one-element array)."""
    if isinstance(scale, (float, int, np.floating, np.integer)):
        return float(scale)
    if isinstance(scale, np.ndarray) and scale.size == 1 and scale.ndim <= 1:
        return float(scale.reshape(-1)[0])
    if np.ndim(scale) <= 1 and np.size(scale) == 1:
        return float(np.asarray(scale).reshape(-1)[0])
    return None


def round_half_away(v: np.ndarray) -> np.ndarray:
    """Round float64 values to the nearest integer, ties away from zero (exact, no ``x + 0.5``)."""
    v = np.asarray(v, dtype=np.float64)
    a = np.abs(v)
    fl = np.floor(a)
    r = fl + ((a - fl) >= 0.5)  # a - floor(a) is exact in binary floating point
    return np.copysign(r, v)


# --------------------------------------------------------------------------------------------
# Multipliers
# --------------------------------------------------------------------------------------------


def quantize_multiplier(
    real: float | np.ndarray, mult_bits: int = DEFAULT_MULT_BITS
) -> tuple[np.ndarray, np.ndarray]:
    """Split ``real`` into int32 ``(mult, shift)`` with ``real ~= mult * 2**-shift``.

    ``|mult|`` is in ``[2**(mult_bits-1), 2**mult_bits)`` and the relative error is at most
    ``2**-mult_bits``, except at the documented edges:

    - ``real == 0`` (or so small that it rounds to zero at ``shift == 63``) gives ``(0, 0)``;
    - ``|real| < 2**(mult_bits-64)`` keeps ``shift = 63`` and a denormal ``mult``
      (any int32 accumulator then requantizes to 0 or +-1 anyway);
    - ``|real| >= 2**mult_bits - 1/2`` (including inf) clamps to ``(+-(2**mult_bits - 1), 0)``:
      every non-zero accumulator then saturates an int8/int16 output.

    Negative reals give a negative ``mult`` (scales are positive; a negative LeakyReLU slope is
    the only user). ``mult_bits`` is in ``[2, 31]`` so that ``mult`` fits int32.
    """
    if not 2 <= int(mult_bits) <= 31:
        raise ValueError(f"mult_bits must be in [2, 31], got {mult_bits}")
    mb = int(mult_bits)
    r = np.asarray(real, dtype=np.float64)
    if np.isnan(r).any():
        raise ValueError("quantize_multiplier: real multiplier is NaN")
    a = np.abs(r)
    big = a >= (2.0**mb - 0.5)  # includes inf
    a_fin = np.where(big, 1.0, a)
    frac, exp = np.frexp(a_fin)  # a = frac * 2**exp, frac in [0.5, 1) (or 0)
    m = round_half_away(np.ldexp(frac, mb)).astype(np.int64)
    s = mb - exp.astype(np.int64)
    carry = m == (1 << mb)  # rounding reached 2**mb: renormalise
    m = np.where(carry, m >> 1, m)
    s = np.where(carry, s - 1, s)
    # Very small: pin shift at MAX_SHIFT and round the real at that resolution.
    small = s > MAX_SHIFT
    m_small = round_half_away(np.ldexp(np.where(small, a_fin, 0.0), MAX_SHIFT)).astype(np.int64)
    m = np.where(small, m_small, m)
    s = np.where(small, MAX_SHIFT, s)
    zero = m == 0
    s = np.where(zero, 0, s)
    m = np.where(big, (1 << mb) - 1, m)
    s = np.where(big, 0, s)
    m = np.where(r < 0, -m, m)
    return m.astype(np.int32), s.astype(np.int32)


def requant_multiplier(
    s_in: float | np.ndarray,
    s_w: float | np.ndarray,
    s_out: float | np.ndarray,
    mult_bits: int = DEFAULT_MULT_BITS,
) -> tuple[np.ndarray, np.ndarray]:
    """``quantize_multiplier((s_in * s_w) / s_out)``, in that float64 evaluation order.

    Every component computes the real multiplier through this function, so that all of them
    round the same float64 value (``s_in * (s_w / s_out)`` may differ in the last bit).
    """
    real = (np.asarray(s_in, dtype=np.float64) * np.asarray(s_w, dtype=np.float64)) / np.asarray(
        s_out, dtype=np.float64
    )
    return quantize_multiplier(real, mult_bits)


# --------------------------------------------------------------------------------------------
# Requantization (integer path)
# --------------------------------------------------------------------------------------------


def _as_int64_param(p: Any, name: str) -> np.ndarray:
    arr = np.asarray(p)
    if arr.dtype.kind not in "iu":
        if arr.dtype.kind == "f" and np.all(arr == np.trunc(arr)):
            arr = arr.astype(np.int64)
        else:
            raise TypeError(f"{name} must be integer, got dtype {arr.dtype}")
    return arr.astype(np.int64)


def _broadcast_param(p: Any, name: str, shape: tuple[int, ...], axis: int | None) -> np.ndarray:
    """Shape a scalar or per-axis parameter so that it broadcasts against ``shape``."""
    arr = _as_int64_param(p, name)
    if axis is None:
        if arr.size != 1:
            raise ValueError(f"{name} has {arr.size} values but axis is None (per-tensor)")
        return arr.reshape(())
    ndim = len(shape)
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} out of range for a {ndim}-d accumulator")
    ax = axis % ndim
    if arr.size == 1:
        return arr.reshape(())
    if arr.ndim != 1 or arr.shape[0] != shape[ax]:
        raise ValueError(
            f"{name} has shape {arr.shape}; per-axis parameters need shape ({shape[ax]},) "
            f"to match axis {axis} of an accumulator of shape {shape}"
        )
    bshape = [1] * ndim
    bshape[ax] = shape[ax]
    return arr.reshape(bshape)


def _check_shift(s: np.ndarray, name: str) -> None:
    if s.size and (s.min() < 0 or s.max() > MAX_SHIFT):
        raise ValueError(f"{name} must be in [0, {MAX_SHIFT}], got [{s.min()}, {s.max()}]")


def clip_bounds(
    out_dtype: Any = np.int8, *, relu: bool = False, relu6_q: int | None = None
) -> tuple[int, int]:
    """The final ``(lo, hi)`` clamp: dtype saturation combined with the folded ReLU / upper clip.

    ``relu`` raises ``lo`` to 0; ``relu6_q`` lowers ``hi`` to that integer (an upper clip in the
    output's integer domain, e.g. ``round(6 / s_out)``). ReLU6 is ``relu=True, relu6_q=q6``.
    """
    lo, hi = qrange(out_dtype)
    if relu:
        lo = 0
    if relu6_q is not None:
        if int(relu6_q) != relu6_q:
            raise ValueError(f"relu6_q must be an integer in the output domain, got {relu6_q}")
        hi = min(hi, int(relu6_q))
    if lo > hi:
        raise ValueError(f"upper clip relu6_q={relu6_q} is below the lower bound {lo}")
    return lo, hi


def _round_shift(p: np.ndarray, s: np.ndarray) -> np.ndarray:
    """``floor((p + 2**(s-1)) / 2**s)`` in int64; ``s == 0`` returns ``p``."""
    half = np.left_shift(np.int64(1), np.maximum(s - 1, 0)) * (s > 0)
    return np.right_shift(p + half, s)


def _prepare(
    acc: Any, mult: Any, shift: Any, axis: int | None, leaky: tuple[Any, Any] | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    a = np.asarray(acc)
    if a.dtype.kind not in "iu" or (a.dtype.kind == "u" and a.dtype.itemsize >= 8):
        raise TypeError(f"accumulator must be a signed integer array (int32/int64), not {a.dtype}")
    a = a.astype(np.int64, copy=False)
    m = _broadcast_param(mult, "mult", a.shape, axis)
    s = _broadcast_param(shift, "shift", a.shape, axis)
    _check_shift(s, "shift")
    mags = [int(np.abs(m).max())]
    if leaky is not None:
        if len(leaky) != 2:
            raise ValueError("leaky must be a (mult_neg, shift_neg) pair")
        if (m < 0).any():
            raise ValueError("with leaky, the positive-side mult must be >= 0")
        mn = _broadcast_param(leaky[0], "leaky mult", a.shape, axis)
        sn = _broadcast_param(leaky[1], "leaky shift", a.shape, axis)
        _check_shift(sn, "leaky shift")
        mags.append(int(np.abs(mn).max()))
        neg = a < 0
        m = np.where(neg, mn, m)
        s = np.where(neg, sn, s)
    if a.size:
        amax = max(-int(a.min()), int(a.max()))
        if amax * max(mags) >= ACC_PRODUCT_LIMIT:
            raise OverflowError(
                f"|acc| * |mult| reaches 2**62 (max |acc| = {amax}, max |mult| = {max(mags)}): "
                "the int64 requantization would overflow; use a smaller mult_bits or a shorter "
                "reduction"
            )
    return a, m, s


def requantize(
    acc: np.ndarray,
    mult: Any,
    shift: Any,
    *,
    axis: int | None = None,
    out_dtype: Any = np.int8,
    relu: bool = False,
    relu6_q: int | None = None,
    leaky: tuple[Any, Any] | None = None,
) -> np.ndarray:
    """Rescale an integer accumulator to the output dtype, exactly, in int64.

    ``y = clip(floor((acc * mult + 2**(shift-1)) / 2**shift), lo, hi)`` — round half up
    (ties toward +inf), computed as an add and an arithmetic right shift, then saturation.

    - ``mult`` / ``shift``: scalars (per tensor) or 1-D vectors along ``axis`` (per channel).
    - ``relu``: clamp low at 0. ``relu6_q``: clamp high at this output-domain integer
      (ReLU6 = both). ``leaky=(mult_neg, shift_neg)``: where ``acc < 0`` use this pair, which
      already contains the slope (``mult_neg * 2**-shift_neg ~= alpha * real``); it excludes
      ``relu``.
    - ``out_dtype``: int8, int16, int32 (or int64); saturation to its full range.

    Requires ``|acc| * |mult| < 2**62`` (checked; ``OverflowError`` otherwise).
    """
    if leaky is not None and relu:
        raise ValueError("relu and leaky are exclusive: LeakyReLU's negative side is not 0")
    lo, hi = clip_bounds(out_dtype, relu=relu, relu6_q=relu6_q)
    a, m, s = _prepare(acc, mult, shift, axis, leaky)
    r = _round_shift(a * m, s)
    return np.clip(r, lo, hi).astype(out_dtype)


def fake_requantize(
    acc: np.ndarray,
    mult: Any,
    shift: Any,
    *,
    axis: int | None = None,
    relu: bool = False,
    relu6_q: int | None = None,
    leaky: tuple[Any, Any] | None = None,
) -> np.ndarray:
    """The "fakeQf" twin of :func:`requantize`: float64 ``acc * mult * 2**-shift``.

    Same scales and the same folded activations (ReLU floor at 0, upper clip at ``relu6_q``,
    LeakyReLU pair on ``acc < 0``), but no rounding and no dtype saturation. The only error is
    the float64 conversion of the exact int64 product (none while ``|acc * mult| < 2**53``).
    Comparing it with :func:`requantize` separates rounding loss from saturation loss.
    """
    if leaky is not None and relu:
        raise ValueError("relu and leaky are exclusive: LeakyReLU's negative side is not 0")
    a, m, s = _prepare(acc, mult, shift, axis, leaky)
    v = np.ldexp((a * m).astype(np.float64), (-s).astype(np.int32))
    if relu:
        v = np.maximum(v, 0.0)
    if relu6_q is not None:
        v = np.minimum(v, float(relu6_q))
    return np.asarray(v, dtype=np.float64)


# --------------------------------------------------------------------------------------------
# Numba twins for the simulators' inner loops
# --------------------------------------------------------------------------------------------


@njit(cache=True)
def requantize_one(a, m, s, mn, sn, lo, hi):  # pragma: no cover - compiled
    """One element of :func:`requantize` (int64 scalars); ``(mn, sn)`` used when ``a < 0``.

    Without LeakyReLU pass ``mn, sn = m, s``; ``(lo, hi)`` comes from :func:`clip_bounds`.
    """
    if a < 0:
        m = mn
        s = sn
    p = np.int64(a) * np.int64(m)
    if s > 0:
        p = (p + (np.int64(1) << np.int64(s - 1))) >> np.int64(s)
    if p < lo:
        return np.int64(lo)
    if p > hi:
        return np.int64(hi)
    return np.int64(p)


@njit(cache=True)
def requantize_nb(acc, mult, shift, mult_neg, shift_neg, lo, hi, out):  # pragma: no cover
    """:func:`requantize` over a 2-D ``(rows, channels)`` accumulator into ``out`` (same shape).

    ``mult``/``shift``/``mult_neg``/``shift_neg`` are int64 vectors of length ``channels``
    (repeat a per-tensor value); the channel loop is innermost. No overflow check: callers
    validate parameters once with :func:`requantize` or by construction.
    """
    n, c = acc.shape
    for i in range(n):
        for j in range(c):
            out[i, j] = requantize_one(
                np.int64(acc[i, j]), mult[j], shift[j], mult_neg[j], shift_neg[j], lo, hi
            )
    return out


# --------------------------------------------------------------------------------------------
# Float <-> integer helpers (calibration side)
# --------------------------------------------------------------------------------------------


def _broadcast_scale(scale: Any, shape: tuple[int, ...], axis: int | None) -> np.ndarray:
    sc = np.asarray(scale, dtype=np.float64)
    if not np.all(np.isfinite(sc)) or np.any(sc <= 0):
        raise ValueError("scales must be finite and > 0")
    if axis is None:
        if sc.size != 1:
            raise ValueError(f"scale has {sc.size} values but axis is None (per-tensor)")
        return sc.reshape(())
    ndim = len(shape)
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} out of range for a {ndim}-d tensor")
    ax = axis % ndim
    if sc.size == 1:
        return sc.reshape(())
    if sc.ndim != 1 or sc.shape[0] != shape[ax]:
        raise ValueError(f"scale has shape {sc.shape}; expected ({shape[ax]},) along axis {axis}")
    bshape = [1] * ndim
    bshape[ax] = shape[ax]
    return sc.reshape(bshape)


def quantize(
    x: np.ndarray,
    scale: Any,
    dtype: Any = np.int8,
    axis: int | None = None,
    *,
    narrow_range: bool = False,
) -> np.ndarray:
    """``saturate(round_half_away(x / scale))``: symmetric, zero point 0.

    ``scale`` is a scalar or a vector along ``axis``. ``narrow_range`` saturates at
    ``-qmax`` instead of ``qmin`` (weights: keeps ``|q| <= 127`` for the int32 accumulator
    bound). NaN raises ``ValueError``; +-inf saturates.
    """
    dt = np.dtype(dtype)
    xa = np.asarray(x)
    sc = _one_scale(scale) if axis is None else None
    if sc is not None and xa.size > 64 and xa.dtype in _FLOATS and dt in _SIGNED_OUT[:3]:
        # hot path (Cast of a feature map): the same float64 arithmetic, fused in one pass
        lo, hi = _QRANGE_F[dt, narrow_range]
        out = np.empty(xa.shape, dtype=dt)
        if not quantize_scalar_nb(np.ascontiguousarray(xa).reshape(-1), sc, lo, hi,
                                  out.reshape(-1)):
            raise ValueError("quantize: input contains NaN")
        return out
    lo, hi = qrange(dtype, narrow_range=narrow_range)
    xf = np.asarray(x, dtype=np.float64)
    if np.isnan(xf).any():
        raise ValueError("quantize: input contains NaN")
    # float(2**63 - 1) rounds up to 2**63: clip at the largest float that still fits
    lo_f, hi_f = float(lo), float(hi) if float(hi) <= hi else float(np.nextafter(float(hi), 0.0))
    v = np.clip(xf / _broadcast_scale(scale, xf.shape, axis), lo_f, hi_f)
    return round_half_away(v).astype(dtype)


#: how far from a half-integer a fast quotient must lie (`quantize_scalar_nb`): x * (1/scale)
#: differs from the correctly rounded x / scale by at most 3.0001 * 2**-53 * |x / scale| <
#: 2**-34.4 below 2**17, so a product farther than this from every k + 0.5 rounds alike
_HALF_TOL = 2.0**-30
#: the fast quotient is taken where the saturation bounds lie below this (int8 / int16)
_FAST_BOUND = 2.0**17


@njit(cache=True, nogil=True)
def quantize_scalar_nb(x, scale, lo, hi, out) -> bool:
    """`quantize` for one scale over flat arrays (`lo`, `hi`: the saturation bounds as
    floats): float64 divide, clip, round half away; False on NaN. Branch-free, so the loop
    vectorises (12x faster than with early exits and branches). Without the GIL: a caller
    may run it over slices of one map on several threads (the host backend's big Casts).

    For int8 / int16 bounds the quotient is first taken as a product with ``1 / scale``
    (a divide per element is most of the pass: 8192 floats 6.3 -> 3.7 us): rounded to an
    integer it is the quotient's own integer unless it lies within `_HALF_TOL` of a
    half-integer (`_HALF_TOL`'s bound), and a pass in which any element does (an input of
    exact halves, a NaN) is done again with the divide. So the bytes are the divide's."""
    if 2.0**-1000 < scale < 2.0**1000 and -lo < _FAST_BOUND and hi < _FAST_BOUND:
        inv = 1.0 / scale
        again = False
        for i in range(x.shape[0]):
            v = np.float64(x[i]) * inv
            again |= v != v
            v = min(max(v, lo), hi)
            a = abs(v)
            fl = np.floor(a)
            f = a - fl
            again |= abs(f - 0.5) <= _HALF_TOL
            out[i] = np.copysign(fl + (1.0 if f >= 0.5 else 0.0), v)
        if not again:
            return True
    bad = False
    for i in range(x.shape[0]):
        v = np.float64(x[i]) / scale
        bad |= v != v
        v = min(max(v, lo), hi)
        a = abs(v)
        fl = np.floor(a)
        out[i] = np.copysign(fl + (1.0 if a - fl >= 0.5 else 0.0), v)
    return not bad


def dequantize(
    q: np.ndarray, scale: Any, axis: int | None = None, *, dtype: Any = np.float32
) -> np.ndarray:
    """``q * scale`` (computed in float64, returned as ``dtype``, float32 by default)."""
    qa = np.asarray(q)
    if qa.dtype.kind not in "iu":
        raise TypeError(f"dequantize expects an integer array, got {qa.dtype}")
    sc = _one_scale(scale)
    if sc is not None and qa.size > 64 and np.dtype(dtype) in _FLOATS:
        # hot path (Cast of a feature map): the same float64 product, in one pass
        if not (math.isfinite(sc) and sc > 0):
            raise ValueError("scales must be finite and > 0")
        out = np.empty(qa.shape, dtype=dtype)
        dequantize_scalar_nb(np.ascontiguousarray(qa).reshape(-1), sc, out.reshape(-1))
        return out
    return (qa.astype(np.float64) * _broadcast_scale(scale, qa.shape, axis)).astype(dtype)


@njit(cache=True, nogil=True)
def dequantize_scalar_nb(q, scale, out) -> None:
    """`dequantize` for one scale over flat arrays: ``q * scale`` in float64, rounded once to
    `out`'s type. Without the GIL, as `quantize_scalar_nb`."""
    for i in range(q.shape[0]):
        out[i] = np.float64(q[i]) * scale


def quantize_bias(
    b: np.ndarray, s_in: float, s_w: Any, dtype: Any = np.int32
) -> np.ndarray:
    """``saturate(round_half_away(b / (s_in * s_w[c])))``: the bias in accumulator units.

    ``s_w`` is a scalar or a vector of the bias length; the divisor is evaluated as
    ``s_in * s_w`` in float64. ``dtype`` is int32 for int8 layers and int64 for int16 layers
    (their accumulators), see docs/quantization.md.
    """
    bf = np.asarray(b, dtype=np.float64)
    sw = np.asarray(s_w, dtype=np.float64)
    axis = None if sw.size == 1 else bf.ndim - 1
    denom = np.float64(s_in) * sw
    return quantize(bf, denom.reshape(-1)[0] if sw.size == 1 else denom, dtype, axis)


#: Add/Sub: the larger of the two input shifts is lowered until the shift difference is at most
#: this, so that |a * m_a * 2**d| < 2**15 * 2**15 * 2**16 = 2**46 and the sum (< 2**47) times a
#: 15-bit LeakyReLU multiplier stays below 2**62.
ADD_MAX_SHIFT_DIFF = 16


def add_rescale_params(s_a: float, s_b: float, s_out: float):
    """Per-input ``(mult, shift)`` of Add/Sub and their common shift ``S``.

    ``(m_i, sh_i) = requant_multiplier(s_i, 1.0, s_out)``; an input whose mult is 0 contributes
    nothing and takes the other's shift. If ``sh_a - sh_b > ADD_MAX_SHIFT_DIFF`` (or the
    reverse), the larger one is lowered by ``k = diff - ADD_MAX_SHIFT_DIFF``:
    ``m' = (m + 2**(k-1)) >> k``, ``sh' = sh - k``. ``S = max(sh_a, sh_b)``.
    """
    (ma, sa), (mb, sb) = (tuple(int(v) for v in requant_multiplier(s, 1.0, s_out))
                          for s in (s_a, s_b))
    if ma == 0:
        sa = sb
    if mb == 0:
        sb = sa
    if sa - sb > ADD_MAX_SHIFT_DIFF:
        k = sa - sb - ADD_MAX_SHIFT_DIFF
        ma, sa = (ma + (1 << (k - 1))) >> k, sa - k
    elif sb - sa > ADD_MAX_SHIFT_DIFF:
        k = sb - sa - ADD_MAX_SHIFT_DIFF
        mb, sb = (mb + (1 << (k - 1))) >> k, sb - k
    return (ma, sa), (mb, sb), max(sa, sb)

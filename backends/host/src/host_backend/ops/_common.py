"""Helpers shared by the float kernels: attribute reading, dtype and padding."""

from __future__ import annotations

from typing import Any

import numpy as np

from xir.numba_target import njit
from xir.quant.fixed_point import requantize_one

#: kernels of other files that this file's kernels call, with their source stamps
#: (tests/test_kernel_stamps.py): a change there makes Numba recompile these
NUMBA_DEPENDS = {"xir.quant.fixed_point.requantize_one": "e5bd92a5402c36dd"}


def f32(x: Any) -> np.ndarray:
    """The input as a float32 array (no copy when it already is one)."""
    return np.asarray(x, dtype=np.float32)


def out32(x: np.ndarray) -> np.ndarray:
    """A kernel output: float32, C-contiguous."""
    return np.ascontiguousarray(x, dtype=np.float32)


def fresh(x: np.ndarray) -> np.ndarray:
    """A C-contiguous copy that never shares memory with a kernel input."""
    return np.array(x, order="C", copy=True)


def int_attr(attrs: dict, name: str, default: int) -> int:
    return int(attrs.get(name, default))


def require(attrs: dict, name: str, op: str) -> Any:
    """An attribute without a documented default: fail with a message naming op and key."""
    try:
        return attrs[name]
    except KeyError:
        raise KeyError(f"{op}: attribute {name!r} is required (see docs/ops.md)") from None


def pads4(attrs: dict) -> tuple[int, int, int, int]:
    """(pad_top, pad_bottom, pad_left, pad_right), each defaulting to 0."""
    return (
        int_attr(attrs, "pad_top", 0),
        int_attr(attrs, "pad_bottom", 0),
        int_attr(attrs, "pad_left", 0),
        int_attr(attrs, "pad_right", 0),
    )


def pad_hw(
    x: np.ndarray,
    pt: int,
    pb: int,
    pl: int,
    pr: int,
    value: float = 0.0,
    mode: str = "constant",
) -> np.ndarray:
    """Pad H and W of an NHWC array; the result is C-contiguous."""
    if min(pt, pb, pl, pr) < 0:
        raise ValueError(f"negative padding ({pt}, {pb}, {pl}, {pr}) is not supported")
    if not (pt or pb or pl or pr):
        return np.ascontiguousarray(x)
    if mode != "constant":
        return np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)), mode=mode)
    n, h, w, c = x.shape
    out = np.empty((n, h + pt + pb, w + pl + pr, c), dtype=x.dtype)
    # Fill only the border: cheaper than filling the whole array then overwriting it.
    out[:, :pt] = value
    out[:, pt + h :] = value
    out[:, pt : pt + h, :pl] = value
    out[:, pt : pt + h, pl + w :] = value
    out[:, pt : pt + h, pl : pl + w] = x
    return out


def tap(x: np.ndarray, i0: int, j0: int, sh: int, sw: int, ho: int, wo: int) -> np.ndarray:
    """The strided NHWC view of one kernel tap: x[:, i0 + sh*oy, j0 + sw*ox, :]."""
    return x[:, i0 : i0 + sh * (ho - 1) + 1 : sh, j0 : j0 + sw * (wo - 1) + 1 : sw, :]


def fold_act(y: np.ndarray, attrs: dict, op: str) -> np.ndarray:
    """Apply a folded activation (``act``, ``act_alpha``, ``act_max``) to a float32 result.

    act "relu" is the Relu family: y if y >= 0 else act_alpha * y, then min(y, act_max).
    Works in place when ``y`` is a float32 array it may own.
    """
    act = str(attrs.get("act", "none"))
    if act == "none":
        return y
    if act != "relu":
        raise ValueError(f"{op}: act must be 'none' or 'relu', not {act!r}")
    alpha = np.float32(attrs.get("act_alpha", 0.0))
    max_value = float(attrs.get("act_max", np.inf))
    if alpha == 0:
        np.maximum(y, np.float32(0), out=y)
    else:
        np.multiply(y, alpha, out=y, where=y < 0)
    if max_value != np.inf:
        np.minimum(y, np.float32(max_value), out=y)
    return y


# --------------------------------------------------------------------------------------------
# Integer kernels: scales, folded activations, requantization (docs/quantization.md)
# --------------------------------------------------------------------------------------------
#
# An integer kernel is ``kernel(inputs, attrs, in_types, out_types, *, fake=False) -> outputs``:
# ``in_types`` / ``out_types`` are the xir TensorTypes of the op's inputs (Params included) and
# outputs, whose QuantizedType scales fix every multiplier (derived in the kernel, never
# stored). ``fake=True`` is fakeQf: quantized feature maps arrive and leave as float64 arrays in
# integer units, and nothing is rounded or saturated (quantized Params stay integers).

ACC_CHUNK_F32 = 1024
"""int8 x int8 products are below 2**14 in magnitude, so a float32 dot product over at most
1024 of them has every partial sum below 2**24: exact. Longer reductions are split."""


def tscale(t: Any) -> np.ndarray:
    """The scale(s) of a quantized TensorType (float64 vector), 1.0 for a float type."""
    el = t.element_dtype
    if getattr(el, "is_quantized", False):
        return np.asarray(el.scale, dtype=np.float64)
    return np.ones(1, dtype=np.float64)


def scale1(t: Any) -> float:
    """The single scale of a per-tensor quantized type."""
    s = tscale(t)
    if s.size != 1:
        raise ValueError(f"expected a per-tensor quantized type, got {t!r}")
    return float(s[0])


def is_q(t: Any) -> bool:
    return bool(getattr(t.element_dtype, "is_quantized", False))


def folded_act(attrs: dict, real: Any, s_out: float, *, act_key: str = "act",
               alpha_key: str = "act_alpha", max_key: str = "act_max",
               enabled: bool | None = None) -> dict:
    """``relu`` / ``relu6_q`` / ``leaky`` arguments of requantize for a folded activation.

    ``real`` is the positive-side real multiplier (scalar or per channel); the LeakyReLU pair is
    ``quantize_multiplier(alpha * real)``; the upper clip is ``quantize(act_max, s_out)``.
    """
    from xir.quant.fixed_point import quantize, quantize_multiplier

    on = (str(attrs.get(act_key, "none")) == "relu") if enabled is None else enabled
    if not on:
        return {"relu": False, "relu6_q": None, "leaky": None}
    alpha = float(attrs.get(alpha_key, 0.0))
    amax = float(attrs.get(max_key, np.inf))
    relu6_q = None
    if amax != np.inf:
        relu6_q = int(quantize(np.float64(amax), s_out, np.int64))
    if alpha == 0.0:
        return {"relu": True, "relu6_q": relu6_q, "leaky": None}
    mn, sn = quantize_multiplier(alpha * np.asarray(real, dtype=np.float64))
    return {"relu": False, "relu6_q": relu6_q, "leaky": (mn, sn)}


def fake_rq(acc: np.ndarray, mult: Any, shift: Any, *, axis: int | None = None,
            relu: bool = False, relu6_q: int | None = None, leaky: Any = None) -> np.ndarray:
    """fakeQf requantization of a float accumulator: ``act(acc * mult * 2**-shift)`` in float64,
    no rounding, no saturation (``xir.quant.fake_requantize`` for non-integer accumulators)."""
    a = np.asarray(acc, dtype=np.float64)

    def shaped(p: Any) -> np.ndarray:
        arr = np.asarray(p, dtype=np.float64)
        if axis is None or arr.size == 1:
            return arr.reshape(())
        bshape = [1] * a.ndim
        bshape[axis % a.ndim] = -1
        return arr.reshape(bshape)

    real = shaped(mult) * np.exp2(-shaped(shift))
    v = a * real
    if leaky is not None:
        neg = shaped(leaky[0]) * np.exp2(-shaped(leaky[1]))
        v = np.where(a < 0, a * neg, v)
    if relu:
        v = np.maximum(v, 0.0)
    if relu6_q is not None:
        v = np.minimum(v, float(relu6_q))
    return v


def rq_any(acc: np.ndarray, mult: Any, shift: Any, out_dtype: Any, *, relu: bool = False,
           relu6_q: int | None = None, leaky: Any = None, fake: bool = False) -> np.ndarray:
    """requantize with ``mult`` / ``shift`` broadcasting against ``acc`` in any numpy way
    (per-position divisors of AvgPool2d): the formula of ``xir.quant.requantize``."""
    from xir.quant.fixed_point import ACC_PRODUCT_LIMIT, clip_bounds

    if fake:
        a = np.asarray(acc, dtype=np.float64)
        v = a * (np.asarray(mult, np.float64) * np.exp2(-np.asarray(shift, np.float64)))
        if leaky is not None:
            v = np.where(a < 0, a * (np.asarray(leaky[0], np.float64)
                                     * np.exp2(-np.asarray(leaky[1], np.float64))), v)
        if relu:
            v = np.maximum(v, 0.0)
        if relu6_q is not None:
            v = np.minimum(v, float(relu6_q))
        return v
    lo, hi = clip_bounds(out_dtype, relu=relu, relu6_q=relu6_q)
    a = np.asarray(acc).astype(np.int64)
    m = np.asarray(mult, dtype=np.int64)
    s = np.asarray(shift, dtype=np.int64)
    if leaky is not None:
        neg = a < 0
        m = np.where(neg, np.asarray(leaky[0], np.int64), m)
        s = np.where(neg, np.asarray(leaky[1], np.int64), s)
    if a.size:
        amax = max(-int(a.min()), int(a.max()))
        if amax * int(np.abs(m).max()) >= ACC_PRODUCT_LIMIT:
            raise OverflowError(f"|acc| * |mult| reaches 2**62 (max |acc| = {amax})")
    p = a * m
    half = np.left_shift(np.int64(1), np.maximum(s - 1, 0)) * (s > 0)
    r = np.right_shift(p + half, s)
    return np.clip(r, lo, hi).astype(out_dtype)


def rescale(x: np.ndarray, s_in: float, s_out: float, out_dtype: Any, fake: bool) -> np.ndarray:
    """Move integer codes from scale ``s_in`` to ``s_out`` (identity when the scales agree)."""
    if s_in == s_out:
        if fake:
            return x
        x, info = np.asarray(x), np.iinfo(out_dtype)
        if x.dtype.itemsize > info.dtype.itemsize:  # a narrowing dtype change saturates
            x = np.clip(x, info.min, info.max)
        return x.astype(out_dtype, copy=False)
    from xir.quant.fixed_point import requant_multiplier

    m, s = requant_multiplier(s_in, 1.0, s_out)
    return rq_any(x, m, s, out_dtype, fake=fake)


@njit(cache=True)
def _rq_rows_nb(acc, bias, has_bias, mult, shift, mneg, sneg, lo, hi, out):  # pragma: no cover
    """`requant_channels`' loop, a module-level function so that Numba's cache serves it (a
    closure made by a factory was compiled again in every process, 2-3 s of CPU per compile,
    and wrote a cache file each time)."""
    n, c = acc.shape
    for i in range(n):
        for j in range(c):
            a = np.int64(acc[i, j])
            if has_bias:
                a += bias[j]
            out[i, j] = requantize_one(a, mult[j], shift[j], mneg[j], sneg[j], lo, hi)
    return out


def _vec(p: Any, c: int) -> np.ndarray:
    arr = np.asarray(p, dtype=np.int64).reshape(-1)
    return np.ascontiguousarray(np.broadcast_to(arr, (c,)) if arr.size == 1 else arr)


def requant_channels(acc: np.ndarray, bias: np.ndarray | None, mult: Any, shift: Any,
                     out_dtype: Any, *, relu: bool = False, relu6_q: int | None = None,
                     leaky: Any = None, fake: bool = False) -> np.ndarray:
    """``requantize(acc + bias)`` with parameters per last axis (or scalar), for conv/matmul.

    ``acc`` holds exact integers (int or integer-valued float32/float64); the loop is Numba
    (``xir.quant.requantize_one`` per element, channel innermost), so the result is the
    reference formula without int64 temporaries the size of the feature map.
    """
    from xir.quant.fixed_point import ACC_PRODUCT_LIMIT, clip_bounds

    shape = acc.shape
    c = shape[-1] if acc.ndim else 1
    if fake:
        a = np.asarray(acc, dtype=np.float64)
        if bias is not None:
            a = a + bias.astype(np.float64)
        return fake_rq(a, _vec(mult, c), _vec(shift, c), axis=-1, relu=relu, relu6_q=relu6_q,
                       leaky=None if leaky is None else (_vec(leaky[0], c), _vec(leaky[1], c)))
    lo, hi = clip_bounds(out_dtype, relu=relu, relu6_q=relu6_q)
    m, s = _vec(mult, c), _vec(shift, c)
    mn, sn = (m, s) if leaky is None else (_vec(leaky[0], c), _vec(leaky[1], c))
    if leaky is not None and relu:
        raise ValueError("relu and leaky are exclusive")
    if (s.min(initial=0) < 0) or (s.max(initial=0) > 63) or (sn.min(initial=0) < 0) \
            or (sn.max(initial=0) > 63):
        raise ValueError("shift must be in [0, 63]")
    a2 = np.ascontiguousarray(acc).reshape(-1, c)
    b = np.zeros(c, np.int64) if bias is None else np.ascontiguousarray(bias, dtype=np.int64)
    if a2.size:
        amax = float(max(-a2.min(), a2.max())) + float(np.abs(b).max(initial=0))
        big = max(int(np.abs(m).max()), int(np.abs(mn).max()))
        if amax * big >= float(ACC_PRODUCT_LIMIT):
            raise OverflowError(f"|acc| * |mult| reaches 2**62 (max |acc| ~ {amax:.0f})")
    out = np.empty(a2.shape, dtype=out_dtype)
    _rq_rows_nb(a2, b, bias is not None, m, s, mn, sn, np.int64(lo), np.int64(hi), out)
    return out.reshape(shape)

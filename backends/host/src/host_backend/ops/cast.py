"""Cast: element type (float <-> quantized, quantized -> quantized) and layout conversion.

Float -> quantized is ``xir.quant.quantize`` with the quantized side's scale(s) (round half away
from zero, saturation to the storage range); quantized -> float is ``dequantize``; quantized ->
quantized is a rescale by ``requant_multiplier(s_in, 1.0, s_out)``. A tiled layout on either side
(e.g. NCHWc16) re-tiles the data: the source is untiled, then tiled into the destination layout
(the tile axis padded with zeros). Signature of the integer kernels (types needed):
``cast(inputs, attrs, in_types, out_types, *, fake=False)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from xir.quant.fixed_point import (
    dequantize,
    dequantize_scalar_nb,
    qrange,
    quantize,
    quantize_scalar_nb,
    requant_multiplier,
)
from xir.tiling import tile, untile

from ._common import is_q, rq_any
from .parts import count, run_parts

_INTS = (np.dtype(np.int8), np.dtype(np.int16), np.dtype(np.int32))
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))

#: (id(source type), id(destination type)) -> (source type, destination type, plan): what
#: `_plan_of` found about a pair of types (the types are kept, so an id is never reused)
_PLANS: dict[tuple[int, int], tuple[Any, Any, Any]] = {}


def _plan_of(src_t, dst_t):
    """("q" or "d", result dtype, shape, lo, hi) when a Cast between these types is a
    one-scale quantize ("q": float to int8/16/32) or dequantize ("d": integer to float32/64)
    of untiled maps -- the edge Casts of every network --, else None (the general path)."""
    key = (id(src_t), id(dst_t))
    hit = _PLANS.get(key)
    if hit is not None and hit[0] is src_t and hit[1] is dst_t:
        return hit[2]
    plan = None
    if not src_t.layout.is_tiled() and not dst_t.layout.is_tiled():
        sq, dq = is_q(src_t), is_q(dst_t)
        out_dt = np.dtype(dst_t.numpy_dtype)
        shape = tuple(dst_t.shape)
        if dq and not sq and dst_t.element_dtype.axis is None and out_dt in _INTS:
            lo, hi = (float(v) for v in qrange(out_dt))
            plan = ("q", out_dt, shape, lo, hi)
        elif sq and not dq and src_t.element_dtype.axis is None and out_dt in _FLOATS:
            plan = ("d", out_dt, shape, 0.0, 0.0)
    if len(_PLANS) >= 4096:
        _PLANS.clear()
    _PLANS[key] = (src_t, dst_t, plan)
    return plan


def _edge_cast(plan, x: np.ndarray, scale: np.ndarray) -> np.ndarray | None:
    """A one-scale quantize / dequantize (`_plan_of`) of `x` by the kernels `quantize` and
    `dequantize` run on such maps (the same bytes), without their per-call checks and
    dispatch; None where `x` is not such a map (the general path runs)."""
    kind, out_dt, shape, lo, hi = plan
    n = x.size
    if scale.size != 1 or n <= 64 or math.prod(shape) != n:
        return None
    sc = float(scale[0])
    if kind == "q":
        if x.dtype not in _FLOATS:
            return None
        if count(n) > 1:
            return _quantize_parts(x, sc, out_dt).reshape(shape)
        y = np.empty(shape, dtype=out_dt)
        flat = (x if x.flags.c_contiguous else np.ascontiguousarray(x)).reshape(-1)
        if not quantize_scalar_nb(flat, sc, lo, hi, y.reshape(-1)):
            raise ValueError("quantize: input contains NaN")
        return y
    if x.dtype.kind not in "iu":
        return None
    if count(n) > 1:
        return _dequantize_parts(x, sc, out_dt).reshape(shape)
    if not (math.isfinite(sc) and sc > 0):
        raise ValueError("scales must be finite and > 0")
    y = np.empty(shape, dtype=out_dt)
    flat = (x if x.flags.c_contiguous else np.ascontiguousarray(x)).reshape(-1)
    dequantize_scalar_nb(flat, sc, y.reshape(-1))
    return y


def edge_cast(src_t, dst_t) -> Callable[[np.ndarray], np.ndarray | None] | None:
    """The edge Cast from `src_t` to `dst_t` (`_plan_of`: a one-scale quantize or dequantize
    of an untiled map) as a function of the input array, what `cast` runs for it: a fresh
    C-contiguous array of `dst_t`'s numpy dtype and shape, or None where the array is not
    such a map (`cast`'s general path then). None for other Casts. For a caller that plans
    an op once and runs it many times (the HostBackend), without `cast`'s per-call look-up."""
    plan = _plan_of(src_t, dst_t)
    if plan is None:
        return None
    scale = (dst_t if plan[0] == "q" else src_t).element_dtype.scale

    def run(x: np.ndarray) -> np.ndarray | None:
        return _edge_cast(plan, x, scale)

    return run


def cast(inputs, attrs, in_types, out_types, *, fake=False):
    """Convert ``inputs[0]`` from ``in_types[0]`` to ``out_types[0]`` (see the module doc)."""
    src_t, dst_t = in_types[0], out_types[0]
    x = np.asarray(inputs[0])
    if not fake:
        plan = _plan_of(src_t, dst_t)
        if plan is not None:
            y = _edge_cast(plan, x, (dst_t if plan[0] == "q" else src_t).element_dtype.scale)
            if y is not None:
                return [y]
    src_tiled, dst_tiled = src_t.layout.is_tiled(), dst_t.layout.is_tiled()
    if src_tiled:
        x = untile(x, src_t.layout)
    sq, dq = is_q(src_t), is_q(dst_t)
    src_el, dst_el = src_t.element_dtype, dst_t.element_dtype

    if dq and not sq:
        sc = dst_el.scale  # a float64 array: one value, or one per entry along the axis
        if fake:
            y = _scaled(np.asarray(x, np.float64), 1.0 / sc, dst_el.axis)
        else:
            y = quantize(x, sc, dst_el.numpy_dtype, dst_el.axis)
    elif sq and not dq:
        sc = src_el.scale
        if fake:
            y = _scaled(np.asarray(x, np.float64), sc, src_el.axis).astype(dst_t.numpy_dtype)
        else:
            y = dequantize(x, sc, src_el.axis, dtype=dst_t.numpy_dtype)
    elif sq and dq:
        if src_el.axis is not None or dst_el.axis is not None:
            raise ValueError("Cast between quantized types needs per-tensor scales")
        m, s = requant_multiplier(float(src_el.scale[0]), 1.0, float(dst_el.scale[0]))
        y = rq_any(x if fake else x.astype(np.int64), m, s, dst_t.numpy_dtype, fake=fake)
    else:
        y = x.astype(dst_t.numpy_dtype)
    shape = tuple(dst_t.shape)
    if dst_tiled:
        y = tile(y, dst_t.layout, shape)
    elif src_tiled and y.ndim == len(shape) and y.shape != shape:
        y = y[tuple(slice(0, d) for d in shape)]  # drop the padding of the source tiles
    if y.shape != shape or not y.flags.c_contiguous:
        y = np.ascontiguousarray(y).reshape(shape)
    return [y]


def _quantize_parts(x: np.ndarray, sc: float, dtype) -> np.ndarray:
    """`quantize` of `x` with one scale, slices of the flat map on the host's threads: each
    element's arithmetic is its own (`quantize_scalar_nb`, `quantize`'s own kernel), so the
    bytes are those of one call."""
    lo, hi = (float(v) for v in qrange(dtype))
    flat = np.ascontiguousarray(x).reshape(-1)
    y = np.empty(x.shape, dtype=dtype)
    out = y.reshape(-1)
    nan = []
    run_parts(flat.size, lambda a, b: None if quantize_scalar_nb(flat[a:b], sc, lo, hi,
                                                                 out[a:b]) else nan.append(a))
    if nan:
        raise ValueError("quantize: input contains NaN")
    return y


def _dequantize_parts(q: np.ndarray, sc: float, dtype) -> np.ndarray:
    """`dequantize` of `q` with one scale in slices on the host's threads (as
    `_quantize_parts`)."""
    if not (np.isfinite(sc) and sc > 0):
        raise ValueError("scales must be finite and > 0")
    flat = np.ascontiguousarray(q).reshape(-1)
    y = np.empty(q.shape, dtype=dtype)
    out = y.reshape(-1)
    run_parts(flat.size, lambda a, b: dequantize_scalar_nb(flat[a:b], sc, out[a:b]))
    return y


def _scaled(x: np.ndarray, sc: np.ndarray, axis) -> np.ndarray:
    if axis is None or sc.size == 1:
        return x * float(sc.reshape(-1)[0])
    shape = [1] * x.ndim
    shape[axis] = -1
    return x * sc.reshape(shape)

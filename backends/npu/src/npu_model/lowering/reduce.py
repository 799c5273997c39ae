"""Lowering of `xir.ops.reduce.Reduce` with func "max" or "mean" over space or over channels.
Max: the integer reference moves codes (the scale passes through), so the POOL MAX unit
computes it. Mean: the reference requantizes the exact sum of the `n` reduced codes with
`requant_multiplier(s_in, 1 / n, s_out)`, which is what POOL AVG does with a window of `n`
codes and no padding (divisor table entry `n`).

- over H and/or W of an NHWC map: one POOL MAX / AVG layer per item whose window is the
  reduced axes (kernel H x 1, 1 x W or H x W, stride 1);
- over the channels: a COPY PERMUTE turns each pixel's channels into a row of pixels
  (``(h, w, c) -> (h, c, w)``), a POOL MAX / AVG of window ``1 x C`` takes their maximum or
  mean, and (with `keepdims`) a second COPY PERMUTE puts the result back as a one-channel map.
  Max over the channels and space pools space first (a mean over both would round twice that
  way: it takes the CONV below).

- min: the vector unit has no POOL MIN, but ``~x = -1 - x`` maps every int8 / int16 code onto
  another one in reverse order, so ``min(x) = ~max(~x)``: one ELTW ADD (``ka = -1``, the
  one-pixel constant ``-1``, requantization (1, 0): exact, never saturating) into a scratch map,
  the max layers above into a second scratch map, and one more ELTW back into the output;
- mean over the channels and space at once: a CONV of weight 1 whose window is the reduced
  space (no padding) and whose one output channel sums all the window's channels exactly
  (int32 for int8, int64 for int16), requantized by the same per-tensor record the reference
  uses, ``requant_multiplier(s_in, 1 / n, s_out)``: one rounding, as the reference.

A reduced output without kept dims has fewer axes; its pixels are the same in the same order,
so each item's result is written through `Resolver.item_map` in the pool's geometry.
"""

from __future__ import annotations

import numpy as np

from npu_model import asm
from xir.quant.fixed_point import clip_bounds, requant_multiplier
from xir.types import TensorType
from xir.values import Value

from .common import items, map3, npu_dtype
from .layers import NotLowerable, OpLowering, Resolver, _feature_dtypes, scale_of
from .moves import map_axis


def lower_reduce(op, cfg) -> OpLowering:
    func = str(op.attrs.get("func"))
    if func not in ("max", "min", "mean"):
        raise NotLowerable(f"Reduce {func}: only max (POOL MAX), min (POOL MAX between two "
                           f"code complements) and mean (POOL AVG or a CONV of ones) run on "
                           f"the NPU")
    dt = _feature_dtypes(op, rescales=func == "mean")
    x, y = op.inputs[0], op.outputs[0]
    if func != "mean" and scale_of(x) != scale_of(y):
        raise NotLowerable(f"Reduce {func} with a rescale")
    if func == "min":
        return _lower_min(op, cfg, dt)
    return _lower_pools(op, cfg, func, x, y)


def _complement(src: asm.FMap, dst: asm.FMap, const_addr: int, tag: int) -> asm.Eltw:
    """``dst = -1 - src`` (the codes' order reversed, exact in any int8 / int16): ELTW ADD of
    ``-1 * src`` and ``1 * (-1)``, the one-pixel constant at `const_addr`."""
    one = asm.FMap(const_addr, 1, 1, src.c, pitch=src.c, dtype=src.dtype)
    return asm.Eltw(src, one, dst, op="add", ka=-1, kb=1, mult=1, shift=0,
                    clip=clip_bounds(np.dtype(src.dtype)), tag=tag)


def _lower_min(op, cfg, dt: str) -> OpLowering:
    """``min(x) = ~max(~x)``: the max layers of `_lower_pools` between two complements."""
    x, y = op.inputs[0], op.outputs[0]
    name = op.name or "reduce"
    nx = Value(-1, TensorType(x.dtype.element_dtype, tuple(x.shape), x.dtype.layout),
               f"{name}.not")
    ny = Value(-1, TensorType(y.dtype.element_dtype, tuple(y.shape), y.dtype.layout),
               f"{name}.max")
    inner = _lower_pools(op, cfg, "max", nx, ny)
    c, yc = map3(x.shape)[2], map3(y.shape)[2]
    minus_one = [np.full(k, -1, np.dtype(dt)).astype(np.dtype(dt).newbyteorder("<"))
                 .view(np.uint8) for k in (c, yc)]

    k = len(inner.consts)  # the two constants follow the inner layers' own

    def make(R: Resolver) -> list[asm.Layer]:
        return [_complement(R.fmap(x), R.fmap(nx), R.const(k), op.op_id)] + inner.make(R) + \
            [_complement(R.fmap(ny), R.fmap(y), R.const(k + 1), op.op_id)]

    return OpLowering(f"eltw+{inner.kind}+eltw", inner.consts + minus_one, make,
                      scratch=[nx, ny] + inner.scratch, fold=inner.fold)


def _lower_pools(op, cfg, func: str, x: Value, y: Value) -> OpLowering:
    """Reduce max / mean of map `x` into map `y` (`op`'s axes and names; `x`, `y` may be
    scratch maps of `op`'s shapes)."""
    r = len(x.shape)
    n, (h, w, c) = items(x.shape), map3(x.shape)
    axes = {int(a) % r for a in (op.attrs.get("axes") or range(r))}
    red = set()
    for a in axes:
        m = map_axis(r, a)
        if m is None:
            if n > 1:
                raise NotLowerable("Reduce over the batch axis")
            continue
        red.add(m)
    if not red:
        raise NotLowerable("Reduce over nothing")
    kh, kw = (h if 0 in red else 1), (w if 1 in red else 1)
    hs, ws = (1 if 0 in red else h), (1 if 1 in red else w)  # after the spatial window
    if max(kh, kw) > 255:
        raise NotLowerable("Reduce window above 255")
    if func == "mean" and 2 in red and kh * kw > 1:
        return _mean_by_conv(op, cfg, x, y, (kh, kw), (n, hs, ws, c))
    if 2 in red and c > 255:
        raise NotLowerable("Reduce window above 255 (the channels as a row of pixels)")
    mode = "max" if func == "max" else "avg"
    consts, avg = [], {}
    if mode == "avg":  # every window holds n codes: divisor table entry n, for every entry
        n_red = kh * kw * (c if 2 in red else 1)
        m_, s_ = requant_multiplier(scale_of(x), 1.0 / n_red, scale_of(y))
        consts = [asm.pack_avgpool_params(np.full(n_red + 1, int(m_), np.int64),
                                          np.full(n_red + 1, int(s_), np.int64))]
    yh, yw, yc = map3(y.shape)
    y_pixels = items(y.shape) * yh * yw
    el = x.dtype.element_dtype
    name = op.name or "reduce"
    spatial = kh * kw > 1
    if 2 not in red:
        if yc != c or y_pixels != n * hs * ws:
            raise NotLowerable("Reduce output geometry")

        def make_s(R: Resolver) -> list[asm.Layer]:
            if mode == "avg":
                avg["params_addr"] = R.const(0)
            return [asm.Pool(R.fmap(x), R.item_map(y, hs, ws), mode, (kh, kw), 1, 0,
                             tag=op.op_id, **avg)]

        return OpLowering(f"{mode}pool", consts, make_s, fold=kh == 1)
    # over the channels: each pixel's channels laid out as a row, a 1 x C window, the result
    # written as one channel (or, when the output's channels are the pixels of a row, as is)
    z0 = Value(-1, TensorType(el, (n, hs, ws, c), "NHWC"), f"{name}.space") if spatial \
        else None
    z1 = Value(-1, TensorType(el, (n, hs, c, ws), "NHWC"), f"{name}.rows")
    as_rows = yc == ws and yc != 1 and y_pixels == n * hs
    if not as_rows and (yc != 1 or y_pixels != n * hs * ws):
        raise NotLowerable("Reduce output geometry")
    z2 = None if as_rows else Value(-1, TensorType(y.dtype.element_dtype, (n, hs, 1, ws), "NHWC"),
                                    f"{name}.{func}")
    scratch = [v for v in (z0, z1, z2) if v is not None]

    def make_c(R: Resolver) -> list[asm.Layer]:
        layers, src = [], R.fmap(x)
        if z0 is not None:
            layers.append(asm.Pool(src, R.fmap(z0), "max", (kh, kw), 1, 0, tag=op.op_id))
            src = R.fmap(z0)
        layers.append(asm.Copy(src, R.fmap(z1), perm=(0, 2, 1), tag=op.op_id))
        if mode == "avg":
            avg["params_addr"] = R.const(0)
        if z2 is None:  # the output's channels are the pool's: h rows of w values
            return layers + [asm.Pool(R.fmap(z1), R.item_map(y, hs, 1), mode, (1, c), 1, 0,
                                      tag=op.op_id, **avg)]
        return layers + [asm.Pool(R.fmap(z1), R.fmap(z2), mode, (1, c), 1, 0, tag=op.op_id,
                                  **avg),
                         asm.Copy(R.fmap(z2), R.item_map(y, hs, ws), perm=(0, 2, 1),
                                  tag=op.op_id)]

    return OpLowering("reduce", consts, make_c, scratch=scratch, fold=not spatial)


def _mean_by_conv(op, cfg, x: Value, y: Value, kernel: tuple[int, int],
                  geo: tuple[int, int, int, int]) -> OpLowering:
    """Reduce mean over the channels and space as one CONV: weights 1 over the reduced window
    and every channel, one output channel, the exact sum requantized once by
    ``requant_multiplier(s_in, 1 / n, s_out)`` (the reference's record)."""
    n, hs, ws, c = geo
    kh, kw = kernel
    count = kh * kw * c
    dt = npu_dtype(x)
    if dt == "int8" and count * 128 >= 1 << 31:
        raise NotLowerable("Reduce mean of more codes than an int8 CONV accumulates in int32")
    yh, yw, yc = map3(y.shape)
    y_pixels = items(y.shape) * yh * yw
    # the output's channels may be the pixels of a row (the kept W of a dropped-dims mean):
    # the CONV's one-channel row then turns into them by a COPY PERMUTE
    as_rows = yc == ws and yc != 1 and y_pixels == n * hs
    if not as_rows and (yc != 1 or y_pixels != n * hs * ws):
        raise NotLowerable("Reduce output geometry")
    z = Value(-1, TensorType(y.dtype.element_dtype, (n, hs, ws, 1), "NHWC"),
              f"{op.name or 'reduce'}.sum") if as_rows else None
    m_, s_ = requant_multiplier(scale_of(x), 1.0 / count, scale_of(y))
    rec = asm.pack_requant_params(np.zeros(1, np.int64), np.full(1, int(m_), np.int64),
                                  np.full(1, int(s_), np.int64), n=1)
    weights = asm.pack_conv_weights(np.ones((kh, kw, c, 1), np.dtype(dt)), 1, dt, cfg)
    clip = clip_bounds(y.dtype.numpy_dtype)

    def make(R: Resolver) -> list[asm.Layer]:
        dst = R.item_map(y, hs, ws) if z is None else R.fmap(z)
        conv = asm.Conv(R.fmap(x), dst, R.const(0), R.const(1), kernel=(kh, kw), clip=clip,
                        tag=op.op_id)
        if z is None:
            return [conv]
        return [conv, asm.Copy(R.fmap(z), R.item_map(y, hs, 1), perm=(0, 2, 1), tag=op.op_id)]

    return OpLowering("conv" if z is None else "conv+copy", [weights, rec], make,
                      n * hs * ws * count, scratch=[] if z is None else [z], fold=kh == 1)


RULES = {"Reduce": lower_reduce}

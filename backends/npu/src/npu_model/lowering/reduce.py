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
  Max over the channels and space pools space first; a mean over both would round twice, so
  it is not lowered (it stays on the host, in integers).

A reduced output without kept dims has fewer axes; its pixels are the same in the same order,
so each item's result is written through `Resolver.item_map` in the pool's geometry.
"""

from __future__ import annotations

import numpy as np

from npu_model import asm
from xir.quant.fixed_point import requant_multiplier
from xir.types import TensorType
from xir.values import Value

from .common import items, map3
from .layers import NotLowerable, OpLowering, Resolver, _feature_dtypes, scale_of
from .moves import map_axis


def lower_reduce(op, cfg) -> OpLowering:
    func = str(op.attrs.get("func"))
    if func not in ("max", "mean"):
        raise NotLowerable(f"Reduce {func}: only max (POOL MAX) and mean (POOL AVG) run on the "
                           f"NPU")
    _feature_dtypes(op, rescales=func == "mean")
    x, y = op.inputs[0], op.outputs[0]
    if func == "max" and scale_of(x) != scale_of(y):
        raise NotLowerable("Reduce max with a rescale")
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
    if max(kh, kw) > 255 or (2 in red and c > 255):
        raise NotLowerable("Reduce window above 255")
    if func == "mean" and 2 in red and kh * kw > 1:
        raise NotLowerable("Reduce mean over the channels and space (two roundings)")
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


RULES = {"Reduce": lower_reduce}

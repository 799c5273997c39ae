"""Lowering of `xir.ops.reduce.Reduce` with func "max" over space or over channels: the
integer reference moves codes (the scale passes through), so the POOL MAX unit computes it.

- over H and/or W of an NHWC map: one POOL MAX layer per item whose window is the reduced
  axes (kernel H x 1, 1 x W or H x W, stride 1);
- over the channels: a COPY PERMUTE turns each pixel's channels into a row of pixels
  (``(h, w, c) -> (h, c, w)``), a POOL MAX of window ``1 x C`` takes their maximum, and (with
  `keepdims`) a second COPY PERMUTE puts the result back as a one-channel map.

A reduced output without kept dims has fewer axes; its pixels are the same in the same order,
so each item's result is written through `Resolver.item_map` in the pool's geometry.
"""

from __future__ import annotations

from npu_model import asm
from xir.types import TensorType
from xir.values import Value

from .common import items, map3
from .layers import NotLowerable, OpLowering, Resolver, _feature_dtypes, scale_of


def lower_reduce(op, cfg) -> OpLowering:
    func = str(op.attrs.get("func"))
    if func != "max":
        raise NotLowerable(f"Reduce {func}: only max runs on the NPU (a POOL MAX)")
    _feature_dtypes(op)
    x, y = op.inputs[0], op.outputs[0]
    if len(x.shape) != 4:
        raise NotLowerable("Reduce over a map that is not NHWC")
    if scale_of(x) != scale_of(y):
        raise NotLowerable("Reduce max with a rescale")
    n, (h, w, c) = items(x.shape), map3(x.shape)
    axes = {int(a) % 4 for a in (op.attrs.get("axes") or range(4))}
    if 0 in axes and n > 1:
        raise NotLowerable("Reduce over the batch axis")
    axes.discard(0)
    if not axes:
        raise NotLowerable("Reduce over nothing")
    keep = bool(op.attrs.get("keepdims", True))
    if axes <= {1, 2}:
        kh, kw = (h if 1 in axes else 1), (w if 2 in axes else 1)
        if max(kh, kw) > 255:
            raise NotLowerable("Reduce window above 255")
        oh, ow = (1 if 1 in axes else h), (1 if 2 in axes else w)

        def make(R: Resolver) -> list[asm.Layer]:
            return [asm.Pool(R.fmap(x), R.item_map(y, oh, ow), "max", (kh, kw), 1, 0,
                             tag=op.op_id)]

        return OpLowering("maxpool", [], make, fold=kh == 1)
    if axes != {3}:
        raise NotLowerable("Reduce over the channels and a spatial axis")
    if c > 255:
        raise NotLowerable("Reduce over more than 255 channels")
    el = x.dtype.element_dtype
    z1 = Value(-1, TensorType(el, (n, h, c, w), "NHWC"), f"{op.name or 'reduce'}.rows")
    scratch = [z1]
    z2 = None
    if keep:
        z2 = Value(-1, TensorType(el, (n, h, 1, w), "NHWC"), f"{op.name or 'reduce'}.max")
        scratch.append(z2)

    def make_c(R: Resolver) -> list[asm.Layer]:
        layers = [asm.Copy(R.fmap(x), R.fmap(z1), perm=(0, 2, 1), tag=op.op_id)]
        if z2 is None:  # [N, H, W]: item i's H rows of W values are the pool's h x 1 x w
            return layers + [asm.Pool(R.fmap(z1), R.item_map(y, h, 1), "max", (1, c), 1, 0,
                                      tag=op.op_id)]
        return layers + [asm.Pool(R.fmap(z1), R.fmap(z2), "max", (1, c), 1, 0, tag=op.op_id),
                         asm.Copy(R.fmap(z2), R.fmap(y), perm=(0, 2, 1), tag=op.op_id)]

    return OpLowering("copy+maxpool" + ("+copy" if keep else ""), [], make_c, scratch=scratch,
                      fold=True)


RULES = {"Reduce": lower_reduce}

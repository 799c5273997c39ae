"""Lowering rules of the pointwise ops of `xir.ops.pointwise` (docs/quantization.md, "Integer
ops: pointwise" defines their codes):

- `Binary` max / min: one ELTW MAX / MIN layer, each operand moved to the output scale by its
  own requantization (RQ for the first, RQ_NEG for the second), then compared; the second may
  be one pixel or a constant in the weight blob (a clip by a constant);
- `Unary` with a table function (abs, neg, exp, log, reciprocal, softplus, elu, mish, ...):
  one LUT layer with the host reference's table (`xir.ops.pointwise.unary_lut`), fused after
  the compute op it reads like Sigmoid;
- `PRelu` with a constant slope per channel: a depthwise 1x1 CONV of weight 1 whose requant
  records carry the LeakyReLU pair of each channel's slope, exactly the host's
  ``requantize(q, m_pos, sh_pos)`` / ``requantize(q, m_neg[c], sh_neg[c])``.
"""

from __future__ import annotations

import numpy as np

from npu_model import asm
from xir.ops.pointwise import UNARY_LUT_FUNCS, unary_lut
from xir.quant.fixed_point import clip_bounds, quantize_multiplier, requant_multiplier

from .common import map3
from .layers import (
    NotLowerable,
    OpLowering,
    Resolver,
    _feature_dtypes,
    eltw_operands,
    scale_of,
)


def _move(s_in: float, s_out: float) -> tuple[int, int]:
    """(mult, shift) moving codes from scale `s_in` to `s_out`: identity when equal (the host's
    `rescale`), else ``requant_multiplier(s_in, 1, s_out)``."""
    if s_in == s_out:
        return 1, 0
    m, s = requant_multiplier(s_in, 1.0, s_out)
    return int(m), int(s)


def lower_binary(op, cfg) -> OpLowering:
    func = str(op.attrs.get("func"))
    if func not in ("max", "min"):
        raise NotLowerable(f"Binary {func}: no integer form on the NPU (only max and min)")
    dt = _feature_dtypes(op, rescales=True)
    y = op.outputs[0]
    ops_ = eltw_operands(op, dt, cfg)
    s_y = scale_of(y)
    ma, sa = _move(scale_of(ops_.first), s_y)
    mb, sb = _move(scale_of(ops_.second), s_y)
    kw = dict(op=func, ka=1, kb=1, mult=ma, shift=sa, mult_neg=mb, shift_neg=sb,
              clip=clip_bounds(y.dtype.numpy_dtype))

    def make(R: Resolver) -> list[asm.Layer]:
        return ops_.prologue(R) + [asm.Eltw(R.fmap(ops_.first), ops_.other(R), R.fmap(y),
                                            tag=op.op_id, **kw)]

    return OpLowering("eltw", ops_.consts, make, fold=ops_.fold, scratch=ops_.scratch)


def lower_unary(op, cfg) -> OpLowering:
    func = str(op.attrs.get("func"))
    if func not in UNARY_LUT_FUNCS:
        raise NotLowerable(f"Unary {func}: no lookup-table form")
    _feature_dtypes(op, rescales=True)
    x, y = op.inputs[0], op.outputs[0]
    if map3(x.shape) != map3(y.shape):
        raise NotLowerable("unary shapes")
    table = unary_lut(op.attrs, scale_of(x), scale_of(y), x.dtype.numpy_dtype,
                      y.dtype.numpy_dtype)

    def make(R: Resolver) -> list[asm.Layer]:
        return [asm.Lut(R.fmap(x), R.fmap(y), R.const(0), tag=op.op_id)]

    return OpLowering("lut", [asm.pack_lut(np.asarray(table))], make, fold=True)


def _slope(v) -> np.ndarray:
    """The real values of PRelu's constant slope: codes times their per-tensor scale (zero
    point removed), or the float data."""
    d = np.asarray(v.data, np.float64)
    el = v.dtype.element_dtype
    if getattr(el, "is_quantized", False):
        s = np.asarray(el.scale, np.float64).reshape(-1)
        if s.size != 1:
            raise NotLowerable("PRelu slope quantized per axis")
        return (d - float(np.asarray(el.zero_point).reshape(-1)[0])) * s[0]
    return d


def lower_prelu(op, cfg) -> OpLowering:
    dt = _feature_dtypes(op, rescales=True)
    if len(op.inputs) != 2 or not op.inputs[1].is_params or op.inputs[1].data is None:
        raise NotLowerable("PRelu needs a constant slope")
    x, y = op.inputs[0], op.outputs[0]
    h, w, c = map3(x.shape)
    try:
        full = np.broadcast_to(_slope(op.inputs[1]), tuple(x.shape)).reshape(-1, c)
    except ValueError:
        raise NotLowerable("PRelu slope does not broadcast to the map") from None
    if np.any(full != full[:1]):
        raise NotLowerable("PRelu slope varies over the pixels (one slope per channel only)")
    slope = full[0]
    real = np.float64(scale_of(x)) / np.float64(scale_of(y))
    m, s = quantize_multiplier(real)
    mn, sn = quantize_multiplier(slope * real)
    n = np.ones(c, np.int64)
    rec = asm.pack_requant_params(np.zeros(c, np.int64), n * int(m), n * int(s),
                                  np.asarray(mn, np.int64).reshape(-1) * n,
                                  np.asarray(sn, np.int64).reshape(-1) * n, n=c)
    ones = np.ones((1, 1, 1, c), np.dtype(dt))
    weights = asm.pack_conv_weights(ones, c, dt, cfg)

    def make(R: Resolver) -> list[asm.Layer]:
        return [asm.Conv(R.fmap(x), R.fmap(y), R.const(0), R.const(1), groups=c,
                         clip=clip_bounds(y.dtype.numpy_dtype), tag=op.op_id)]

    return OpLowering("conv", [weights, rec], make, fold=True)


RULES = {"Binary": lower_binary, "Unary": lower_unary, "PRelu": lower_prelu}
#: pointwise ops that are lookup tables (fused after their producer like the LUT activations)
TABLE_OPS = frozenset({"Unary"})

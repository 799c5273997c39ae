"""Add (with a folded activation), Sub, Multiply, float32, with numpy broadcasting."""

from __future__ import annotations

import numpy as np

from xir.quant.fixed_point import add_rescale_params

from ._common import f32, fold_act, out32


def add(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """a + b, then the folded activation (act, act_alpha, act_max)."""
    return [fold_act(out32(np.add(f32(inputs[0]), f32(inputs[1]))), attrs, "Add")]


def sub(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    return [out32(np.subtract(f32(inputs[0]), f32(inputs[1])))]


def multiply(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    return [out32(np.multiply(f32(inputs[0]), f32(inputs[1])))]


def div(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    return [out32(np.divide(f32(inputs[0]), f32(inputs[1])))]


def sqrt(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    return [out32(np.sqrt(f32(inputs[0])))]


def reduce_mean(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """The mean over `axes` (float64 accumulation, float32 result)."""
    x = np.asarray(inputs[0], np.float64)
    axes = tuple(int(a) % x.ndim for a in attrs["axes"])
    return [out32(x.mean(axis=axes, keepdims=bool(attrs.get("keepdims", True))))]


# --------------------------------------------------------------------------------------------
# Integer kernels (docs/quantization.md, "Integer ops")
# --------------------------------------------------------------------------------------------

def _add_sub_int(inputs, attrs, in_types, out_types, fake, sign):
    from xir.quant.fixed_point import quantize_multiplier

    from ._common import folded_act, rq_any, scale1

    s_a, s_b, s_out = scale1(in_types[0]), scale1(in_types[1]), scale1(out_types[0])
    (ma, sa), (mb, sb), S = add_rescale_params(s_a, s_b, s_out)
    act = folded_act(attrs, 1.0, s_out)
    if act["leaky"] is not None:
        # the slope at the common shift: quantize_multiplier(alpha * 2**-S)
        act["leaky"] = quantize_multiplier(float(attrs.get("act_alpha", 0.0)) * 2.0 ** -S)
    out_dt = out_types[0].numpy_dtype
    if fake:
        a = np.asarray(inputs[0], np.float64) * (ma * 2.0 ** (S - sa))
        b = np.asarray(inputs[1], np.float64) * (mb * 2.0 ** (S - sb))
        return [rq_any(a + sign * b, 1, S, out_dt, fake=True, **act)]
    a = np.asarray(inputs[0]).astype(np.int64) * (ma << (S - sa))
    b = np.asarray(inputs[1]).astype(np.int64) * (mb << (S - sb))
    acc = a + b if sign > 0 else a - b
    return [rq_any(acc, 1, S, out_dt, **act)]


def add_int(inputs, attrs, in_types, out_types, *, fake=False):
    """y = requantize(a*m_a*2**(S-sh_a) + b*m_b*2**(S-sh_b), 1, S) with the folded act."""
    return _add_sub_int(inputs, attrs, in_types, out_types, fake, +1)


def sub_int(inputs, attrs, in_types, out_types, *, fake=False):
    """As add_int with the second term subtracted."""
    return _add_sub_int(inputs, attrs, in_types, out_types, fake, -1)


def multiply_int(inputs, attrs, in_types, out_types, *, fake=False):
    """y = requantize(a * b, requant_multiplier(s_a, s_b, s_out)) (exact int64 product)."""
    from xir.quant.fixed_point import requant_multiplier

    from ._common import rq_any, scale1

    m, s = requant_multiplier(scale1(in_types[0]), scale1(in_types[1]), scale1(out_types[0]))
    if fake:
        acc = np.asarray(inputs[0], np.float64) * np.asarray(inputs[1], np.float64)
    else:
        acc = np.asarray(inputs[0]).astype(np.int64) * np.asarray(inputs[1]).astype(np.int64)
    return [rq_any(acc, m, s, out_types[0].numpy_dtype, fake=fake)]

"""Integer weights and biases of the quantized ops: per-channel or per-tensor codes, GPTQ
rounding, bias correction, and constant inputs at their op's scale."""

from __future__ import annotations

import numpy as np

from xcompile.quant.bias_correction import weight_error_shift
from xcompile.quant.float_stats import kept_or_made
from xcompile.quant.gptq import collect_hessians, gptq_weights
from xcompile.quant.observers import scale_from_amax, weight_scales
from xcompile.runner import Runner
from xir.network import Network
from xir.ops.base import Operation
from xir.quant.fixed_point import quantize, quantize_bias
from xir.types import INT8, INT16, QuantizedType, ScalarType, TensorType
from xir.values import Params, Value


def params_at(v: Params, t: TensorType) -> Params:
    """Constant `v` quantized to `t`'s per-tensor element type (round half away, saturated):
    a Concat's constant input moves unchanged at the output's scale, as its branches do."""
    el = t.element_dtype
    data = quantize(np.asarray(v.data, np.float64), float(el.scale[0]), el.numpy_dtype)
    return Params(v.v_id, TensorType(el, v.shape, v.dtype.layout), data, v.name, v.mtype,
                  dict(v.tags))


def _weight_axis(op: Operation, ndim: int) -> int | None:
    """The per-output-channel axis of `op`'s weight, None for per-tensor weights."""
    t = op.op_type
    if t == "Conv2d":
        return 3
    if t == "ConvTranspose2d" and int(op.attrs.get("groups", 1)) == 1:
        return 3
    if t == "Matmul" and ndim == 2:
        return 0 if op.attrs.get("transpose_b", False) else 1
    return None


def gptq_weight_ops(opt: Network, int_ops: set[int]) -> list[Operation]:
    """The integer Conv2d / Matmul ops whose constant weights GPTQ rounds."""
    return [op for op in opt.ops if op.op_id in int_ops and op.op_type in ("Conv2d", "Matmul")
            and op.inputs[1].is_params
            and ((op.op_type == "Conv2d" and op.inputs[1].data.ndim == 4)
                 or (op.op_type == "Matmul" and op.inputs[1].data.ndim == 2
                     and not op.attrs.get("transpose_a", False)
                     and not op.attrs.get("transpose_b", False)))]


def gptq_codes(opt: Network, data: list, ops: list[Operation], op_el: dict[int, ScalarType],
                runner: Runner | None, source: tuple = ()) -> dict[int, tuple[np.ndarray,
                                                                         np.ndarray]]:
    """`{op_id: (codes, scales)}` for `ops` (`gptq_weight_ops`), rounded by GPTQ
    (`xcompile.quant.gptq`) on the calibration samples. `source`: the (float network,
    samples) objects the statistics come from, their key in `reuse_float_statistics`."""
    from xrt.console import progress_bar

    key = tuple(id(x) for x in source) + tuple(op.op_id for op in ops)
    hess = kept_or_made(key, source, lambda: collect_hessians(opt, data, ops, runner=runner))
    out = {}
    with progress_bar(len(ops), f"GPTQ weight rounding: {opt.name}") as advance:
        for op in ops:
            advance()
            if op.op_id not in hess:
                continue
            dt = op_el[op.op_id].numpy_dtype
            qmax = int(np.iinfo(dt).max)
            w = np.asarray(op.inputs[1].data)  # float32: GPTQ widens one block at a time
            s = weight_scales(w, w.ndim - 1, dt)
            groups = int(op.attrs.get("groups", 1)) if op.op_type == "Conv2d" else 1
            out[op.op_id] = (gptq_weights(w, s, hess[op.op_id], groups, dt, qmax), s)
    return out


def correct_biases(opt: Network, ops: list[Operation], means: dict[int, np.ndarray],
                    op_el: dict[int, ScalarType], bits: int, per_channel: bool) -> int:
    """Bias correction of `ops` (Conv2d / Matmul with constant weights) in place: each bias
    less the mean shift its nearest-rounded weights cause (`weight_error_shift`); returns how
    many were corrected."""
    n = 0
    for op in ops:
        w = op.inputs[1] if len(op.inputs) > 1 else None
        x = op.inputs[0]
        if w is None or not w.is_params or w.data is None or means.get(x.v_id) is None:
            continue
        wd = np.asarray(w.data, np.float32)
        el = op_el.get(op.op_id, INT8 if bits == 8 else INT16)
        wq, s, qaxis = _weight_q(wd, _weight_axis(op, wd.ndim), el, per_channel)
        shape = [1] * wd.ndim
        if qaxis is not None:
            shape[qaxis] = -1
        dw = wq.astype(np.float64) * np.asarray(s, np.float64).reshape(shape) - wd
        shift = weight_error_shift(op.op_type, op.attrs, dw, means[x.v_id])
        if shift is None:
            continue
        if len(op.inputs) > 2:
            b = op.inputs[2]
            op.inputs[2] = Params(b.v_id, b.dtype, (np.asarray(b.data, np.float64) - shift)
                                  .astype(np.float32), b.name, b.mtype, dict(b.tags))
        else:
            op.inputs.append(opt.newParams((-shift).astype(np.float32),
                                           f"{op.name or op.op_type}.bias", layout="C"))
        n += 1
    opt.relink()
    return n


def _weight_q(w: np.ndarray, axis: int | None, el, per_channel: bool
              ) -> tuple[np.ndarray, np.ndarray, int | None]:
    """Quantized weights, their scale(s), and the QuantizedType axis (None: per tensor)."""
    dt = el.numpy_dtype
    if per_channel and axis is not None:
        s = weight_scales(w, axis, dt)
        return quantize(w, s, dt, axis, narrow_range=True), s, axis % w.ndim
    s = np.asarray([scale_from_amax(float(np.abs(np.asarray(w, np.float64)).max(initial=0.0)),
                                    dt)])
    return quantize(w, float(s[0]), dt, narrow_range=True), s, None


def integer_inputs(op: Operation, get_q, act_el, bias_el, per_channel: bool,
                    codes: tuple[np.ndarray, np.ndarray] | None = None
                    ) -> list[Value]:
    """The quantized inputs of integer `op`: feature inputs from `get_q`, constant weights
    (GPTQ `codes` when given) and biases as integer Params."""
    t = op.op_type
    if t in ("Conv2d", "ConvTranspose2d", "Matmul"):
        x = get_q(op.inputs[0])
        s_in = float(x.dtype.element_dtype.scale[0])
        w = op.inputs[1]
        if w.is_params:
            wd = np.asarray(w.data, np.float32)
            axis = _weight_axis(op, wd.ndim)
            if codes is not None:
                wq, s_w, qaxis = codes[0], codes[1], wd.ndim - 1
            else:
                wq, s_w, qaxis = _weight_q(wd, axis, act_el, per_channel)
            w_el = QuantizedType(ScalarType.from_numpy(wq.dtype), s_w, axis=qaxis)
            wv = Params(w.v_id, TensorType(w_el, w.shape, w.dtype.layout), wq, w.name, w.mtype,
                        dict(w.tags))
        else:
            wv = get_q(w)
            s_w = np.asarray(wv.dtype.element_dtype.scale)
        ins = [x, wv]
        if len(op.inputs) > 2:
            b = op.inputs[2]
            s_b = np.float64(s_in) * np.asarray(s_w, np.float64)
            bq = quantize_bias(np.asarray(b.data, np.float64), s_in,
                               s_w if s_w.size > 1 else float(s_w[0]), bias_el.numpy_dtype)
            b_el = QuantizedType(bias_el, s_b, axis=0 if s_b.size > 1 else None)
            ins.append(Params(b.v_id, TensorType(b_el, b.shape, b.dtype.layout), bq, b.name,
                              b.mtype, dict(b.tags)))
        return ins
    if t == "LayerNorm":  # gamma and beta stay float: the row scale is float64 (rownorm)
        return [get_q(op.inputs[0])] + [
            Params(v.v_id, v.dtype, v.data.copy(), v.name, v.mtype, dict(v.tags))
            for v in op.inputs[1:]]
    ins = []
    for v in op.inputs:
        if v.is_params:  # a constant operand of Add/Sub/Multiply: per-tensor, its own scale
            d = np.asarray(v.data, np.float64)
            s = float(scale_from_amax(float(np.abs(d).max(initial=0.0)), act_el.numpy_dtype))
            el = QuantizedType(act_el, s)
            ins.append(Params(v.v_id, TensorType(el, v.shape, v.dtype.layout),
                              quantize(d, s, act_el.numpy_dtype), v.name, v.mtype,
                              dict(v.tags)))
        else:
            ins.append(get_q(v))
    return ins

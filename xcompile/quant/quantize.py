"""The quantize stage: a float network becomes a network of integer ops (docs/quantization.md).

    qnet = quantize_network(net, samples, bits=8, method="kl")

Steps: `xcompile.passes.optimize` (BN and ReLU folding), calibration of every float value
(`calibrate`), scale assignment, then a rebuild in which every op with an exact integer form
works on quantized element types:

- weights: per output channel (`per_channel=True`) symmetric int8/int16 Params with a per-axis
  `QuantizedType` (Conv2d HWIO axis 3; ConvTranspose2d axis 3 when groups == 1; Matmul the N
  axis), narrow range; biases int32 (8-bit) / int64 (16-bit) Params quantized with scale
  `s_in * s_w[c]` (their `QuantizedType` says so);
- activations: per tensor, `scale = max(amax * headroom / qmax, MIN_SCALE)` (headroom 2 for
  16 bits by default); a detector's score branch keeps headroom over its 8-bit thresholds where
  they clipped a sparse tail, the objects (`score_branch.widen_scores`);
- weight codes rounded by GPTQ against the calibration inputs (`weight_rounding="gptq"`);
- **scale-sharing groups**: ops that must not rescale (Concat: inputs and output; Split,
  Slice, Reshape, Transpose, Squeeze, Unsqueeze, Pad, MaxPool2d, Reduce max / min, nearest
  Resize/Upsample, AlignAxis, PruneAxis: input and outputs) put their values in one group
  (union-find over the whole network). A group takes the largest `amax` of its members, so no
  member saturates earlier than its own calibration says; this rule is order-independent
  (deterministic);
- **Concat branches of far-apart ranges** (`concats`, docs/quantization.md section 11):
  at a network output the Concat joins floats at the host edge, each branch at its own scale
  (a detector's box pixels and class probabilities); inside the network a branch far below the
  others keeps its own scale and is requantized by a Cast into the Concat, stored in 16 bits;
  a constant input (a ViT's class token) is quantized at the Concat's output scale
  (`xcompile.quant.weights.params_at`);
- Reduce mean computes in integers as a global AvgPool2d does (the sum of its n codes
  requantized by 1 / n, for n below 65536); Reduce max / min share their input's scale;
- ReLU/ReLU6/LeakyReLU stay folded in the producing op's requantization; SiLU, Sigmoid, Tanh,
  Hardswish, GELU and Power keep their op type and run as tables (`xir.quant.lut`) derived from
  their scales;
- Softmax and LayerNorm over the last axis compute in integers (`xir.quant.rownorm`) where
  every reader of their output does too (an attention block's probabilities feed the PV
  matmul, a normalised row the next projection); feeding a float op or the network output,
  they stay float, so a classifier's probabilities are never re-quantized on their way out;
- ops with no exact integer form (Relu with a threshold, GroupNorm, ...) stay float, with
  Cast ops converting around them; the ops that only move codes (Reshape, Transpose,
  Concat, ...) stay float after them too when every input is float.

Mixed precision (`input_bits`, `op_bits`; docs/quantization.md section 10): raised ops compute
at 16 bits; precision spreads through scale groups and to the other inputs of rescaling ops,
and changes only inside rescaling ops, so no integer-to-integer Casts appear.

The network inputs and outputs stay float32: Input (fp32) -> Cast -> integer ops -> Cast (fp32)
-> Output. Every quantized value keeps the `v_id` of the float value it stands for where the
integer op produces it; Cast outputs get fresh ids. Every value carries `tags["float_v_id"]`,
the v_id of the float value (of the input network) it approximates, for per-layer reports.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from xcompile.passes import optimize
from xcompile.quant.act_bias import activation_bias_shifts, apply_bias_shifts
from xcompile.quant.bits import logit_bits, resolve_op_bits, value_bits
from xcompile.quant.calibrate import calibrate, load_calibration
from xcompile.quant.capability import (
    PASS_THROUGH_OPS,
    PROBABILITY_OPS,
    integer_capable,
    integer_ops,
)
from xcompile.quant.concats import BRANCH_SPREAD, concat_plan
from xcompile.quant.dw_equalize import equalize_depthwise_inputs
from xcompile.quant.equalize import equalize as equalize_pairs
from xcompile.quant.float_stats import float_stats, reuse_float_statistics
from xcompile.quant.head_range import head_values, widen_head
from xcompile.quant.int16_reasons import cast_record, op_record
from xcompile.quant.saturation import clip_table_inputs
from xcompile.quant.scale_groups import assign_scales, scale_groups
from xcompile.quant.score_branch import SCORE_HEADROOM, score_values, widen_scores
from xcompile.quant.weights import (
    correct_biases,
    gptq_codes,
    gptq_weight_ops,
    integer_inputs,
    params_at,
)
from xcompile.refit.record import RECORDS_TAG, layer_records
from xcompile.runner import Runner
from xir.errors import QuantizationError
from xir.network import Network
from xir.ops.base import OP_REGISTRY
from xir.quant.lut import LUT_OPS
from xir.types import FP32, INT8, INT16, INT32, INT64, QuantizedType, ScalarType, TensorType
from xir.values import Params, Value

log = logging.getLogger(__name__)

__all__ = ["quantize_network", "PASS_THROUGH_OPS", "LUT_OPS", "integer_capable",
           "reuse_float_statistics"]

#: Default amax multiplier of 16-bit quantization: int16 has resolution to spare, and one
#: bit of it buys headroom for values beyond the calibration set's range.
INT16_HEADROOM = 2.0
#: The power of the quantization error that `method="mse"` minimises for 8-bit activations
#: with `outlier_aware=True` (`MSEObserver(power=...)`): 3 weighs the few large values a
#: threshold clips above the many small ones it rounds. Trained detectors put their objects in
#: those few: with squared errors the thresholds clipped them (ddddocr's YOLOX detector: object
#: features 5-8% low, scores 0.72 -> 0.45, worst part 0.904 -> 0.980 on the probes with the
#: table inputs clipped too; docs/quantization.md section 8). Elsewhere the coarser steps cost
#: more than they keep (PP-OCRv4's detector), so the compile measures both (`mixed`).
MSE_POWER = 3


def _observer_kw(method: str, bits: int, kw: dict, outlier_aware: bool = False) -> dict:
    out = dict(kw)
    if method == "mse":
        out.setdefault("dtype", np.int8 if bits == 8 else np.int16)
        if outlier_aware and bits == 8:
            out.setdefault("power", MSE_POWER)
    if method == "kl":
        out.setdefault("dtype", np.int8 if bits == 8 else np.int16)
        if bits == 16:
            out.setdefault("bins", 131072)
            out.setdefault("stride", 1024)
    return out


def _rounding(opt: Network, int_ops: set[int], scales: dict[int, float],
              bits_of: Any) -> dict[int, tuple[float, int, int]]:
    """`{v_id: (scale, qmin, qmax)}` of every value the integer network holds as codes: the
    outputs and feature inputs of its integer ops."""
    out = {}
    for op in opt.ops:
        if op.op_id not in int_ops:
            continue
        for v in op.feature_inputs() + op.outputs:
            if v.v_id in scales:
                q = 127 if bits_of(v.v_id) == 8 else 32767
                out[v.v_id] = (scales[v.v_id], -q - 1, q)
    return out


def quantize_network(net: Network, samples: Any, *, bits: int = 8, method: str = "mse",
                     per_channel: bool = True, weight_rounding: str = "gptq",
                     headroom: float | None = None, op_bits: Any = None,
                     input_bits: int | None = None, runner: Runner | None = None,
                     equalize: bool | None = None, bias_correction: bool | None = None,
                     outlier_aware: bool = False, activation_bias: bool = True,
                     depthwise_equalize: bool = True, widen_concats: bool = True,
                     residual_stream: bool = True, score_headroom: float | None = None,
                     **kw: Any) -> Network:
    """Quantize `net` (float) into a new network of integer ops; see the module docstring.

    `samples`: anything `load_calibration` accepts. `bits`: 8 or 16 (activations and weights).
    `method`: "mse" (default), "minmax", "percentile" or "kl" (observer keyword arguments in
    `kw`; for 16-bit KL the defaults are bins=131072, stride=1024). `headroom` multiplies every
    activation threshold (default 1 for 8-bit values, `INT16_HEADROOM` for 16-bit ones).
    `weight_rounding`: "gptq" (default, `xcompile.quant.gptq`) or "nearest".
    Mixed precision: `op_bits` maps op names (or op_ids) of the optimized network to 16, so
    those ops compute with 16-bit inputs, weights and int64 bias; `input_bits=16` does the same
    for the network inputs and the ops reading them (the usual 16-bit first layer: the input
    keeps its resolution through the stem, whose edge filters amplify rounding). Rescaling ops
    requantize between precisions, so an int16 stem writes int8 for the next layer.
    `runner` executes the float network for calibration and GPTQ (`xcompile.runner`;
    default: the HostBackend). The input network is not modified.
    `equalize`: cross-layer equalisation of convolution pairs (`xcompile.quant.equalize`;
    default: with per-tensor weights only). `bias_correction`: subtract each layer's mean
    weight-rounding error (`xcompile.quant.bias_correction`; default: the layers GPTQ did not
    round). Where they pay is measured in docs/quantization.md.
    `outlier_aware`: 8-bit "mse" thresholds minimise the cubed error (`MSE_POWER`), keeping
    more of the few large values a squared error clips, and the inputs of Sigmoid / Tanh
    tables are calibrated only to where the table still changes
    (`xcompile.quant.saturation`); docs/quantization.md section 8 says where it pays.
    `activation_bias`: each convolution's output mean, as the integer network computes it
    on the calibration samples, brought back to the float network's through its bias
    (`xcompile.quant.act_bias`; default on). `depthwise_equalize`: the channels of a map
    that a convolution writes and only a depthwise convolution reads carried to the map's
    range, exactly, where the map is stored in 8 bits (`xcompile.quant.dw_equalize`; default
    on). `widen_concats`: a Concat of
    far-apart branches is stored in 16 bits (`concats.concat_plan`; False: kept int8, as a
    compile that measured the widening buys nothing chooses, `xcompile.quant.widening`).
    `residual_stream`: the Adds writing a LayerNorm's input and their stream in 16 bits
    (`bits.stream_bits`; False: as a compile that measured it buys nothing chooses).
    `score_headroom`: the multiplier of a score branch's 8-bit thresholds that clipped a
    sparse tail (`xcompile.quant.score_branch.widen_scores`; None: `SCORE_HEADROOM`; 1.0:
    off); applied when `headroom` is not given.
    """
    if bits not in (8, 16):
        raise QuantizationError(f"bits must be 8 or 16, not {bits}", field="bits")
    if input_bits is not None and (input_bits not in (8, 16) or input_bits < bits):
        raise QuantizationError(f"input_bits must be 16 (or equal to bits={bits}), not "
                                f"{input_bits}", field="input_bits")
    opt = optimize(net)
    n_eq = equalize_pairs(opt) if (not per_channel if equalize is None else equalize) else 0
    data = load_calibration(samples, opt)
    if weight_rounding not in ("gptq", "nearest"):
        raise QuantizationError(f"weight_rounding must be 'gptq' or 'nearest', not "
                                f"{weight_rounding!r}", field="weight_rounding")
    if headroom is not None and headroom < 1.0:
        raise QuantizationError(f"headroom must be >= 1, not {headroom}", field="headroom")
    if score_headroom is not None and not score_headroom >= 1.0:
        raise QuantizationError(f"score_headroom must be >= 1, not {score_headroom}",
                                field="score_headroom")
    int_ops = integer_ops(opt)
    uf = scale_groups(opt, int_ops)
    raised = {**logit_bits(opt, int_ops, bits, residual_stream),  # the log-domain rule too
              **resolve_op_bits(opt, op_bits, bits, int_ops)}
    why: dict = {}  # per 16-bit value, the rule that raised it (`int16_reasons`)
    vbits = value_bits(opt, int_ops, uf, bits, raised, input_bits, why=why,
                       stream=residual_stream)
    # maps evened out only where stored in 8 bits (`dw_equalize`: at 16 bits it spends the
    # carried channels' headroom for nothing); the bits come from the graph, which the
    # equalisation leaves as it is (it rescales weights)
    n_dw = equalize_depthwise_inputs(opt, data, runner,
                                     wide={v for v, b in vbits.items() if b == 16}) \
        if depthwise_equalize and bits == 8 else 0

    def bits_of(vid: int) -> int:
        return vbits.get(vid, bits)

    def el_of(vid: int) -> ScalarType:
        return INT8 if bits_of(vid) == 8 else INT16

    def observers() -> dict[int, dict]:
        per = {vid: _observer_kw(method, b, kw, outlier_aware) for vid, b in vbits.items()}
        for op in opt.ops:  # a softmax's logits and probabilities: calibrated by their range
            if op.op_type in PROBABILITY_OPS:
                for v in op.feature_inputs() + op.outputs:
                    per[v.v_id] = {"method": "minmax"}
        return per

    per_value = observers()
    gptq_ops = gptq_weight_ops(opt, int_ops) if weight_rounding == "gptq" and per_channel else []
    nearest = [op for op in opt.ops if op.op_id in int_ops and op.op_type in ("Conv2d", "Matmul")
               and op not in gptq_ops] if bias_correction is not False else []
    # bias correction's input means, taken in the calibration pass for the layers it corrects
    means = {op.inputs[0].v_id: None for op in nearest} or None
    head = head_values(opt)  # a dense head's few values per input: no histogram
    widened: list[int] = []
    # a detector's score branch: its largest activations are the objects (`score_branch`)
    scores = score_values(opt) if score_headroom is None or score_headroom > 1.0 else {}
    scored: list[int] = []

    def thresholds() -> dict[int, float]:
        amax = calibrate(opt, data, method, per_value=per_value, runner=runner, means=means,
                         reuse=float_stats("calibration", (net, samples)),
                         **_observer_kw(method, bits, kw, outlier_aware))
        amax = {vid: a * (headroom if headroom is not None else
                          1.0 if bits_of(vid) == 8 else INT16_HEADROOM)
                for vid, a in amax.items()}
        if headroom is None:
            widened[:] = widen_head(amax, head, lambda vid: bits_of(vid) == 8)
            if scores:  # their ranges and squared-error thresholds, whatever `method` is
                # (a compile answers both from its kept histograms; else more float passes)
                reuse = float_stats("calibration", (net, samples))
                ranges = calibrate(opt, data, "minmax", runner=runner, reuse=reuse)
                squared = calibrate(opt, data, "mse", runner=runner, reuse=reuse,
                                    dtype=np.int8)
                scored[:] = widen_scores(amax, scores, ranges, squared,
                                         lambda vid: bits_of(vid) == 8,
                                         SCORE_HEADROOM if score_headroom is None
                                         else score_headroom)
        # a QDQ model's pairs (xcompile.quant.qdq): the range its author chose, not calibration's
        amax.update({v.v_id: float(v.tags["qdq_amax"]) for op in opt.ops for v in op.outputs
                     if "qdq_amax" in v.tags and v.v_id in amax})
        return amax

    amax = thresholds()
    uf, requant, floats, concats, wide = concat_plan(opt, int_ops, amax, bits_of,
                                                     widen=widen_concats)
    if wide:  # Concats of far-apart branches stored in 16 bits: their precision spreads,
        # and the values raised are calibrated again with 16-bit observers
        log.info("%s: %d Concat(s) of branches > %gx apart stored in 16 bits", net.name,
                 len(wide), BRANCH_SPREAD)
        why = {}
        vbits = value_bits(opt, int_ops, uf, bits, raised, input_bits, wide, why=why,
                           stream=residual_stream)
        per_value = observers()
        amax = thresholds()
        uf, requant, floats, concats, _ = concat_plan(opt, int_ops, amax, bits_of, requant)
    int_ops -= floats
    # table inputs calibrated only to where the table still changes (objectness logits)
    clipped = clip_table_inputs(opt, int_ops, amax, uf.find,
                                lambda vid: 127 if bits_of(vid) == 8 else 32767) \
        if outlier_aware else {}
    scales, groups = assign_scales(amax, uf, lambda vid: el_of(vid).numpy_dtype)
    op_el = {op.op_id: el_of(op.feature_inputs()[0].v_id) for op in opt.ops
             if op.op_id in int_ops and op.feature_inputs()}
    # the mean shifts the integer network's roundings cause, measured before any bias moves
    shifts = activation_bias_shifts(opt, data, int_ops, _rounding(opt, int_ops, scales, bits_of),
                                    runner) if activation_bias else {}
    codes: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    if gptq_ops:
        codes = gptq_codes(opt, data, gptq_ops, op_el, runner, (net, samples))
    n_bc = correct_biases(opt, nearest, means, op_el, bits, per_channel) if means else 0
    n_ab = apply_bias_shifts(opt, shifts)

    q = Network(opt.name, framework_kind=opt.framework_kind,
                framework_version=opt.framework_version, icraft_version=opt.icraft_version,
                icraft_xir_version=opt.icraft_xir_version, tags=dict(opt.tags))
    q.tags["quantization"] = {"bits": bits, "method": method, "per_channel": bool(per_channel),
                              "weight_rounding": weight_rounding if per_channel else "nearest",
                              "headroom": float(headroom if headroom is not None else
                                                 1.0 if bits == 8 else INT16_HEADROOM),
                              "input_bits": input_bits, "equalized_pairs": n_eq,
                              "head_headroom": [int(v) for v in widened],
                              "score_headroom": {"factor": float(
                                  SCORE_HEADROOM if score_headroom is None else score_headroom),
                                  "values": [int(v) for v in scored]},
                              "depthwise_equalized": n_dw,
                              "bias_corrected": n_bc, "activation_bias_corrected": n_ab,
                              "concats": concats,
                              "outlier_aware": bool(outlier_aware),
                              "table_inputs_clipped": len(clipped),
                              "op_bits": {str(oid): 16 for oid, el in op_el.items()
                                          if el.storage.bits > bits},
                              "float_ops": sorted(op.op_id for op in opt.ops
                                                  if op.op_id not in int_ops
                                                  and op.op_type not in ("Input", "Output"))}
    next_vid = [max((v.v_id for op in opt.ops for v in op.inputs + op.outputs), default=-1) + 1]
    next_vid[0] = max(next_vid[0], opt.next_v_id)
    next_op = [max(opt.opIds(), default=-1) + 1]
    fv: dict[int, Value] = {}
    qv: dict[int, Value] = {}

    def fresh_vid() -> int:
        next_vid[0] += 1
        return next_vid[0] - 1

    def qtype(v: Value) -> TensorType:
        if v.v_id not in scales:
            raise QuantizationError(f"value {v.v_id} ('{v.name}') was never seen during "
                                    f"calibration", field="samples")
        return TensorType(QuantizedType(el_of(v.v_id), scales[v.v_id]), v.shape,
                          v.dtype.layout)

    def tags_of(v: Value) -> dict:
        t = dict(v.tags)
        t["float_v_id"] = int(v.v_id)
        return t

    def add_cast(src: Value, dst_type: TensorType, float_v: Value) -> Value:
        out = Value(fresh_vid(), dst_type, f"{float_v.name}.cast", tags=tags_of(float_v))
        op = OP_REGISTRY["Cast"]([src], [out], op_id=next_op[0], name=f"{float_v.name}.cast")
        next_op[0] += 1
        q.ops.append(op)
        return out

    def get_q(v: Value) -> Value:
        if v.v_id not in qv:
            qv[v.v_id] = add_cast(fv[v.v_id], qtype(v), v)
        return qv[v.v_id]

    def get_f(v: Value) -> Value:
        if v.v_id not in fv:
            ftype = TensorType(FP32, v.shape, v.dtype.layout)
            fv[v.v_id] = add_cast(qv[v.v_id], ftype, v)
        return fv[v.v_id]

    requants: dict[tuple[int, float], Value] = {}

    def get_requant(v: Value, dst: TensorType) -> Value:
        """`v`'s codes requantized to `dst` (a Cast between quantized types)."""
        key = (v.v_id, float(dst.element_dtype.scale[0]))
        if key not in requants:
            requants[key] = add_cast(get_q(v), TensorType(dst.element_dtype, v.shape,
                                                          v.dtype.layout), v)
        return requants[key]

    def copy_params(p: Params) -> Params:
        return Params(p.v_id, p.dtype, None if p.data is None else p.data.copy(), p.name,
                      p.mtype, dict(p.tags))

    for op in opt.ops:
        t = op.op_type
        if t == "Input":
            outs = []
            for v in op.outputs:
                nv = Value(v.v_id, v.dtype, v.name, v.mtype, tags_of(v))
                fv[v.v_id] = nv
                outs.append(nv)
            q.ops.append(op.clone_with([], outs))
            continue
        if t == "Output":
            ins = [get_f(v) for v in op.inputs]
            for v, nv in zip(op.inputs, ins):
                if nv.v_id != v.v_id:
                    nv.name = v.name
            q.ops.append(op.clone_with(ins, []))
            continue
        if op.op_id not in int_ops:
            ins = [copy_params(v) if v.is_params else get_f(v) for v in op.inputs]
            outs = []
            for v in op.outputs:
                nv = Value(v.v_id, v.dtype, v.name, v.mtype, tags_of(v))
                fv[v.v_id] = nv
                outs.append(nv)
            q.ops.append(op.clone_with(ins, outs))
            continue
        act_el = op_el.get(op.op_id, INT8 if bits == 8 else INT16)
        bias_el = INT32 if act_el.storage.bits == 8 else INT64
        ins = integer_inputs(op, get_q, act_el, bias_el, per_channel, codes.get(op.op_id))
        if t == "Concat":  # branches that keep their own scale, requantized into the Concat's
            for i, v in enumerate(op.inputs):
                if v.is_params:  # a constant: its codes at the Concat's (shared) scale
                    ins[i] = params_at(v, qtype(op.outputs[0]))
                elif (op.op_id, i) in requant:
                    ins[i] = get_requant(v, qtype(op.outputs[0]))
        outs = []
        for v in op.outputs:
            nv = Value(v.v_id, qtype(v), v.name, v.mtype, tags_of(v))
            qv[v.v_id] = nv
            outs.append(nv)
        new = op.clone_with(ins, outs)
        new.tags = dict(op.tags)
        new.tags["scale_group"] = [int(groups.get(v.v_id, v.v_id)) for v in op.outputs]
        q.ops.append(new)
    q.relink()
    q.reserveIds(next_op[0] - 1, next_vid[0] - 1)
    # why every op computing or storing in 16 bits does (docs/quantization.md section 10)
    int16 = op_record(opt, int_ops, vbits, why, bits)
    int16["ops"] += cast_record(q, int16, bits)
    q.tags["quantization"]["int16"] = int16
    q.tags[RECORDS_TAG] = layer_records(q)  # what a refit keeps (xcompile.refit.record)
    q.validate()
    log.info("quantized %s: %d integer ops (%d at 16 bits), %d float ops, int%d, %s", net.name,
             len(int_ops), len(q.tags["quantization"]["op_bits"]),
             len(q.tags["quantization"]["float_ops"]), bits, method)
    return q

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
  16 bits by default);
- weight codes rounded by GPTQ against the calibration inputs (`weight_rounding="gptq"`);
- **scale-sharing groups**: ops that must not rescale (Concat: inputs and output; Split,
  Slice, Reshape, Transpose, Squeeze, Unsqueeze, Pad, MaxPool2d, Reduce max / min, nearest
  Resize/Upsample, AlignAxis, PruneAxis: input and outputs) put their values in one group
  (union-find over the whole network). A group takes the largest `amax` of its members, so no
  member saturates earlier than its own calibration says; this rule is order-independent
  (deterministic);
- **Concat branches of far-apart ranges** (`_concat_plan`, docs/quantization.md section 11):
  at a network output the Concat joins floats at the host edge, each branch at its own scale
  (a detector's box pixels and class probabilities); inside the network a branch far below the
  others keeps its own scale and is requantized by a Cast into the Concat, stored in 16 bits;
  a constant input (a ViT's class token) is quantized at the Concat's output scale (`_params_at`);
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
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np

from xcompile.passes import optimize
from xcompile.quant.bias_correction import weight_error_shift
from xcompile.quant.calibrate import calibrate, load_calibration
from xcompile.quant.equalize import equalize as equalize_pairs
from xcompile.quant.gptq import collect_hessians, gptq_weights
from xcompile.quant.observers import scale_from_amax, weight_scales
from xcompile.quant.saturation import clip_table_inputs
from xcompile.refit.record import RECORDS_TAG, layer_records
from xcompile.runner import Runner
from xir.errors import QuantizationError
from xir.network import Network
from xir.ops.base import OP_REGISTRY, Operation
from xir.quant.fixed_point import quantize, quantize_bias
from xir.quant.lut import LUT_OPS
from xir.types import FP32, INT8, INT16, INT32, INT64, QuantizedType, ScalarType, TensorType
from xir.values import Params, Value

log = logging.getLogger(__name__)

__all__ = ["quantize_network", "PASS_THROUGH_OPS", "LUT_OPS", "integer_capable",
           "reuse_float_statistics"]

#: Ops whose integer kernel moves codes without rescaling: their values share one scale.
PASS_THROUGH_OPS = frozenset({"Concat", "Split", "Slice", "Reshape", "Transpose", "Squeeze",
                              "Unsqueeze", "Pad", "MaxPool2d", "AlignAxis", "PruneAxis",
                              "ChannelShuffle"})
#: Ops whose inputs (logits) and outputs (probabilities) are calibrated by their range
#: (minmax), not by a histogram search that clips the few large values the probabilities
#: depend on most (reported on a transformer block: 0.972 output cosine with KL on the attention
#: probabilities, 0.998 with minmax; a clipped top logit moves a 1000-class softmax)
PROBABILITY_OPS = frozenset({"Softmax"})
#: Ops normalising the last axis by the row's own statistics (`xir.quant.rownorm`)
ROW_OPS = frozenset({"Softmax", "LayerNorm"})
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
#: Ops a Concat's output may pass on its way to a network output and still be "at the output".
OUTPUT_MOVE_OPS = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "AlignAxis",
                             "PruneAxis"})
#: A Concat branch whose range is this many times below the largest branch's loses too many
#: codes at one shared scale (4 of int8's 7 bits): it keeps its own scale (`_concat_plan`).
BRANCH_SPREAD = 16.0
#: The same at a network output, where keeping every branch costs only a host Concat.
OUTPUT_SPREAD = 4.0
_REQUANT_OPS = frozenset({"Conv2d", "ConvTranspose2d", "Matmul", "Add", "Sub", "Multiply",
                          "AvgPool2d", "Relu", "Resize", "Upsample"})


def _integer_ops(net: Network) -> set[int]:
    """The ops that compute in integers: integer-capable ones, except code-moving ops (scale
    sharing) whose every feature input comes from a float compute op -- quantizing after a
    Softmax only to reshape its probabilities would throw their resolution away."""
    ints = {op.op_id for op in net.ops if integer_capable(op)}

    def computed_on(v: Value) -> bool:  # every op reading v computes in integers
        return all(c.op_id in ints and (not _shares_scale(c) or all(map(computed_on, c.outputs)))
                   for c in v.consumers)

    for op in net.ops:  # a row op's codes only pay where integer ops compute on them
        if op.op_id in ints and op.op_type in ROW_OPS and not all(map(computed_on, op.outputs)):
            ints.discard(op.op_id)
    for op in net.ops:  # network order: producers first
        if op.op_id not in ints or not _shares_scale(op):
            continue
        prods = [v.producer for v in op.feature_inputs()]
        if prods and all(p is not None and p.op_type != "Input" and p.op_id not in ints
                         for p in prods):
            ints.discard(op.op_id)
    return ints


def _is_nearest(op: Operation) -> bool:
    return op.op_type in ("Resize", "Upsample") and op.attrs.get("mode", "nearest") == "nearest"


def _picks_codes(op: Operation) -> bool:
    """Reduce max / min: they pick one of their input's codes (a positive scale keeps the
    order), so they share their input's scale as MaxPool2d does."""
    return op.op_type == "Reduce" and op.attrs.get("func") in ("max", "min")


def _shares_scale(op: Operation) -> bool:
    return op.op_type in PASS_THROUGH_OPS or _is_nearest(op) or _picks_codes(op)


def integer_capable(op: Operation) -> bool:
    """Whether `op` has an exact integer form in docs/quantization.md ("Integer ops")."""
    t = op.op_type
    feats = op.feature_inputs()
    if any(not v.dtype.element_dtype.is_float() or v.dtype.numpy_dtype != np.float32
           for v in feats + op.outputs):
        return False
    if any(v.is_params and v.data is None for v in op.inputs):
        return False
    if t in ("Conv2d", "ConvTranspose2d"):
        return len(feats) == 1 and op.inputs[0] is feats[0]
    if t == "Matmul":
        return not op.inputs[0].is_params
    if t in ("Add", "Sub", "Multiply"):
        return len(feats) >= 1
    if t == "Relu":
        return float(op.attrs.get("threshold", 0.0)) == 0.0
    if t in ("PRelu", "Binary", "Unary"):  # docs/quantization.md, "Integer ops: pointwise"
        from xir.ops.pointwise import UNARY_LUT_FUNCS

        func = op.attrs.get("func")
        if t == "PRelu":  # a constant slope
            return len(feats) == 1 and op.inputs[0] is feats[0]
        return bool(feats) and (func in ("max", "min") if t == "Binary"
                                else func in UNARY_LUT_FUNCS)
    if t in ROW_OPS:
        return _row_op_capable(op)
    if t == "Concat":  # constant inputs (a ViT's class token): codes at the Concat's scale
        return len(feats) >= 1
    if t == "Reduce":  # docs/quantization.md, "Integer ops": max / min pick codes, mean
        if len(feats) != 1 or op.inputs[0] is not feats[0]:  # requantizes a sum (AvgPool2d)
            return False
        if op.attrs.get("func") == "mean":
            shape = feats[0].shape
            axes = op.attrs.get("axes") or range(len(shape))
            return 0 < int(np.prod([shape[int(a) % len(shape)] for a in axes])) < 1 << 16
        return _picks_codes(op)
    if t in PASS_THROUGH_OPS or t in LUT_OPS or t in ("AvgPool2d", "Resize", "Upsample"):
        if t == "Pad" and op.attrs.get("mode", "constant") != "constant":
            return len(feats) == len(op.inputs)
        return len(feats) == len(op.inputs)
    return False


def _row_op_capable(op: Operation) -> bool:
    """Softmax / LayerNorm: one feature input normalised over its last axis (rows short enough
    for the int64 arithmetic), LayerNorm with constant gamma/beta, epsilon > 0 and no stats."""
    feats = op.feature_inputs()
    if len(feats) != 1 or op.inputs[0] is not feats[0] or len(op.outputs) != 1:
        return False
    shape = feats[0].shape
    if not shape or int(op.attrs.get("axis", -1)) % len(shape) != len(shape) - 1 or \
            not 0 < int(shape[-1]) < 1 << 16:
        return False
    if op.op_type == "LayerNorm":
        return (not op.attrs.get("stats", False) and float(op.attrs.get("epsilon", 1e-5)) > 0
                and 2 <= len(op.inputs) <= 3 and all(v.is_params for v in op.inputs[1:]))
    return True


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[int, int] = {}

    def find(self, a: int) -> int:
        self.parent.setdefault(a, a)
        while self.parent[a] != a:
            self.parent[a] = self.parent[self.parent[a]]
            a = self.parent[a]
        return a

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def _scale_groups(net: Network, int_ops: set[int], concat: bool = True) -> _UnionFind:
    """Union-find of the values that must share one scale (and so one dtype); `concat=False`
    leaves Concat out (`_concat_plan` decides its unions)."""
    uf = _UnionFind()
    for op in net.ops:
        if op.op_id in int_ops and _shares_scale(op) and (concat or op.op_type != "Concat"):
            vals = [v.v_id for v in op.feature_inputs()] + [v.v_id for v in op.outputs]
            for v in vals[1:]:
                uf.union(vals[0], v)
    return uf


def _output_tail(op: Operation) -> list[Operation] | None:
    """The code-moving ops from `op`'s output to a network output, when that is all its output
    reaches (the chain a Concat's output passes on its way out, a Concat joining several heads
    included); None otherwise."""
    tail: list[Operation] = []
    v = op.outputs[0]
    while True:
        if not v.consumers:
            return None
        if all(c.op_type == "Output" for c in v.consumers):
            return tail
        if len(v.consumers) != 1:
            return None
        c = v.consumers[0]
        if (c.op_type not in OUTPUT_MOVE_OPS and c.op_type != "Concat") or \
                len(c.outputs) != 1:
            return None
        tail.append(c)
        v = c.outputs[0]


def _concat_plan(net: Network, int_ops: set[int], amax: dict[int, float],
                 bits_of: Any = None, far: set[tuple[int, int]] | None = None
                 ) -> tuple[_UnionFind, set[tuple[int, int]], set[int], dict[str, dict],
                            set[int]]:
    """How each integer Concat keeps its branches' ranges (docs/quantization.md, "Concat").

    A branch's *spread* is the largest range among the Concat's branches over its own (group
    amax, measured by calibration): at one shared scale it keeps `qmax / spread` of its codes.
    - every branch within `BRANCH_SPREAD` (16x: at most 4 of int8's 7 bits lost): one shared
      scale, the codes move unchanged (an NPU alias);
    - a network output (the Concat reaches the Output through code-moving ops only) with a
      branch beyond `OUTPUT_SPREAD` (4x: 2 bits): the Concat, and the ops after it, stay float
      at the host edge; each branch leaves the integer part at its own scale (a detector's box
      pixels and class probabilities);
    - elsewhere, a branch beyond `BRANCH_SPREAD` keeps its own scale (its producer and other
      readers keep their resolution) and is requantized into the Concat's by a Cast, and the
      Concat's group is stored in 16 bits (form "int16"; the readers compute at 16 bits):
      there the branch keeps `32767 / spread` codes instead of `127 / spread`. A spread beyond
      `BRANCH_SPREAD * 256` is lost in 16 bits too: then only requantized ("requantized").
    `bits_of(v_id)`: the value's storage bits (default 8); `far`: the requantized branches of
    an earlier plan, kept (a second plan after the 16-bit calibration must not unite a branch
    with a group of other bits). Returns (the scale groups, the requantized (concat op_id,
    input index) pairs, the ops made float, the record for `tags["quantization"]["concats"]`,
    the Concat outputs to store in 16 bits that are not yet)."""
    uf = _scale_groups(net, int_ops, concat=False)
    gmax: dict[int, float] = {}
    for vid, a in amax.items():
        r = uf.find(vid)
        gmax[r] = max(gmax.get(r, 0.0), a)
    requant: set[tuple[int, int]] = set()
    floats: set[int] = set()
    record: dict[str, dict] = {}
    wide: set[int] = set()
    bits_of = bits_of or (lambda vid: 8)
    for op in net.ops:
        if op.op_type != "Concat" or op.op_id not in int_ops or op.op_id in floats:
            continue
        feats, y = op.feature_inputs(), op.outputs[0]
        ranges = [gmax.get(uf.find(v.v_id), 0.0) for v in feats]
        top = max(ranges + [gmax.get(uf.find(y.v_id), 0.0)])
        spread = [top / a if a > 0 else (1.0 if top == 0 else float("inf")) for a in ranges]
        at = [i for i, v in enumerate(op.inputs) if not v.is_params]  # inputs' own indices
        tail = _output_tail(op)
        form = "shared"
        if tail is not None and max(spread, default=1.0) > OUTPUT_SPREAD:
            form = "float"
            floats.update([op.op_id] + [t.op_id for t in tail])
        else:
            for i, v, sp in zip(at, feats, spread):
                if ((op.op_id, i) in far) if far is not None else sp > BRANCH_SPREAD:
                    requant.add((op.op_id, i))
                    if bits_of(y.v_id) >= 16:
                        form = "int16"
                    elif sp <= BRANCH_SPREAD * 256:
                        wide.add(y.v_id)
                        form = "int16"
                    elif form != "int16":
                        form = "requantized"
                else:
                    ry, rv = uf.find(y.v_id), uf.find(v.v_id)
                    a = max(gmax.get(ry, 0.0), gmax.get(rv, 0.0))
                    uf.union(ry, rv)
                    gmax[uf.find(ry)] = a
        if len(feats) > 1:
            record[str(op.op_id)] = {
                "name": op.name, "form": form, "at_output": tail is not None,
                "spread": [round(float(x), 2) if np.isfinite(x) else None for x in spread]}
    return uf, requant, floats, record, wide


def _logit_bits(net: Network, int_ops: set[int], bits: int) -> dict[int, int]:
    """The integer ops producing a softmax's input compute in 16 bits, and the logits they write
    are 16-bit (`_value_bits`): one int8 step of a large logit moves the probabilities by
    exp(step) (vgg19's 1000-class head: output cosine 0.981 with 8-bit logits, 0.993 with
    16-bit ones; onnxruntime's int8 0.976). PaddleOCR's recognizer wrote its 6625 logits in
    int8, a step of 0.29, until the value itself was raised too."""
    if bits != 8:
        return {}
    out = {}
    for op in net.ops:
        if op.op_type in PROBABILITY_OPS:
            for v in op.feature_inputs():
                prod = v.producer
                if prod is not None and prod.op_id in int_ops and \
                        prod.op_type in ("Conv2d", "Matmul", "Add", "Sub", "Multiply"):
                    out[prod.op_id] = 16  # the ops the chips run writing the other dtype
    return out


def _resolve_op_bits(net: Network, op_bits: Any, bits: int, int_ops: set[int]
                     ) -> dict[int, int]:
    """`{op_id: bits}` from the user's `{op name or op_id: bits}`, checked."""
    if op_bits is not None and not isinstance(op_bits, Mapping):
        raise QuantizationError(f"op_bits must map op names (or op_ids) to 16, not "
                                f"{type(op_bits).__name__} {op_bits!r}", field="op_bits")
    by_name = {op.name: op for op in net.ops}
    by_id = {op.op_id: op for op in net.ops}
    out: dict[int, int] = {}
    for key, b in (op_bits or {}).items():
        op = by_id.get(key) if isinstance(key, int) else by_name.get(str(key))
        if op is None and isinstance(key, str) and key.isdigit():
            op = by_id.get(int(key))  # an unnamed op, by its op id (--op-bits 12=16)
        if op is None:
            raise QuantizationError(f"op_bits names op {key!r}, which the optimized network "
                                    f"does not have (folded activations and BatchNorms are "
                                    f"gone; name the op they folded into)", field="op_bits")
        if b not in (8, 16) or b < bits:
            raise QuantizationError(f"op_bits[{key!r}] = {b}: an op can only be raised from "
                                    f"bits={bits} to 16", field="op_bits")
        if op.op_id not in int_ops:
            raise QuantizationError(f"op_bits names {op.op_type} '{op.name}', which has no "
                                    f"integer form and stays float", field="op_bits")
        out[op.op_id] = int(b)
    return out


def _value_bits(net: Network, int_ops: set[int], uf: _UnionFind, bits: int,
                op_bits: dict[int, int], input_bits: int | None,
                wide: set[int] | frozenset = frozenset()) -> dict[int, int]:
    """Storage bits of the activation values that differ from `bits` (mixed precision).

    An op raised by `op_bits` needs its feature inputs at its precision; `input_bits` raises
    the network inputs. From there, to a fixed point: a scale-sharing group takes its widest
    member's bits, and a rescaling op (Conv2d, Add, LUT, ...) computes at the widest bits of
    its feature inputs, so all of them are raised to it. Rescaling ops write any dtype, so
    precision changes only ever happen inside them: no integer-to-integer Casts are needed.
    """
    vb: dict[int, int] = {}

    def need(vid: int, b: int) -> bool:
        if b > vb.get(vid, bits):
            vb[vid] = b
            return True
        return False

    if input_bits is not None:
        for v in net.inputs():
            need(v.v_id, input_bits)
    for vid in wide:  # Concats holding branches of far-apart ranges (`_concat_plan`)
        need(vid, 16)
    ops = {op.op_id: op for op in net.ops}
    for oid, b in op_bits.items():
        for v in ops[oid].feature_inputs():
            need(v.v_id, b)
    for op in net.ops:  # the logits themselves, not only the ops computing them (_logit_bits)
        if op.op_type in PROBABILITY_OPS:
            for v in op.feature_inputs():
                if v.producer is not None and v.producer.op_id in int_ops:
                    need(v.v_id, 16)
    changed = bool(vb)
    while changed:
        changed = False
        gmax: dict[int, int] = {}
        for vid, b in vb.items():
            r = uf.find(vid)
            gmax[r] = max(gmax.get(r, bits), b)
        for op in net.ops:
            if op.op_id not in int_ops:
                continue
            feats = op.feature_inputs()
            for v in feats + op.outputs:
                changed |= need(v.v_id, gmax.get(uf.find(v.v_id), bits))
            if feats and not _shares_scale(op):
                b = max(vb.get(v.v_id, bits) for v in feats)
                for v in feats:
                    changed |= need(v.v_id, b)
    return vb


def _assign_scales(amax: dict[int, float], uf: _UnionFind, dtype_of: Any
                   ) -> tuple[dict[int, float], dict[int, int]]:
    """Per-value scales with the sharing groups resolved (largest amax of the group)."""
    group_amax: dict[int, float] = {}
    for vid, a in amax.items():
        r = uf.find(vid)
        group_amax[r] = max(group_amax.get(r, 0.0), a)
    scales = {vid: float(scale_from_amax(group_amax[uf.find(vid)], dtype_of(vid)))
              for vid in amax}
    groups = {vid: uf.find(vid) for vid in amax}
    return scales, groups


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


def quantize_network(net: Network, samples: Any, *, bits: int = 8, method: str = "mse",
                     per_channel: bool = True, weight_rounding: str = "gptq",
                     headroom: float | None = None, op_bits: Any = None,
                     input_bits: int | None = None, runner: Runner | None = None,
                     equalize: bool | None = None, bias_correction: bool | None = None,
                     outlier_aware: bool = False, **kw: Any) -> Network:
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
    int_ops = _integer_ops(opt)
    uf = _scale_groups(opt, int_ops)
    raised = {**_logit_bits(opt, int_ops, bits), **_resolve_op_bits(opt, op_bits, bits, int_ops)}
    vbits = _value_bits(opt, int_ops, uf, bits, raised, input_bits)

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
    gptq_ops = _gptq_ops(opt, int_ops) if weight_rounding == "gptq" and per_channel else []
    nearest = [op for op in opt.ops if op.op_id in int_ops and op.op_type in ("Conv2d", "Matmul")
               and op not in gptq_ops] if bias_correction is not False else []
    # bias correction's input means, taken in the calibration pass for the layers it corrects
    means = {op.inputs[0].v_id: None for op in nearest} or None
    def thresholds() -> dict[int, float]:
        amax = calibrate(opt, data, method, per_value=per_value, runner=runner, means=means,
                         reuse=_float_stats("calibration", (net, samples)),
                         **_observer_kw(method, bits, kw, outlier_aware))
        amax = {vid: a * (headroom if headroom is not None else
                          1.0 if bits_of(vid) == 8 else INT16_HEADROOM)
                for vid, a in amax.items()}
        # a QDQ model's pairs (xcompile.quant.qdq): the range its author chose, not calibration's
        amax.update({v.v_id: float(v.tags["qdq_amax"]) for op in opt.ops for v in op.outputs
                     if "qdq_amax" in v.tags and v.v_id in amax})
        return amax

    amax = thresholds()
    uf, requant, floats, concats, wide = _concat_plan(opt, int_ops, amax, bits_of)
    if wide:  # Concats of far-apart branches stored in 16 bits: their precision spreads,
        # and the values raised are calibrated again with 16-bit observers
        log.info("%s: %d Concat(s) of branches > %gx apart stored in 16 bits", net.name,
                 len(wide), BRANCH_SPREAD)
        vbits = _value_bits(opt, int_ops, uf, bits, raised, input_bits, wide)
        per_value = observers()
        amax = thresholds()
        uf, requant, floats, concats, _ = _concat_plan(opt, int_ops, amax, bits_of, requant)
    int_ops -= floats
    # table inputs calibrated only to where the table still changes (objectness logits)
    clipped = clip_table_inputs(opt, int_ops, amax, uf.find,
                                lambda vid: 127 if bits_of(vid) == 8 else 32767) \
        if outlier_aware else {}
    scales, groups = _assign_scales(amax, uf, lambda vid: el_of(vid).numpy_dtype)
    op_el = {op.op_id: el_of(op.feature_inputs()[0].v_id) for op in opt.ops
             if op.op_id in int_ops and op.feature_inputs()}
    codes: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    if gptq_ops:
        codes = _gptq_codes(opt, data, gptq_ops, op_el, runner, (net, samples))
    n_bc = _correct_biases(opt, nearest, means, op_el, bits, per_channel) if means else 0

    q = Network(opt.name, framework_kind=opt.framework_kind,
                framework_version=opt.framework_version, icraft_version=opt.icraft_version,
                icraft_xir_version=opt.icraft_xir_version, tags=dict(opt.tags))
    q.tags["quantization"] = {"bits": bits, "method": method, "per_channel": bool(per_channel),
                              "weight_rounding": weight_rounding if per_channel else "nearest",
                              "headroom": float(headroom if headroom is not None else
                                                 1.0 if bits == 8 else INT16_HEADROOM),
                              "input_bits": input_bits, "equalized_pairs": n_eq,
                              "bias_corrected": n_bc, "concats": concats,
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
        ins = _integer_inputs(op, get_q, act_el, bias_el, per_channel, codes.get(op.op_id))
        if t == "Concat":  # branches that keep their own scale, requantized into the Concat's
            for i, v in enumerate(op.inputs):
                if v.is_params:  # a constant: its codes at the Concat's (shared) scale
                    ins[i] = _params_at(v, qtype(op.outputs[0]))
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
    q.tags[RECORDS_TAG] = layer_records(q)  # what a refit keeps (xcompile.refit.record)
    q.validate()
    log.info("quantized %s: %d integer ops (%d at 16 bits), %d float ops, int%d, %s", net.name,
             len(int_ops), len(q.tags["quantization"]["op_bits"]),
             len(q.tags["quantization"]["float_ops"]), bits, method)
    return q


def _params_at(v: Params, t: TensorType) -> Params:
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


def _gptq_ops(opt: Network, int_ops: set[int]) -> list[Operation]:
    """The integer Conv2d / Matmul ops whose constant weights GPTQ rounds."""
    return [op for op in opt.ops if op.op_id in int_ops and op.op_type in ("Conv2d", "Matmul")
            and op.inputs[1].is_params
            and ((op.op_type == "Conv2d" and op.inputs[1].data.ndim == 4)
                 or (op.op_type == "Matmul" and op.inputs[1].data.ndim == 2
                     and not op.attrs.get("transpose_a", False)
                     and not op.attrs.get("transpose_b", False)))]


#: the float statistics `reuse_float_statistics` keeps: {(id(net), id(samples), op ids):
#: (net, samples, Hessians)} (the network and samples held, so their ids stay theirs)
_FLOAT_STATS: dict | None = None


@contextmanager
def reuse_float_statistics() -> Iterator[None]:
    """Within it, `quantize_network` calls on the same float network and samples object (the
    same objects, not equal ones) share GPTQ's input second moments: they are statistics of
    the float network alone, whatever the bits, op_bits or thresholds, so a mixed-precision
    search's quantizations need not collect them again (yolov5s-640: 6 s of each of its
    three). Outside it nothing is kept."""
    global _FLOAT_STATS
    before, _FLOAT_STATS = _FLOAT_STATS, {}
    try:
        yield
    finally:
        _FLOAT_STATS = before


def _float_stats(kind: str, source: tuple) -> Any:
    """What `reuse_float_statistics` keeps of `kind` for `source` (the float network and
    samples objects), created empty on first use; None outside it. The value is the last item
    of the entry (the network and samples before it keep their ids theirs)."""
    if _FLOAT_STATS is None:
        return None
    key = (kind,) + tuple(id(x) for x in source)
    if key not in _FLOAT_STATS:
        _FLOAT_STATS[key] = (*source, {})
    return _FLOAT_STATS[key][-1]


def _gptq_codes(opt: Network, data: list, ops: list[Operation], op_el: dict[int, ScalarType],
                runner: Runner | None, source: tuple = ()) -> dict[int, tuple[np.ndarray,
                                                                         np.ndarray]]:
    """`{op_id: (codes, scales)}` for `ops` (`_gptq_ops`), rounded by GPTQ
    (`xcompile.quant.gptq`) on the calibration samples. `source`: the (float network,
    samples) objects the statistics come from, their key in `reuse_float_statistics`."""
    from xrt.console import progress_bar

    key = tuple(id(x) for x in source) + tuple(op.op_id for op in ops)
    kept = _FLOAT_STATS.get(key) if _FLOAT_STATS is not None and source else None
    hess = kept[-1] if kept is not None else collect_hessians(opt, data, ops, runner=runner)
    if _FLOAT_STATS is not None and source and kept is None:
        _FLOAT_STATS[key] = (*source, hess)
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


def _correct_biases(opt: Network, ops: list[Operation], means: dict[int, np.ndarray],
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


def _integer_inputs(op: Operation, get_q, act_el, bias_el, per_channel: bool,
                    codes: tuple[np.ndarray, np.ndarray] | None = None
                    ) -> list[Value]:
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

"""Which ops compute in integers (docs/quantization.md, "Integer ops"), and which of them
move codes without rescaling (their values share one scale)."""

from __future__ import annotations

import numpy as np

from xir.network import Network
from xir.ops.base import Operation
from xir.quant.lut import LUT_OPS
from xir.values import Value

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


def integer_ops(net: Network) -> set[int]:
    """The ops that compute in integers: integer-capable ones, except code-moving ops (scale
    sharing) whose every feature input comes from a float compute op -- quantizing after a
    Softmax only to reshape its probabilities would throw their resolution away."""
    ints = {op.op_id for op in net.ops if integer_capable(op)}

    def computed_on(v: Value) -> bool:  # every op reading v computes in integers
        return all(c.op_id in ints and (not shares_scale(c) or all(map(computed_on, c.outputs)))
                   for c in v.consumers)

    for op in net.ops:  # a row op's codes only pay where integer ops compute on them
        if op.op_id in ints and op.op_type in ROW_OPS and not all(map(computed_on, op.outputs)):
            ints.discard(op.op_id)
    for op in net.ops:  # network order: producers first
        if op.op_id not in ints or not shares_scale(op):
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


def shares_scale(op: Operation) -> bool:
    """Whether `op` moves codes without rescaling, so its values share one scale."""
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

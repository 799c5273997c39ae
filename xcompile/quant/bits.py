"""Mixed precision (docs/quantization.md section 10): the ops and values at 16 bits, from the
user's `op_bits`, the softmax logits and the spread of precision through scale groups."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from xcompile.quant.capability import PROBABILITY_OPS, shares_scale
from xcompile.quant.log_domain import log_domain_bits
from xcompile.quant.scale_groups import UnionFind
from xir.errors import QuantizationError
from xir.network import Network


@dataclass(frozen=True)
class Why:
    """Why `value_bits` raised one value to 16 bits: the rule (`kind`) and what it names.

    Seeds (the value is raised by a rule of its own): "op_bits" (`op` was raised by op_bits:
    the user's or the mixed-precision search's, `xcompile.quant.int16_reasons` tells them
    apart), "logits" (`op` computes or is a softmax's input: `logit_bits`), "stream" (`op` is
    a residual-stream Add or the LayerNorm reading it: `stream_bits`), "log_domain" (an op
    of a log-power chain: `rule_bits`), "input_bits" (a network
    input at --input-bits 16), "concat" (`op` is a Concat of far-apart branches stored in 16
    bits: `concats.concat_plan`). Spread (the value takes another's bits): "group" (it shares
    a scale group with the 16-bit `value`), "input" (`op`, a rescaling op, computes at the
    widest of its feature inputs, `value`)."""

    kind: str
    op: int | None = None
    value: int | None = None


#: the `Why.kind`s a value is raised by directly
SEED_KINDS = ("op_bits", "logits", "stream", "log_domain", "input_bits", "concat")


def logit_producers(net: Network, int_ops: set[int]) -> dict[int, int]:
    """`{op_id: softmax op_id}` of the integer ops writing a softmax's input (`logit_bits`)."""
    out = {}
    for op in net.ops:
        if op.op_type in PROBABILITY_OPS:
            for v in op.feature_inputs():
                prod = v.producer
                if prod is not None and prod.op_id in int_ops and \
                        prod.op_type in ("Conv2d", "Matmul", "Add", "Sub", "Multiply"):
                    out[prod.op_id] = op.op_id
    return out


def logit_bits(net: Network, int_ops: set[int], bits: int, stream: bool = True
               ) -> dict[int, int]:
    """The integer ops producing a softmax's input compute in 16 bits, and the logits they write
    are 16-bit (`value_bits`): one int8 step of a large logit moves the probabilities by
    exp(step) (vgg19's 1000-class head: output cosine 0.981 with 8-bit logits, 0.993 with
    16-bit ones; onnxruntime's int8 0.976). PaddleOCR's recognizer wrote its 6625 logits in
    int8, a step of 0.29, until the value itself was raised too."""
    return {oid: 16 for oid in rule_bits(net, int_ops, bits, stream)}


def rule_bits(net: Network, int_ops: set[int], bits: int, stream: bool = True
              ) -> dict[int, str]:
    """`{op_id: rule}` of the integer ops an automatic 16-bit rule raises, whatever the user
    or the search chooses: "logits" (the ops computing a softmax's input, `logit_bits`),
    "stream" (`stream_bits`), "log_domain" (a log-power spectrum's chain,
    `log_domain.log_domain_bits`). `logit_bits` raises them all (the quantizer's `raised`, the
    base of `mixed.planned_int16`), and `value_bits` names each by its rule. None at
    `bits` 16. `stream=False` leaves the residual stream out (`quantize_network(
    residual_stream=False)`, for a compile that measured it buys nothing)."""
    if bits != 8:
        return {}
    # the ops the chips run writing the other dtype
    out = {oid: "logits" for oid in logit_producers(net, int_ops)}
    if stream:
        out.update({oid: "stream" for oid in stream_bits(net, int_ops, bits)})
    out.update({oid: "log_domain" for oid in log_domain_bits(net, int_ops, bits)})
    return out


#: ops writing a LayerNorm's input that `stream_bits` raises: elementwise, no MACs (a
#: transformer's residual Adds)
STREAM_OPS = ("Add", "Sub")


def normalized_inputs(net: Network, int_ops: set[int]) -> list[Any]:
    """The feature inputs of the integer LayerNorms of `net` written by integer ops: stored
    in 16 bits (`value_bits`, `stream_bits`)."""
    return [v for op in net.ops if op.op_type == "LayerNorm" and op.op_id in int_ops
            for v in op.feature_inputs()
            if v.producer is not None and v.producer.op_id in int_ops]


def stream_bits(net: Network, int_ops: set[int], bits: int) -> dict[int, int]:
    """The Add / Sub ops writing a LayerNorm's input compute in 16 bits, and the value they
    write is 16-bit (`value_bits`): a transformer's residual stream. A LayerNorm divides each
    row by the row's own spread, so a row far smaller than the tensor's range (a ViT's class
    token: std 0.1 against 1.1 for the patch tokens, 3 int8 steps) comes out with its int8
    rounding magnified to unit scale, and one scale per tensor cannot serve both. The Adds
    computing in 16 bits make their inputs 16-bit too (the residual, and the branch a Matmul
    writes in 16 bits while computing in 8: no MAC moves), so the stream carries 16-bit
    precision from the first Add (whose Concat keeps the class token's 0.02 values) to the
    last LayerNorm. Measured on the field corpus ViT block: worst part 0.906 -> 0.998 on the
    probes, no MAC in int16 (docs/quantization.md section 10)."""
    if bits != 8:
        return {}
    out = {}
    for v in normalized_inputs(net, int_ops):
        prod = v.producer
        # through the Reshapes / Transposes between the Add and the LayerNorm (SVTR's tokens)
        while prod is not None and prod.op_type in ("Reshape", "Transpose") and \
                prod.op_id in int_ops and len(prod.feature_inputs()) == 1:
            prod = prod.feature_inputs()[0].producer
        if prod is not None and prod.op_id in int_ops and prod.op_type in STREAM_OPS:
            out[prod.op_id] = 16
    return out


def resolve_op_bits(net: Network, op_bits: Any, bits: int, int_ops: set[int]
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


def value_bits(net: Network, int_ops: set[int], uf: UnionFind, bits: int,
                op_bits: dict[int, int], input_bits: int | None,
                wide: set[int] | frozenset = frozenset(),
                why: dict[int, Why] | None = None, stream: bool = True) -> dict[int, int]:
    """Storage bits of the activation values that differ from `bits` (mixed precision).

    An op raised by `op_bits` needs its feature inputs at its precision; `input_bits` raises
    the network inputs. From there, to a fixed point: a scale-sharing group takes its widest
    member's bits, and a rescaling op (Conv2d, Add, LUT, ...) computes at the widest bits of
    its feature inputs, so all of them are raised to it. Rescaling ops write any dtype, so
    precision changes only ever happen inside them: no integer-to-integer Casts are needed.

    `why`, when given, is filled with the reason each raised value was raised (`Why`): the
    rule that raised it first, in the order automatic rules (16-bit logits, the residual
    stream), input bits, far-apart Concats, then `op_bits`; a value the spread reached, the
    value it took its bits from. `xcompile.quant.int16_reasons` turns it into each op's reason.
    """
    vb: dict[int, int] = {}
    why = {} if why is None else why

    def need(vid: int, b: int, cause: Why) -> bool:
        if b > vb.get(vid, bits):
            vb[vid] = b
            why.setdefault(vid, cause)
            return True
        return False

    ops = {op.op_id: op for op in net.ops}
    rules = rule_bits(net, int_ops, bits, stream)

    def seed_kind(oid: int) -> str:
        return rules.get(oid, "op_bits")

    # the automatic rules first: an op the user (or the search) raises that a rule raises
    # anyway is the rule's
    for oid, b in sorted(op_bits.items(), key=lambda kv: seed_kind(kv[0]) == "op_bits"):
        if seed_kind(oid) != "op_bits":
            for v in ops[oid].feature_inputs():
                need(v.v_id, b, Why(seed_kind(oid), oid))
    for op in net.ops:  # the logits themselves, not only the ops computing them (logit_bits)
        if op.op_type in PROBABILITY_OPS:
            for v in op.feature_inputs():
                if v.producer is not None and v.producer.op_id in int_ops:
                    need(v.v_id, 16, Why("logits", op.op_id))
    if bits == 8 and stream:  # a LayerNorm's input (stream_bits)
        for v in normalized_inputs(net, int_ops):
            norm = next((c for c in v.consumers if c.op_type == "LayerNorm"), None)
            need(v.v_id, 16, Why("stream", norm.op_id if norm is not None else None))
    if input_bits is not None:
        for v in net.inputs():
            need(v.v_id, input_bits, Why("input_bits"))
    for vid in sorted(wide):  # Concats holding branches of far-apart ranges (`concat_plan`)
        prod = next((op for op in net.ops if any(o.v_id == vid for o in op.outputs)), None)
        need(vid, 16, Why("concat", prod.op_id if prod is not None else None))
    for oid, b in op_bits.items():
        if seed_kind(oid) == "op_bits":
            for v in ops[oid].feature_inputs():
                need(v.v_id, b, Why("op_bits", oid))
    changed = bool(vb)
    while changed:
        changed = False
        gmax: dict[int, int] = {}
        gsrc: dict[int, int] = {}
        for vid, b in vb.items():
            r = uf.find(vid)
            if b > gmax.get(r, bits):
                gmax[r], gsrc[r] = b, vid
        for op in net.ops:
            if op.op_id not in int_ops:
                continue
            feats = op.feature_inputs()
            for v in feats + op.outputs:
                r = uf.find(v.v_id)
                if r in gmax:
                    changed |= need(v.v_id, gmax[r], Why("group", op.op_id, gsrc[r]))
            if feats and not shares_scale(op):
                top = max(feats, key=lambda v: vb.get(v.v_id, bits))
                b = vb.get(top.v_id, bits)
                for v in feats:
                    changed |= need(v.v_id, b, Why("input", op.op_id, top.v_id))
    return vb

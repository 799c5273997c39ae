"""The adapt stage of an NPU target: AlignAxis / PruneAxis around the quantized region's Casts.

The vendor's generated graphs read ``Input -> AlignAxis -> Cast -> HardOp ... -> Cast ->
PruneAxis -> Output``: the host pads the channel axis to the NPU's channel unit before
quantizing and cuts it after dequantizing, so every tensor crossing between host and NPU is a
whole, dense NPU buffer. `adapt` makes that edge explicit on the quantized network:

- a Cast float -> quantized ``x -> q`` becomes ``x -> AlignAxis -> Cast -> q_pad ->
  PruneAxis -> q`` (the PruneAxis is quantized and later becomes a free alias on the NPU);
- a Cast quantized -> float ``q -> f`` becomes ``q -> AlignAxis -> q_pad -> Cast -> f_pad ->
  PruneAxis -> f``.

The original values keep their v_ids (consumers are untouched); new values and ops get fresh
ids. The adapted network computes exactly what the quantized one does (AlignAxis pads with
code 0 = real 0 and PruneAxis removes it), so it still runs on the HostBackend.
"""

from __future__ import annotations

import logging

from xir.network import Network
from xir.ops.base import OP_REGISTRY
from xir.types import TensorType
from xir.values import Value

from .common import TargetConfig, align, clone_network

log = logging.getLogger(__name__)


def _bits(net: Network, options: dict | None) -> int:
    q = net.tags.get("quantization", {}) if isinstance(net.tags, dict) else {}
    return int((options or {}).get("bits") or q.get("bits", 8))


def adapt(quantized: Network, target: TargetConfig, options: dict | None = None) -> Network:
    """The adapted network for `target` (a new object; `quantized` is not modified)."""
    TAG = target.tag
    net, _ = clone_network(quantized)
    unit = target.channel_unit(_bits(net, options))
    AlignAxis, PruneAxis = OP_REGISTRY["AlignAxis"], OP_REGISTRY["PruneAxis"]
    new_ops = []
    count = 0
    for op in net.ops:
        if op.op_type != "Cast" or not op.outputs or not op.inputs:
            new_ops.append(op)
            continue
        src, dst = op.inputs[0], op.outputs[0]
        sq, dq = src.dtype.is_quantized(), dst.dtype.is_quantized()
        if sq == dq or src.dtype.rank < 2 or src.dtype.layout.is_tiled() or \
                dst.dtype.layout.is_tiled() or tuple(src.shape) != tuple(dst.shape):
            new_ops.append(op)
            continue
        c = int(src.shape[-1])
        cp = align(c, unit)
        pshape = tuple(src.shape[:-1]) + (cp,)

        def padded(v: Value, name: str, shape: tuple) -> Value:
            return Value(net.newVId(), TensorType(v.dtype.element_dtype, shape, v.dtype.layout),
                         name, tags={**v.tags, TAG: {"adapt": "padded"}})

        a_out = padded(src, f"{src.name}.align", pshape)
        c_out = padded(dst, f"{dst.name}.pad", pshape)
        align_op = AlignAxis([src], [a_out], op_id=net.newOpId(), name=f"{op.name}.align",
                             axis=-1, align_unit=unit)
        cast = op.clone_with([a_out], [c_out])
        cast.tags = dict(op.tags)
        prune = PruneAxis([c_out], [dst], op_id=net.newOpId(), name=f"{op.name}.prune",
                          axis=-1, size=c)
        new_ops += [align_op, cast, prune]
        count += 1
    net.ops = new_ops
    net.relink()
    net.tags.setdefault(TAG, {})["adapt"] = {"channel_unit": unit, "casts": count}
    net.validate()
    log.info("adapt %s for %s: %d casts padded to the channel unit %d", net.name, target.name,
             count, unit)
    return net


"""Element-wise ops out of the rank-5 steps of a data-movement chain (before `lower.select`).

Exporters split attention heads with a chain of moves through a value of five axes, and the
import's clean-up (unit-axis Reshape sinking, Transpose sinking) may leave an element-wise op
on that rank-5 step: SVTR's ``q = qkv.reshape(N, T, 3, H, D).transpose(2, 0, 3, 1, 4)[0]``
then ``q * scale`` imports as ``Reshape -> Multiply -> Transpose -> Reshape`` with the Multiply
on ``(N, T, 1, H, D)``. No value of more than four axes has an NPU map form (`common.map3`),
so the Multiply would run on the host and split the chain (`moves.find_chain`) in two host
pieces as well.

An element-wise op that reads one map and constants of one number each computes every element
from that element alone, and a chain only moves codes (one scale throughout, `moves`): the op
gives the same codes after the chain as before it. `commute` moves it there, to the first
value of the chain that has a map form: ``Reshape -> Transpose -> Reshape -> Multiply``, the
three moves one chain of COPY layers and the Multiply one ELTW layer, both on the chip,
bit-identical to the integer reference that runs them in the exporter's order. The op keeps its
op id and its output value (the chain's last value, with its v_id); the chain's values are
re-typed to the op's input type.
"""

from __future__ import annotations

import logging

import numpy as np

from xir.network import Network
from xir.ops.base import Operation
from xir.quant.lut import LUT_OPS
from xir.types import TensorType
from xir.values import Params, Value

from .common import map3
from .moves import CHAIN_OPS
from .pointwise import TABLE_OPS

log = logging.getLogger(__name__)

#: ops that compute each element from the same element of their one map (and constants of
#: one number each)
ELEMENTWISE = frozenset({"Multiply", "Add", "Sub", "Binary", "Relu"}) | frozenset(LUT_OPS) \
    | TABLE_OPS


def _scalar_consts(op: Operation) -> bool:
    return all(v.hasData() and np.asarray(v.data).size == 1 for v in op.inputs if v.is_params)


def _movable(op: Operation) -> Value | None:
    """The one map `op` reads when it is an element-wise op on a value with no map form."""
    if op.op_type not in ELEMENTWISE or len(op.outputs) != 1 or not op.is_quantized():
        return None
    feats = [v for v in op.inputs if not v.is_params]
    if len(feats) != 1 or not _scalar_consts(op):
        return None
    x, y = feats[0], op.outputs[0]
    if tuple(x.shape) != tuple(y.shape) or map3(y.shape) is not None:
        return None
    return x


def _chain_below(v: Value) -> list[Operation] | None:
    """The moves from `v` (no map form) to the first value with one, each the only reader of
    the value before it; None when the chain branches or ends elsewhere."""
    path: list[Operation] = []
    while map3(v.shape) is None:
        if len(v.consumers) != 1:
            return None
        c = v.consumers[0]
        if c.op_type not in CHAIN_OPS or len(c.outputs) != 1 or not c.inputs or \
                c.inputs[0] is not v or any(u.is_params for u in c.inputs[1:]) or \
                not c.is_quantized():
            return None
        path.append(c)
        v = c.outputs[0]
    return path or None


def commute(net: Network) -> int:
    """Move every element-wise op on a value of no map form below the chain of moves after
    it (see the module docstring); the number of ops moved. `net` is changed in place."""
    moved = 0
    for op in list(net.ops):
        x = _movable(op)
        if x is None:
            continue
        path = _chain_below(op.outputs[0])
        if path is None:
            continue
        end = path[-1].outputs[0]
        prev = x
        for c in path:  # the moves now carry op's input codes
            o = c.outputs[0]
            nv = Value(net.newVId(), TensorType(x.dtype.element_dtype, o.shape, o.dtype.layout),
                       f"{o.name}:before.{op.name or op.op_type}" if o.name else "")
            c.inputs = [prev] + list(c.inputs[1:])
            c.outputs = [nv]
            prev = nv
        rank = len(end.shape)
        ins = []
        for v in op.inputs:
            if v is x:
                ins.append(prev)
            elif v.is_params:
                d = np.asarray(v.data).reshape((1,) * rank)
                ins.append(Params(net.newVId(), TensorType(v.dtype.element_dtype, d.shape), d,
                                  v.name, v.mtype, dict(v.tags)))
            else:
                ins.append(v)
        op.inputs = ins
        op.outputs = [end]
        net.ops.remove(op)
        net.ops.insert(net.ops.index(path[-1]) + 1, op)
        net.relink()
        moved += 1
        log.info("%s %s: moved below %d moves (%s) onto %s", op.op_type, op.name or op.op_id,
                 len(path), ", ".join(c.op_type for c in path), list(end.shape))
    return moved

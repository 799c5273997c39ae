"""LayerNorm written out over the middle axis of a rank-3 tensor whose means the ONNX importer
made global pools: one LayerNorm between two Transposes.

paddle2onnx writes SVTR's LayerNorm (PaddleOCR's PP-OCRv4 recognizer) as ReduceMean over the
last axis, Sub, Pow 2, ReduceMean, Add eps, Sqrt, Div, Mul gamma, Add beta, on tokens that are
a Transpose of a (N, C, L) map. The importer keeps the map in its (N, C, L) view, so the
normalized axis is axis 1 there, and each ReduceMean becomes a global AvgPool2d over the
(N, 1, C, L) map between two Reshapes (`handlers.reduce._global_pool_1d`), which
`normalization.fold_layernorm` (ReduceMean over trailing axes) does not see. Left so, the
pieces quantize one by one: the squares in int8 (a step set by the largest square, so the
small rows' variances round coarsely), the division by the standard deviation in float on the
host, and no LayerNorm for the residual stream's 16 bits (`xcompile.quant.bits.stream_bits`)
to protect. As one LayerNorm over the last axis of the (N, L, C) tokens, the integer form sums
the codes and their squares exactly (`xir.quant.rownorm`).

The rewrite is exact in float: `Transpose(x, [0, 2, 1])`, `LayerNorm(axis=2, epsilon)` with
gamma and beta of shape (C,), `Transpose(y, [0, 2, 1])` computes the same values (the pooled
means are means over axis 1).
"""

from __future__ import annotations

import numpy as np

from xir.network import Network
from xir.ops.base import Operation
from xir.types import TensorType
from xir.values import Value

from .graph import only_reader, other_input, scalar_value

__all__ = ["fold_pooled_layernorm", "pooled_mean"]


def _same_data(a: Value, b: Value) -> bool:
    """`a` and `b` hold the same elements in the same order (one a Reshape of the other)."""
    if a is b:
        return True
    for u, w in ((a, b), (b, a)):
        p = u.producer
        if p is not None and p.op_type == "Reshape" and p.inputs[0] is w:
            return True
    return False


def _global_pool_over_width(pool: Operation, width: int) -> bool:
    """`pool` (an AvgPool2d of an (N, 1, W, L) NHWC map) averages the whole W of `width`."""
    if pool.op_type != "AvgPool2d":
        return False
    a = pool.attrs
    if any(int(a.get(k, 0)) for k in ("pad_top", "pad_bottom", "pad_left", "pad_right")):
        return False
    n, h, w, _ = pool.inputs[0].shape
    if h != 1 or w != width:
        return False
    return bool(a.get("is_global")) or (int(a["pool_height"]) == 1 and
                                        int(a["pool_width"]) == width)


def pooled_mean(first: Operation, outputs: set[int]) -> tuple[Value, list[Operation]] | None:
    """The mean over axis 1 of a rank-3 (N, C, L) tensor as the importer writes it:
    ``Reshape (N, 1, C, L) -> global AvgPool2d -> Reshape (N, 1, L)``, from the first Reshape
    on. Returns the mean's value and the three ops, or None."""
    if first.op_type != "Reshape":
        return None
    shape = tuple(first.outputs[0].shape)
    if len(shape) != 4 or shape[1] != 1 or shape[2] <= 1:
        return None
    pool = only_reader(first.outputs[0], outputs, "AvgPool2d")
    if pool is None or not _global_pool_over_width(pool, shape[2]):
        return None
    last = only_reader(pool.outputs[0], outputs, "Reshape")
    if last is None or tuple(last.outputs[0].shape) != (shape[0], 1, shape[3]):
        return None
    return last.outputs[0], [first, pool, last]


def _per_channel(k: Value | None, c: int) -> np.ndarray | None:
    """A constant varying along axis 1 of an (N, C, L) tensor only (shape (C, 1), (1, C, 1)
    or one number), as a (C,) vector; None otherwise."""
    if k is None or not k.is_params or k.data is None:
        return None
    d = np.asarray(k.data, np.float32)
    if d.size == 1:
        return np.full(c, float(d.ravel()[0]), np.float32)
    s = tuple(d.shape)
    if len(s) in (2, 3) and s[-1] == 1 and s[-2] == c and all(n == 1 for n in s[:-2]):
        return d.reshape(c)
    return None


def _variance_chain(sq: Value, c: int, outputs: set[int]
                    ) -> tuple[Value, float, list[Operation]] | None:
    """From the squares: Reshape, the global pool over C, Add eps, Sqrt and a Reshape back,
    in the orders exporters and the importer leave them. (the standard deviation's value,
    eps, the ops) or None."""
    ops: list[Operation] = []
    eps = None
    v = sq
    seen = {"AvgPool2d": 0, "Add": 0, "Sqrt": 0}
    while True:
        op = only_reader(v, outputs)
        if op is None:
            return None
        t = op.op_type
        if t == "Div":
            break
        if t == "Reshape":
            pass
        elif t == "AvgPool2d" and not seen["Add"] and not seen["Sqrt"]:
            if not _global_pool_over_width(op, c) or not ops or ops[-1].op_type != "Reshape" \
                    or tuple(ops[-1].inputs[0].shape) != tuple(sq.shape):
                return None
        elif t == "Add" and seen["AvgPool2d"] and not seen["Sqrt"]:
            eps = scalar_value(other_input(op, v))
            if eps is None or eps <= 0 or op.attrs.get("act", "none") != "none":
                return None
        elif t == "Sqrt" and seen["Add"]:
            pass
        else:
            return None
        if t in seen:
            if seen[t]:
                return None
            seen[t] += 1
        ops.append(op)
        v = op.outputs[0]
    if not all(seen.values()) or tuple(v.shape) != (sq.shape[0], 1, sq.shape[2]):
        return None
    return v, float(eps), ops


def fold_pooled_layernorm(net: Network, first: Operation, outputs: set[int]) -> bool:
    """``(x - mean(x)) / sqrt(mean((x - mean(x))**2) + eps) [* gamma] [+ beta]`` over axis 1
    of a rank-3 x with pooled means (`pooled_mean`), from the mean's first Reshape on: one
    LayerNorm over the last axis between two Transposes, the second left out where the
    result's only reader transposes it back to tokens (SVTR's projections read tokens). The
    LayerNorm keeps the Reshape's op_id and the chain's last value stays the output."""
    from xir.ops.nn import LayerNorm
    from xir.ops.shape import Transpose

    got = pooled_mean(first, outputs)
    if got is None:
        return False
    mean, mean_ops = got
    sub = only_reader(mean, outputs, "Sub")
    if sub is None or sub.inputs[1] is not mean:
        return False
    x = sub.inputs[0]
    if len(x.shape) != 3 or not _same_data(x, first.inputs[0]) or \
            tuple(first.outputs[0].shape) != (x.shape[0], 1, x.shape[1], x.shape[2]):
        return False
    n, c, length = (int(d) for d in x.shape)
    d = sub.outputs[0]
    readers = {op.op_type: op for op in d.consumers}
    sq, div = readers.get("Multiply"), readers.get("Div")
    if d.v_id in outputs or len(d.consumers) != 2 or sq is None or div is None or \
            list(sq.inputs) != [d, d] or div.inputs[0] is not d:
        return False
    chain = _variance_chain(sq.outputs[0], c, outputs)
    if chain is None or div.inputs[1] is not chain[0]:
        return False
    _, eps, var_ops = chain
    gone = mean_ops[1:] + [sub, sq] + var_ops + [div]
    last = div
    params: list[np.ndarray] = []
    for op_type in ("Multiply", "Add"):
        nxt = only_reader(last.outputs[0], outputs, op_type)
        k = _per_channel(other_input(nxt, last.outputs[0]) if nxt is not None else None, c)
        if k is None or (op_type == "Add" and nxt.attrs.get("act", "none") != "none"):
            break
        if op_type == "Add" and not params:  # a bias without a scale
            params.append(np.ones(c, np.float32))
        params.append(k)
        gone.append(nxt)
        last = nxt
    if not params:
        params.append(np.ones(c, np.float32))
    name = last.name or first.name
    el = x.dtype.element_dtype
    tokens = Value(net.newVId(), TensorType(el, (n, length, c), None), f"{name}.tokens")
    normed = Value(net.newVId(), TensorType(el, (n, length, c), None), f"{name}.normalized")
    ws = [net.newParams(p, f"{name}.{k}") for p, k in zip(params, ("scale", "bias"))]
    y = last.outputs[0]
    ops = [Transpose([x], [tokens], op_id=net.newOpId(), name=f"{name}.tokens", perm=[0, 2, 1])]
    back = only_reader(y, outputs, "Transpose")
    if back is not None and list(back.attrs["perm"]) == [0, 2, 1]:  # tokens read on: as they are
        ops.append(LayerNorm([tokens] + ws, list(back.outputs), op_id=first.op_id, name=name,
                             axis=2, epsilon=eps))
        gone.append(back)
    else:
        ops += [LayerNorm([tokens] + ws, [normed], op_id=first.op_id, name=name, axis=2,
                          epsilon=eps),
                Transpose([normed], [y], op_id=net.newOpId(), name=f"{name}.back",
                          perm=[0, 2, 1])]
    ops[1].tags = {"fused_op_ids": [op.op_id for op in gone]}
    for op in [first] + gone[:-1]:
        net.ops.remove(op)
    i = net.ops.index(gone[-1])  # the chain's last place: all it reads is computed before
    net.ops[i:i + 1] = ops
    net.relink()
    return True


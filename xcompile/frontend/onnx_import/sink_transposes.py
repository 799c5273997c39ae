"""Transposes moved down the graph until they meet their inverse (part of the import clean-up,
`cleanup._optimize`).

Exporters write token streams as the NCHW map flattened and transposed
(``conv(x).flatten(2).transpose(1, 2)``, a ViT's patch embedding): imported from an NHWC map,
that is NHWC -> NCHW Transpose, Reshape, and every op after it works in the (N, C, T) view, with
a Transpose to (N, T, C) before each LayerNorm / Linear and one back before each residual Add.
Two rewrites remove them:

- ``Reshape(Transpose(x))`` -> ``Transpose(Reshape(x))`` when the Reshape merges runs of
  axes that are neighbours, in order, in x too (a flatten: the Reshape then needs no data
  movement in x's order), or only drops / adds unit axes and a Transpose reads it (the two
  Transposes then compose); a Reshape that splits an axis (a channel shuffle's first step,
  which `xcompile.passes` recognises as it is) stays;
- a Transpose that moves only unit axes and keeps the last one is a Reshape (an alias);
- ``E(Transpose_p(a), Transpose_p(b), k)`` -> ``Transpose_p(E(a, b, k'))`` for an element-wise E
  or a Concat (axis remapped), every computed input such a Transpose read by E alone, the
  constants transposed by the inverse permutation.

Neither adds an op: one Transpose replaces one or more, and the clean-up composes consecutive
Transposes, dropping the identity they meet.
"""

from __future__ import annotations

import numpy as np

from xir.network import Network
from xir.ops.base import OP_REGISTRY, Operation
from xir.types import TensorType
from xir.values import Params, Value

#: ops a Transpose can move below: element-wise ones (no axis attribute) and Concat
SINKABLE = frozenset({"Add", "Sub", "Multiply", "Div", "Relu", "Sigmoid", "Tanh", "Silu",
                      "Gelu", "Erf", "Hardswish", "Sqrt", "Power", "Cast", "Unary", "Binary",
                      "Concat"})


def sink_transposes(net: Network) -> bool:
    """One sweep of the rewrites; True when the network changed."""
    changed = False
    for op in list(net.ops):
        if op not in net.ops:
            continue
        if op.op_type == "Reshape":
            changed |= _reshape_first(net, op)
        elif op.op_type in SINKABLE:
            changed |= _sink_below(net, op)
        elif op.op_type == "Transpose":
            changed |= _unit_move_as_reshape(net, op)
    return changed


def _unit_move_as_reshape(net: Network, t: Operation) -> bool:
    """A Transpose that moves only unit axes (the others keep their order) and keeps the last
    axis is a Reshape: the same bytes in the same order, an alias on the chips."""
    x, y = t.inputs[0], t.outputs[0]
    p = [int(a) % len(x.shape) for a in t.attrs["perm"]]
    big = [a for a in p if x.shape[a] > 1]
    if not p or big != sorted(big) or x.shape[-1] != y.shape[-1] or \
            (x.shape[-1] == 1 and p[-1] != len(p) - 1):
        return False
    r = OP_REGISTRY["Reshape"]([x], [y], op_id=t.op_id, name=t.name, shape=list(y.shape))
    r.tags = dict(t.tags)
    net.ops[net.ops.index(t)] = r
    net.relink()
    return True


def _groups(ys: tuple[int, ...], zs: tuple[int, ...]) -> list[tuple[list[int], list[int]]] | None:
    """The finest runs (axes of ys, axes of zs) of equal products a row-major reshape ys -> zs
    maps onto each other; None when a run lacks axes on one side."""
    out: list[tuple[list[int], list[int]]] = []
    i = k = 0
    while i < len(ys) or k < len(zs):
        gy, gz, py, pz = [], [], 1, 1
        while not (gy and gz and py == pz):
            if gy and (py > pz or (py == pz and not gz)) and k < len(zs):
                gz.append(k)
                pz *= zs[k]
                k += 1
            elif i < len(ys):
                gy.append(i)
                py *= ys[i]
                i += 1
            elif k < len(zs):
                gz.append(k)
                pz *= zs[k]
                k += 1
            else:
                return None
        out.append((gy, gz))
    return out


def _reshape_first(net: Network, r: Operation) -> bool:
    """Reshape(Transpose_p(x)) -> Transpose_q(Reshape'(x)) (the Reshape's output value kept)."""
    t = r.inputs[0].producer
    y = r.inputs[0]
    if t is None or t.op_type != "Transpose" or y.consumers != [r]:
        return False
    x, z = t.inputs[0], r.outputs[0]
    p = [int(a) % len(x.shape) for a in t.attrs["perm"]]
    groups = _groups(tuple(y.shape), tuple(z.shape))
    then = z.consumers[0] if len(z.consumers) == 1 else None
    if groups is None or any(sum(z.shape[k] > 1 for k in gz) > 1 for _, gz in groups) or (
            all(sum(y.shape[j] > 1 for j in gy) < 2 for gy, _ in groups) and
            (then is None or then.op_type != "Transpose")):
        return False  # a split (a channel shuffle's first step), or only unit axes moved
        # with no Transpose after it to compose with
    for gy, _ in groups:  # each run of y's axes is a run of x's, in order
        src = [p[j] for j in gy]
        if src != list(range(src[0], src[0] + len(src))):
            return False
    order = sorted(range(len(groups)), key=lambda g: p[groups[g][0][0]])
    shape, at = [], {}
    for g in order:
        for kz in groups[g][1]:
            at[kz] = len(shape)
            shape.append(int(z.shape[kz]))
    q = [at[kz] for kz in range(len(z.shape))]
    if q == list(range(len(q))):
        return False  # nothing would move: the Reshape already reads x's order
    mid = Value(net.newVId(), TensorType(z.dtype.element_dtype, shape), f"{z.name}:unmoved"
                if z.name else "")
    first = OP_REGISTRY["Reshape"]([x], [mid], op_id=r.op_id, name=r.name, shape=shape)
    move = OP_REGISTRY["Transpose"]([mid], [z], op_id=t.op_id, name=t.name, perm=q)
    net.ops.remove(t)
    i = net.ops.index(r)
    net.ops[i:i + 1] = [first, move]
    net.relink()
    return True


def _sink_below(net: Network, op: Operation) -> bool:
    """E(Transpose_p(a), ..., k) -> Transpose_p(E(a, ..., k')) (E's output value kept)."""
    if len(op.outputs) != 1:
        return False
    out = op.outputs[0]
    rank = len(out.shape)
    computed = [v for v in op.inputs if not (v.is_params and v.hasData())]
    moves = [v.producer for v in computed]
    if not computed or any(m is None or m.op_type != "Transpose" or set(v.consumers) != {op}
                           for v, m in zip(computed, moves)):
        return False
    perms = {tuple(int(a) % rank for a in m.attrs["perm"]) for m in moves}
    if len(perms) != 1 or any(len(v.shape) != rank for v in computed):
        return False
    p = perms.pop()
    inv = tuple(int(a) for a in np.argsort(p))
    if any(v.is_params and v.hasData() and np.asarray(v.data).ndim > rank for v in op.inputs):
        return False
    ins = []
    for v in op.inputs:
        if v in computed:
            ins.append(v.producer.inputs[0])
        elif v.is_params and v.hasData():
            d = np.asarray(v.data)
            d = np.ascontiguousarray(np.transpose(d.reshape((1,) * (rank - d.ndim) + d.shape),
                                                 inv))
            ins.append(Params(net.newVId(), TensorType(v.dtype.element_dtype, d.shape), d,
                              v.name, v.mtype, dict(v.tags)))
        else:
            ins.append(v)
    if op.op_type == "Concat":
        op.attrs["axis"] = p[int(op.attrs.get("axis", -1)) % rank]
    op.inputs = ins
    t = op.infer_types([v.dtype for v in ins])[0]
    unmoved = Value(net.newVId(), t, f"{out.name}:unmoved" if out.name else "")
    op.outputs = [unmoved]
    first = moves[0]
    back = OP_REGISTRY["Transpose"]([unmoved], [out], op_id=first.op_id, name=first.name,
                                    perm=list(p))
    for m in dict.fromkeys(moves):
        net.ops.remove(m)
    net.ops.insert(net.ops.index(op) + 1, back)
    net.relink()
    return True

"""xir-level clean-up passes run on the imported network until nothing changes.

BatchNorm folds into the Conv before it, x*Sigmoid(x) becomes Silu, consecutive Transposes
and Reshapes compose (identities are bypassed), and ops nobody reads are removed.
"""

from __future__ import annotations

import numpy as np

from xir.network import Network
from xir.ops.base import OP_REGISTRY, Operation
from xir.values import Value


def _optimize(net: Network) -> None:
    changed = True
    while changed:
        changed = False
        changed |= _fold_batchnorm(net)
        changed |= _fuse_silu(net)
        changed |= _compose_moves(net)
        changed |= _remove_dead(net)
        net.relink()


def _sole_reader(v: Value, op: Operation) -> bool:
    return v.consumers == [op]


def _fold_batchnorm(net: Network) -> bool:
    changed = False
    for bn in list(net.ops):
        if bn.op_type != "BatchNorm2d":
            continue
        x = bn.inputs[0]
        conv = x.producer
        if conv is None or conv.op_type not in ("Conv2d", "ConvTranspose2d") or \
                not _sole_reader(x, bn) or not all(v.is_params and v.hasData()
                                                   for v in conv.inputs[1:] + bn.inputs[1:]):
            continue
        gamma, beta, mean, var = (v.data.astype(np.float64) for v in bn.inputs[1:])
        s = gamma / np.sqrt(var + bn.attrs["epsilon"])
        w = conv.inputs[1].data
        wd = w.astype(np.float64)
        if conv.op_type == "Conv2d":
            w2 = wd * s
        else:
            kh, kw, cin, cout_g = w.shape
            g = conv.attrs["groups"]
            w2 = (wd.reshape(kh, kw, g, cin // g, cout_g) * s.reshape(g, 1, cout_g)
                  ).reshape(w.shape)
        b = conv.inputs[2].data.astype(np.float64) if len(conv.inputs) > 2 else 0.0
        b2 = (b - mean) * s + beta
        wp = net.newParams(w2.astype(w.dtype), conv.inputs[1].name, conv.inputs[1].dtype.layout)
        bp = net.newParams(np.asarray(b2, dtype=w.dtype).reshape(-1), f"{bn.name}:bias")
        conv.inputs = [conv.inputs[0], wp, bp]
        conv.outputs = list(bn.outputs)
        net.ops.remove(bn)
        net.relink()
        changed = True
    return changed


def _fuse_silu(net: Network) -> bool:
    changed = False
    for op in list(net.ops):
        if op.op_type != "Multiply":
            continue
        a, b = op.inputs
        for x, s in ((a, b), (b, a)):
            sig = s.producer
            if sig is not None and sig.op_type == "Sigmoid" and sig.inputs[0] is x and \
                    _sole_reader(s, op):
                silu = OP_REGISTRY["Silu"]([x], list(op.outputs), op_id=op.op_id, name=op.name)
                net.ops[net.ops.index(op)] = silu
                net.relink()
                changed = True
                break
    return changed


def _compose_moves(net: Network) -> bool:
    """Transpose(Transpose) -> one Transpose, Reshape(Reshape) -> one, identities bypassed."""
    changed = False
    for op in list(net.ops):
        if op not in net.ops:
            continue
        src = op.inputs[0].producer if op.inputs else None
        if op.op_type == "Transpose":
            if src is not None and src.op_type == "Transpose":
                inner = src.attrs["perm"]
                op.inputs = [src.inputs[0]]
                op.attrs["perm"] = [inner[p] for p in op.attrs["perm"]]
                changed = True
            if op.attrs["perm"] == list(range(len(op.attrs["perm"]))):
                changed |= _bypass(net, op)
        elif op.op_type == "Reshape":
            if src is not None and src.op_type == "Reshape":
                op.inputs = [src.inputs[0]]
                changed = True
            if tuple(op.inputs[0].shape) == tuple(op.outputs[0].shape):
                changed |= _bypass(net, op)
        if changed:
            net.relink()
    return changed


def _bypass(net: Network, op: Operation) -> bool:
    """Let the readers of op's output read op's input instead."""
    src, out = op.inputs[0], op.outputs[0]
    for reader in list(out.consumers):
        reader.inputs = [src if v is out else v for v in reader.inputs]
        if reader.op_type == "Output" and out.name and src.producer is not None and \
                src.producer.op_type != "Input" and not any(
                    c.op_type == "Output" for c in src.consumers):
            src.name = out.name
    net.relink()
    return True


def _remove_dead(net: Network) -> bool:
    changed = False
    for op in reversed(list(net.ops)):
        if op.op_type in ("Input", "Output"):
            continue
        if all(not v.consumers for v in op.outputs):
            net.ops.remove(op)
            net.relink()
            changed = True
    return changed

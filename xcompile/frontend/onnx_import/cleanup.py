"""xir-level clean-up passes run on the imported network until nothing changes.

BatchNorm folds into the Conv before it, x*Sigmoid(x) becomes Silu, consecutive Transposes
and Reshapes compose (identities are bypassed), and ops nobody reads are removed.

A Reshape that only drops a unit axis sinks below the element-wise ops that read it (their
constants gain the unit axis): a 1-D Conv's result is the (N, 1, L, C) map reshaped to
(N, L, C), and the BatchNorm (a Multiply and an Add by per-channel constants) and the
activation after it then act on the NHWC map itself, where the optimize stage folds them into
the Conv2d; the Reshape meets the next 1-D op's Reshape back to (N, 1, L, C), and the two
compose into nothing. Transposes move down the same way until they meet their inverse
(`sink_transposes`: a ViT's token stream stays (N, T, C) from its patch embedding on).
"""

from __future__ import annotations

import numpy as np

from xcompile.frontend.onnx_import.sink_transposes import sink_transposes
from xcompile.refit.provenance import fold_bn_src as _fold_src
from xir.network import Network
from xir.ops.base import OP_REGISTRY, Operation
from xir.values import Params, Value


def _optimize(net: Network) -> None:
    changed = True
    while changed:
        changed = False
        changed |= _fold_batchnorm(net)
        changed |= _fuse_silu(net)
        changed |= _compose_moves(net)
        changed |= _sink_unit_reshapes(net)
        changed |= sink_transposes(net)
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
        _fold_src(conv, bn, wp, bp)
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


#: ops computed element by element, with no axis attribute: a unit axis dropped before them
#: can be dropped after them instead
_ELEMENTWISE = frozenset({"Add", "Sub", "Multiply", "Div", "Relu", "Sigmoid", "Tanh", "Silu",
                          "Gelu", "Erf", "Hardswish", "Sqrt", "Power", "Cast", "Unary",
                          "Binary", "PRelu"})


def _dropped_unit_axis(src: tuple[int, ...], dst: tuple[int, ...]) -> int | None:
    """The axis `a` when `dst` is `src` without its unit axis `a` (not the last axis: the
    channels stay last), else None."""
    if len(src) != len(dst) + 1:
        return None
    for a in range(len(src) - 1):
        if src[a] == 1 and src[:a] + src[a + 1:] == dst:
            return a
    return None


def _sink_unit_reshapes(net: Network) -> bool:
    """``E(Reshape(x))`` -> ``Reshape(E(x))`` for an element-wise E (`_ELEMENTWISE`) whose
    every computed input is such a Reshape, read by E alone, of one unit axis dropped at the
    same place; E's constants get that axis (numpy broadcasting gives the same values), E's
    output value (its v_id) is the new Reshape's."""
    changed = False
    for op in list(net.ops):
        if op not in net.ops or op.op_type not in _ELEMENTWISE:
            continue
        out = op.outputs[0]
        computed = [v for v in op.inputs if not (v.is_params and v.hasData())]
        reshapes = [v.producer for v in computed]
        if not computed or len(op.outputs) != 1 or any(
                r is None or r.op_type != "Reshape" or set(v.consumers) != {op}
                for v, r in zip(computed, reshapes)):
            continue
        src = reshapes[0].inputs[0]
        axis = _dropped_unit_axis(tuple(src.shape), tuple(computed[0].shape))
        if axis is None or tuple(out.shape) != tuple(computed[0].shape) or any(
                tuple(r.inputs[0].shape) != tuple(src.shape) or
                tuple(v.shape) != tuple(computed[0].shape) for v, r in zip(computed, reshapes)):
            continue
        if any(v.is_params and v.hasData() and np.asarray(v.data).ndim > len(out.shape)
               for v in op.inputs):
            continue
        ins = []
        for v in op.inputs:
            if v in computed:
                ins.append(v.producer.inputs[0])
            elif v.is_params and v.hasData():
                d = np.asarray(v.data)
                d = np.expand_dims(d.reshape((1,) * (len(out.shape) - d.ndim) + d.shape), axis)
                ins.append(Params(net.newVId(), _retyped(v, d.shape), d, v.name, v.mtype,
                                  dict(v.tags)))
            else:
                ins.append(v)
        op.inputs = ins
        t = op.infer_types([v.dtype for v in ins])[0]
        wide = net.newValue(t, f"{out.name}:{len(src.shape)}d" if out.name else "")
        op.outputs = [wide]
        back = OP_REGISTRY["Reshape"]([wide], [out], op_id=reshapes[0].op_id,
                                      name=reshapes[0].name, shape=list(out.shape))
        for r in dict.fromkeys(reshapes):
            net.ops.remove(r)
        net.ops.insert(net.ops.index(op) + 1, back)
        net.relink()
        changed = True
    return changed


def _retyped(v: Value, shape: tuple[int, ...]):
    """`v`'s tensor type with another shape (any layout)."""
    from xir.types import TensorType

    return TensorType(v.dtype.element_dtype, shape)


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

"""Graph passes of the compile pipeline; here the "optimize" stage (parse -> *optimize* ->
quantize -> adapt -> generate).

`optimize(net)` returns a new network and leaves its input untouched:

0. decomposed activations: HardSwish as exporters write it (``x * relu6(x + 3) / 6``, in
   either association) becomes one Hardswish op and GELU (``x * (1 + erf(x / sqrt 2)) / 2``,
   or its tanh form ``x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x**3))) / 2``) one Gelu op:
   a lookup table each once quantized; LayerNorm written out (ReduceMean, Sub, Pow 2,
   ReduceMean, Add eps, Sqrt, Div, then Mul gamma and Add beta) becomes one LayerNorm;
   an LRN becomes ops the NPUs run (`x * x`, the channel window's sum as a 1x1 Conv2d with a
   band of ones, the denominator's power as a Power table, `x * d`); the square root of a
   square, ``sqrt(x * x)`` or ``sqrt(max(x * x, c))`` (keras' magnitude with a floor), becomes
   ``|x|`` or ``max(|x|, sqrt c)``: the same values, without the square that int8 cannot hold
   (it rounds every |x| below 1/16 of the largest to 0);
1. per-channel affines: a Multiply or Add of a 4-D map by a constant that varies along C only
   (exporters write BatchNorm so, and Caffe2's scale layers) becomes a BatchNorm2d, and a
   BatchNorm2d read only by another composes with it into one (`y = x * a + b`, in float64);
2. a standalone BatchNorm2d whose input is a Conv2d / ConvTranspose2d output read by nothing
   else is folded into the convolution's weights and bias (`w' = w * a`, `b' = (b - mean) * a +
   beta`, `a = gamma / sqrt(var + eps)`, computed in float64, stored float32);
3. a BatchNorm2d that follows no convolution (after a Concat, an input, a pool) becomes a
   depthwise 1x1 Conv2d with weight `a` and bias `b`, which the NPUs run;
4. a Relu (threshold 0) that is the only reader of a Conv2d / ConvTranspose2d / Matmul / Add
   without a folded activation becomes that op's `act` / `act_alpha` / `act_max`;
5. Reshapes that keep the shape and Transposes with the identity permutation are removed.

Before all of them, `xcompile.slice_passes.fold_slices` turns index picks into code moves the
chips run: a Gather of evenly stepping constant indices becomes a Slice, a Slice of a
Reshape-split axis slices the unsplit one, and Slices that tile an axis become one Split.

Ids are stable: a fused op keeps the producer's `op_id` and outputs the *last* value of the
chain (the BatchNorm2d's or the Relu's output, with its `v_id`), so a value of the optimized
network has the same `v_id` as the value it equals in the original one. Removed ops leave
`tags["fused_op_ids"]` on the op that absorbed them.
"""

from __future__ import annotations

import logging

import numpy as np

from xcompile.refit.provenance import SRC, src_of
from xcompile.refit.provenance import fold_bn_src as _fold_src
from xcompile.slice_passes import fold_slices
from xir.network import Network
from xir.ops.base import Operation
from xir.values import Params, Value

log = logging.getLogger(__name__)

__all__ = ["optimize", "copy_network"]

_ACT_HOSTS = ("Conv2d", "ConvTranspose2d", "Matmul", "Add")


def copy_network(net: Network) -> Network:
    """A deep copy: new Value/Params/Operation objects with the same ids (data copied)."""
    new = Network(net.name, framework_kind=net.framework_kind,
                  framework_version=net.framework_version, icraft_version=net.icraft_version,
                  icraft_xir_version=net.icraft_xir_version, tags=dict(net.tags))
    vmap: dict[int, Value] = {}

    def cv(v: Value) -> Value:
        got = vmap.get(id(v))
        if got is None:
            if v.is_params:
                got = Params(v.v_id, v.dtype, None if v.data is None else v.data.copy(), v.name,
                             v.mtype, dict(v.tags))
            else:
                got = Value(v.v_id, v.dtype, v.name, v.mtype, dict(v.tags))
            vmap[id(v)] = got
        return got

    for op in net.ops:
        c = op.clone_with([cv(v) for v in op.inputs], [cv(v) for v in op.outputs])
        c.tags = dict(op.tags)
        c.attrs = {k: (list(x) if isinstance(x, list) else x) for k, x in op.attrs.items()}
        new.ops.append(c)
    new.relink()
    new.reserveIds(max(net.opIds(), default=-1),
                   max((v.v_id for op in net.ops for v in op.inputs + op.outputs), default=-1))
    new.reserveIds(v_id=net.next_v_id - 1)
    return new


def _reader(v: Value, outputs: set[int], op_type: str | None = None) -> Operation | None:
    """The single op reading `v` (of `op_type`, when given), if exactly one does and `v` is
    not a network output."""
    if v.v_id in outputs or len(v.consumers) != 1:
        return None
    c = v.consumers[0]
    return c if op_type is None or c.op_type == op_type else None


def _replace(net: Network, old: Operation, new: Operation, gone: list[Operation] = ()
             ) -> None:
    """`new` takes `old`'s place in the network order; the ops in `gone` leave it."""
    for op in gone:
        net.ops.remove(op)
    net.ops[net.ops.index(old)] = new
    net.relink()


def _fuse_tag(host: Operation, gone: Operation) -> None:
    host.tags.setdefault("fused_op_ids", [])
    host.tags["fused_op_ids"] = list(host.tags["fused_op_ids"]) + [gone.op_id]


def _bypass(net: Network, host: Operation, gone: Operation) -> None:
    """`host` takes over `gone`'s output value (v_id kept); `gone` leaves the network."""
    host.outputs = [gone.outputs[0]]
    net.ops.remove(gone)
    net.relink()


def _fold_bn(net: Network, conv: Operation, bn: Operation) -> bool:
    if any(not (p.is_params and p.data is not None) for p in bn.inputs[1:5]):
        return False
    w_p = conv.inputs[1]
    if not (w_p.is_params and w_p.data is not None and w_p.dtype.numpy_dtype == np.float32):
        return False
    gamma, beta, mean, var = (np.asarray(p.data, np.float64) for p in bn.inputs[1:5])
    a = gamma / np.sqrt(var + float(bn.attrs.get("epsilon", 1e-5)))
    w = np.asarray(w_p.data, np.float64)
    cout = bn.outputs[0].shape[3]
    if conv.op_type == "Conv2d":
        w = w * a  # HWIO: O is the last axis
    else:  # ConvTranspose2d (kh, kw, cin, cout/g): output channel = group * og + o
        kh, kw, cin, og = w.shape
        g = int(conv.attrs.get("groups", 1))
        w = (w.reshape(kh, kw, g, cin // g, og) * a.reshape(g, 1, og)).reshape(kh, kw, cin, og)
    b = np.asarray(conv.inputs[2].data, np.float64) if len(conv.inputs) > 2 else np.zeros(cout)
    b = (b - mean) * a + beta
    new_w = Params(w_p.v_id, w_p.dtype, w.astype(np.float32), w_p.name, w_p.mtype,
                   dict(w_p.tags))
    if len(conv.inputs) > 2:
        bp = conv.inputs[2]
        new_b = Params(bp.v_id, bp.dtype, b.astype(np.float32), bp.name, bp.mtype, dict(bp.tags))
    else:
        new_b = net.newParams(b.astype(np.float32), f"{conv.name or 'conv'}.bias")
    _fold_src(conv, bn, new_w, new_b)
    conv.inputs = [conv.inputs[0], new_w, new_b]
    _fuse_tag(conv, bn)
    _bypass(net, conv, bn)
    return True


def _affine_of(op: Operation) -> tuple[np.ndarray, np.ndarray] | None:
    """(a, b) per channel when `op` computes ``x * a + b`` on a 4-D NHWC map `x`: a BatchNorm2d
    with constant statistics, or a Multiply / Add by a constant that varies along C only."""
    x = next((v for v in op.inputs if not v.is_params), None)
    if x is None or len(x.shape) != 4:
        return None
    c = x.shape[3]
    if op.op_type == "BatchNorm2d":
        if any(not (p.is_params and p.data is not None) for p in op.inputs[1:5]):
            return None
        gamma, beta, mean, var = (np.asarray(p.data, np.float64) for p in op.inputs[1:5])
        a = gamma / np.sqrt(var + float(op.attrs.get("epsilon", 1e-5)))
        return a, beta - mean * a
    if op.op_type not in ("Multiply", "Add") or len(op.inputs) != 2 or op.attrs.get(
            "act", "none") != "none":
        return None
    if tuple(op.outputs[0].shape) != tuple(x.shape):
        return None
    kd = _channel_const(_other(op, x), c)
    if kd is None:
        return None
    if op.op_type == "Multiply":
        return kd, np.zeros(c)
    return np.ones(c), kd


def _channel_const(k: Value | None, c: int) -> np.ndarray | None:
    """A constant that varies along the last (channel) axis only, as `c` float64 values."""
    if k is None or not (k.is_params and k.data is not None):
        return None
    kd = np.asarray(k.data, np.float64)
    if kd.size not in (1, c) or (kd.ndim and any(d != 1 for d in kd.shape[:-1])):
        return None
    return np.broadcast_to(kd.reshape(-1), (c,)).copy()


def _set_affine(net: Network, op: Operation, a: np.ndarray, b: np.ndarray) -> Operation:
    """Replace `op` by a BatchNorm2d computing ``x * a + b`` (same op_id, same output value)."""
    from xir.ops.nn import BatchNorm2d

    c = a.size
    params = [net.newParams(v.astype(np.float32), f"{op.name or 'affine'}.{n}")
              for n, v in (("scale", a), ("bias", b), ("mean", np.zeros(c)),
                           ("var", np.ones(c)))]
    x = next(v for v in op.inputs if not v.is_params)
    bn = BatchNorm2d([x] + params, list(op.outputs), op_id=op.op_id, name=op.name, epsilon=0.0)
    bn.tags = dict(op.tags)
    _replace(net, op, bn)
    return bn


def _as_depthwise(net: Network, bn: Operation) -> None:
    """A BatchNorm2d as the depthwise 1x1 Conv2d with weight `a` and bias `b`."""
    from xir.ops.nn import Conv2d

    a, b = _affine_of(bn)
    c = a.size
    w = net.newParams(a.reshape(1, 1, 1, c).astype(np.float32), f"{bn.name or 'bn'}.weight",
                      layout="HWIO")
    bias = net.newParams(b.astype(np.float32), f"{bn.name or 'bn'}.bias", layout="C")
    conv = Conv2d([bn.inputs[0], w, bias], list(bn.outputs), op_id=bn.op_id, name=bn.name,
                  groups=c)
    conv.tags = dict(bn.tags, affine="BatchNorm2d")
    _replace(net, bn, conv)


def _scalar(v: Value | None) -> float | None:
    """The value of a constant holding one number, else None."""
    if v is not None and v.is_params and v.data is not None and np.asarray(v.data).size == 1:
        return float(np.asarray(v.data).ravel()[0])
    return None


def _other(op: Operation, v: Value) -> Value | None:
    """The input of binary `op` that is not `v`."""
    ins = list(op.inputs)
    if len(ins) != 2 or (ins[0] is v) == (ins[1] is v):
        return None
    return ins[1] if ins[0] is v else ins[0]


def _fold_hardswish(net: Network, add: Operation, outputs: set[int]) -> bool:
    """``x * relu6(x + 3) / 6`` or ``x * (relu6(x + 3) / 6)`` from `add` = ``x + 3`` on:
    one Hardswish op (the last op's output value and the Add's op_id kept)."""
    from xir.ops.elementwise import Hardswish

    if add.op_type != "Add" or len(add.inputs) != 2 or add.attrs.get("act", "none") != "none":
        return False
    x = next((v for v in add.inputs if not v.is_params), None)
    k = _other(add, x) if x is not None else None
    if k is None or _scalar(k) != 3.0:
        return False
    relu = _reader(add.outputs[0], outputs, "Relu")
    if relu is None or float(relu.attrs.get("max_value", 0)) != 6.0 or \
            float(relu.attrs.get("alpha", 0)) != 0.0 or \
            float(relu.attrs.get("threshold", 0)) != 0.0:
        return False
    r = relu.outputs[0]
    m1 = _reader(r, outputs, "Multiply")
    if m1 is None:
        return False
    o = _other(m1, r)
    if o is x:  # x * relu6(x + 3), then / 6
        m2 = _reader(m1.outputs[0], outputs, "Multiply")
        ok = m2 is not None and _near(_other(m2, m1.outputs[0]), 1 / 6)
    else:  # relu6(x + 3) / 6, then x *
        ok = _near(o, 1 / 6)
        m2 = _reader(m1.outputs[0], outputs, "Multiply") if ok else None
        ok = ok and m2 is not None and _other(m2, m1.outputs[0]) is x
    if not ok:
        return False
    hs = Hardswish([x], list(m2.outputs), op_id=add.op_id, name=m2.name or add.name)
    hs.tags = {"fused_op_ids": [relu.op_id, m1.op_id, m2.op_id]}
    _replace(net, add, hs, [relu, m1, m2])
    return True


def _near(v: Value | None, want: float) -> bool:
    got = _scalar(v)
    return got is not None and abs(got - want) <= 1e-5 * abs(want)


def _gelu_tail(x: Value, inner: Value, outputs: set[int], head: list[Operation]
               ) -> tuple[list[Operation], Operation] | None:
    """``x * (1 + inner) * 0.5`` after `inner` (erf or tanh of the scaled `x`), either order of
    the two final products, as torch.onnx writes it: (the ops it takes, the last one)."""
    add = _reader(inner, outputs, "Add")
    if add is None or add.attrs.get("act", "none") != "none" or not _near(_other(add, inner), 1.0):
        return None
    m1 = _reader(add.outputs[0], outputs, "Multiply")
    if m1 is None:
        return None
    o = _other(m1, add.outputs[0])
    half = next((c for c in x.consumers if c.op_type == "Multiply" and c not in [m1, *head]
                 and _near(_other(c, x), 0.5)), None)
    if o is x:  # (x * (1 + inner)) * 0.5
        m2 = _reader(m1.outputs[0], outputs, "Multiply")
        if m2 is None or not _near(_other(m2, m1.outputs[0]), 0.5):
            return None
        return [add, m1, m2], m2
    if o is not None and half is not None and o is half.outputs[0] and \
            len(o.consumers) == 1:  # (x * 0.5) * (1 + inner)
        return [add, half, m1], m1
    return None


def _make_gelu(net: Network, at: Operation, x: Value, gone: list[Operation], last: Operation,
               approximate: str) -> bool:
    from xir.ops.elementwise import Gelu

    g = Gelu([x], list(last.outputs), op_id=at.op_id, name=last.name or at.name,
             approximate=approximate)
    g.tags = {"fused_op_ids": [op.op_id for op in gone]}
    _replace(net, at, g, gone)
    return True


def _fold_gelu(net: Network, erf: Operation, outputs: set[int]) -> bool:
    """``x * (1 + erf(x * 1/sqrt 2)) * 0.5`` around `erf`: one Gelu op (the last output and
    Erf's op_id kept)."""
    scale = erf.inputs[0].producer
    if scale is None or scale.op_type != "Multiply" or len(erf.inputs[0].consumers) != 1:
        return False
    x = next((v for v in scale.inputs if not v.is_params), None)
    if x is None or not _near(_other(scale, x), 2 ** -0.5):
        return False
    tail = _gelu_tail(x, erf.outputs[0], outputs, [scale])
    return tail is not None and _make_gelu(net, erf, x, [scale, *tail[0]], tail[1], "none")


def _cube_of(v: Value, outputs: set[int]) -> tuple[Value, list[Operation]] | None:
    """(x, the ops) when `v` is ``x ** 3``: a Power 3 or ``x * x * x`` in either grouping."""
    p = v.producer
    if p is None or v.v_id in outputs or len(v.consumers) != 1:
        return None
    if p.op_type == "Power" and float(p.attrs["power"]) == 3.0 and \
            float(p.attrs["scale"]) == 1.0 and float(p.attrs["shift"]) == 0.0:
        return p.inputs[0], [p]
    if p.op_type == "Multiply" and len(p.inputs) == 2 and not any(i.is_params for i in p.inputs):
        for sq, x in (p.inputs, p.inputs[::-1]):
            q = sq.producer
            if q is not None and q.op_type == "Multiply" and len(sq.consumers) == 1 and \
                    q.inputs[0] is x and q.inputs[1] is x:
                return x, [q, p]
    return None


def _fold_gelu_tanh(net: Network, tanh: Operation, outputs: set[int]) -> bool:
    """GELU's tanh form, ``x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3))) * 0.5``
    (torch's approximate="tanh"), around `tanh`: one Gelu(approximate="tanh")."""
    u = tanh.inputs[0]
    scale = u.producer
    if scale is None or scale.op_type != "Multiply" or len(u.consumers) != 1:
        return False
    v = next((i for i in scale.inputs if not i.is_params), None)
    if v is None or not _near(_other(scale, v), (2 / np.pi) ** 0.5) or len(v.consumers) != 1:
        return False
    add = v.producer
    if add is None or add.op_type != "Add" or len(add.inputs) != 2:
        return False
    for x, w in (add.inputs, add.inputs[::-1]):
        mul = w.producer
        if w.is_params or mul is None or mul.op_type != "Multiply" or len(w.consumers) != 1:
            continue
        cube = next((i for i in mul.inputs if not i.is_params), None)
        if cube is None or not _near(_other(mul, cube), 0.044715):
            continue
        found = _cube_of(cube, outputs)
        if found is None or found[0] is not x:
            continue
        head = [*found[1], mul, add, scale]
        tail = _gelu_tail(x, tanh.outputs[0], outputs, head)
        if tail is not None:
            return _make_gelu(net, tanh, x, [*head, *tail[0]], tail[1], "tanh")
    return False


def _sqrt_as_table(net: Network, root: Operation) -> bool:
    """A float32 Sqrt left after the patterns that read it (LayerNorm, ``sqrt(x * x)``) as
    ``Unary(func="sqrt")``: the same float result, and once quantized a lookup table the chips
    run like Exp or Log (the Sqrt op itself has no integer form)."""
    from xir.ops.pointwise import Unary

    x = root.inputs[0]
    if x.is_params or x.dtype.numpy_dtype != np.float32:
        return False
    op = Unary([x], list(root.outputs), op_id=root.op_id, name=root.name, func="sqrt")
    op.tags = dict(root.tags)
    net.ops[net.ops.index(root)] = op
    net.relink()
    return True


def _fold_sqrt_of_square(net: Network, root: Operation, outputs: set[int]) -> bool:
    """``sqrt(x * x)`` -> ``|x|`` and ``sqrt(max(x * x, c))`` with a constant c >= 0 ->
    ``max(|x|, sqrt c)``, around `root` (the Sqrt; its output value and op_id kept). An exact
    identity that removes the square: quantized, ``x * x`` needs twice the bits of x (int8
    rounds every |x| below 1/16 of the largest to 0 before the Sqrt), ``|x|`` none more, and
    Abs (a table) and Max run on the chips where the float Sqrt stays on the host."""
    from xir.ops.pointwise import Binary, Unary

    v = root.inputs[0]
    floor = v.producer
    c = None
    if floor is not None and floor.op_type == "Binary" and floor.attrs["func"] == "max" and \
            _reader(v, outputs) is root:
        sq = next((i for i in floor.inputs if not i.is_params), None)
        k = _other(floor, sq) if sq is not None else None
        if k is None or not (k.is_params and k.data is not None) or \
                np.asarray(k.data).size != 1 or not float(np.asarray(k.data).ravel()[0]) >= 0:
            return False
        c, v = k, sq
    mul = v.producer
    if mul is None or mul.op_type != "Multiply" or len(mul.inputs) != 2 or \
            mul.inputs[0] is not mul.inputs[1] or mul.inputs[0].is_params or \
            _reader(v, outputs) is not (root if c is None else floor):
        return False
    x = mul.inputs[0]
    if x.dtype.numpy_dtype != np.float32 or tuple(x.shape) != tuple(root.outputs[0].shape):
        return False
    name = root.name or f"sqrt{root.op_id}"
    gone = [mul] + ([floor] if c is not None else [])
    if c is None:
        ops = [Unary([x], list(root.outputs), op_id=root.op_id, name=name, func="abs")]
    else:
        a = Value(net.newVId(), x.dtype, f"{name}.abs")
        k = np.sqrt(np.asarray(c.data, np.float64)).astype(np.float32)
        ops = [Unary([x], [a], op_id=net.newOpId(), name=f"{name}.abs", func="abs"),
               Binary([a, net.newParams(k.reshape(np.asarray(c.data).shape),
                                        f"{name}.floor")],
                      list(root.outputs), op_id=root.op_id, name=name, func="max")]
    for op in ops:
        op.tags = dict(root.tags, fused_op_ids=[g.op_id for g in gone], decomposed="Sqrt")
    for g in gone:
        net.ops.remove(g)
    i = net.ops.index(root)
    net.ops[i:i + 1] = ops
    net.relink()
    return True


def _is_mean(op: Operation) -> bool:
    """A mean over axes: the ONNX importer's Reduce(func="mean") or an older ReduceMean."""
    return op.op_type == "ReduceMean" or (op.op_type == "Reduce" and op.attrs["func"] == "mean")


def _fold_layernorm(net: Network, mean: Operation, outputs: set[int]) -> bool:
    """``(x - mean(x)) / sqrt(mean((x - mean(x))**2) + eps) [* gamma] [+ beta]`` over the last
    axes, from `mean` = the first ReduceMean on: one LayerNorm (op_id of `mean`)."""
    from xir.ops.nn import LayerNorm

    x = mean.inputs[0]
    axes = sorted(int(a) % len(x.shape) for a in mean.attrs["axes"]) or list(range(len(x.shape)))
    if not mean.attrs.get("keepdims", True) or axes != list(range(axes[0], len(x.shape))):
        return False
    sub = _reader(mean.outputs[0], outputs, "Sub")
    if sub is None or list(sub.inputs) != [x, mean.outputs[0]]:
        return False
    d = sub.outputs[0]
    readers = {op.op_type: op for op in d.consumers}
    sq, div = readers.get("Multiply"), readers.get("Div")
    if len(d.consumers) != 2 or sq is None or div is None or list(sq.inputs) != [d, d] or \
            div.inputs[0] is not d:
        return False
    var = _reader(sq.outputs[0], outputs)
    if var is None or not _is_mean(var) or \
            (sorted(int(a) % len(x.shape) for a in var.attrs["axes"]) or
             list(range(len(x.shape)))) != axes or \
            not var.attrs.get("keepdims", True):
        return False
    add = _reader(var.outputs[0], outputs, "Add")
    eps = _other(add, var.outputs[0]) if add is not None else None
    if eps is None or _scalar(eps) is None or add.attrs.get("act", "none") != "none":
        return False
    root = _reader(add.outputs[0], outputs, "Sqrt")
    if root is None or len(root.outputs[0].consumers) != 1 or div.inputs[1] is not root.outputs[0]:
        return False
    gone, last = [sub, sq, var, add, root, div], div
    norm = tuple(x.shape[axes[0]:])
    params: list[Value] = []
    for op_type in ("Multiply", "Add"):
        nxt = _reader(last.outputs[0], outputs, op_type)
        k = _other(nxt, last.outputs[0]) if nxt is not None else None
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
                   axis=axes[0], epsilon=float(_scalar(eps)))
    ln.tags = {"fused_op_ids": [op.op_id for op in gone]}
    _replace(net, mean, ln, gone)
    return True


def _lrn_as_chip_ops(net: Network, lrn: Operation) -> bool:
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


def _fold_relu(net: Network, host: Operation, relu: Operation) -> bool:
    if float(relu.attrs.get("threshold", 0.0)) != 0.0 or host.attrs.get("act", "none") != "none":
        return False
    host.attrs["act"] = "relu"
    host.attrs["act_alpha"] = float(relu.attrs.get("alpha", 0.0))
    host.attrs["act_max"] = float(relu.attrs.get("max_value", float("inf")))
    _fuse_tag(host, relu)
    _bypass(net, host, relu)
    return True


def _fold_matmul_bias(net: Network, mm: Operation, add: Operation) -> bool:
    """``Matmul(x, W) + b`` with a constant b along the output columns: b becomes the
    Matmul's bias (what torch.onnx writes for nn.Linear on a 3-D input)."""
    if len(mm.inputs) != 2 or not mm.inputs[1].is_params or add.attrs.get("act", "none") != \
            "none" or mm.attrs.get("act", "none") != "none":
        return False
    y = mm.outputs[0]
    if tuple(add.outputs[0].shape) != tuple(y.shape) or not y.shape:
        return False
    kd = _channel_const(_other(add, y), int(y.shape[-1]))
    if kd is None:
        return False
    bias = net.newParams(kd.astype(np.float32), f"{mm.name or 'matmul'}.bias", layout="C")
    k_src = src_of(_other(add, y))
    if k_src is not None and "init" in k_src:  # provenance for a refit: the flat constant
        bias.tags[SRC] = {**k_src, "flat": True}
    mm.inputs = list(mm.inputs) + [bias]
    _fuse_tag(mm, add)
    _bypass(net, mm, add)
    return True


def _fold_transpose_into_matmul(net: Network, tr: Operation, outputs: set[int]) -> bool:
    """A Transpose that swaps the last two axes and feeds only a Matmul's B becomes the
    Matmul's transpose_b (``Q @ K^T`` of attention; the chips read K as stored). A transposed
    A is left alone: the chips run no transpose_a."""
    perm = list(tr.attrs.get("perm") or [])
    n = len(perm)
    if n < 2 or perm != list(range(n - 2)) + [n - 1, n - 2] or tr.inputs[0].is_params:
        return False
    mm = _reader(tr.outputs[0], outputs, "Matmul")
    if mm is None or mm.inputs[0] is tr.outputs[0] or mm.inputs[1] is not tr.outputs[0]:
        return False
    mm.inputs = [mm.inputs[0], tr.inputs[0]] + list(mm.inputs[2:])
    mm.attrs["transpose_b"] = not bool(mm.attrs.get("transpose_b", False))
    _fuse_tag(mm, tr)
    net.ops.remove(tr)
    net.relink()
    return True


def _shuffle_axis(r1: Operation, outputs: set[int]) -> tuple[int, int, Operation] | None:
    """(axis, groups, last Reshape) when `r1` starts Reshape -> Transpose -> Reshape that
    splits one axis into (g, n), swaps the two and merges them back: a channel shuffle."""
    x, s = tuple(r1.inputs[0].shape), tuple(r1.outputs[0].shape)
    if r1.inputs[0].is_params or len(s) != len(x) + 1:
        return None
    a = next((i for i in range(len(x)) if x[i] != s[i]), len(x) - 1)
    if x[:a] != s[:a] or x[a + 1:] != s[a + 2:] or s[a] * s[a + 1] != x[a] or s[a] < 2:
        return None
    tr = _reader(r1.outputs[0], outputs, "Transpose")
    perm = list(range(len(s)))
    perm[a], perm[a + 1] = a + 1, a
    if tr is None or [p % len(s) for p in tr.attrs.get("perm") or []] != perm:
        return None
    r2 = _reader(tr.outputs[0], outputs, "Reshape")
    if r2 is None or tuple(r2.outputs[0].shape) != x:
        return None
    return a, int(s[a]), r2


def _fold_channel_shuffle(net: Network, r1: Operation, outputs: set[int]) -> bool:
    """ShuffleNet's Reshape -> Transpose -> Reshape as one ChannelShuffle on the NHWC map:
    directly when it shuffles the last axis, or, on the NCHW view the importer makes of an
    NCHW model, with the Transposes on either side (NHWC -> NCHW, NCHW -> NHWC) folded away."""
    from xir.ops.shape import ChannelShuffle, Transpose

    found = _shuffle_axis(r1, outputs)
    if found is None:
        return False
    a, g, r2 = found
    x, y = r1.inputs[0], r2.outputs[0]
    gone = [r1, r1.outputs[0].consumers[0], r2]
    back = None  # NHWC -> NCHW after the shuffle, when the NCHW value is not read as NHWC
    if a != len(x.shape) - 1:
        t1, t3 = x.producer, _reader(y, outputs, "Transpose")
        if a != 1 or len(x.shape) != 4 or t1 is None or t1.op_type != "Transpose" or \
                list(t1.attrs.get("perm") or []) != [0, 3, 1, 2] or len(x.consumers) != 1:
            return False
        gone = [t1] + gone
        if t3 is not None and list(t3.attrs.get("perm") or []) == [0, 2, 3, 1]:
            gone.append(t3)
            x, y = t1.inputs[0], t3.outputs[0]
        else:
            x, nchw = t1.inputs[0], y
            y = Value(net.newVId(), x.dtype, f"{r1.name or 'shuffle'}.nhwc")
            back = Transpose([y], [nchw], op_id=net.newOpId(), name=f"{r1.name}.nchw",
                             perm=[0, 3, 1, 2])
    shuffle = ChannelShuffle([x], [y], op_id=r1.op_id, name=r1.name, groups=g)
    shuffle.tags = dict(r1.tags, fused_op_ids=[op.op_id for op in gone if op is not r1])
    _replace(net, gone[0], shuffle, gone[1:])
    if back is not None:
        net.ops.insert(net.ops.index(shuffle) + 1, back)
        net.relink()
    return True


def _is_noop(op: Operation) -> bool:
    if op.op_type == "Reshape":
        return tuple(op.inputs[0].shape) == tuple(op.outputs[0].shape)
    if op.op_type == "Transpose":
        perm = list(op.attrs.get("perm") or [])
        return bool(perm) and perm == list(range(len(perm)))
    return False


def optimize(net: Network) -> Network:
    """The optimize stage: affine merging, BN folding (into a convolution, else as a depthwise
    convolution), Relu folding, no-op Reshape/Transpose removal (a new network)."""
    out = copy_network(net)
    n_moves = fold_slices(out)
    outputs = {v.v_id for v in out.outputs()}
    changed = True
    n_bn = n_relu = n_noop = 0
    n_affine = n_dw = n_act = 0
    for op in list(out.ops):  # 0. decomposed activations
        if op in out.ops and op.op_type == "Add" and _fold_hardswish(out, op, outputs):
            n_act += 1
        elif op in out.ops and op.op_type == "Erf" and _fold_gelu(out, op, outputs):
            n_act += 1
        elif op in out.ops and op.op_type == "Tanh" and _fold_gelu_tanh(out, op, outputs):
            n_act += 1
        elif op in out.ops and _is_mean(op) and _fold_layernorm(out, op, outputs):
            n_act += 1
        elif op in out.ops and op.op_type == "LRN" and _lrn_as_chip_ops(out, op):
            n_act += 1
        elif op in out.ops and op.op_type == "Sqrt" and _fold_sqrt_of_square(out, op, outputs):
            n_act += 1
    for op in list(out.ops):  # the Sqrts no pattern took: tables once quantized
        if op.op_type == "Sqrt" and _sqrt_as_table(out, op):
            n_act += 1
    for op in list(out.ops):  # channel shuffles written as Reshape -> Transpose -> Reshape
        if op in out.ops and op.op_type == "Reshape" and _fold_channel_shuffle(out, op, outputs):
            n_act += 1
    for op in list(out.ops):  # 1. constant per-channel Multiply / Add as BatchNorm2d
        if op.op_type in ("Multiply", "Add") and (ab := _affine_of(op)) is not None:
            _set_affine(out, op, *ab)
            n_affine += 1
    while changed:
        changed = False
        for op in list(out.ops):
            if op not in out.ops:
                continue
            if op.op_type == "BatchNorm2d":  # 1. compose consecutive affines
                reader = _reader(op.outputs[0], outputs, "BatchNorm2d")
                first = _affine_of(op)
                second = _affine_of(reader) if reader is not None else None
                if first is not None and second is not None:
                    (a1, b1), (a2, b2) = first, second
                    bn = _set_affine(out, op, a1 * a2, b1 * a2 + b2)
                    _fuse_tag(bn, reader)
                    _bypass(out, bn, reader)
                    n_affine += 1
                    changed = True
                    continue
            if op.op_type in ("Conv2d", "ConvTranspose2d") \
                    and op.attrs.get("act", "none") == "none":
                reader = _reader(op.outputs[0], outputs, "BatchNorm2d")
                if reader is not None and reader.inputs[0] is op.outputs[0] \
                        and _fold_bn(out, op, reader):
                    n_bn += 1
                    changed = True
                    continue
            if op.op_type == "Matmul":
                reader = _reader(op.outputs[0], outputs, "Add")
                if reader is not None and _fold_matmul_bias(out, op, reader):
                    n_affine += 1
                    changed = True
                    continue
            if op.op_type == "Transpose" and _fold_transpose_into_matmul(out, op, outputs):
                n_noop += 1
                changed = True
                continue
            if op.op_type in _ACT_HOSTS:
                reader = _reader(op.outputs[0], outputs, "Relu")
                if reader is not None and _fold_relu(out, op, reader):
                    n_relu += 1
                    changed = True
                    continue
            if _is_noop(op) and not op.inputs[0].is_params:
                src, dst = op.inputs[0], op.outputs[0]
                if dst.v_id in outputs:
                    if src.v_id in outputs or src.producer is None \
                            or src.producer.op_type == "Input":
                        continue
                    # keep the output's v_id: the producer writes it directly
                    prod = src.producer
                    if len(src.consumers) != 1:
                        continue
                    prod.outputs = [dst if v is src else v for v in prod.outputs]
                    out.ops.remove(op)
                    out.relink()
                else:
                    out.ops.remove(op)
                    out.replaceValue(dst, src)
                n_noop += 1
                changed = True
    for op in list(out.ops):  # 3. what did not fold into a convolution runs as one
        if op.op_type == "BatchNorm2d" and _affine_of(op) is not None:
            _as_depthwise(out, op)
            n_dw += 1
    for op in list(out.ops):  # 4. ... and takes the Relu after it
        if op.op_type == "Conv2d" and op.tags.get("affine") and op in out.ops:
            reader = _reader(op.outputs[0], outputs, "Relu")
            if reader is not None and _fold_relu(out, op, reader):
                n_relu += 1
    out.validate()
    log.debug("optimize %s: %d index picks as slices, %d activations recomposed, %d affine "
              "ops merged, %d BatchNorm2d folded, %d as depthwise convolutions, %d Relu folded, "
              "%d no-op ops removed", net.name, n_moves, n_act, n_affine, n_bn, n_dw, n_relu,
              n_noop)
    return out

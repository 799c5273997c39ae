"""Graph edits the optimize passes share: a copy of a network (its weights shared read-only),
the single reader of a value, one op taking another's place or output, and constant inputs read
as numbers."""

from __future__ import annotations

import numpy as np

from xir.network import Network
from xir.ops.base import Operation
from xir.values import Params, Value


def shared_data(data: np.ndarray | None) -> np.ndarray | None:
    """A read-only view of `data` (no bytes copied): what a copy of a network holds in place
    of its source's weights.

    No pass writes a weight in place: a pass that changes one builds new data (BatchNorm
    folding, new Params of `Network.newParams`). The view is read-only so that a writer
    that forgot this fails loudly (numpy's "assignment destination is read-only") rather
    than change the source network's weights; the source's own array keeps its flags."""
    if data is None:
        return None
    view = data.view()
    view.flags.writeable = False
    return view


def copy_network(net: Network) -> Network:
    """A copy: new Value/Params/Operation objects with the same ids; the Params' data are
    read-only views of the source's arrays (`shared_data`), not copies, since the optimize
    passes replace weights rather than write them (a vgg19's 575 MB are not copied)."""
    new = Network(net.name, framework_kind=net.framework_kind,
                  framework_version=net.framework_version, icraft_version=net.icraft_version,
                  icraft_xir_version=net.icraft_xir_version, tags=dict(net.tags))
    vmap: dict[int, Value] = {}

    def cv(v: Value) -> Value:
        got = vmap.get(id(v))
        if got is None:
            if v.is_params:
                got = Params(v.v_id, v.dtype, shared_data(v.data), v.name, v.mtype,
                             dict(v.tags))
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


def only_reader(v: Value, outputs: set[int], op_type: str | None = None) -> Operation | None:
    """The single op reading `v` (of `op_type`, when given), if exactly one does and `v` is
    not a network output."""
    if v.v_id in outputs or len(v.consumers) != 1:
        return None
    c = v.consumers[0]
    return c if op_type is None or c.op_type == op_type else None


def replace_op(net: Network, old: Operation, new: Operation, gone: list[Operation] = ()
             ) -> None:
    """`new` takes `old`'s place in the network order; the ops in `gone` leave it."""
    for op in gone:
        net.ops.remove(op)
    net.ops[net.ops.index(old)] = new
    net.relink()


def fuse_tag(host: Operation, gone: Operation) -> None:
    """Record `gone`'s op_id in `host`'s `fused_op_ids` tag."""
    host.tags.setdefault("fused_op_ids", [])
    host.tags["fused_op_ids"] = list(host.tags["fused_op_ids"]) + [gone.op_id]


def bypass(net: Network, host: Operation, gone: Operation) -> None:
    """`host` takes over `gone`'s output value (v_id kept); `gone` leaves the network."""
    host.outputs = [gone.outputs[0]]
    net.ops.remove(gone)
    net.relink()


def scalar_value(v: Value | None) -> float | None:
    """The value of a constant holding one number, else None."""
    if v is not None and v.is_params and v.data is not None and np.asarray(v.data).size == 1:
        return float(np.asarray(v.data).ravel()[0])
    return None


def other_input(op: Operation, v: Value) -> Value | None:
    """The input of binary `op` that is not `v`."""
    ins = list(op.inputs)
    if len(ins) != 2 or (ins[0] is v) == (ins[1] is v):
        return None
    return ins[1] if ins[0] is v else ins[0]


def is_near(v: Value | None, want: float) -> bool:
    """Whether `v` is a one-number constant within 1e-5 (relative) of `want`."""
    got = scalar_value(v)
    return got is not None and abs(got - want) <= 1e-5 * abs(want)

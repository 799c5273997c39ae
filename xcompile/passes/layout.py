"""Data-movement rewrites: channel shuffles written as Reshape -> Transpose -> Reshape, and
no-op Reshape / Transpose ops."""

from __future__ import annotations

from xir.network import Network
from xir.ops.base import Operation
from xir.values import Value

from .graph import only_reader, replace_op


def _shuffle_axis(r1: Operation, outputs: set[int]) -> tuple[int, int, Operation] | None:
    """(axis, groups, last Reshape) when `r1` starts Reshape -> Transpose -> Reshape that
    splits one axis into (g, n), swaps the two and merges them back: a channel shuffle."""
    x, s = tuple(r1.inputs[0].shape), tuple(r1.outputs[0].shape)
    if r1.inputs[0].is_params or len(s) != len(x) + 1:
        return None
    a = next((i for i in range(len(x)) if x[i] != s[i]), len(x) - 1)
    if x[:a] != s[:a] or x[a + 1:] != s[a + 2:] or s[a] * s[a + 1] != x[a] or s[a] < 2:
        return None
    tr = only_reader(r1.outputs[0], outputs, "Transpose")
    perm = list(range(len(s)))
    perm[a], perm[a + 1] = a + 1, a
    if tr is None or [p % len(s) for p in tr.attrs.get("perm") or []] != perm:
        return None
    r2 = only_reader(tr.outputs[0], outputs, "Reshape")
    if r2 is None or tuple(r2.outputs[0].shape) != x:
        return None
    return a, int(s[a]), r2


def fold_channel_shuffle(net: Network, r1: Operation, outputs: set[int]) -> bool:
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
        t1, t3 = x.producer, only_reader(y, outputs, "Transpose")
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
    replace_op(net, gone[0], shuffle, gone[1:])
    if back is not None:
        net.ops.insert(net.ops.index(shuffle) + 1, back)
        net.relink()
    return True


def is_noop(op: Operation) -> bool:
    """A Reshape that keeps the shape or a Transpose with the identity permutation."""
    if op.op_type == "Reshape":
        return tuple(op.inputs[0].shape) == tuple(op.outputs[0].shape)
    if op.op_type == "Transpose":
        perm = list(op.attrs.get("perm") or [])
        return bool(perm) and perm == list(range(len(perm)))
    return False

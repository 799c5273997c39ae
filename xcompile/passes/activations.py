"""Decomposed activations recomposed: HardSwish (``x * relu6(x + 3) / 6``) and GELU (erf and
tanh forms) as exporters write them become one Hardswish / Gelu op."""

from __future__ import annotations

import numpy as np

from xir.network import Network
from xir.ops.base import Operation
from xir.values import Value

from .graph import is_near, only_reader, other_input, replace_op, scalar_value


def fold_hardswish(net: Network, add: Operation, outputs: set[int]) -> bool:
    """``x * relu6(x + 3) / 6`` or ``x * (relu6(x + 3) / 6)`` from `add` = ``x + 3`` on:
    one Hardswish op (the last op's output value and the Add's op_id kept)."""
    from xir.ops.elementwise import Hardswish

    if add.op_type != "Add" or len(add.inputs) != 2 or add.attrs.get("act", "none") != "none":
        return False
    x = next((v for v in add.inputs if not v.is_params), None)
    k = other_input(add, x) if x is not None else None
    if k is None or scalar_value(k) != 3.0:
        return False
    relu = only_reader(add.outputs[0], outputs, "Relu")
    if relu is None or float(relu.attrs.get("max_value", 0)) != 6.0 or \
            float(relu.attrs.get("alpha", 0)) != 0.0 or \
            float(relu.attrs.get("threshold", 0)) != 0.0:
        return False
    r = relu.outputs[0]
    m1 = only_reader(r, outputs, "Multiply")
    if m1 is None:
        return False
    o = other_input(m1, r)
    if o is x:  # x * relu6(x + 3), then / 6
        m2 = only_reader(m1.outputs[0], outputs, "Multiply")
        ok = m2 is not None and is_near(other_input(m2, m1.outputs[0]), 1 / 6)
    else:  # relu6(x + 3) / 6, then x *
        ok = is_near(o, 1 / 6)
        m2 = only_reader(m1.outputs[0], outputs, "Multiply") if ok else None
        ok = ok and m2 is not None and other_input(m2, m1.outputs[0]) is x
    if not ok:
        return False
    hs = Hardswish([x], list(m2.outputs), op_id=add.op_id, name=m2.name or add.name)
    hs.tags = {"fused_op_ids": [relu.op_id, m1.op_id, m2.op_id]}
    replace_op(net, add, hs, [relu, m1, m2])
    return True


def _gelu_tail(x: Value, inner: Value, outputs: set[int], head: list[Operation]
               ) -> tuple[list[Operation], Operation] | None:
    """``x * (1 + inner) * 0.5`` after `inner` (erf or tanh of the scaled `x`), either order of
    the two final products, as torch.onnx writes it: (the ops it takes, the last one)."""
    add = only_reader(inner, outputs, "Add")
    if add is None or add.attrs.get("act", "none") != "none" \
            or not is_near(other_input(add, inner), 1.0):
        return None
    m1 = only_reader(add.outputs[0], outputs, "Multiply")
    if m1 is None:
        return None
    o = other_input(m1, add.outputs[0])
    half = next((c for c in x.consumers if c.op_type == "Multiply" and c not in [m1, *head]
                 and is_near(other_input(c, x), 0.5)), None)
    if o is x:  # (x * (1 + inner)) * 0.5
        m2 = only_reader(m1.outputs[0], outputs, "Multiply")
        if m2 is None or not is_near(other_input(m2, m1.outputs[0]), 0.5):
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
    replace_op(net, at, g, gone)
    return True


def fold_gelu(net: Network, erf: Operation, outputs: set[int]) -> bool:
    """``x * (1 + erf(x * 1/sqrt 2)) * 0.5`` around `erf`: one Gelu op (the last output and
    Erf's op_id kept)."""
    scale = erf.inputs[0].producer
    if scale is None or scale.op_type != "Multiply" or len(erf.inputs[0].consumers) != 1:
        return False
    x = next((v for v in scale.inputs if not v.is_params), None)
    if x is None or not is_near(other_input(scale, x), 2 ** -0.5):
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


def fold_gelu_tanh(net: Network, tanh: Operation, outputs: set[int]) -> bool:
    """GELU's tanh form, ``x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3))) * 0.5``
    (torch's approximate="tanh"), around `tanh`: one Gelu(approximate="tanh")."""
    u = tanh.inputs[0]
    scale = u.producer
    if scale is None or scale.op_type != "Multiply" or len(u.consumers) != 1:
        return False
    v = next((i for i in scale.inputs if not i.is_params), None)
    if v is None or not is_near(other_input(scale, v), (2 / np.pi) ** 0.5) or len(v.consumers) != 1:
        return False
    add = v.producer
    if add is None or add.op_type != "Add" or len(add.inputs) != 2:
        return False
    for x, w in (add.inputs, add.inputs[::-1]):
        mul = w.producer
        if w.is_params or mul is None or mul.op_type != "Multiply" or len(w.consumers) != 1:
            continue
        cube = next((i for i in mul.inputs if not i.is_params), None)
        if cube is None or not is_near(other_input(mul, cube), 0.044715):
            continue
        found = _cube_of(cube, outputs)
        if found is None or found[0] is not x:
            continue
        head = [*found[1], mul, add, scale]
        tail = _gelu_tail(x, tanh.outputs[0], outputs, head)
        if tail is not None:
            return _make_gelu(net, tanh, x, [*head, *tail[0]], tail[1], "tanh")
    return False

"""Square roots: ``sqrt(x * x)`` (or ``sqrt(max(x * x, c))``) as ``|x|`` (or ``max(|x|, sqrt c)``),
and the Sqrts no pattern took as lookup tables once quantized."""

from __future__ import annotations

import numpy as np

from xir.network import Network
from xir.ops.base import Operation
from xir.values import Value

from .graph import only_reader, other_input


def sqrt_as_table(net: Network, root: Operation) -> bool:
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


def fold_sqrt_of_square(net: Network, root: Operation, outputs: set[int]) -> bool:
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
            only_reader(v, outputs) is root:
        sq = next((i for i in floor.inputs if not i.is_params), None)
        k = other_input(floor, sq) if sq is not None else None
        if k is None or not (k.is_params and k.data is not None) or \
                np.asarray(k.data).size != 1 or not float(np.asarray(k.data).ravel()[0]) >= 0:
            return False
        c, v = k, sq
    mul = v.producer
    if mul is None or mul.op_type != "Multiply" or len(mul.inputs) != 2 or \
            mul.inputs[0] is not mul.inputs[1] or mul.inputs[0].is_params or \
            only_reader(v, outputs) is not (root if c is None else floor):
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

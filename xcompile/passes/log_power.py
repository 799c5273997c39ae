"""The logarithm of a power spectrum, ``log(max(re*re + im*im, c))``, computed in the log domain
from the magnitudes of its parts: the same values, without the linear power that no integer
width can hold.

Speech front ends write a log-power spectrum so (keras2onnx's DNSMOS P.835: a learned STFT
as two convolutions, ``x * x`` for each, their sum, ``Sqrt`` then ``Pow 2``, ``Max`` with
1e-12, ``Log``). The power spans ten decades (1e-7 to 1e3 on speech with a noise floor near
0.05): one int8 scale is a step of 11 there, one int16 scale a step of 0.09, and every quiet
bin rounds to 0 before the Log, whose output then reads the floor (-27.6) where the float
network reads -3. The Log's readers see a different spectrum; DNSMOS's three scores came out
0.5-1.2 MOS off (worst part cosine 0.944 on held-out audio, 0.83 with the power in 16 bits).

The rewrite keeps the parts linear, where 16 bits hold them (a step of 0.002 on STFT outputs
of +-35: 1% of the noise floor's magnitude), and takes their logarithms before anything
squares them::

    hi = max(|re|, |im|, t)        lo = max(min(|re|, |im|), t)
    log(re^2 + im^2) = 2 log hi + softplus(2 (log lo - log hi))

``softplus(2 (log lo - log hi)) = log(1 + (lo / hi)^2)`` lies in [0, log 2], so a rare
saturated difference (one part near 0) costs nothing. The floor ``c`` moves into the log
domain (``max(L, log c)``). The guard ``t = sqrt(c) / 1000`` keeps the float network finite
where a part is exactly 0 (an STFT's imaginary part at 0 Hz and at Nyquist, digital
silence): it changes a power of at least ``c`` by at most 1e-6 of itself, and one below ``c``
stays below ``c (1 + 1e-6)``, which the floor replaces as before. Every new op is a table (Abs,
Log, Softplus), a Max / Min, or an Add / Sub, which the chips run; once quantized they compute
in 16 bits (`xcompile.quant.quantize.log_domain_bits`), where Log's input keeps 4.5 decades.
"""

from __future__ import annotations

import numpy as np

from xir.network import Network
from xir.ops.base import Operation
from xir.values import Value

from .graph import only_reader, other_input

#: the guard on both parts' magnitudes, as a fraction of sqrt(floor): it moves a power of at
#: least the floor by at most GUARD**2 of itself
GUARD = 1e-3
#: the guard without a floor (a plain ``log(re^2 + im^2)``): far below any float32 signal
BARE_GUARD = 1e-18


def _is_func(op: Operation | None, func: str) -> bool:
    return op is not None and op.op_type == "Unary" and op.attrs.get("func") == func


def _sole_reader(v: Value, outputs: set[int]) -> Operation | None:
    """The one op reading `v` (it may read it twice, as ``x * x``), when `v` is not an output."""
    readers = {id(c): c for c in v.consumers}
    if v.v_id in outputs or len(readers) != 1:
        return None
    return next(iter(readers.values()))


def _square_of(v: Value) -> Value | None:
    """x when `v` is written by ``Multiply(x, x)``."""
    mul = v.producer
    if mul is None or mul.op_type != "Multiply" or len(mul.inputs) != 2 or \
            mul.inputs[0] is not mul.inputs[1] or mul.inputs[0].is_params:
        return None
    return mul.inputs[0]


def _floor_of(root: Operation, outputs: set[int]) -> tuple[Value, float | None, list]:
    """(the power value the Log reads, the constant floor or None, the ops that go)."""
    v = root.inputs[0]
    op = v.producer
    if op is not None and op.op_type == "Binary" and op.attrs.get("func") == "max" and \
            only_reader(v, outputs) is root:
        p = next((i for i in op.inputs if not i.is_params), None)
        k = other_input(op, p) if p is not None else None
        if k is not None and k.is_params and k.data is not None and np.size(k.data) == 1:
            c = float(np.asarray(k.data).ravel()[0])
            if c > 0 and np.isfinite(c):
                return p, c, [op]
    return v, None, []


def match_log_power(root: Operation, outputs: set[int]
                    ) -> tuple[list[Value], float | None, list[Operation]] | None:
    """For `root` a ``Unary(log)``: (the parts whose squares sum to the power it reads, the
    floor or None, the ops the rewrite replaces besides `root`), or None when it reads
    something else. Accepted: ``log([max(c,] S [)])`` with ``S`` one of ``x*x``,
    ``x*x + y*y``, or either through ``sqrt(S) * sqrt(S)``; every intermediate read only by
    the next op."""
    if not _is_func(root, "log") or root.inputs[0].is_params:
        return None
    p, c, gone = _floor_of(root, outputs)
    reader = gone[0] if gone else root
    m = _square_of(p)
    if m is not None and (m.producer is not None and
                          (m.producer.op_type == "Sqrt" or _is_func(m.producer, "sqrt"))) \
            and _sole_reader(m, outputs) is p.producer and _sole_reader(p, outputs) is reader:
        gone += [p.producer, m.producer]
        reader, p = m.producer, m.producer.inputs[0]
    if _sole_reader(p, outputs) is not reader or p.is_params:
        return None
    s = p.producer
    if s is None:
        return None
    if s.op_type == "Multiply":
        x = _square_of(p)
        return ([x], c, gone + [s]) if x is not None else None
    if s.op_type != "Add" or s.attrs.get("act", "none") != "none" or len(s.inputs) != 2:
        return None
    parts = []
    for q in s.inputs:
        x = _square_of(q) if not q.is_params else None
        if x is None or _sole_reader(q, outputs) is not s:
            return None
        parts.append(x)
    return parts, c, gone + [s, s.inputs[0].producer, s.inputs[1].producer]


def fold_log_power(net: Network, root: Operation, outputs: set[int]) -> bool:
    """Rewrite the log-power chain that `root` (a ``Unary(log)``) ends, as the module says;
    its output value and op_id kept. False (nothing changed) when `root` reads no power."""
    from xir.ops.elementwise import Add, Sub
    from xir.ops.pointwise import Binary, Unary

    found = match_log_power(root, outputs)
    if found is None:
        return False
    parts, c, gone = found
    y = root.outputs[0]
    shape = tuple(y.shape)
    if any(x.dtype.numpy_dtype != np.float32 or tuple(x.shape) != shape for x in parts):
        return False
    name = root.name or f"log{root.op_id}"
    ops: list[Operation] = []

    def emit(cls, ins, suffix: str, out: Value | None = None, op_id: int | None = None,
             **attrs) -> Value:
        v = out if out is not None else Value(net.newVId(), y.dtype, f"{name}.{suffix}")
        ops.append(cls(ins, [v], op_id=net.newOpId() if op_id is None else op_id,
                       name=f"{name}.{suffix}" if out is None else name, **attrs))
        return v

    def const(value: float, suffix: str) -> Value:
        return net.newParams(np.full((1,) * len(shape), value, np.float32), f"{name}.{suffix}")

    mags = [emit(Unary, [x], f"abs{i}", func="abs") for i, x in enumerate(parts)]
    hi = mags[0] if len(mags) == 1 else emit(Binary, mags, "hi", func="max")
    guard = const(float(np.sqrt(c) * GUARD) if c is not None else BARE_GUARD, "guard")
    hi = emit(Binary, [hi, guard], "hi_guarded", func="max")
    log_hi = emit(Unary, [hi], "log_hi", func="log")
    last = c is None and len(mags) == 1
    total = emit(Add, [log_hi, log_hi], "log_hi2", out=y if last else None,
                 op_id=root.op_id if last else None)
    if len(mags) == 2:
        lo = emit(Binary, [emit(Binary, mags, "lo", func="min"), guard], "lo_guarded",
                  func="max")
        ratio = emit(Sub, [emit(Unary, [lo], "log_lo", func="log"), log_hi], "log_ratio")
        spread = emit(Unary, [emit(Add, [ratio, ratio], "log_ratio2")], "softplus",
                      func="softplus")
        total = emit(Add, [total, spread], "sum", out=y if c is None else None,
                     op_id=root.op_id if c is None else None)
    if c is not None:
        emit(Binary, [total, const(float(np.log(c)), "floor")], "floor", out=y,
             op_id=root.op_id, func="max")
    for op in ops:
        op.tags = dict(root.tags, fused_op_ids=[g.op_id for g in gone], decomposed="LogPower")
    for g in gone:
        net.ops.remove(g)
    i = net.ops.index(root)
    net.ops[i:i + 1] = ops
    net.relink()
    return True

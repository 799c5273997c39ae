"""Slice-forming rewrites of the optimize stage (`xcompile.passes.optimize` runs
`fold_slices` first): index picks as code moves the chips run.

- a Gather of constant indices that step evenly forward through one axis (``x[:, 0]``, a
  class token; ``qkv[0]``, attention's q / k / v picks; a channel pick ``x[:, 2]``) is the
  Slice of those elements: a code move (scale shared, a DMA window on the chips), where a
  Gather stays float on the host;
- a Slice of the first factor of an axis a Reshape split (``x.reshape(N, T, 3, h, d)[:, :,
  i]``) slices the unsplit axis instead, so no value of the factored rank (a rank-5 tensor
  has no NPU map form) is left;
- Slices of one value along one axis that cut it into consecutive pieces become one Split
  (aliases of one buffer on the chips' channel axis).

Every rewrite keeps the value it replaces the producer of (its v_id) and the first op's
op_id.
"""

from __future__ import annotations

import numpy as np

from xir.network import Network
from xir.ops.base import OP_REGISTRY, Operation
from xir.types import TensorType
from xir.values import Value

__all__ = ["fold_slices"]


def fold_slices(net: Network) -> int:
    """Run the three rewrites until none applies; the number of rewrites made."""
    done = 0
    while True:
        n = _gathers_as_slices(net) + _slices_before_split_reshapes(net) + \
            _slices_as_split(net)
        if not n:
            return done
        done += n


def _retyped(v: Value, shape: tuple[int, ...]) -> TensorType:
    """`v`'s element type with another shape (any layout)."""
    return TensorType(v.dtype.element_dtype, shape)


def _gathers_as_slices(net: Network) -> int:
    """Gather(x, constant indices i0, i0 + s, ..., s >= 1) -> Slice(x, i0 : last + 1 : s)."""
    done = 0
    for op in list(net.ops):
        if op.op_type != "Gather" or op.inputs[0].is_params:
            continue
        x, idx = op.inputs
        if not (idx.is_params and idx.data is not None) or np.asarray(idx.data).ndim != 1:
            continue
        at = np.asarray(idx.data)
        ax = int(op.attrs.get("axis", 0)) % len(x.shape)
        dim = int(x.shape[ax])
        if not np.issubdtype(at.dtype, np.integer) or at.size == 0 or \
                np.any(at < -dim) or np.any(at >= dim):
            continue
        at = at.astype(np.int64) % dim
        step = int(at[1] - at[0]) if at.size > 1 else 1
        if step < 1 or np.any(np.diff(at) != step):
            continue
        begin, end, steps = [0] * len(x.shape), list(x.shape), [1] * len(x.shape)
        begin[ax], end[ax], steps[ax] = int(at[0]), int(at[-1]) + 1, step
        cut = OP_REGISTRY["Slice"]([x], list(op.outputs), op_id=op.op_id, name=op.name,
                                   begin=begin, end=end, step=steps)
        cut.tags = dict(op.tags)
        net.ops[net.ops.index(op)] = cut
        net.relink()
        done += 1
    return done


def _sliced_axes(op: Operation) -> list[tuple[int, int, int, int]] | None:
    """(axis, start, length, step) of each axis a Slice cuts (python slice semantics)."""
    from xir.ops.shape import slice_range

    x = op.inputs[0]
    step = op.attrs.get("step") or [1] * len(x.shape)
    cuts = []
    for ax, (b, e, st, d) in enumerate(zip(op.attrs["begin"], op.attrs["end"], step,
                                           x.shape)):
        r = slice_range(int(b), int(e), int(st), int(d))
        if len(r) != d or (d > 1 and r.step != 1) or (d and r.start != 0):
            cuts.append((ax, r.start, len(r), r.step))
    return cuts


def _slices_before_split_reshapes(net: Network) -> int:
    """``Slice(Reshape(x))`` -> ``Reshape(Slice(x))`` when the Reshape splits one axis of x into
    factors and the Slice cuts the first factor only (step 1): the same elements are a
    contiguous range of x's axis. The Slice's output value stays the Reshape's."""
    done = 0
    for op in list(net.ops):
        if op not in net.ops or op.op_type != "Slice":
            continue
        y = op.inputs[0]
        r = y.producer
        cuts = _sliced_axes(op)
        if r is None or r.op_type != "Reshape" or len(cuts) != 1 or cuts[0][3] != 1:
            continue
        x, (j, start, length, _) = r.inputs[0], cuts[0]
        xs, ys = tuple(x.shape), tuple(y.shape)
        q = len(xs) - j - 1  # the axes after the split one
        if not 0 <= j < len(xs) or xs[:j] != ys[:j] or ys[len(ys) - q:] != xs[j + 1:] or \
                len(ys) - q - j < 2:
            continue
        factors = ys[j:len(ys) - q]
        if int(np.prod(factors)) != xs[j]:
            continue
        inner = int(np.prod(factors[1:]))
        begin, end = [0] * len(xs), list(xs)
        begin[j], end[j] = start * inner, (start + length) * inner
        out = op.outputs[0]
        shape = list(xs)
        shape[j] = length * inner
        part = net.newValue(_retyped(out, tuple(shape)), f"{out.name}:unsplit" if out.name
                            else "")
        cut = OP_REGISTRY["Slice"]([x], [part], op_id=op.op_id, name=op.name, begin=begin,
                                   end=end, step=[1] * len(xs))
        back = OP_REGISTRY["Reshape"]([part], [out], op_id=net.newOpId(), name=op.name,
                                      shape=list(out.shape))
        nxt = out.consumers[0] if len(out.consumers) == 1 else None
        i = net.ops.index(op)
        if nxt is not None and nxt.op_type == "Reshape":  # Reshape(Reshape) is one Reshape
            nxt.inputs = [part]
            net.ops[i] = cut
        else:
            net.ops[i:i + 1] = [cut, back]
        net.relink()
        if not y.consumers:
            net.ops.remove(r)
            net.relink()
        done += 1
    return done


def _slices_as_split(net: Network) -> int:
    """Slices of one value along one axis (step 1) whose pieces follow each other from 0 to the
    axis' end, as one Split writing their output values (at the first Slice's place)."""
    done = 0
    for op in list(net.ops):
        for v in op.outputs:
            readers = [c for c in v.consumers if c.op_type == "Slice"]
            if len(readers) < 2:
                continue
            pieces = []
            for c in readers:
                cuts = _sliced_axes(c)
                if len(cuts) == 1 and cuts[0][3] == 1:
                    pieces.append((cuts[0][0], cuts[0][1], cuts[0][2], c))
            axes = {p[0] for p in pieces}
            if len(pieces) != len(readers) or len(axes) != 1:
                continue
            ax = axes.pop()
            pieces.sort(key=lambda p: p[1])
            at = 0
            for _, start, length, _c in pieces:
                at = at + length if start == at and length > 0 else -1
            if at != v.shape[ax]:
                continue
            first = min((p[3] for p in pieces), key=net.ops.index)
            split = OP_REGISTRY["Split"]([v], [p[3].outputs[0] for p in pieces],
                                         op_id=first.op_id, name=first.name, axis=ax,
                                         sections=[p[2] for p in pieces])
            net.ops[net.ops.index(first)] = split
            for p in pieces:
                if p[3] is not first:
                    net.ops.remove(p[3])
            net.relink()
            done += 1
    return done

"""Lowering rules of the data-movement ops the DMA runs as COPY layers: Transpose (COPY
PERMUTE), Slice, Split and Concat along any axis but the batch (a COPY from or into a window
of a map: an address offset, a row stride, a pixel pitch or a channel offset), and a Reshape
that regroups the elements (two COPYs through a dense scratch map).

The last-axis Concat / Split and the channel-keeping Reshape need no layer at all (aliases of
one buffer, `layers.ALIAS_OPS`); these rules take the rest. A value's axes map to the NPU map
axes (h, w, c) as `common.map3` lays them out; the batch axis of an NHWC value is the item
index, which these rules leave alone (every item moves the same way).
"""

from __future__ import annotations

from dataclasses import replace

from npu_model import asm
from xir.types import TensorType
from xir.values import Value

from .common import items, map3
from .layers import NotLowerable, OpLowering, Resolver, _feature_dtypes, scale_of


def map_axis(rank: int, axis: int) -> int | None:
    """The NPU map axis (0 h, 1 w, 2 c) of value axis `axis`; None for an NHWC value's batch
    axis."""
    axis = axis % rank
    if rank == 4:
        return None if axis == 0 else axis - 1
    if rank == 3:
        return axis
    return axis + 1


def window(f: asm.FMap, axis: int, start: int, length: int, step: int = 1) -> asm.FMap:
    """Elements ``start, start + step, ...`` (`length` of them) of map axis `axis` of `f`: the
    same buffer read through an address offset and a row stride (h), a pixel pitch (w) or a
    channel offset (c)."""
    esz = 2 if f.dtype == "int16" else 1
    rs = f.row_stride or f.w * f.pitch * esz
    if axis == 0:
        return replace(f, addr=f.addr + start * rs, h=length, row_stride=rs * step)
    if axis == 1:
        if length * f.pitch * step * esz > rs:
            raise NotLowerable("a strided column window wider than the row")
        return replace(f, addr=f.addr + start * f.pitch * esz, w=length, pitch=f.pitch * step,
                       row_stride=rs)
    if step != 1:
        raise NotLowerable("a strided channel window")
    return replace(f, c=length, c_off=f.c_off + start, row_stride=rs)


def _same_scale(op) -> None:
    _feature_dtypes(op)
    vals = op.feature_inputs() + list(op.outputs)
    if any(scale_of(v) != scale_of(vals[0]) for v in vals):
        raise NotLowerable(f"{op.op_type} with a rescale")
    if any(v.is_params for v in op.inputs):
        raise NotLowerable(f"{op.op_type} of a constant")


def _check_pitch(f: asm.FMap) -> asm.FMap:
    if f.pitch >= 1 << 16:
        raise NotLowerable("window pitch above 65535 channels")
    return f


def lower_transpose(op, cfg) -> OpLowering:
    """Transpose as one COPY PERMUTE per item (one over all items when h stays in place)."""
    _same_scale(op)
    x, y = op.inputs[0], op.outputs[0]
    r = len(x.shape)
    perm = [int(p) % r for p in op.attrs["perm"]]
    if r == 4 and perm[0] != 0:
        raise NotLowerable("a Transpose that moves the batch axis")
    out_axes = {4: [1, 2, 3], 3: [0, 1, 2], 2: [None, 0, 1]}.get(r)
    if out_axes is None:
        raise NotLowerable(f"a rank-{r} Transpose")
    p3 = tuple(0 if a is None else map_axis(r, perm[a]) for a in out_axes)
    if sorted(p3) != [0, 1, 2]:
        raise NotLowerable("transpose axes")

    def make(R: Resolver) -> list[asm.Layer]:
        return [asm.Copy(R.fmap(x), R.fmap(y), perm=p3, tag=op.op_id)]

    return OpLowering("copy", [], make, fold=p3[0] == 0)


def lower_slice(op, cfg) -> OpLowering:
    """Slice (positive steps) as one COPY from a window of the input."""
    _same_scale(op)
    x, y = op.inputs[0], op.outputs[0]
    r = len(x.shape)
    begin, end = op.attrs["begin"], op.attrs["end"]
    step = op.attrs.get("step") or [1] * r
    cuts = []
    for ax, (b, e, s, d) in enumerate(zip(begin, end, step, x.shape)):
        start, stop, st = slice(int(b), int(e), int(s)).indices(int(d))
        n = len(range(start, stop, st))
        if (start, n, st) == (0, int(d), 1) or int(d) == 1:
            continue
        if st < 1:
            raise NotLowerable("a Slice with a negative step")
        m = map_axis(r, ax)
        if m is None:
            raise NotLowerable("a Slice of the batch axis")
        if m == 2 and st != 1:
            raise NotLowerable("a strided channel Slice")
        cuts.append((m, start, n, st))

    def make(R: Resolver) -> list[asm.Layer]:
        src = R.fmap(x)
        for m, start, n, st in cuts:
            src = window(src, m, start, n, st)
        return [asm.Copy(_check_pitch(src), R.fmap(y), tag=op.op_id)]

    # check the windows now (a strided column window that overruns a row stays on the host)
    h, w, c = map3(x.shape)
    probe = asm.FMap(0, h, w, c, c, 0, "int8")
    for m, start, n, st in cuts:
        probe = window(probe, m, start, n, st)
    _check_pitch(probe)
    return OpLowering("copy", [], make, fold=all(m != 0 for m, *_ in cuts))


def _axis(op) -> int:
    x = op.feature_inputs()[0]
    m = map_axis(len(x.shape), int(op.attrs.get("axis", -1)))
    if m is None:
        raise NotLowerable(f"a {op.op_type} of the batch axis")
    return m


def lower_concat(op, cfg) -> OpLowering:
    """Concat along h or w: one COPY per input into its window of the output."""
    _same_scale(op)
    m = _axis(op)
    y = op.outputs[0]
    spans, off = [], 0
    for x in op.inputs:
        n = map3(x.shape)[m]
        spans.append((x, off, n))
        off += n

    def make(R: Resolver) -> list[asm.Layer]:
        return [asm.Copy(R.fmap(x), window(R.fmap(y), m, o, n), tag=op.op_id)
                for x, o, n in spans]

    return OpLowering("+".join(["copy"] * len(spans)), [], make, fold=m != 0)


def lower_split(op, cfg) -> OpLowering:
    """Split along h or w: one COPY per output from its window of the input."""
    _same_scale(op)
    m = _axis(op)
    x = op.inputs[0]
    spans, off = [], 0
    for y in op.outputs:
        n = map3(y.shape)[m]
        spans.append((y, off, n))
        off += n

    def make(R: Resolver) -> list[asm.Layer]:
        return [asm.Copy(window(R.fmap(x), m, o, n), R.fmap(y), tag=op.op_id)
                for y, o, n in spans]

    return OpLowering("+".join(["copy"] * len(spans)), [], make, fold=m != 0)


def lower_reshape(op, cfg) -> OpLowering:
    """A Reshape (Squeeze, Unsqueeze) that regroups the elements: COPY into a dense scratch
    map (pitch = channels), whose bytes are then the elements in row-major order, and COPY
    that read in the output's geometry into the output."""
    _same_scale(op)
    x, y = op.inputs[0], op.outputs[0]
    h, w, c = map3(x.shape)
    z = Value(-1, TensorType(x.dtype.element_dtype, (items(x.shape), h, w, c), "NHWC"),
              f"{op.name or 'reshape'}.dense")
    yh, yw, yc = map3(y.shape)
    rows = items(y.shape) * yh

    def make(R: Resolver) -> list[asm.Layer]:
        zf = R.fmap(z)
        flat = asm.FMap(zf.addr, rows, yw, yc, yc, 0, zf.dtype)
        return [asm.Copy(R.fmap(x), zf, tag=op.op_id), asm.Copy(flat, R.fmap(y), tag=op.op_id)]

    return OpLowering("copy+copy", [], make, scratch=[z], fold=True, dense_scratch=True)


#: rules of the data-movement ops; the lowering selects them only next to NPU ops
MOVE_RULES = {"Transpose": lower_transpose, "Slice": lower_slice, "Concat": lower_concat,
              "Split": lower_split, "Reshape": lower_reshape, "Squeeze": lower_reshape,
              "Unsqueeze": lower_reshape}

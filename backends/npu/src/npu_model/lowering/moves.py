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

import numpy as np

from npu_model import asm
from xir.types import TensorType
from xir.values import Value

from .common import items, map3, npu_dtype
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


def _same_scale(op, consts: bool = False) -> None:
    """Every map of `op` one NPU dtype at one scale; constant inputs only where `consts`
    (Concat: they become data of the weight blob, `_const_source`), at that dtype and scale."""
    _feature_dtypes(op)
    vals = op.feature_inputs() + list(op.outputs)
    if any(scale_of(v) != scale_of(vals[0]) for v in vals):
        raise NotLowerable(f"{op.op_type} with a rescale")
    for v in op.inputs:
        if not v.is_params:
            continue
        if not consts:
            raise NotLowerable(f"{op.op_type} of a constant")
        if v.data is None or npu_dtype(v) != npu_dtype(vals[0]) or \
                scale_of(v) != scale_of(vals[0]) or map3(v.shape) is None:
            raise NotLowerable(f"{op.op_type} of a constant not quantized at its output's "
                               f"per-tensor int8 / int16 type")
        if items(v.shape) != items(op.outputs[0].shape):
            raise NotLowerable(f"{op.op_type} of a constant with {items(v.shape)} batch items")


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
    """Concat along h or w: one COPY per input into its window of the output. A constant
    input (a ViT's class token, quantized at the output's scale) is a dense map of the weight
    blob (one map per batch item, in order as a buffer holds them), COPYed into its window
    like any other input."""
    _same_scale(op, consts=True)
    m = _axis(op)
    y = op.outputs[0]
    dt = npu_dtype(y)
    spans, consts, off = [], [], 0
    for x in op.inputs:
        n = map3(x.shape)[m]
        k = None
        if x.is_params:
            k = len(consts)
            consts.append(np.asarray(x.data).astype(np.dtype(dt).newbyteorder("<"))
                          .reshape(-1).view(np.uint8))
        spans.append((x, k, off, n))
        off += n

    esz = 2 if dt == "int16" else 1

    def src(R: Resolver, x: Value, k: int | None) -> asm.FMap:
        if k is None:
            return R.fmap(x)
        h, w, c = map3(x.shape)
        if R.item is None:  # folded (or one item): every item's rows at once
            return asm.FMap(R.const(k), items(x.shape) * h, w, c, pitch=c, dtype=dt)
        return asm.FMap(R.const(k) + R.item * h * w * c * esz, h, w, c, pitch=c, dtype=dt)

    def make(R: Resolver) -> list[asm.Layer]:
        return [asm.Copy(src(R, x, k), window(R.fmap(y), m, o, n), tag=op.op_id)
                for x, k, o, n in spans]

    return OpLowering("+".join(["copy"] * len(spans)), consts, make, fold=m != 0)


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
        xf = R.fmap(x)
        if xf.pitch == xf.c and xf.c_off == 0:  # dense already: read it in y's geometry
            return [asm.Copy(asm.FMap(xf.addr, rows, yw, yc, yc, 0, xf.dtype), R.fmap(y),
                             tag=op.op_id)]
        zf = R.fmap(z)
        flat = asm.FMap(zf.addr, rows, yw, yc, yc, 0, zf.dtype)
        return [asm.Copy(xf, zf, tag=op.op_id), asm.Copy(flat, R.fmap(y), tag=op.op_id)]

    return OpLowering("copy+copy", [], make, scratch=[z], fold=True, dense_scratch=True,
                      dense_input=True)


#: rules of the data-movement ops; the lowering selects them only next to NPU ops
MOVE_RULES = {"Transpose": lower_transpose, "Slice": lower_slice, "Concat": lower_concat,
              "Split": lower_split, "Reshape": lower_reshape, "Squeeze": lower_reshape,
              "Unsqueeze": lower_reshape}


# --- chains of Reshape / Transpose through values of more than the map's axes -------------------

#: ops a chain is made of (what exporters write for DepthToSpace / PixelShuffle, SpaceToDepth,
#: a channel split into heads...)
CHAIN_OPS = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze"})
#: the most COPY layers a chain may take (beyond that the host's one numpy pass is cheaper)
MAX_CHAIN_COPIES = 256


def find_chain(op) -> list | None:
    """The ops of a data-movement chain starting at `op`: from a value with an NPU map form
    through values without one (rank 5, 6...) to the next value with one, each op the only
    reader of the one before, all quantized at one scale. None when `op` starts no chain."""
    if op.op_type not in CHAIN_OPS or not op.is_quantized() or len(op.outputs) != 1:
        return None
    x = op.inputs[0]
    if map3(x.shape) is None or map3(op.outputs[0].shape) is not None:
        return None
    chain, v = [op], op.outputs[0]
    while map3(v.shape) is None:
        if len(v.consumers) != 1:
            return None
        c = v.consumers[0]
        if c.op_type not in CHAIN_OPS or not c.is_quantized() or len(c.outputs) != 1 or \
                c.inputs[0] is not v:
            return None
        chain.append(c)
        v = c.outputs[0]
    return chain


def _probe(f: asm.FMap, esz: int):
    """A strided numpy view with `f`'s geometry whose strides are element strides (nothing is
    read through it: numpy's reshape logic decides which regroupings are views)."""
    from numpy.lib.stride_tricks import as_strided

    rs = (f.row_stride // esz) if f.row_stride else f.w * f.pitch
    return as_strided(np.zeros(1, np.int8), (f.h, f.w, f.c), (rs, f.pitch, 1), writeable=False)


def _apply(t, op):
    if op.op_type == "Transpose":
        return t.transpose([int(p) for p in op.attrs["perm"]])
    return np.reshape(t, tuple(int(d) for d in op.outputs[0].shape), copy=False)


def chain_copies(chain: list, xf: asm.FMap, yf: asm.FMap) -> list[tuple[asm.FMap, asm.FMap]]:
    """(source, destination) windows of the COPY layers that carry out `chain` from map `xf`
    to map `yf` (whole buffers, every item): the chain applied as strided views of the input
    (a Reshape that would need a copy is refused), the output's map viewed in the shape before
    its last Reshape; one dimension both sides read contiguously becomes the COPY's channels,
    two nested ones its rows and pixels, and every other dimension a loop of COPYs."""
    esz = 2 if xf.dtype == "int16" else 1
    x, y = chain[0].inputs[0], chain[-1].outputs[0]
    try:
        t = np.reshape(_probe(xf, esz), tuple(int(d) for d in x.shape), copy=False)
        body = chain[:-1] if chain[-1].op_type != "Transpose" else chain
        for op in body:
            t = _apply(t, op)
        yv = np.reshape(_probe(yf, esz), tuple(int(d) for d in y.shape), copy=False)
        yv = np.reshape(yv, t.shape, copy=False)
    except ValueError:
        raise NotLowerable("a regrouping the DMA cannot address as strided views") from None
    dims: list[tuple[int, int, int]] = []
    for d in ((int(n), int(a), int(b)) for n, a, b in zip(t.shape, t.strides, yv.strides)):
        if d[0] == 1:
            continue
        if dims and dims[-1][1] == d[0] * d[1] and dims[-1][2] == d[0] * d[2]:
            dims[-1] = (dims[-1][0] * d[0], d[1], d[2])  # nested on both sides: one dim
        else:
            dims.append(d)
    cdim = next((d for d in dims if d[1] == 1 and d[2] == 1), None)
    if cdim is not None:
        dims.remove(cdim)
    nc = cdim[0] if cdim else 1
    best, best_n = ((1, 0, 0), (1, 0, 0)), 1
    for w in dims + [(1, 0, 0)]:
        if w[0] > 1 and (w[1] < nc or w[2] < nc):
            continue
        for h in dims + [(1, 0, 0)]:
            if h is w and h[0] > 1:
                continue
            if h[0] > 1 and (h[1] < max(w[0] * w[1], nc) or h[2] < max(w[0] * w[2], nc)):
                continue
            if h[0] * w[0] > best_n:
                best, best_n = (h, w), h[0] * w[0]
    h, w = best
    loops = [d for d in dims if d is not h and d is not w]
    total = int(np.prod([d[0] for d in loops])) if loops else 1
    if total > MAX_CHAIN_COPIES:
        raise NotLowerable(f"a regrouping of {total} COPY layers")

    def fm(f: asm.FMap, off: int, side: int) -> asm.FMap:
        pitch = w[1 + side] if w[0] > 1 else nc
        rs = h[1 + side] if h[0] > 1 else w[0] * pitch
        return asm.FMap(f.addr + (f.c_off + off) * esz, h[0], w[0], nc, pitch, 0, f.dtype,
                        rs * esz)

    out = []
    for idx in np.ndindex(*[d[0] for d in loops]):
        ox = sum(i * d[1] for i, d in zip(idx, loops))
        oy = sum(i * d[2] for i, d in zip(idx, loops))
        out.append((fm(xf, ox, 0), fm(yf, oy, 1)))
    return out


def lower_chain(chain: list, cfg) -> OpLowering:
    """A chain of Reshape / Transpose ops (DepthToSpace as exporters write it) as the COPY
    layers of `chain_copies`, on whole buffers."""
    for op in chain:
        if any(v.is_params for v in op.inputs[:1]):
            raise NotLowerable("a chain over a constant")
    x, y = chain[0].inputs[0], chain[-1].outputs[0]
    dt = npu_dtype(x)
    if dt is None or npu_dtype(y) != dt:
        raise NotLowerable("a chain whose ends are not one per-tensor int8 / int16 type")
    if any(scale_of(op.outputs[0]) != scale_of(x) for op in chain):
        raise NotLowerable("a chain with a rescale")
    # check it now with padded pitches (the final ones are known at layout)
    unit = cfg.channel_unit(dt)
    (xh, xw, xc), (yh, yw, yc) = map3(x.shape), map3(y.shape)
    n_x, n_y = items(x.shape), items(y.shape)
    probe_x = asm.FMap(0, n_x * xh, xw, xc, -(-(xc + 1) // unit) * unit, 0, dt)
    probe_y = asm.FMap(0, n_y * yh, yw, yc, -(-(yc + 1) // unit) * unit, 0, dt)
    n = len(chain_copies(chain, probe_x, probe_y))

    def make(R: Resolver) -> list[asm.Layer]:
        return [asm.Copy(s, d, tag=chain[0].op_id)
                for s, d in chain_copies(chain, R.fmap(x), R.fmap(y))]

    return OpLowering("+".join(["copy"] * n), [], make, fold=True)

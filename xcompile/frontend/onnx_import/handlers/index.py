"""Index and shape ops: Expand, Tile, Gather*, Scatter*, OneHot, Range, Trilu, EyeLike,
CastLike, DepthToSpace/SpaceToDepth, Compress, ReverseSequence and Col2Im.

Index ops read the ONNX-order view (`im.value`) unless they are axis-local: Expand (same
rank), Tile, Gather with 0-D / 1-D indices, GatherElements, ScatterElements, Convert and the
DepthToSpace family work in the view their input has (an NHWC map stays NHWC). Constant
indices become Params. Whatever fixes an output shape (Expand's shape, Tile's repeats,
OneHot's depth, Compress's condition) must be constant: an xir value has a static shape.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from xcompile.frontend.onnx_import.registry import _handles, _Unsupported
from xcompile.frontend.onnx_import.tensor import _T, NHWC
from xir.errors import XirError
from xir.types import ScalarType

if TYPE_CHECKING:
    from xcompile.frontend.onnx_import.importer import _Importer


def _ints(c: np.ndarray) -> list[int]:
    return [int(v) for v in np.ravel(c)]


def _scalar_type(dtype: np.dtype, what: str) -> ScalarType:
    """The xir scalar type of a numpy dtype; none (bfloat16, float8, 4-bit, strings): refused."""
    try:
        st = ScalarType.from_numpy(dtype)
    except (XirError, TypeError) as exc:
        raise _Unsupported(f"{what} {dtype} has no xir element type") from exc
    return st


def _convert(im: _Importer, x: _T, to: np.dtype, what: str) -> _T:
    """x as element type `to` (ONNX Cast semantics); no op when it already is."""
    to = np.dtype(to)
    if to == x.dtype:
        return x
    if x.is_const:
        return _T.constant(x.const.astype(to))
    _scalar_type(x.dtype, f"{what} from")
    st = _scalar_type(to, f"{what} to")
    perm = x.base
    v = im.emit1("Convert", [im.value(x, perm)], "NHWC" if perm == NHWC else None,
                 to=st.encode())
    return im.result(v, perm)


def cast_to(im: _Importer, node, a: dict, x: _T) -> _T:
    """ONNX Cast of a computed tensor (the Cast handler in passthrough calls this)."""
    if "to" not in a:
        raise _Unsupported("no 'to' attribute")
    try:
        to = np.dtype(im.onnx.helper.tensor_dtype_to_np_dtype(a["to"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise _Unsupported(f"target type {a['to']} has no numpy form") from exc
    return _convert(im, x, to, "Cast")


@_handles("CastLike")
def _cast_like(im: _Importer, node, a, ins):
    return [_convert(im, ins[0], ins[1].dtype, "CastLike")]


@_handles("Expand")
def _expand(im: _Importer, node, a, ins):
    x = ins[0]
    shape = _ints(im.const_of(ins[1], "Expand shape"))
    try:
        out = np.broadcast_shapes(x.shape, tuple(shape))
    except ValueError as exc:
        raise _Unsupported(f"shape {shape} does not broadcast with {list(x.shape)}") from exc
    if tuple(out) == x.shape:
        return [x]
    if len(out) == x.rank and not x.is_const:  # same rank: expand in the input's view
        perm = x.base
        v = im.emit1("Expand", [im.value(x, perm)], "NHWC" if perm == NHWC else None,
                     shape=[out[p] for p in perm])
        return [im.result(v, perm)]
    return [im.result(im.emit1("Expand", [im.value(x)], shape=list(out)))]


@_handles("Tile")
def _tile(im: _Importer, node, a, ins):
    x = ins[0]
    reps = _ints(im.const_of(ins[1], "Tile repeats"))
    if len(reps) != x.rank:
        raise _Unsupported(f"{len(reps)} repeats for rank {x.rank}")
    perm = x.base
    v = im.emit1("Tile", [im.value(x, perm)], "NHWC" if perm == NHWC else None,
                 repeats=[reps[p] for p in perm])
    return [im.result(v, perm)]


def _view(t: _T) -> tuple[int, ...]:
    """The permutation t is held in (ONNX order for a constant)."""
    return t.base if not t.is_const else tuple(range(t.rank))


def _indices(im: _Importer, t: _T, what: str):
    if not np.issubdtype(t.dtype, np.integer):
        raise _Unsupported(f"{what} of type {t.dtype}")
    return im.value(t)


@_handles("Gather")
def _gather(im: _Importer, node, a, ins):
    data, idx = ins
    if data.rank == 0:
        raise _Unsupported("a scalar data input")
    """With 0-D or 1-D indices the gather is axis-local: it runs in the data's view (an NHWC
    map picks channels without a Transpose); other indices in ONNX order."""
    axis = int(a.get("axis", 0)) % data.rank
    perm = data.base if not data.is_const and idx.rank <= 1 else tuple(range(data.rank))
    layout = "NHWC" if perm == NHWC and idx.rank == 1 else None
    v = im.emit1("Gather", [im.value(data, perm), _indices(im, idx, "indices")], layout,
                 axis=perm.index(axis))
    if idx.rank == 1:
        return [im.result(v, perm)]
    out_perm = tuple(p - (p > axis) for p in perm if p != axis)
    if idx.rank == 0 and len(v.shape) == data.rank:
        # xir Params are at least 1-D: a constant scalar index gathered a unit axis; drop it
        kept = [d for i, d in enumerate(v.shape) if i != perm.index(axis)]
        v = im.emit1("Reshape", [v], shape=kept)
    if idx.rank == 0:
        return [im.result(v, out_perm)]
    return [im.result(v)]


@_handles("GatherElements")
def _gather_elements(im: _Importer, node, a, ins):
    """Axis-local: data and indices read in the data's view."""
    data, idx = ins
    axis = int(a.get("axis", 0)) % max(data.rank, 1)
    perm = _view(data)
    _indices(im, idx, "indices")
    v = im.emit1("GatherElements", [im.value(data, perm), im.value(idx, perm)],
                 "NHWC" if perm == NHWC else None, axis=perm.index(axis))
    return [im.result(v, perm)]


@_handles("GatherND")
def _gather_nd(im: _Importer, node, a, ins):
    data, idx = ins
    v = im.emit1("GatherND", [im.value(data), _indices(im, idx, "indices")],
                 batch_dims=int(a.get("batch_dims", 0)))
    return [im.result(v)]


@_handles("ScatterElements", "Scatter")
def _scatter_elements(im: _Importer, node, a, ins):
    """Axis-local: data, indices and updates read in the data's view."""
    data, idx, upd = ins
    axis = int(a.get("axis", 0)) % max(data.rank, 1)
    upd = _convert(im, upd, data.dtype, "updates")
    perm = _view(data)
    _indices(im, idx, "indices")
    v = im.emit1("ScatterElements", [im.value(data, perm), im.value(idx, perm),
                                     im.value(upd, perm)], "NHWC" if perm == NHWC else None,
                 axis=perm.index(axis), reduction=str(a.get("reduction", "none")))
    return [im.result(v, perm)]


@_handles("ScatterND")
def _scatter_nd(im: _Importer, node, a, ins):
    data, idx, upd = ins
    upd = _convert(im, upd, data.dtype, "updates")
    v = im.emit1("ScatterND", [im.value(data), _indices(im, idx, "indices"), im.value(upd)],
                 reduction=str(a.get("reduction", "none")))
    return [im.result(v)]


@_handles("OneHot")
def _one_hot(im: _Importer, node, a, ins):
    idx, depth, vals = ins
    d = im.const_of(depth, "OneHot depth")
    if np.size(d) != 1:
        raise _Unsupported(f"depth must hold one number, not shape {list(np.shape(d))}")
    if vals.is_const and vals.const.size != 2:
        raise _Unsupported(f"values must hold 2 entries, not {vals.const.size}")
    v = im.emit1("OneHot", [im.value(idx), im.value(vals)], axis=int(a.get("axis", -1)),
                 depth=int(np.ravel(d)[0]))
    return [im.result(v)]


def _declared_shape(im: _Importer, name: str) -> list[int] | None:
    """The static shape the model declares for tensor `name` (graph output or value_info)."""
    for vi in list(im.graph.output) + list(im.graph.value_info):
        if vi.name != name or not vi.type.HasField("tensor_type") or \
                not vi.type.tensor_type.HasField("shape"):
            continue
        dims = vi.type.tensor_type.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            return [int(d.dim_value) for d in dims]
    return None


@_handles("Range")
def _range(im: _Importer, node, a, ins):
    """Folds when start, limit and delta are constant; otherwise its length is data: the model
    must declare the output's static shape, and running with other inputs fails."""
    shape = _declared_shape(im, node.output[0])
    if shape is None or len(shape) != 1:
        raise _Unsupported("start/limit/delta are computed and the model declares no static "
                           "output length (a data-dependent shape)")
    dt = ins[0].dtype
    parts = [im.value(_convert(im, t, dt, "Range input")) for t in ins]
    return [im.result(im.emit1("Range", parts, size=shape[0]))]


@_handles("Trilu")
def _trilu(im: _Importer, node, a, ins):
    """k constant: an attribute; computed: a second input, read when the op runs."""
    x = ins[0]
    kt = ins[1] if len(ins) > 1 else None
    if x.rank < 2:
        raise _Unsupported(f"rank {x.rank} (needs 2 or more)")
    upper = bool(int(a.get("upper", 1)))
    if kt is not None and not kt.is_const:
        return [im.result(im.emit1("Trilu", [im.value(x), im.value(kt)], upper=upper))]
    k = 0 if kt is None else int(np.ravel(kt.const)[0])
    return [im.result(im.emit1("Trilu", [im.value(x)], upper=upper, k=k))]


@_handles("EyeLike")
def _eye_like(im: _Importer, node, a, ins):
    """A constant: the result depends on the input's shape only."""
    x = ins[0]
    if x.rank != 2:
        raise _Unsupported(f"rank {x.rank} (EyeLike takes 2-D inputs)")
    dt = x.dtype if "dtype" not in a else \
        np.dtype(im.onnx.helper.tensor_dtype_to_np_dtype(a["dtype"]))
    return [_T.constant(np.eye(x.shape[0], x.shape[1], int(a.get("k", 0)), dtype=dt))]


@_handles("DepthToSpace", "SpaceToDepth")
def _depth_space(im: _Importer, node, a, ins):
    """As Reshape -> Transpose -> Reshape on the NHWC view (channels last): DepthToSpace DCR
    splits C into (b, b, C'), CRD into (C', b, b); SpaceToDepth makes them (the inverses)."""
    x = ins[0]
    if x.rank != 4:
        raise _Unsupported(f"rank {x.rank} (needs a 4-D NCHW map)")
    b = int(a["blocksize"])
    n, c, h, w = x.shape
    v = im.nhwc(x)
    if node.op_type == "DepthToSpace":
        if c % (b * b):
            raise _Unsupported(f"{c} channels do not split into blocks of {b}x{b}")
        c2 = c // (b * b)
        if a.get("mode", "DCR") == "CRD":
            v = im.emit1("Reshape", [v], shape=[n, h, w, c2, b, b])
            v = im.emit1("Transpose", [v], perm=[0, 1, 4, 2, 5, 3])
        else:
            v = im.emit1("Reshape", [v], shape=[n, h, w, b, b, c2])
            v = im.emit1("Transpose", [v], perm=[0, 1, 3, 2, 4, 5])
        v = im.emit1("Reshape", [v], "NHWC", shape=[n, h * b, w * b, c2])
    else:
        if h % b or w % b:
            raise _Unsupported(f"{h}x{w} does not split into blocks of {b}x{b}")
        v = im.emit1("Reshape", [v], shape=[n, h // b, b, w // b, b, c])
        crd = a.get("mode", "DCR") == "CRD"
        v = im.emit1("Transpose", [v], perm=[0, 1, 3, 5, 2, 4] if crd else [0, 1, 3, 2, 4, 5])
        v = im.emit1("Reshape", [v], "NHWC", shape=[n, h // b, w // b, c * b * b])
    return [im.result(v, NHWC)]


@_handles("Compress")
def _compress(im: _Importer, node, a, ins):
    """A constant condition is a Gather of the selected indices; a computed one makes the
    output's length data."""
    x, cond = ins
    if not cond.is_const:
        raise _Unsupported("a computed condition (the output length is data-dependent)")
    keep = np.nonzero(np.ravel(cond.const).astype(bool))[0].astype(np.int64)
    if "axis" in a:
        axis = int(a["axis"]) % max(x.rank, 1)
        if keep.size and keep[-1] >= x.shape[axis]:
            raise _Unsupported(f"condition selects entry {keep[-1]} of an axis of "
                               f"{x.shape[axis]}")
        data = im.value(x)
    else:
        axis = 0
        if keep.size and keep[-1] >= math.prod(x.shape):
            raise _Unsupported(f"condition selects entry {keep[-1]} of {math.prod(x.shape)}")
        data = im.emit1("Reshape", [im.value(x)], shape=[math.prod(x.shape)])
    v = im.emit1("Gather", [data, im.params(keep)], axis=axis)
    return [im.result(v)]


@_handles("ReverseSequence")
def _reverse_sequence(im: _Importer, node, a, ins):
    x, lens = ins
    v = im.emit1("ReverseSequence", [im.value(x), _indices(im, lens, "sequence_lens")],
                 batch_axis=int(a.get("batch_axis", 1)), time_axis=int(a.get("time_axis", 0)))
    return [im.result(v)]


@_handles("Col2Im")
def _col2im(im: _Importer, node, a, ins):
    """image_shape and block_shape must be constant (they fix the output shape)."""
    image = _ints(im.const_of(ins[1], "Col2Im image_shape"))
    block = _ints(im.const_of(ins[2], "Col2Im block_shape"))
    v = im.emit1("Col2Im", [im.value(ins[0])], image_shape=image, block_shape=block,
                 dilations=[int(d) for d in a.get("dilations", [])],
                 pads=[int(d) for d in a.get("pads", [])],
                 strides=[int(d) for d in a.get("strides", [])])
    return [im.result(v)]

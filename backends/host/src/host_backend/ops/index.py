"""Host kernels of xir.ops.index: Expand, Tile, the gathers and scatters, OneHot, Range, Trilu,
ReverseSequence, Col2Im and Convert.

After onnx/reference, vectorised with numpy (no loop over elements). Data keeps its element
type; indices may be any integer type and negative (counted from the end of their axis). An
index outside its axis is the caller's data error: `TensorError` naming the op and the index.
Repeated scatter indices combine in index order (the last "none" update wins).
"""

from __future__ import annotations

import numpy as np

from xir.ops.index import col2im_blocks
from xir.types import ScalarType
from xrt.errors import TensorError

from ._common import fresh, require


def _norm_index(idx: np.ndarray, n: int, op: str, what: str = "index") -> np.ndarray:
    """Integer indices into an axis of length n, negatives counted from its end."""
    idx = np.asarray(idx)
    if not (np.issubdtype(idx.dtype, np.integer)):
        raise TensorError(f"{op}: {what} must be integers, not {idx.dtype}")
    idx = idx.astype(np.int64, copy=False)
    if idx.size and (idx.min() < -n or idx.max() >= n):
        bad = idx[(idx < -n) | (idx >= n)].reshape(-1)[0]
        raise TensorError(f"{op}: {what} {int(bad)} is outside [-{n}, {n})")
    return np.where(idx < 0, idx + n, idx)


def expand(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """Broadcast x with `shape` (ONNX Expand: both ways)."""
    x = np.asarray(inputs[0])
    shape = tuple(int(d) for d in require(attrs, "shape", "Expand"))
    out = np.broadcast_shapes(x.shape, shape)
    return [fresh(np.broadcast_to(x, out))]


def tile(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    reps = [int(r) for r in require(attrs, "repeats", "Tile")]
    return [fresh(np.tile(x, reps))]


def gather(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    data = np.asarray(inputs[0])
    axis = int(attrs.get("axis", 0)) % max(data.ndim, 1)
    idx = _norm_index(inputs[1], data.shape[axis], "Gather")
    return [fresh(np.take(data, idx, axis=axis))]


def gather_elements(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    data = np.asarray(inputs[0])
    axis = int(attrs.get("axis", 0)) % max(data.ndim, 1)
    idx = _norm_index(inputs[1], data.shape[axis], "GatherElements")
    # the indices may be shorter than data on the other axes: read that corner of data
    corner = tuple(slice(None) if a == axis else slice(0, idx.shape[a]) for a in range(data.ndim))
    return [fresh(np.take_along_axis(data[corner], idx, axis=axis))]


def _nd_index(data_shape: tuple[int, ...], idx: np.ndarray, op: str) -> tuple[np.ndarray, ...]:
    """The index tuple of ND indices (last axis m) into the first m axes of data."""
    m = idx.shape[-1]
    return tuple(_norm_index(idx[..., j], data_shape[j], op) for j in range(m))


def gather_nd(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    data = np.asarray(inputs[0])
    idx = np.asarray(inputs[1])
    b = int(attrs.get("batch_dims", 0))
    batch = data.shape[:b]
    nb = int(np.prod(batch, dtype=np.int64))
    d = data.reshape((nb,) + data.shape[b:])
    i = idx.reshape((nb, -1, idx.shape[-1]))
    parts = _nd_index(d.shape[1:], i, "GatherND")
    rows = np.arange(nb).reshape(nb, 1)
    out = d[(rows,) + parts]
    m = idx.shape[-1]
    return [fresh(out.reshape(idx.shape[:-1] + data.shape[b + m:]))]


_UFUNC_AT = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter(out: np.ndarray, where: tuple, upd: np.ndarray, reduction: str, op: str) -> None:
    if reduction == "none":
        out[where] = upd
    elif reduction in _UFUNC_AT:
        _UFUNC_AT[reduction].at(out, where, upd)
    else:
        raise ValueError(f"{op}: reduction {reduction!r} is not one of none, "
                         f"{', '.join(_UFUNC_AT)}")


def scatter_elements(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    data, upd = np.asarray(inputs[0]), np.asarray(inputs[2])
    axis = int(attrs.get("axis", 0)) % max(data.ndim, 1)
    idx = _norm_index(inputs[1], data.shape[axis], "ScatterElements")
    where = list(np.indices(idx.shape, sparse=True))
    where[axis] = idx
    out = fresh(data)
    _scatter(out, tuple(where), upd.astype(data.dtype, copy=False),
             str(attrs.get("reduction", "none")), "ScatterElements")
    return [out]


def scatter_nd(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    data, idx, upd = (np.asarray(a) for a in inputs)
    out = fresh(data)
    where = _nd_index(data.shape, idx, "ScatterND")
    _scatter(out, where, upd.astype(data.dtype, copy=False),
             str(attrs.get("reduction", "none")), "ScatterND")
    return [out]


def one_hot(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """values[1] where the (int64-cast) index equals the position on the new axis, else
    values[0]; negative indices count from depth, indices outside [-depth, depth) match none."""
    idx = np.asarray(inputs[0])
    vals = np.asarray(inputs[1]).reshape(-1)
    depth = int(require(attrs, "depth", "OneHot"))
    axis = int(attrs.get("axis", -1)) % (idx.ndim + 1)
    i = idx.astype(np.int64)
    i = np.where(i < 0, i + depth, i)
    pos = np.arange(depth).reshape((depth,) + (1,) * (idx.ndim - axis))
    hit = np.expand_dims(i, axis) == pos
    return [np.asarray(np.where(hit, vals[1], vals[0]).astype(vals.dtype), order="C")]


def range_(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """start + i * delta for i < size; fails when the inputs give another length."""
    start, limit, delta = (np.asarray(a).reshape(()) for a in inputs)
    size = int(require(attrs, "size", "Range"))
    if delta == 0:
        raise TensorError("Range: delta must not be 0")
    want = max(int(np.ceil((float(limit) - float(start)) / float(delta))), 0)
    if want != size:
        raise TensorError(f"Range: start {start}, limit {limit}, delta {delta} give {want} "
                          f"entries, the network was built for {size}")
    y = np.arange(size, dtype=np.float64 if start.dtype.kind == "f" else np.int64)
    return [np.asarray((start + y * delta).astype(start.dtype), order="C")]


def trilu(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """Upper / lower triangle of the last two axes from diagonal k (second input, else attr)."""
    x = np.asarray(inputs[0])
    k = int(np.asarray(inputs[1]).reshape(-1)[0]) if len(inputs) > 1 else int(attrs.get("k", 0))
    return [fresh(np.triu(x, k) if attrs.get("upper", True) else np.tril(x, k))]


def reverse_sequence(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """Per batch entry b, the first lens[b] steps along time_axis in reverse order."""
    x = np.asarray(inputs[0])
    b_ax = int(attrs.get("batch_axis", 1)) % x.ndim
    t_ax = int(attrs.get("time_axis", 0)) % x.ndim
    n_t = x.shape[t_ax]
    lens = np.asarray(inputs[1]).astype(np.int64).reshape(-1)
    if lens.size and (lens.min() < 0 or lens.max() > n_t):
        raise TensorError(f"ReverseSequence: sequence lengths {lens.tolist()} must lie in "
                          f"0..{n_t}")
    t = np.arange(n_t).reshape(1, n_t)
    lens_c = lens.reshape(-1, 1)
    src_t = np.where(t < lens_c, lens_c - 1 - t, t)  # (batch, time): the step each reads
    shape = [1] * x.ndim
    shape[b_ax], shape[t_ax] = x.shape[b_ax], n_t
    if b_ax > t_ax:
        src_t = src_t.T
    src = src_t.reshape(shape)
    return [fresh(np.take_along_axis(x, np.broadcast_to(src, x.shape), axis=t_ax))]


def col2im(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """Sum the columns of `[N, C*prod(block), L]` into `[N, C, *image]`: every (block
    offset, block position) pair adds into one pixel of the padded image (`ufunc.at`), the
    pads are cut off at the end."""
    x = np.asarray(inputs[0])
    image = [int(d) for d in require(attrs, "image_shape", "Col2Im")]
    block = [int(d) for d in require(attrs, "block_shape", "Col2Im")]
    nd = len(image)
    dil = [int(d) for d in attrs.get("dilations") or [1] * nd]
    pads = [int(d) for d in attrs.get("pads") or [0] * (2 * nd)]
    strides = [int(d) for d in attrs.get("strides") or [1] * nd]
    blocks = col2im_blocks(image, block, dil, pads, strides)
    padded = [image[d] + pads[d] + pads[nd + d] for d in range(nd)]
    n, ck, length = x.shape
    kk = int(np.prod(block))
    if ck % kk or length != int(np.prod(blocks)):
        raise ValueError(f"Col2Im: input {list(x.shape)} does not fit block_shape {block} and "
                         f"{blocks} blocks")
    c = ck // kk
    # padded coordinate of (offset k, block b) on axis d: b * stride + k * dilation
    offs = np.indices(block).reshape(nd, kk, 1)
    pos = np.indices(blocks).reshape(nd, 1, length)
    coords = pos * np.array(strides).reshape(nd, 1, 1) + offs * np.array(dil).reshape(nd, 1, 1)
    flat = np.ravel_multi_index(tuple(coords), padded).reshape(-1)  # (kk * L,)
    cols = x.reshape(n * c, kk * length).T  # one row per (offset, block)
    acc_dt = np.float32 if x.dtype == np.float16 else x.dtype
    out = np.zeros((int(np.prod(padded)), n * c), dtype=acc_dt)
    np.add.at(out, flat, cols.astype(acc_dt, copy=False))
    out = out.T.reshape([n, c] + padded)
    crop = tuple([slice(None), slice(None)] +
                 [slice(pads[d], pads[d] + image[d]) for d in range(nd)])
    return [np.asarray(out[crop].astype(x.dtype, copy=False), order="C")]


def convert(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """astype `to`: float -> int truncates toward zero, x -> bool is x != 0."""
    x = np.asarray(inputs[0])
    dt = ScalarType.parse(str(require(attrs, "to", "Convert"))).numpy_dtype
    with np.errstate(invalid="ignore", over="ignore"):
        return [np.array(x != 0 if dt == np.bool_ else x.astype(dt), order="C")]


# --------------------------------------------------------------------------------------------
# Integer kernels: the ops that only move codes run on them; indices are plain integers and the
# data's scale passes through (docs/quantization.md). Updates are moved to the data's scale.
# --------------------------------------------------------------------------------------------


def moves_codes(float_kernel, name: str, rescaled_inputs: tuple[int, ...] = ()):
    """An integer kernel running `float_kernel` on codes: input k in `rescaled_inputs` is first
    moved to input 0's scale, each quantized output from input 0's scale to its own; an output
    that is not quantized (TopK / ArgReduce indices) passes as it is."""

    def kernel(inputs, attrs, in_types, out_types, *, fake=False):
        from ._common import is_q, rescale, scale1

        s_in = scale1(in_types[0])
        ins = list(inputs)
        for k in rescaled_inputs:
            ins[k] = rescale(np.asarray(ins[k]), scale1(in_types[k]), s_in,
                             in_types[0].numpy_dtype, fake)
        outs = float_kernel(ins, attrs)
        return [rescale(y, s_in, scale1(t), t.numpy_dtype, fake) if is_q(t) else y
                for y, t in zip(outs, out_types)]

    kernel.__name__ = f"{name}_int"
    kernel.__doc__ = f"{name} on integer codes (the scale passes through)."
    return kernel


INT_KERNELS: dict = {
    "Expand": moves_codes(expand, "expand"),
    "Tile": moves_codes(tile, "tile"),
    "Gather": moves_codes(gather, "gather"),
    "GatherElements": moves_codes(gather_elements, "gather_elements"),
    "GatherND": moves_codes(gather_nd, "gather_nd"),
    "ScatterElements": moves_codes(lambda i, a: scatter_elements(i, _moving(a)),
                                   "scatter_elements", (2,)),
    "ScatterND": moves_codes(lambda i, a: scatter_nd(i, _moving(a)), "scatter_nd", (2,)),
    "ReverseSequence": moves_codes(reverse_sequence, "reverse_sequence"),
}


def _moving(attrs: dict) -> dict:
    """Scatter attributes whose reduction only moves codes: none, max, min (add and mul
    would need a rescale of the result)."""
    red = str(attrs.get("reduction", "none"))
    if red not in ("none", "max", "min"):
        raise ValueError(f"scatter reduction {red!r} has no integer form (it rescales)")
    return attrs


FLOAT_KERNELS: dict = {
    "Expand": expand,
    "Tile": tile,
    "Gather": gather,
    "GatherElements": gather_elements,
    "GatherND": gather_nd,
    "ScatterElements": scatter_elements,
    "ScatterND": scatter_nd,
    "OneHot": one_hot,
    "Range": range_,
    "Trilu": trilu,
    "ReverseSequence": reverse_sequence,
    "Convert": convert,
    "Col2Im": col2im,
}

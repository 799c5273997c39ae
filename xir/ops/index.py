"""Index and shape ops: broadcasts and tiles, gathers and scatters, one-hot, ranges, triangles,
sequence reversal, Col2Im and the plain element-type conversion.

Semantics are ONNX's (opsets 7-21). Indices are inputs (constant ones are Params), may be
negative (counted from the end of their axis) and are checked when the op runs. Every output
shape follows from the input shapes and the attributes, so nothing here depends on data.
"""

from __future__ import annotations

import math

from ..errors import FieldTypeError
from ..types import ScalarType, TensorType
from .base import REQUIRED, Operation, broadcast, fail, norm_axis, register_op

#: ScatterElements / ScatterND reductions (ONNX names; "none" overwrites)
SCATTER_REDUCTIONS = ("none", "add", "mul", "max", "min")


def _need_int(op: Operation, t: TensorType, what: str) -> None:
    if not t.element_dtype.is_int() or t.is_quantized():
        raise fail(op, f"{what} must be an integer tensor, not {t.element_dtype!r}", "inputs")


class _Indexed(Operation):
    """An op reading `data` (input 0) at integer `indices` (input 1): the output has the data's
    element type, its shape from `infer_shapes` over the declared inputs."""

    def infer_types(self, types: list[TensorType]) -> list[TensorType]:
        _need_int(self, types[1], "indices")
        shapes = [t.shape for t in types[:self.MAX_INPUTS]]
        return [TensorType(types[0].element_dtype, self.infer_shapes(shapes)[0])]


@register_op
class Expand(Operation):
    """Broadcast the input against `shape` (numpy's rule both ways, as ONNX Expand: a 1 in
    `shape` keeps the input's dimension)."""

    op_type = "Expand"
    KEEPS_LAYOUT = False
    ATTRS = {"shape": (list, REQUIRED)}

    def infer_shapes(self, shapes):
        want = tuple(int(d) for d in self.attrs["shape"])
        if any(d < 0 for d in want):
            raise fail(self, f"negative dimension in shape {list(want)}", "shape")
        return [broadcast(self, tuple(shapes[0]), want)]


@register_op
class Tile(Operation):
    """Repeat the input `repeats[i]` times along axis i (numpy.tile, ONNX Tile)."""

    op_type = "Tile"
    ATTRS = {"repeats": (list, REQUIRED)}

    def infer_shapes(self, shapes):
        x = tuple(shapes[0])
        reps = [int(r) for r in self.attrs["repeats"]]
        if len(reps) != len(x) or any(r < 0 for r in reps):
            raise fail(self, f"repeats {reps} need {len(x)} non-negative entries", "repeats")
        return [tuple(d * r for d, r in zip(x, reps))]


@register_op
class Gather(_Indexed):
    """``take(data, indices, axis)``: the output is ``data.shape[:axis] + indices.shape +
    data.shape[axis+1:]`` (ONNX Gather)."""

    op_type = "Gather"
    KEEPS_LAYOUT = False
    MIN_INPUTS = MAX_INPUTS = 2
    ATTRS = {"axis": (int, 0)}

    def infer_shapes(self, shapes):
        data, idx = tuple(shapes[0]), tuple(shapes[1])
        ax = norm_axis(self, self.attrs["axis"], len(data))
        return [data[:ax] + idx + data[ax + 1:]]


@register_op
class GatherElements(_Indexed):
    """``out[i][j][k] = data[index[i][j][k]][j][k]`` along `axis` (ONNX GatherElements):
    the output has the indices' shape."""

    op_type = "GatherElements"
    MIN_INPUTS = MAX_INPUTS = 2
    ATTRS = {"axis": (int, 0)}

    def infer_shapes(self, shapes):
        data, idx = tuple(shapes[0]), tuple(shapes[1])
        ax = norm_axis(self, self.attrs["axis"], len(data))
        if len(idx) != len(data) or any(i > d for k, (i, d) in enumerate(zip(idx, data))
                                         if k != ax):
            raise fail(self, f"indices {list(idx)} do not fit data {list(data)} outside "
                             f"axis {ax}", "inputs")
        return [idx]


@register_op
class GatherND(_Indexed):
    """Slices of `data` addressed by the last axis of `indices`, after `batch_dims` leading
    axes both share (ONNX GatherND)."""

    op_type = "GatherND"
    KEEPS_LAYOUT = False
    MIN_INPUTS = MAX_INPUTS = 2
    ATTRS = {"batch_dims": (int, 0)}

    def infer_shapes(self, shapes):
        data, idx = tuple(shapes[0]), tuple(shapes[1])
        b = self.attrs["batch_dims"]
        if not idx or b < 0 or b >= min(len(data), len(idx)):
            raise fail(self, f"batch_dims {b} must be below the ranks of data {list(data)} "
                             f"and indices {list(idx)}", "batch_dims")
        if data[:b] != idx[:b]:
            raise fail(self, f"the first {b} axes of data {list(data)} and indices "
                             f"{list(idx)} differ", "inputs")
        m = idx[-1]
        if not 1 <= m <= len(data) - b:
            raise fail(self, f"index tuples of length {m} do not address data {list(data)} "
                             f"after {b} batch axes", "inputs")
        return [idx[:-1] + data[b + m:]]


@register_op
class ScatterElements(_Indexed):
    """A copy of `data` with ``out[index[i][j]][j] = update[i][j]`` along `axis`, or combined
    with the old value by `reduction` (add, mul, max, min; ONNX ScatterElements, and the old
    Scatter). Repeated indices combine in index order."""

    op_type = "ScatterElements"
    MIN_INPUTS = MAX_INPUTS = 3
    ATTRS = {"axis": (int, 0), "reduction": (str, "none")}
    CHOICES = {**Operation.CHOICES, "reduction": SCATTER_REDUCTIONS}

    def infer_shapes(self, shapes):
        data, idx, upd = (tuple(s) for s in shapes)
        ax = norm_axis(self, self.attrs["axis"], len(data))
        if idx != upd or len(idx) != len(data) or any(
                i > d for k, (i, d) in enumerate(zip(idx, data)) if k != ax):
            raise fail(self, f"indices {list(idx)} and updates {list(upd)} must match and fit "
                             f"data {list(data)} outside axis {ax}", "inputs")
        return [data]


@register_op
class ScatterND(_Indexed):
    """A copy of `data` whose slices addressed by the last axis of `indices` are `updates`
    (or combined by `reduction`; ONNX ScatterND)."""

    op_type = "ScatterND"
    MIN_INPUTS = MAX_INPUTS = 3
    ATTRS = {"reduction": (str, "none")}
    CHOICES = {**Operation.CHOICES, "reduction": SCATTER_REDUCTIONS}

    def infer_shapes(self, shapes):
        data, idx, upd = (tuple(s) for s in shapes)
        if not idx or not 1 <= idx[-1] <= len(data):
            raise fail(self, f"indices {list(idx)} do not address data {list(data)}", "inputs")
        want = idx[:-1] + data[idx[-1]:]
        if upd != want:
            raise fail(self, f"updates are {list(upd)}, data {list(data)} and indices "
                             f"{list(idx)} need {list(want)}", "inputs")
        return [data]


@register_op
class OneHot(Operation):
    """`values[1]` where the index equals the position along the new axis `axis` (of length
    `depth`), `values[0]` elsewhere; negative indices count from `depth`, indices outside
    ``[-depth, depth)`` give an all-off row (ONNX OneHot). Inputs: indices, values (2 entries);
    the output has the values' element type."""

    op_type = "OneHot"
    KEEPS_LAYOUT = False
    MIN_INPUTS = MAX_INPUTS = 2
    ATTRS = {"axis": (int, -1), "depth": (int, REQUIRED)}

    def infer_shapes(self, shapes):
        idx, vals = tuple(shapes[0]), tuple(shapes[1])
        if math.prod(vals) != 2:
            raise fail(self, f"values must hold 2 entries (off, on), not shape {list(vals)}",
                       "inputs")
        if self.attrs["depth"] < 1:
            raise fail(self, f"depth must be >= 1, not {self.attrs['depth']}", "depth")
        ax = norm_axis(self, self.attrs["axis"], len(idx) + 1)
        return [idx[:ax] + (self.attrs["depth"],) + idx[ax:]]

    def infer_types(self, types: list[TensorType]) -> list[TensorType]:
        return [TensorType(types[1].element_dtype,
                           self.infer_shapes([types[0].shape, types[1].shape])[0])]


@register_op
class Range(Operation):
    """``start + i * delta`` for i < `size` (ONNX Range): inputs start, limit, delta (scalars).
    `size` is the static output length; running with inputs that give another length fails."""

    op_type = "Range"
    KEEPS_LAYOUT = False
    MIN_INPUTS = MAX_INPUTS = 3
    ATTRS = {"size": (int, REQUIRED)}

    def infer_shapes(self, shapes):
        for name, s in zip(("start", "limit", "delta"), shapes):
            if math.prod(s) != 1:
                raise fail(self, f"{name} must be a scalar, not shape {list(s)}", "inputs")
        if self.attrs["size"] < 0:
            raise fail(self, f"size must be >= 0, not {self.attrs['size']}", "size")
        return [(self.attrs["size"],)]


@register_op
class Trilu(Operation):
    """The upper (`upper`) or lower triangle of the last two axes, from diagonal `k`; the rest
    zero (ONNX Trilu). A second input (one integer), when present, is k, read when the op
    runs; the attribute is then unused."""

    op_type = "Trilu"
    MAX_INPUTS = 2
    ATTRS = {"upper": (bool, True), "k": (int, 0)}

    def infer_shapes(self, shapes):
        if len(shapes[0]) < 2:
            raise fail(self, f"needs rank >= 2, got shape {list(shapes[0])}", "inputs")
        if len(shapes) > 1 and math.prod(shapes[1]) != 1:
            raise fail(self, f"the k input must hold one number, not shape {list(shapes[1])}",
                       "inputs")
        return [tuple(shapes[0])]


@register_op
class ReverseSequence(Operation):
    """Reverse the first ``lens[b]`` entries along `time_axis` of every batch entry b along
    `batch_axis` (ONNX ReverseSequence). Inputs: x, lens (int, one per batch entry)."""

    op_type = "ReverseSequence"
    MIN_INPUTS = MAX_INPUTS = 2
    ATTRS = {"batch_axis": (int, 1), "time_axis": (int, 0)}

    def infer_shapes(self, shapes):
        x, lens = tuple(shapes[0]), tuple(shapes[1])
        b = norm_axis(self, self.attrs["batch_axis"], len(x), "batch_axis")
        t = norm_axis(self, self.attrs["time_axis"], len(x), "time_axis")
        if b == t:
            raise fail(self, "batch_axis and time_axis must differ", "batch_axis")
        if lens != (x[b],):
            raise fail(self, f"lens must have shape [{x[b]}], not {list(lens)}", "inputs")
        return [x]


def col2im_blocks(image: list[int], block: list[int], dilations: list[int], pads: list[int],
                  strides: list[int]) -> list[int]:
    """Blocks per spatial axis of ONNX Col2Im / im2col: ``(image + pads - extent) // stride
    + 1`` with ``extent = dilation * (block - 1) + 1``; pads are begins then ends."""
    n = len(image)
    return [(image[d] + pads[d] + pads[n + d] - dilations[d] * (block[d] - 1) - 1)
            // strides[d] + 1 for d in range(n)]


@register_op
class Col2Im(Operation):
    """ONNX Col2Im: input `[N, C * prod(block_shape), L]`, its columns summed back into
    `[N, C, *image_shape]` (the inverse of im2col: overlapping blocks add up). dilations,
    pads (begins then ends) and strides as the convolutions' (empty: 1s / 0s)."""

    op_type = "Col2Im"
    KEEPS_LAYOUT = False
    ATTRS = {"image_shape": (list, REQUIRED), "block_shape": (list, REQUIRED),
             "dilations": (list, []), "pads": (list, []), "strides": (list, [])}

    def geometry(self) -> tuple[list[int], list[int], list[int], list[int], list[int]]:
        """image, block, dilations, pads, strides with the defaults filled in."""
        a = self.attrs
        image, block = [int(d) for d in a["image_shape"]], [int(d) for d in a["block_shape"]]
        n = len(image)
        dil = [int(d) for d in a["dilations"]] or [1] * n
        pads = [int(d) for d in a["pads"]] or [0] * (2 * n)
        strides = [int(d) for d in a["strides"]] or [1] * n
        if not n or len(block) != n or len(dil) != n or len(pads) != 2 * n or \
                len(strides) != n:
            raise fail(self, f"image_shape {image}, block_shape {block}, dilations {dil}, "
                             f"pads {pads}, strides {strides} disagree on the spatial rank",
                       "image_shape")
        if min(block + dil + strides) < 1 or min(pads) < 0 or min(image) < 1:
            raise fail(self, "block_shape, dilations and strides must be >= 1, pads >= 0",
                       "block_shape")
        return image, block, dil, pads, strides

    def infer_shapes(self, shapes):
        x = tuple(shapes[0])
        image, block, dil, pads, strides = self.geometry()
        if len(x) != 3 or x[1] % math.prod(block):
            raise fail(self, f"input {list(x)} is not [N, C * {math.prod(block)}, L]", "inputs")
        blocks = col2im_blocks(image, block, dil, pads, strides)
        if min(blocks) < 1 or math.prod(blocks) != x[2]:
            raise fail(self, f"{x[2]} columns, the geometry gives {blocks} blocks", "inputs")
        return [(x[0], x[1] // math.prod(block), *image)]


@register_op
class Convert(Operation):
    """A plain element-type conversion to `to` (an xir scalar type such as "@sint(64)"), as
    ONNX Cast / CastLike: float to integer truncates toward zero, anything to bool is
    ``!= 0``. (xir's Cast is the quantization cast; this one knows no scales.)"""

    op_type = "Convert"
    ATTRS = {"to": (str, REQUIRED)}

    def check_attr_values(self) -> None:
        super().check_attr_values()
        try:
            to = ScalarType.parse(self.attrs["to"])
        except FieldTypeError as err:
            raise FieldTypeError(f"to: {err}", op_id=self.op_id, field="to") from err
        if to.kind == "bf":
            raise FieldTypeError("to: bfloat16 values are raw bits in xir; Convert has no "
                                 "conversion to them", op_id=self.op_id, field="to")

    def infer_types(self, types: list[TensorType]) -> list[TensorType]:
        src = types[0].element_dtype
        if src.is_quantized or src.kind == "bf":
            raise fail(self, f"converts plain numbers, not {src!r} (quantized values go "
                             f"through Cast)", "inputs")
        return [TensorType(ScalarType.parse(self.attrs["to"]), types[0].shape)]

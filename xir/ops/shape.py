"""Data-movement ops: concat/split/slice, reshape/transpose/squeeze, pad, align/prune axis."""

from __future__ import annotations

from .base import REQUIRED, Operation, fail, norm_axis, prod, register_op


@register_op
class Concat(Operation):
    """Join inputs along `axis`; every other dimension must agree."""

    op_type = "Concat"
    MIN_INPUTS = 1
    MAX_INPUTS = None
    ATTRS = {"axis": (int, -1)}

    def infer_shapes(self, shapes):
        first = shapes[0]
        ax = norm_axis(self, self.attrs["axis"], len(first))
        total = 0
        for i, s in enumerate(shapes):
            if len(s) != len(first) or any(
                    d != e for j, (d, e) in enumerate(zip(s, first)) if j != ax):
                raise fail(self, f"input {i} shape {list(s)} does not fit {list(first)} "
                                 f"outside axis {ax}", "inputs")
            total += s[ax]
        out = list(first)
        out[ax] = total
        return [tuple(out)]


@register_op
class Split(Operation):
    """Cut one input along `axis` into pieces of the given `sections` sizes."""

    op_type = "Split"
    N_OUTPUTS = None
    ATTRS = {"axis": (int, -1), "sections": (list, REQUIRED)}

    def n_outputs(self) -> int:
        return len(self.attrs["sections"])

    def infer_shapes(self, shapes):
        x = shapes[0]
        ax = norm_axis(self, self.attrs["axis"], len(x))
        secs = self.attrs["sections"]
        if not secs or any(not isinstance(s, int) or s < 0 for s in secs) or sum(secs) != x[ax]:
            raise fail(self, f"sections {secs} must be non-negative and sum to {x[ax]}",
                       "sections")
        out = []
        for s in secs:
            shape = list(x)
            shape[ax] = s
            out.append(tuple(shape))
        return out


def slice_range(begin: int, end: int, step: int, dim: int) -> range:
    """Python slice semantics on one axis (negative indices, clamping, negative steps)."""
    return range(*slice(begin, end, step).indices(dim))


@register_op
class Slice(Operation):
    """x[begin:end:step] with one entry per axis (python slice semantics, clamped)."""

    op_type = "Slice"
    ATTRS = {"begin": (list, REQUIRED), "end": (list, REQUIRED), "step": (list, [])}

    def infer_shapes(self, shapes):
        x = shapes[0]
        a = self.attrs
        step = a["step"] or [1] * len(x)
        if not (len(a["begin"]) == len(a["end"]) == len(step) == len(x)):
            raise fail(self, f"begin/end/step need {len(x)} entries each", "begin")
        if any(s == 0 for s in step):
            raise fail(self, "step must not be 0", "step")
        return [tuple(len(slice_range(b, e, s, d))
                      for b, e, s, d in zip(a["begin"], a["end"], step, x))]


@register_op
class ReduceMean(Operation):
    """The mean over `axes` (float; the mean over H and W of an NHWC map is an AvgPool2d)."""

    op_type = "ReduceMean"
    KEEPS_LAYOUT = False
    ATTRS = {"axes": (list, REQUIRED), "keepdims": (bool, True)}

    def infer_shapes(self, shapes):
        x = tuple(shapes[0])
        axes = {norm_axis(self, int(a), len(x), "axes") for a in self.attrs["axes"]}
        if self.attrs["keepdims"]:
            return [tuple(1 if i in axes else d for i, d in enumerate(x))]
        return [tuple(d for i, d in enumerate(x) if i not in axes)]


@register_op
class Reshape(Operation):
    """Row-major reshape; one -1 entry is inferred, a 0 copies the input dimension."""

    op_type = "Reshape"
    KEEPS_LAYOUT = False
    ATTRS = {"shape": (list, REQUIRED)}

    def infer_shapes(self, shapes):
        x = shapes[0]
        want = list(self.attrs["shape"])
        for i, d in enumerate(want):
            if d == 0:
                if i >= len(x):
                    raise fail(self, f"shape entry {i} is 0 but the input has rank {len(x)}",
                               "shape")
                want[i] = x[i]
        if want.count(-1) > 1 or any(d < -1 for d in want):
            raise fail(self, f"bad target shape {self.attrs['shape']}", "shape")
        if -1 in want:
            known = prod(d for d in want if d != -1)
            if known == 0 or prod(x) % known:
                raise fail(self, f"cannot reshape {list(x)} into {self.attrs['shape']}", "shape")
            want[want.index(-1)] = prod(x) // known
        if prod(want) != prod(x):
            raise fail(self, f"cannot reshape {list(x)} ({prod(x)} elements) into {want}",
                       "shape")
        return [tuple(want)]


@register_op
class ChannelShuffle(Operation):
    """ShuffleNet's channel shuffle on the last (channel) axis: with ``n = C / groups``, output
    channel ``j * groups + i`` is input channel ``i * n + j``. Exporters write it as
    Reshape -> Transpose -> Reshape; the compiler recognises that and keeps one op."""

    op_type = "ChannelShuffle"
    ATTRS = {"groups": (int, REQUIRED)}

    def infer_shapes(self, shapes):
        x = shapes[0]
        g = self.attrs["groups"]
        if not x or g < 1 or x[-1] % g:
            raise fail(self, f"{x[-1] if x else 0} channels do not split into {g} groups",
                       "groups")
        return [tuple(x)]


@register_op
class Transpose(Operation):
    """Permute axes: output axis i is input axis perm[i]."""

    op_type = "Transpose"
    ATTRS = {"perm": (list, REQUIRED)}

    def output_layout(self, layout, rank):
        """Axis letters follow the permutation (NHWC with [0, 3, 1, 2] gives NCHW)."""
        if layout.rank == rank and not layout.is_tiled() and "*" not in layout.spec:
            from ..types import Layout

            return Layout("".join(layout.spec[p] for p in self.attrs["perm"]))
        return None

    def infer_shapes(self, shapes):
        x = shapes[0]
        perm = self.attrs["perm"]
        if sorted(p % len(x) if -len(x) <= p < len(x) else -999 for p in perm) != \
                list(range(len(x))):
            raise fail(self, f"perm {perm} is not a permutation of {len(x)} axes", "perm")
        return [tuple(x[p] for p in perm)]


@register_op
class Squeeze(Operation):
    """Drop size-1 axes (`axes` empty: all of them)."""

    op_type = "Squeeze"
    KEEPS_LAYOUT = False
    ATTRS = {"axes": (list, [])}

    def infer_shapes(self, shapes):
        x = shapes[0]
        axes = {norm_axis(self, a, len(x), "axes") for a in self.attrs["axes"]}
        if not axes:
            axes = {i for i, d in enumerate(x) if d == 1}
        for a in axes:
            if x[a] != 1:
                raise fail(self, f"axis {a} has length {x[a]}, not 1", "axes")
        return [tuple(d for i, d in enumerate(x) if i not in axes)]


@register_op
class Unsqueeze(Operation):
    """Insert size-1 axes at the given positions of the output."""

    op_type = "Unsqueeze"
    KEEPS_LAYOUT = False
    ATTRS = {"axes": (list, REQUIRED)}

    def infer_shapes(self, shapes):
        x = list(shapes[0])
        rank = len(x) + len(self.attrs["axes"])
        axes = sorted(norm_axis(self, a, rank, "axes") for a in self.attrs["axes"])
        if len(set(axes)) != len(axes):
            raise fail(self, f"repeated axes {self.attrs['axes']}", "axes")
        for a in axes:
            x.insert(a, 1)
        return [tuple(x)]


PAD_MODES = ("constant", "reflect", "edge", "wrap")


@register_op
class Pad(Operation):
    """Pad every axis by pad_before/pad_after: a constant `value`, reflect (mirror without the
    edge), edge (repeat it) or wrap (periodic), as numpy.pad and ONNX Pad. A negative pad
    crops that side first (ONNX's negative pads); the other pads then grow what is left."""

    op_type = "Pad"
    ATTRS = {"pad_before": (list, REQUIRED), "pad_after": (list, REQUIRED),
             "mode": (str, "constant"), "value": (float, 0.0)}

    def infer_shapes(self, shapes):
        x = shapes[0]
        pb, pa = self.attrs["pad_before"], self.attrs["pad_after"]
        if len(pb) != len(x) or len(pa) != len(x):
            raise fail(self, f"pad_before/pad_after need {len(x)} entries", "pad_before")
        if self.attrs["mode"] not in PAD_MODES:
            raise fail(self, f"unknown pad mode {self.attrs['mode']!r}", "mode")
        out = tuple(d + b + a for d, b, a in zip(x, pb, pa))
        if any(d < 0 for d in out):
            raise fail(self, f"negative pads cut {list(x)} below zero", "pad_before")
        return [out]


@register_op
class AlignAxis(Operation):
    """Zero-pad one axis up to a multiple of `align_unit` (the hardware channel unit)."""

    op_type = "AlignAxis"
    ATTRS = {"axis": (int, -1), "align_unit": (int, 16)}

    def infer_shapes(self, shapes):
        x = list(shapes[0])
        ax = norm_axis(self, self.attrs["axis"], len(x))
        unit = self.attrs["align_unit"]
        if unit < 1:
            raise fail(self, f"align_unit must be >= 1, got {unit}", "align_unit")
        x[ax] = -(-x[ax] // unit) * unit
        return [tuple(x)]


@register_op
class PruneAxis(Operation):
    """Keep the first `size` entries of one axis (undoes AlignAxis)."""

    op_type = "PruneAxis"
    ATTRS = {"axis": (int, -1), "size": (int, REQUIRED)}

    def infer_shapes(self, shapes):
        x = list(shapes[0])
        ax = norm_axis(self, self.attrs["axis"], len(x))
        if not 0 < self.attrs["size"] <= x[ax]:
            raise fail(self, f"size {self.attrs['size']} outside 1..{x[ax]}", "size")
        x[ax] = self.attrs["size"]
        return [tuple(x)]

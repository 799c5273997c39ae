"""Neural-network ops on NHWC feature maps: convolutions, matmul, pools, norm and resize."""

from __future__ import annotations

import math

from .base import REQUIRED, Operation, fail, need_rank, norm_axis, register_op
from .resize_taps import COORDINATE_MODES, NEAREST_MODES

FUSED_ACT_ATTRS = {
    # An activation folded into the op (the optimize stage folds a following Relu here):
    # act "relu" applies the Relu family with negative slope act_alpha and upper clip act_max.
    "act": (str, "none"), "act_alpha": (float, 0.0), "act_max": (float, float("inf")),
}

_CONV_ATTRS = {
    "stride_height": (int, 1), "stride_width": (int, 1),
    "pad_top": (int, 0), "pad_bottom": (int, 0), "pad_left": (int, 0), "pad_right": (int, 0),
    "dilation_height": (int, 1), "dilation_width": (int, 1),
    "groups": (int, 1), "padding_mode": (str, "zeros"),
    **FUSED_ACT_ATTRS,
}
#: the padding modes a convolution may name (torch's padding_mode)
_CONV_CHOICES = {**Operation.CHOICES,
                 "padding_mode": ("zeros", "reflect", "replicate", "circular")}


def _check_positive(op: Operation, *names: str) -> None:
    for name in names:
        if op.attrs[name] < 1:
            raise fail(op, f"{name} must be >= 1, got {op.attrs[name]}", name)
    for name in ("pad_top", "pad_bottom", "pad_left", "pad_right"):
        if name in op.attrs and op.attrs[name] < 0:
            raise fail(op, f"{name} must be >= 0, got {op.attrs[name]}", name)


def _bias_check(op: Operation, shapes, cout: int) -> None:
    if len(shapes) > 2 and tuple(shapes[2]) != (cout,):
        raise fail(op, f"bias must have shape [{cout}], got {list(shapes[2])}", "inputs")


def _conv_operands(op: Operation, shapes):
    """The (x, w) shapes of a convolution, checked: both rank 4, positive strides etc."""
    x, w = shapes[0], shapes[1]
    need_rank(op, x, 4)
    need_rank(op, w, 4, "weight")
    _check_positive(op, "stride_height", "stride_width", "dilation_height", "dilation_width",
                    "groups")
    return x, w


@register_op
class Conv2d(Operation):
    """2-D convolution: x NHWC, w HWIO (kh, kw, cin/groups, cout), optional bias (cout,)."""

    op_type = "Conv2d"
    MIN_INPUTS = 2
    MAX_INPUTS = 3
    ATTRS = dict(_CONV_ATTRS)
    CHOICES = _CONV_CHOICES

    def infer_shapes(self, shapes):
        x, w = _conv_operands(self, shapes)
        a = self.attrs
        n, h, wd, c = x
        kh, kw, cin_g, cout = w
        g = a["groups"]
        if c % g or cout % g or cin_g * g != c:
            raise fail(self, f"input channels {c}, weight {list(w)} and groups {g} disagree",
                       "groups")
        _bias_check(self, shapes, cout)
        eh = a["dilation_height"] * (kh - 1) + 1
        ew = a["dilation_width"] * (kw - 1) + 1
        oh = (h + a["pad_top"] + a["pad_bottom"] - eh) // a["stride_height"] + 1
        ow = (wd + a["pad_left"] + a["pad_right"] - ew) // a["stride_width"] + 1
        if oh <= 0 or ow <= 0:
            raise fail(self, f"kernel {kh}x{kw} larger than padded input {h}x{wd}", "inputs")
        return [(n, oh, ow, cout)]


@register_op
class ConvTranspose2d(Operation):
    """Transposed convolution: x NHWC, w (kh, kw, cin, cout/groups), optional bias (cout,)."""

    op_type = "ConvTranspose2d"
    MIN_INPUTS = 2
    MAX_INPUTS = 3
    ATTRS = dict(_CONV_ATTRS, output_pad_height=(int, 0), output_pad_width=(int, 0))
    CHOICES = _CONV_CHOICES

    def infer_shapes(self, shapes):
        x, w = _conv_operands(self, shapes)
        a = self.attrs
        n, h, wd, c = x
        kh, kw, cin, cout_g = w
        g = a["groups"]
        if cin != c or c % g:
            raise fail(self, f"input channels {c}, weight {list(w)} and groups {g} disagree",
                       "groups")
        cout = cout_g * g
        _bias_check(self, shapes, cout)
        oh = (h - 1) * a["stride_height"] - a["pad_top"] - a["pad_bottom"] \
            + a["dilation_height"] * (kh - 1) + 1 + a["output_pad_height"]
        ow = (wd - 1) * a["stride_width"] - a["pad_left"] - a["pad_right"] \
            + a["dilation_width"] * (kw - 1) + 1 + a["output_pad_width"]
        if oh <= 0 or ow <= 0:
            raise fail(self, "output would be empty", "inputs")
        return [(n, oh, ow, cout)]


@register_op
class Matmul(Operation):
    """numpy matmul of a (..., M, K) and b (..., K, N), optional bias (N,)."""

    op_type = "Matmul"
    KEEPS_LAYOUT = False
    MIN_INPUTS = 2
    MAX_INPUTS = 3
    ATTRS = {"transpose_a": (bool, False), "transpose_b": (bool, False), **FUSED_ACT_ATTRS}

    def infer_shapes(self, shapes):
        a, b = list(shapes[0]), list(shapes[1])
        if len(a) < 1 or len(b) < 1:
            raise fail(self, "matmul operands must have rank >= 1", "inputs")
        va, vb = len(a) == 1, len(b) == 1
        if va:
            a = [1] + a
        if vb:
            b = b + [1]
        if self.attrs["transpose_a"]:
            a[-2], a[-1] = a[-1], a[-2]
        if self.attrs["transpose_b"]:
            b[-2], b[-1] = b[-1], b[-2]
        if a[-1] != b[-2]:
            raise fail(self, f"inner dimensions differ: {list(shapes[0])} @ {list(shapes[1])}",
                       "inputs")
        from .base import broadcast

        batch = broadcast(self, tuple(a[:-2]), tuple(b[:-2]))
        out = list(batch) + ([] if va else [a[-2]]) + ([] if vb else [b[-1]])
        if len(shapes) > 2 and tuple(shapes[2]) != (b[-1],):
            raise fail(self, f"bias must have shape [{b[-1]}], got {list(shapes[2])}", "inputs")
        return [tuple(out)]


_POOL_ATTRS = {
    "pool_height": (int, 1), "pool_width": (int, 1),
    "stride_height": (int, 1), "stride_width": (int, 1),
    "pad_top": (int, 0), "pad_bottom": (int, 0), "pad_left": (int, 0), "pad_right": (int, 0),
    "ceil_mode": (bool, False),
}


def pool_out(size: int, k: int, s: int, p0: int, p1: int, ceil_mode: bool) -> int:
    """Output length of a pooling window, ONNX/PyTorch semantics for ceil_mode."""
    span = size + p0 + p1 - k
    if ceil_mode:
        out = -(-span // s) + 1
        if (out - 1) * s >= size + p0:  # last window must start inside input or left pad
            out -= 1
        return out
    return span // s + 1


class _Pool(Operation):
    def _dilations(self) -> tuple[int, int]:
        return 1, 1

    def infer_shapes(self, shapes):
        x = shapes[0]
        need_rank(self, x, 4)
        n, h, w, c = x
        a = self.attrs
        if a.get("is_global"):
            return [(n, 1, 1, c)]
        _check_positive(self, "pool_height", "pool_width", "stride_height", "stride_width")
        dh, dw = self._dilations()
        kh = dh * (a["pool_height"] - 1) + 1
        kw = dw * (a["pool_width"] - 1) + 1
        oh = pool_out(h, kh, a["stride_height"], a["pad_top"], a["pad_bottom"], a["ceil_mode"])
        ow = pool_out(w, kw, a["stride_width"], a["pad_left"], a["pad_right"], a["ceil_mode"])
        if oh <= 0 or ow <= 0:
            raise fail(self, f"window {kh}x{kw} larger than padded input {h}x{w}", "inputs")
        return [(n, oh, ow, c)]


@register_op
class MaxPool2d(_Pool):
    """Max pooling over NHWC windows (padding counts as -inf)."""

    op_type = "MaxPool2d"
    ATTRS = dict(_POOL_ATTRS, dilation_height=(int, 1), dilation_width=(int, 1))

    def _dilations(self):
        _check_positive(self, "dilation_height", "dilation_width")
        return self.attrs["dilation_height"], self.attrs["dilation_width"]


@register_op
class AvgPool2d(_Pool):
    """Average pooling; `is_global` pools the whole H x W plane."""

    op_type = "AvgPool2d"
    ATTRS = dict(_POOL_ATTRS, count_include_pad=(bool, False), is_global=(bool, False))


@register_op
class BatchNorm2d(Operation):
    """Inference batch norm over the C axis of NHWC: inputs x, scale, bias, mean, var."""

    op_type = "BatchNorm2d"
    MIN_INPUTS = 5
    MAX_INPUTS = 5
    ATTRS = {"epsilon": (float, 1e-5)}

    def infer_shapes(self, shapes):
        x = shapes[0]
        need_rank(self, x, 4)
        for i, s in enumerate(shapes[1:], 1):
            if tuple(s) != (x[3],):
                raise fail(self, f"input {i} must have shape [{x[3]}], got {list(s)}", "inputs")
        return [x]


@register_op
class LayerNorm(Operation):
    """Layer normalization over the trailing axes `[axis, rank)`: inputs x, scale[, bias]
    (each broadcastable to `x.shape[axis:]`, from the right). With `stats`, two more outputs:
    the mean and 1/sqrt(var + epsilon), shaped as x with the normalized axes set to 1 (ONNX
    LayerNormalization's Mean and InvStdDev)."""

    op_type = "LayerNorm"
    MIN_INPUTS = 2
    MAX_INPUTS = 3
    N_OUTPUTS = None
    ATTRS = {"axis": (int, -1), "epsilon": (float, 1e-5), "stats": (bool, False)}

    def n_outputs(self) -> int:
        return 3 if self.attrs["stats"] else 1

    def infer_shapes(self, shapes):
        x = tuple(shapes[0])
        ax = norm_axis(self, self.attrs["axis"], len(x))
        norm = x[ax:]
        for i, s in enumerate(shapes[1:], 1):
            s = tuple(s)
            if len(s) > len(norm) or any(d not in (1, n) for d, n in zip(s[::-1], norm[::-1])):
                raise fail(self, f"input {i} shape {list(s)} does not broadcast to the "
                                 f"normalized shape {list(norm)}", "inputs")
        stat = x[:ax] + (1,) * len(norm)
        return [x, stat, stat] if self.attrs["stats"] else [x]


@register_op
class GroupNorm(Operation):
    """Group normalization of an NHWC map: the C channels in `num_groups` groups, each group
    normalized over (H, W, its channels), then a per-channel scale and bias (inputs x, scale,
    bias; ONNX GroupNormalization, and InstanceNormalization with num_groups = C)."""

    op_type = "GroupNorm"
    MIN_INPUTS = 3
    MAX_INPUTS = 3
    ATTRS = {"num_groups": (int, REQUIRED), "epsilon": (float, 1e-5)}

    def infer_shapes(self, shapes):
        x = tuple(shapes[0])
        need_rank(self, x, 4)
        g = self.attrs["num_groups"]
        if g < 1 or x[3] % g:
            raise fail(self, f"num_groups {g} does not divide the {x[3]} channels", "num_groups")
        for i, s in enumerate(shapes[1:], 1):
            if tuple(s) != (x[3],):
                raise fail(self, f"input {i} must have shape [{x[3]}], got {list(s)}", "inputs")
        return [x]


@register_op
class LRN(Operation):
    """Local response normalization across the channels of an NHWC map (ONNX LRN):
    ``y = x / (bias + alpha / size * sum(x[c'] ** 2)) ** beta`` over the `size` channels
    ``c - (size - 1) // 2 .. c + size // 2``."""

    op_type = "LRN"
    ATTRS = {"size": (int, REQUIRED), "alpha": (float, 1e-4), "beta": (float, 0.75),
             "bias": (float, 1.0)}

    def infer_shapes(self, shapes):
        need_rank(self, tuple(shapes[0]), 4)
        if self.attrs["size"] < 1:
            raise fail(self, f"size must be >= 1, not {self.attrs['size']}", "size")
        return [tuple(shapes[0])]




@register_op
class Resize(Operation):
    """Resize the H and W of an NHWC map to out_height x out_width (nearest or bilinear)."""

    op_type = "Resize"
    ATTRS = {"out_height": (int, REQUIRED), "out_width": (int, REQUIRED),
             "mode": (str, "nearest"), "coordinate_mode": (str, "half_pixel"),
             "nearest_mode": (str, "round_prefer_floor")}

    def _check_modes(self) -> None:
        a = self.attrs
        if a["mode"] not in ("nearest", "bilinear"):
            raise fail(self, f"mode must be nearest or bilinear, not {a['mode']!r}", "mode")
        if a.get("coordinate_mode", "half_pixel") not in COORDINATE_MODES:
            raise fail(self, f"unknown coordinate_mode {a['coordinate_mode']!r}",
                       "coordinate_mode")
        if a.get("nearest_mode", "floor") not in NEAREST_MODES:
            raise fail(self, f"unknown nearest_mode {a['nearest_mode']!r}", "nearest_mode")

    def infer_shapes(self, shapes):
        x = shapes[0]
        need_rank(self, x, 4)
        self._check_modes()
        oh, ow = self.attrs["out_height"], self.attrs["out_width"]
        if oh < 1 or ow < 1:
            raise fail(self, f"output size {oh}x{ow} must be positive", "out_height")
        return [(x[0], oh, ow, x[3])]


@register_op
class Upsample(Resize):
    """Integer-factor upsampling (nearest: asymmetric/floor; bilinear: half_pixel)."""

    op_type = "Upsample"
    ATTRS = {"scale_height": (int, 2), "scale_width": (int, 2), "mode": (str, "nearest")}

    def infer_shapes(self, shapes):
        x = shapes[0]
        need_rank(self, x, 4)
        self._check_modes()
        _check_positive(self, "scale_height", "scale_width")
        return [(x[0], x[1] * self.attrs["scale_height"], x[2] * self.attrs["scale_width"], x[3])]


def conv_macs(op: Operation) -> int:
    """Multiply-accumulates of a Conv2d/ConvTranspose2d/Matmul (for profiles and cycle bounds)."""
    if op.op_type == "Conv2d":
        kh, kw, cin_g, _ = op.inputs[1].shape
        return math.prod(op.outputs[0].shape) * kh * kw * cin_g
    if op.op_type == "ConvTranspose2d":
        kh, kw, _, cout_g = op.inputs[1].shape
        return math.prod(op.inputs[0].shape) * kh * kw * cout_g
    if op.op_type == "Matmul":
        a = op.inputs[0].shape
        k = a[-2] if op.attrs["transpose_a"] and len(a) > 1 else a[-1]
        return math.prod(op.outputs[0].shape) * k
    return 0

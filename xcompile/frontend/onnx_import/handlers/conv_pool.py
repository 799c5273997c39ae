"""Conv, ConvTranspose and the pools: 2-D ops that read and produce NHWC feature maps.

Also the ONNX padding rules (`auto_pad`, explicit pads) they share, and `_need_4d`, the check
every 2-D op makes on its input rank.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from xcompile.frontend.onnx_import.registry import _handles, _Unsupported
from xcompile.frontend.onnx_import.tensor import _T, NHWC

if TYPE_CHECKING:
    from xcompile.frontend.onnx_import.importer import _Importer


def _same_pads(size, k, s, d, upper: bool) -> tuple[int, int]:
    out = -(-size // s)
    total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
    lo = total // 2 if upper else total - total // 2
    return lo, total - lo


def _pads2d(a: dict, spatial, kernel, strides, dil) -> dict[str, int]:
    auto = a.get("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        (t, b), (lft, r) = (_same_pads(spatial[i], kernel[i], strides[i], dil[i],
                                       auto == "SAME_UPPER") for i in range(2))
    elif auto == "VALID":
        t = b = lft = r = 0
    else:
        p = list(a.get("pads", [0, 0, 0, 0]))
        t, lft, b, r = p
    return {"pad_top": t, "pad_bottom": b, "pad_left": lft, "pad_right": r}


def _need_4d(t: _T, what: str) -> None:
    if t.rank != 4:
        raise _Unsupported(f"{what} on a rank-{t.rank} tensor (only 2-D, NCHW)")


def _conv_operands(a: dict, ins: list, what: str) -> tuple[_T, _T, _T | None, list[int],
                                                            list[int], list[int]]:
    """Conv and ConvTranspose operands: (x, w, bias or None, kernel, strides, dilations)."""
    x, w = ins[0], ins[1]
    b = ins[2] if len(ins) > 2 else None
    _need_4d(x, what)
    kernel = list(w.shape[2:])
    strides = list(a.get("strides", [1, 1]))
    dil = list(a.get("dilations", [1, 1]))
    return x, w, b, kernel, strides, dil


@_handles("Conv")
def _conv(im: _Importer, node, a, ins):
    x, w, b, kernel, strides, dil = _conv_operands(a, ins, "Conv")
    attrs = dict(stride_height=strides[0], stride_width=strides[1], dilation_height=dil[0],
                 dilation_width=dil[1], groups=int(a.get("group", 1)),
                 **_pads2d(a, x.shape[2:], kernel, strides, dil))
    inputs = [im.nhwc(x), im.value(w, (2, 3, 1, 0), "HWIO")]
    if b is not None:
        inputs.append(im.value(b))
    return [im.result(im.emit1("Conv2d", inputs, "NHWC", **attrs), NHWC)]


@_handles("ConvTranspose")
def _conv_transpose(im: _Importer, node, a, ins):
    x, w, b, kernel, strides, dil = _conv_operands(a, ins, "ConvTranspose")
    opad = list(a.get("output_padding", [0, 0]))
    auto = a.get("auto_pad", "NOTSET")
    out_shape = list(a.get("output_shape", []))[-2:]
    if out_shape or auto in ("SAME_UPPER", "SAME_LOWER"):
        if not out_shape:
            out_shape = [x.shape[2 + i] * strides[i] for i in range(2)]
        lo, hi = [], []
        for i in range(2):
            total = strides[i] * (x.shape[2 + i] - 1) + opad[i] \
                + (kernel[i] - 1) * dil[i] + 1 - out_shape[i]
            first = total // 2 if auto == "SAME_UPPER" else total - total // 2
            lo.append(first)
            hi.append(total - first)
    else:
        p = list(a.get("pads", [0, 0, 0, 0]))
        lo, hi = p[:2], p[2:]
    for i in range(2):
        if hi[i] < 0:  # a larger output than the kernel covers: zero rows at the end
            opad[i] -= hi[i]
            hi[i] = 0
        if lo[i] < 0:
            raise _Unsupported("negative leading padding")
    attrs = dict(stride_height=strides[0], stride_width=strides[1], dilation_height=dil[0],
                 dilation_width=dil[1], groups=int(a.get("group", 1)),
                 pad_top=lo[0], pad_left=lo[1], pad_bottom=hi[0], pad_right=hi[1],
                 output_pad_height=opad[0], output_pad_width=opad[1])
    inputs = [im.nhwc(x), im.value(w, (2, 3, 0, 1), "HWIO")]
    if b is not None:
        inputs.append(im.value(b))
    return [im.result(im.emit1("ConvTranspose2d", inputs, "NHWC", **attrs), NHWC)]


def _pool_attrs(a: dict, x: _T, dilated: bool) -> dict[str, Any]:
    kernel = list(a["kernel_shape"])
    if len(kernel) != 2:
        raise _Unsupported(f"{len(kernel)}-D pooling (only 2-D)")
    strides = list(a.get("strides", [1, 1]))
    dil = list(a.get("dilations", [1, 1]))
    if not dilated and dil != [1, 1]:
        raise _Unsupported("dilated average pooling")
    attrs = dict(pool_height=kernel[0], pool_width=kernel[1], stride_height=strides[0],
                 stride_width=strides[1], ceil_mode=bool(a.get("ceil_mode", 0)),
                 **_pads2d(a, x.shape[2:], kernel, strides, dil))
    if dilated:
        attrs.update(dilation_height=dil[0], dilation_width=dil[1])
    return attrs


@_handles("MaxPool")
def _maxpool(im: _Importer, node, a, ins):
    x = ins[0]
    _need_4d(x, "MaxPool")
    if im.reads(node, 1):
        raise _Unsupported("the Indices output")
    attrs = _pool_attrs(a, x, True)
    return [im.result(im.emit1("MaxPool2d", [im.nhwc(x)], "NHWC", **attrs), NHWC)]


@_handles("AveragePool")
def _avgpool(im: _Importer, node, a, ins):
    x = ins[0]
    _need_4d(x, "AveragePool")
    attrs = _pool_attrs(a, x, False)
    attrs["count_include_pad"] = bool(a.get("count_include_pad", 0))
    return [im.result(im.emit1("AvgPool2d", [im.nhwc(x)], "NHWC", **attrs), NHWC)]


@_handles("GlobalAveragePool")
def _gap(im: _Importer, node, a, ins):
    x = ins[0]
    _need_4d(x, "GlobalAveragePool")
    v = im.emit1("AvgPool2d", [im.nhwc(x)], "NHWC", is_global=True,
                 pool_height=x.shape[2], pool_width=x.shape[3])
    return [im.result(v, NHWC)]


@_handles("ReduceMean")
def _reduce_mean(im: _Importer, node, a, ins):
    """The mean over H and W of an NCHW map (how PyTorch exports `x.mean((2, 3))`): a global
    AvgPool2d, reshaped when `keepdims` is 0; over other axes a (float) ReduceMean."""
    x = ins[0]
    if len(ins) > 1 and ins[1] is not None:
        axes = im.const_of(ins[1], "ReduceMean axes")
    else:
        axes = a.get("axes")
    if axes is None or a.get("noop_with_empty_axes", 0) or not np.size(axes):
        raise _Unsupported("no axes (the mean over every axis)")
    axes = sorted(int(d) % max(x.rank, 1) for d in np.ravel(axes))
    if x.rank != 4 or axes != [2, 3]:  # any other mean: a float ReduceMean in ONNX order
        v = im.emit1("ReduceMean", [im.value(x)], None, axes=axes,
                     keepdims=bool(int(a.get("keepdims", 1))))
        return [im.result(v)]
    v = im.emit1("AvgPool2d", [im.nhwc(x)], "NHWC", is_global=True,
                 pool_height=x.shape[2], pool_width=x.shape[3])
    if int(a.get("keepdims", 1)):
        return [im.result(v, NHWC)]
    return [im.result(im.emit1("Reshape", [v], None, shape=[x.shape[0], x.shape[1]]))]


@_handles("GlobalMaxPool")
def _gmp(im: _Importer, node, a, ins):
    x = ins[0]
    _need_4d(x, "GlobalMaxPool")
    v = im.emit1("MaxPool2d", [im.nhwc(x)], "NHWC", pool_height=x.shape[2],
                 pool_width=x.shape[3])
    return [im.result(v, NHWC)]

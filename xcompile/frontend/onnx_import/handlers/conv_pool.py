"""Conv, ConvTranspose and the pools: 2-D ops that read and produce NHWC feature maps.

Their 1-D forms (rank-3 tensors N, C, L: audio and sequence models) import as the 2-D op over
an (N, 1, L, C) map, a unit H axis: the tensor is read in its (N, L, C) view (one Transpose,
shared by every reader) and reshaped, the kernel, strides, dilations and pads gain a leading 1
(or 0), and the result is held as the (N, L', C') view of the ONNX (N, C', L') tensor, so a
chain of 1-D ops transposes once. The chips run them as Conv2d / pools.

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


_NLC = (0, 2, 1)  # the (N, L, C) view of a rank-3 (N, C, L) tensor


def _need_1d_or_2d(t: _T, what: str) -> None:
    if t.rank not in (3, 4):
        dims = f"{t.rank - 2}-D" if t.rank > 2 else f"rank-{t.rank}"
        raise _Unsupported(f"{what} on a rank-{t.rank} tensor ({dims}; only 1-D N,C,L and "
                           f"2-D N,C,H,W)")


def _lift(a: dict, rank: int) -> dict:
    """The attributes of a 1-D op (rank-3 input) written for the 2-D op over (N, C, 1, L):
    a unit kernel / stride / dilation / output padding first, zero pads on the unit axis."""
    if rank == 4:
        return a
    out = dict(a)
    for key in ("kernel_shape", "strides", "dilations"):
        if key in a:
            out[key] = [1] + list(a[key])
    if "output_padding" in a:
        out["output_padding"] = [0] + list(a["output_padding"])
    if "output_shape" in a:
        out["output_shape"] = [1] + list(a["output_shape"])[-1:]
    if "pads" in a:
        p = list(a["pads"])
        out["pads"] = [0, p[0], 0, p[1]]
    return out


def _shape4(t: _T) -> tuple[int, ...]:
    """The (N, C, H, W) shape the 2-D op sees: (N, C, 1, L) for a rank-3 tensor."""
    return t.shape if t.rank == 4 else (t.shape[0], t.shape[1], 1, t.shape[2])


def _nhwc_in(im: _Importer, t: _T):
    """The NHWC Value a 2-D op reads: the map itself, or (N, 1, L, C) for a rank-3 tensor."""
    if t.rank == 4:
        return im.nhwc(t)
    n, c, length = t.shape
    return im.emit1("Reshape", [im.value(t, _NLC)], "NHWC", shape=[n, 1, length, c])


def _nhwc_out(im: _Importer, v, rank: int) -> _T:
    """The ONNX tensor held by a 2-D op's NHWC result; a rank-3 (N, C, L) one for 1-D ops."""
    if rank == 4:
        return im.result(v, NHWC)
    n, _, length, c = v.shape
    return im.result(im.emit1("Reshape", [v], None, shape=[n, length, c]), _NLC)


def _weights(im: _Importer, w: _T, perm4: tuple[int, ...]):
    """Conv weights in HWIO order (`perm4` of the rank-4 ONNX weights); a 1-D kernel
    (O, I, k) is the 2-D one (O, I, 1, k)."""
    if w.rank == 4:
        return im.value(w, perm4, "HWIO")
    if w.rank != 3:
        raise _Unsupported(f"weights of rank {w.rank} for a 1-D convolution")
    o, i, k = w.shape
    if w.is_const:
        return im.params(np.transpose(w.const.reshape(o, i, 1, k), perm4), "HWIO")
    w4 = im.emit1("Reshape", [im.value(w)], None, shape=[o, i, 1, k])
    return im.emit1("Transpose", [w4], "HWIO", perm=list(perm4))


def _conv_operands(a: dict, ins: list, what: str) -> tuple[_T, _T, _T | None, list[int],
                                                            list[int], list[int]]:
    """Conv and ConvTranspose operands: (x, w, bias or None, kernel, strides, dilations),
    kernel / strides / dilations 2-D (a 1-D op's with the unit axis first)."""
    x, w = ins[0], ins[1]
    b = ins[2] if len(ins) > 2 else None
    _need_1d_or_2d(x, what)
    if w.rank != x.rank:
        raise _Unsupported(f"{what} weights of rank {w.rank} for a rank-{x.rank} input")
    kernel = ([1] if x.rank == 3 else []) + list(w.shape[2:])
    strides = list(a.get("strides", [1, 1]))
    dil = list(a.get("dilations", [1, 1]))
    return x, w, b, kernel, strides, dil


@_handles("Conv")
def _conv(im: _Importer, node, a, ins):
    a = _lift(a, ins[0].rank)
    x, w, b, kernel, strides, dil = _conv_operands(a, ins, "Conv")
    attrs = dict(stride_height=strides[0], stride_width=strides[1], dilation_height=dil[0],
                 dilation_width=dil[1], groups=int(a.get("group", 1)),
                 **_pads2d(a, _shape4(x)[2:], kernel, strides, dil))
    inputs = [_nhwc_in(im, x), _weights(im, w, (2, 3, 1, 0))]
    if b is not None:
        inputs.append(im.value(b))
    return [_nhwc_out(im, im.emit1("Conv2d", inputs, "NHWC", **attrs), x.rank)]


@_handles("ConvTranspose")
def _conv_transpose(im: _Importer, node, a, ins):
    a = _lift(a, ins[0].rank)
    x, w, b, kernel, strides, dil = _conv_operands(a, ins, "ConvTranspose")
    xs = _shape4(x)
    opad = list(a.get("output_padding", [0, 0]))
    auto = a.get("auto_pad", "NOTSET")
    out_shape = list(a.get("output_shape", []))[-2:]
    if out_shape or auto in ("SAME_UPPER", "SAME_LOWER"):
        if not out_shape:
            out_shape = [xs[2 + i] * strides[i] for i in range(2)]
        lo, hi = [], []
        for i in range(2):
            total = strides[i] * (xs[2 + i] - 1) + opad[i] \
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
    inputs = [_nhwc_in(im, x), _weights(im, w, (2, 3, 0, 1))]
    if b is not None:
        inputs.append(im.value(b))
    return [_nhwc_out(im, im.emit1("ConvTranspose2d", inputs, "NHWC", **attrs), x.rank)]


def _pool_attrs(a: dict, x: _T, dilated: bool, what: str) -> dict[str, Any]:
    _need_1d_or_2d(x, what)
    a = _lift(a, x.rank)
    kernel = list(a["kernel_shape"])
    if len(kernel) != 2:
        raise _Unsupported(f"{what}: kernel_shape {list(a['kernel_shape'])} does not fit a "
                           f"rank-{x.rank} input")
    strides = list(a.get("strides", [1, 1]))
    dil = list(a.get("dilations", [1, 1]))
    if not dilated and dil != [1, 1]:
        raise _Unsupported(f"dilated {what}")
    attrs = dict(pool_height=kernel[0], pool_width=kernel[1], stride_height=strides[0],
                 stride_width=strides[1], ceil_mode=bool(a.get("ceil_mode", 0)),
                 **_pads2d(a, _shape4(x)[2:], kernel, strides, dil))
    if dilated:
        attrs.update(dilation_height=dil[0], dilation_width=dil[1])
    return attrs


@_handles("MaxPool")
def _maxpool(im: _Importer, node, a, ins):
    x = ins[0]
    attrs = _pool_attrs(a, x, True, "MaxPool")
    if im.reads(node, 1):
        raise _Unsupported("the Indices output")
    return [_nhwc_out(im, im.emit1("MaxPool2d", [_nhwc_in(im, x)], "NHWC", **attrs), x.rank)]


@_handles("AveragePool")
def _avgpool(im: _Importer, node, a, ins):
    x = ins[0]
    attrs = _pool_attrs(a, x, False, "AveragePool")
    attrs["count_include_pad"] = bool(a.get("count_include_pad", 0))
    return [_nhwc_out(im, im.emit1("AvgPool2d", [_nhwc_in(im, x)], "NHWC", **attrs), x.rank)]


@_handles("GlobalAveragePool")
def _gap(im: _Importer, node, a, ins):
    x = ins[0]
    _need_1d_or_2d(x, "GlobalAveragePool")
    hw = _shape4(x)[2:]
    v = im.emit1("AvgPool2d", [_nhwc_in(im, x)], "NHWC", is_global=True,
                 pool_height=hw[0], pool_width=hw[1])
    return [_nhwc_out(im, v, x.rank)]


@_handles("GlobalMaxPool")
def _gmp(im: _Importer, node, a, ins):
    x = ins[0]
    _need_1d_or_2d(x, "GlobalMaxPool")
    hw = _shape4(x)[2:]
    v = im.emit1("MaxPool2d", [_nhwc_in(im, x)], "NHWC", pool_height=hw[0], pool_width=hw[1])
    return [_nhwc_out(im, v, x.rank)]


@_handles("LpPool")
def _lppool(im: _Importer, node, a, ins):
    """``(sum over the window of |x|^p)^(1/p)`` as ops the chips run: ``x * x`` (and for
    p != 2 a Power ``(x * x)^(p/2)``, which is |x|^p for any p > 0), an AvgPool2d counting
    the zero pads, and a Power ``(k * mean)^(1/p)`` with k the window size. 1-D and 2-D; no
    ceil_mode, no dilations (refused here, carried whole by the generic fallback)."""
    x = ins[0]
    attrs = _pool_attrs(a, x, False, "LpPool")
    p = float(a.get("p", 2))
    if not p > 0:
        raise _Unsupported(f"LpPool with p = {a.get('p')} (p must be > 0)")
    if attrs["ceil_mode"]:
        raise _Unsupported("LpPool with ceil_mode")
    v = _nhwc_in(im, x)
    powered = im.emit1("Multiply", [v, v], "NHWC")
    if p != 2:
        powered = im.emit1("Power", [powered], "NHWC", power=p / 2)
    mean = im.emit1("AvgPool2d", [powered], "NHWC", count_include_pad=True, **attrs)
    k = attrs["pool_height"] * attrs["pool_width"]
    y = im.emit1("Power", [mean], "NHWC", power=1.0 / p, scale=float(k))
    return [_nhwc_out(im, y, x.rank)]

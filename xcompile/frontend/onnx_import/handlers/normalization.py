"""LRN, GroupNormalization and InstanceNormalization on NHWC maps: LRN and GroupNorm ops
(InstanceNormalization is a GroupNorm with one group per channel)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from xcompile.frontend.onnx_import.handlers.conv_pool import _need_4d
from xcompile.frontend.onnx_import.registry import _handles, _Unsupported
from xcompile.frontend.onnx_import.tensor import _T, NHWC

if TYPE_CHECKING:
    from xcompile.frontend.onnx_import.importer import _Importer


@_handles("LRN")
def _lrn(im: _Importer, node, a, ins):
    x = ins[0]
    _need_4d(x, "LRN")
    if "size" not in a:
        raise _Unsupported("no size attribute")
    y = im.emit1("LRN", [im.nhwc(x)], "NHWC", size=int(a["size"]),
                 alpha=float(a.get("alpha", 1e-4)), beta=float(a.get("beta", 0.75)),
                 bias=float(a.get("bias", 1.0)))
    return [im.result(y, NHWC)]


def _per_channel(im: _Importer, t: _T, c: int, groups: int, what: str):
    """A scale or bias as C values (opset 18's GroupNormalization gives one per group)."""
    if not t.is_const:
        if list(t.shape) != [c]:
            raise _Unsupported(f"a non-constant {what} of shape {list(t.shape)}, not [{c}]")
        return im.value(t)
    v = np.asarray(t.const).ravel()
    if v.size == groups and groups != c:
        v = np.repeat(v, c // groups)
    if v.size != c:
        raise _Unsupported(f"{what} of {v.size} values for {c} channels")
    return im.value(_T.constant(v.astype(np.float32)))


def _group_norm(im: _Importer, x: _T, scale: _T, bias: _T, groups: int, eps: float):
    _need_4d(x, "group normalization")
    c = x.shape[1]
    if groups < 1 or c % groups:
        raise _Unsupported(f"num_groups {groups} does not divide {c} channels")
    ins = [im.nhwc(x), _per_channel(im, scale, c, groups, "scale"),
           _per_channel(im, bias, c, groups, "bias")]
    return [im.result(im.emit1("GroupNorm", ins, "NHWC", num_groups=groups, epsilon=eps), NHWC)]


@_handles("GroupNormalization")
def _groupnorm(im: _Importer, node, a, ins):
    if int(a.get("stash_type", 1)) != 1:
        raise _Unsupported("stash_type other than float32")
    return _group_norm(im, ins[0], ins[1], ins[2], int(a["num_groups"]),
                       float(a.get("epsilon", 1e-5)))


@_handles("InstanceNormalization")
def _instancenorm(im: _Importer, node, a, ins):
    x = ins[0]
    _need_4d(x, "InstanceNormalization")
    return _group_norm(im, x, ins[1], ins[2], x.shape[1], float(a.get("epsilon", 1e-5)))

"""Per-channel affines: a constant per-channel Multiply / Add as a BatchNorm2d, BatchNorm2d
folded into the convolution before it, or run as a depthwise 1x1 Conv2d."""

from __future__ import annotations

import numpy as np

from xcompile.refit.provenance import fold_bn_src as _fold_src
from xir.network import Network
from xir.ops.base import Operation
from xir.values import Params, Value

from .graph import bypass, fuse_tag, other_input, replace_op


def fold_bn(net: Network, conv: Operation, bn: Operation) -> bool:
    """Fold BatchNorm2d `bn` into the weights and bias of `conv` (False, nothing changed, when
    the statistics or the float32 weights are not constants)."""
    if any(not (p.is_params and p.data is not None) for p in bn.inputs[1:5]):
        return False
    w_p = conv.inputs[1]
    if not (w_p.is_params and w_p.data is not None and w_p.dtype.numpy_dtype == np.float32):
        return False
    gamma, beta, mean, var = (np.asarray(p.data, np.float64) for p in bn.inputs[1:5])
    a = gamma / np.sqrt(var + float(bn.attrs.get("epsilon", 1e-5)))
    w = np.asarray(w_p.data, np.float64)
    cout = bn.outputs[0].shape[3]
    if conv.op_type == "Conv2d":
        w = w * a  # HWIO: O is the last axis
    else:  # ConvTranspose2d (kh, kw, cin, cout/g): output channel = group * og + o
        kh, kw, cin, og = w.shape
        g = int(conv.attrs.get("groups", 1))
        w = (w.reshape(kh, kw, g, cin // g, og) * a.reshape(g, 1, og)).reshape(kh, kw, cin, og)
    b = np.asarray(conv.inputs[2].data, np.float64) if len(conv.inputs) > 2 else np.zeros(cout)
    b = (b - mean) * a + beta
    new_w = Params(w_p.v_id, w_p.dtype, w.astype(np.float32), w_p.name, w_p.mtype,
                   dict(w_p.tags))
    if len(conv.inputs) > 2:
        bp = conv.inputs[2]
        new_b = Params(bp.v_id, bp.dtype, b.astype(np.float32), bp.name, bp.mtype, dict(bp.tags))
    else:
        new_b = net.newParams(b.astype(np.float32), f"{conv.name or 'conv'}.bias")
    _fold_src(conv, bn, new_w, new_b)
    conv.inputs = [conv.inputs[0], new_w, new_b]
    fuse_tag(conv, bn)
    bypass(net, conv, bn)
    return True


def affine_of(op: Operation) -> tuple[np.ndarray, np.ndarray] | None:
    """(a, b) per channel when `op` computes ``x * a + b`` on a 4-D NHWC map `x`: a BatchNorm2d
    with constant statistics, or a Multiply / Add by a constant that varies along C only."""
    x = next((v for v in op.inputs if not v.is_params), None)
    if x is None or len(x.shape) != 4:
        return None
    c = x.shape[3]
    if op.op_type == "BatchNorm2d":
        if any(not (p.is_params and p.data is not None) for p in op.inputs[1:5]):
            return None
        gamma, beta, mean, var = (np.asarray(p.data, np.float64) for p in op.inputs[1:5])
        a = gamma / np.sqrt(var + float(op.attrs.get("epsilon", 1e-5)))
        return a, beta - mean * a
    if op.op_type not in ("Multiply", "Add") or len(op.inputs) != 2 or op.attrs.get(
            "act", "none") != "none":
        return None
    if tuple(op.outputs[0].shape) != tuple(x.shape):
        return None
    kd = channel_const(other_input(op, x), c)
    if kd is None:
        return None
    if op.op_type == "Multiply":
        return kd, np.zeros(c)
    return np.ones(c), kd


def channel_const(k: Value | None, c: int) -> np.ndarray | None:
    """A constant that varies along the last (channel) axis only, as `c` float64 values."""
    if k is None or not (k.is_params and k.data is not None):
        return None
    kd = np.asarray(k.data, np.float64)
    if kd.size not in (1, c) or (kd.ndim and any(d != 1 for d in kd.shape[:-1])):
        return None
    return np.broadcast_to(kd.reshape(-1), (c,)).copy()


def set_affine(net: Network, op: Operation, a: np.ndarray, b: np.ndarray) -> Operation:
    """Replace `op` by a BatchNorm2d computing ``x * a + b`` (same op_id, same output value)."""
    from xir.ops.nn import BatchNorm2d

    c = a.size
    params = [net.newParams(v.astype(np.float32), f"{op.name or 'affine'}.{n}")
              for n, v in (("scale", a), ("bias", b), ("mean", np.zeros(c)),
                           ("var", np.ones(c)))]
    x = next(v for v in op.inputs if not v.is_params)
    bn = BatchNorm2d([x] + params, list(op.outputs), op_id=op.op_id, name=op.name, epsilon=0.0)
    bn.tags = dict(op.tags)
    replace_op(net, op, bn)
    return bn


def as_depthwise(net: Network, bn: Operation) -> None:
    """A BatchNorm2d as the depthwise 1x1 Conv2d with weight `a` and bias `b`."""
    from xir.ops.nn import Conv2d

    a, b = affine_of(bn)
    c = a.size
    w = net.newParams(a.reshape(1, 1, 1, c).astype(np.float32), f"{bn.name or 'bn'}.weight",
                      layout="HWIO")
    bias = net.newParams(b.astype(np.float32), f"{bn.name or 'bn'}.bias", layout="C")
    conv = Conv2d([bn.inputs[0], w, bias], list(bn.outputs), op_id=bn.op_id, name=bn.name,
                  groups=c)
    conv.tags = dict(bn.tags, affine="BatchNorm2d")
    replace_op(net, bn, conv)

"""A small numpy float executor for the ops the zoo uses.

The zoo needs a forward pass at build time: batch-norm running statistics are measured on
synthetic images pushed through the network as it stands. xir cannot depend on the host backend
(a separate distribution), so this module carries its own plain numpy kernels. It is a reference
for float networks only; the runtime's kernels are the ones to use everywhere else.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from xir.errors import XirError
from xir.network import Network, NetworkView
from xir.ops.base import Operation

Kernel = Callable[[list[np.ndarray], dict], list[np.ndarray]]


def _conv2d(ins: list[np.ndarray], a: dict) -> list[np.ndarray]:
    x, w = ins[0], ins[1]
    n, h, wd, c = x.shape
    kh, kw, cin_g, cout = w.shape
    g = a["groups"]
    sh, sw = a["stride_height"], a["stride_width"]
    dh, dw = a["dilation_height"], a["dilation_width"]
    if a.get("padding_mode", "zeros") != "zeros":
        raise XirError(f"reference Conv2d supports padding_mode 'zeros' only, not "
                       f"{a['padding_mode']!r}", field="padding_mode")
    xp = np.pad(x, ((0, 0), (a["pad_top"], a["pad_bottom"]), (a["pad_left"], a["pad_right"]),
                    (0, 0)))
    oh = (xp.shape[1] - dh * (kh - 1) - 1) // sh + 1
    ow = (xp.shape[2] - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, oh, ow, cout), dtype=np.float32)
    depthwise = g == c and cin_g == 1 and cout == c
    cout_g = cout // g
    for i in range(kh):
        for j in range(kw):
            xs = xp[:, i * dh: i * dh + sh * (oh - 1) + 1: sh,
                    j * dw: j * dw + sw * (ow - 1) + 1: sw, :]
            if depthwise:
                out += xs * w[i, j, 0, :]
            elif g == 1:
                out += xs @ w[i, j]
            else:
                for k in range(g):
                    out[..., k * cout_g:(k + 1) * cout_g] += \
                        xs[..., k * cin_g:(k + 1) * cin_g] @ w[i, j, :, k * cout_g:(k + 1) * cout_g]
    if len(ins) > 2:
        out += ins[2]
    return [out]


def _pool(ins: list[np.ndarray], a: dict, reduce_max: bool) -> np.ndarray:
    x = ins[0]
    if a.get("is_global"):
        return x.mean(axis=(1, 2), keepdims=True)
    kh, kw = a["pool_height"], a["pool_width"]
    sh, sw = a["stride_height"], a["stride_width"]
    dh, dw = a.get("dilation_height", 1), a.get("dilation_width", 1)
    if a.get("ceil_mode"):
        raise XirError("reference pools do not implement ceil_mode", field="ceil_mode")
    pads = ((0, 0), (a["pad_top"], a["pad_bottom"]), (a["pad_left"], a["pad_right"]), (0, 0))
    fill = -np.inf if reduce_max else 0.0
    xp = np.pad(x, pads, constant_values=fill)
    oh = (xp.shape[1] - dh * (kh - 1) - 1) // sh + 1
    ow = (xp.shape[2] - dw * (kw - 1) - 1) // sw + 1
    acc = None
    for i in range(kh):
        for j in range(kw):
            xs = xp[:, i * dh: i * dh + sh * (oh - 1) + 1: sh,
                    j * dw: j * dw + sw * (ow - 1) + 1: sw, :]
            acc = xs.copy() if acc is None else (np.maximum(acc, xs) if reduce_max else acc + xs)
    if reduce_max:
        return acc
    if a.get("count_include_pad"):
        return acc / float(kh * kw)
    ones = np.pad(np.ones((1,) + x.shape[1:3] + (1,), np.float32), pads)
    count = None
    for i in range(kh):
        for j in range(kw):
            cs = ones[:, i: i + sh * (oh - 1) + 1: sh, j: j + sw * (ow - 1) + 1: sw, :]
            count = cs.copy() if count is None else count + cs
    return acc / count


def _relu(ins: list[np.ndarray], a: dict) -> list[np.ndarray]:
    x, t = ins[0], a["threshold"]
    y = np.where(x >= t, x, a["alpha"] * (x - t))
    return [np.minimum(y, a["max_value"]).astype(x.dtype)]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))  # never overflows
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(x.dtype)


def _upsample(ins: list[np.ndarray], a: dict) -> list[np.ndarray]:
    if a["mode"] != "nearest":
        raise XirError("reference Upsample implements mode 'nearest' only", field="mode")
    x = ins[0]
    return [np.repeat(np.repeat(x, a["scale_height"], axis=1), a["scale_width"], axis=2)]


def _matmul(ins: list[np.ndarray], a: dict) -> list[np.ndarray]:
    x, w = ins[0], ins[1]
    if a["transpose_a"]:
        x = np.swapaxes(x, -1, -2)
    if a["transpose_b"]:
        w = np.swapaxes(w, -1, -2)
    y = x @ w
    return [y + ins[2] if len(ins) > 2 else y]


def _softmax(ins: list[np.ndarray], a: dict) -> list[np.ndarray]:
    x = ins[0]
    e = np.exp(x - x.max(axis=a["axis"], keepdims=True))
    return [e / e.sum(axis=a["axis"], keepdims=True)]


KERNELS: dict[str, Kernel] = {
    "Conv2d": _conv2d,
    "BatchNorm2d": lambda ins, a: [
        ((ins[0] - ins[3]) / np.sqrt(ins[4] + a["epsilon"]) * ins[1] + ins[2])
        .astype(np.float32)],
    "Relu": _relu,
    "Sigmoid": lambda ins, a: [_sigmoid(ins[0])],
    "Silu": lambda ins, a: [ins[0] * _sigmoid(ins[0])],
    "Hardswish": lambda ins, a: [ins[0] * np.clip(ins[0] + 3.0, 0.0, 6.0) / 6.0],
    "Add": lambda ins, a: [ins[0] + ins[1]],
    "Sub": lambda ins, a: [ins[0] - ins[1]],
    "Multiply": lambda ins, a: [ins[0] * ins[1]],
    "MaxPool2d": lambda ins, a: [_pool(ins, a, True)],
    "AvgPool2d": lambda ins, a: [_pool(ins, a, False).astype(np.float32)],
    "Concat": lambda ins, a: [np.concatenate(ins, axis=a["axis"])],
    "Upsample": _upsample,
    "Reshape": lambda ins, a: [ins[0].reshape(
        [ins[0].shape[i] if d == 0 else d for i, d in enumerate(a["shape"])])],
    "Transpose": lambda ins, a: [np.transpose(ins[0], a["perm"])],
    "Matmul": _matmul,
    "Softmax": _softmax,
}


def run(net: Network | NetworkView, inputs: Sequence[np.ndarray],
        before_op: Callable[[Operation, list[np.ndarray]], None] | None = None
        ) -> list[np.ndarray]:
    """Run a float network on numpy inputs (one per Input op); returns the Output values.

    `before_op(op, input_arrays)` is called before each op runs, so a caller can inspect or
    set the op's Params first (the zoo measures batch-norm statistics this way). Batch sizes
    and spatial sizes may differ from the declared ones as long as the ops allow it.
    """
    env: dict[int, np.ndarray] = {}
    feed = iter(inputs)
    last_use: dict[int, int] = {}
    for i, op in enumerate(net.ops):
        for v in op.inputs:
            last_use[v.v_id] = i
    results: list[np.ndarray] = []
    for i, op in enumerate(net.ops):
        if op.op_type == "Input":
            env[op.outputs[0].v_id] = np.asarray(next(feed), dtype=np.float32)
            continue
        ins = [v.data if v.is_params else env[v.v_id] for v in op.inputs]
        if op.op_type == "Output":
            results.extend(ins)
            continue
        kernel = KERNELS.get(op.op_type)
        if kernel is None:
            raise XirError(f"the zoo's numpy reference has no kernel for {op.op_type}",
                           op_id=op.op_id)
        if before_op is not None:
            before_op(op, ins)
            ins = [v.data if v.is_params else env[v.v_id] for v in op.inputs]
        outs = kernel(ins, op.attrs)
        for v, arr in zip(op.outputs, outs):
            env[v.v_id] = np.asarray(arr, dtype=np.float32)
        for v in op.inputs:
            if last_use.get(v.v_id) == i and not v.is_params:
                env.pop(v.v_id, None)
    return results

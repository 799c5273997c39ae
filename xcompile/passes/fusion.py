"""Fusions into the producing op: a Relu as a Conv / Matmul / Add activation, a constant Add as
a Matmul bias, a Transpose of a Matmul input into the Matmul."""

from __future__ import annotations

import numpy as np

from xcompile.refit.provenance import SRC, src_of
from xir.network import Network
from xir.ops.base import Operation

from .affine import channel_const
from .graph import bypass, fuse_tag, only_reader, other_input

ACT_HOSTS = ("Conv2d", "ConvTranspose2d", "Matmul", "Add")


def fold_relu(net: Network, host: Operation, relu: Operation) -> bool:
    """A Relu of threshold 0 becomes `host`'s act / act_alpha / act_max (False when `host`
    already has an activation)."""
    if float(relu.attrs.get("threshold", 0.0)) != 0.0 or host.attrs.get("act", "none") != "none":
        return False
    host.attrs["act"] = "relu"
    host.attrs["act_alpha"] = float(relu.attrs.get("alpha", 0.0))
    host.attrs["act_max"] = float(relu.attrs.get("max_value", float("inf")))
    fuse_tag(host, relu)
    bypass(net, host, relu)
    return True


def fold_matmul_bias(net: Network, mm: Operation, add: Operation) -> bool:
    """``Matmul(x, W) + b`` with a constant b along the output columns: b becomes the
    Matmul's bias (what torch.onnx writes for nn.Linear on a 3-D input)."""
    if len(mm.inputs) != 2 or not mm.inputs[1].is_params or add.attrs.get("act", "none") != \
            "none" or mm.attrs.get("act", "none") != "none":
        return False
    y = mm.outputs[0]
    if tuple(add.outputs[0].shape) != tuple(y.shape) or not y.shape:
        return False
    kd = channel_const(other_input(add, y), int(y.shape[-1]))
    if kd is None:
        return False
    bias = net.newParams(kd.astype(np.float32), f"{mm.name or 'matmul'}.bias", layout="C")
    k_src = src_of(other_input(add, y))
    if k_src is not None and "init" in k_src:  # provenance for a refit: the flat constant
        bias.tags[SRC] = {**k_src, "flat": True}
    mm.inputs = list(mm.inputs) + [bias]
    fuse_tag(mm, add)
    bypass(net, mm, add)
    return True


def fold_transpose_into_matmul(net: Network, tr: Operation, outputs: set[int]) -> bool:
    """A Transpose that swaps the last two axes and feeds only a Matmul's B becomes the
    Matmul's transpose_b (``Q @ K^T`` of attention; the chips read K as stored). A transposed
    A is left alone: the chips run no transpose_a."""
    perm = list(tr.attrs.get("perm") or [])
    n = len(perm)
    if n < 2 or perm != list(range(n - 2)) + [n - 1, n - 2] or tr.inputs[0].is_params:
        return False
    mm = only_reader(tr.outputs[0], outputs, "Matmul")
    if mm is None or mm.inputs[0] is tr.outputs[0] or mm.inputs[1] is not tr.outputs[0]:
        return False
    mm.inputs = [mm.inputs[0], tr.inputs[0]] + list(mm.inputs[2:])
    mm.attrs["transpose_b"] = not bool(mm.attrs.get("transpose_b", False))
    fuse_tag(mm, tr)
    net.ops.remove(tr)
    net.relink()
    return True

"""The backend's own kernels: small pure functions of numpy arrays and the op's attributes, one
explicit registry (`KERNELS`). Feature maps are NHWC, Conv2d weights HWIO ([kh, kw, cin, cout]),
as xir defines them. Nothing is imported from another backend: these are this plugin's kernels.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

Kernel = Callable[[list[np.ndarray], dict[str, Any]], list[np.ndarray]]


def _act(y: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
    """The fused activation some ops carry (`act`: "none" or "relu")."""
    return np.maximum(y, 0, out=y) if attrs.get("act", "none") == "relu" else y


def _windows(x: np.ndarray, kh: int, kw: int, sh: int, sw: int) -> np.ndarray:
    """[n, ho, wo, c, kh, kw] views of every (kh, kw) window of NHWC `x` at strides (sh, sw)."""
    return sliding_window_view(x, (kh, kw), axis=(1, 2))[:, ::sh, ::sw]


def conv2d(inputs: list[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
    """Conv2d (groups 1, dilation 1, zero padding) as one tensordot over the windows."""
    x, w = inputs[0].astype(np.float32, copy=False), inputs[1].astype(np.float32, copy=False)
    bias = inputs[2] if len(inputs) > 2 else None
    kh, kw = w.shape[0], w.shape[1]
    pads = ((0, 0), (attrs.get("pad_top", 0), attrs.get("pad_bottom", 0)),
            (attrs.get("pad_left", 0), attrs.get("pad_right", 0)), (0, 0))
    xp = np.pad(x, pads) if any(p for pair in pads for p in pair) else x
    win = _windows(xp, kh, kw, attrs.get("stride_height", 1), attrs.get("stride_width", 1))
    # win: [n, ho, wo, cin, kh, kw]; w: [kh, kw, cin, cout]
    y = np.tensordot(win, w, axes=([4, 5, 3], [0, 1, 2])).astype(np.float32)
    if bias is not None:
        y += bias.astype(np.float32)
    return [_act(y, attrs)]


def relu(inputs: list[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
    """max(x, 0) (plain ReLU: no leak, clip or threshold; `supports` checks)."""
    return [np.maximum(inputs[0], np.float32(0))]


def add(inputs: list[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
    """Element-wise sum with numpy broadcasting, then the fused activation."""
    return [_act(np.add(inputs[0], inputs[1], dtype=np.float32), attrs)]


def max_pool2d(inputs: list[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
    """Max over each window; padding reads as -inf (floor mode, dilation 1)."""
    x = inputs[0].astype(np.float32, copy=False)
    pads = ((0, 0), (attrs.get("pad_top", 0), attrs.get("pad_bottom", 0)),
            (attrs.get("pad_left", 0), attrs.get("pad_right", 0)), (0, 0))
    if any(p for pair in pads for p in pair):
        x = np.pad(x, pads, constant_values=-np.inf)
    win = _windows(x, attrs.get("pool_height", 1), attrs.get("pool_width", 1),
                   attrs.get("stride_height", 1), attrs.get("stride_width", 1))
    return [win.max(axis=(4, 5))]


#: op type -> kernel: what this backend runs (its `FORWARDS` are made from this table)
KERNELS: dict[str, Kernel] = {"Conv2d": conv2d, "Relu": relu, "Add": add,
                              "MaxPool2d": max_pool2d}


def supports(op_type: str, attrs: dict[str, Any]) -> bool:
    """Whether the kernel of `op_type` computes these attributes exactly (the rest of an op's
    forms, e.g. grouped or dilated convolutions, is left to the next backend)."""
    if op_type == "Conv2d":
        return (attrs.get("groups", 1) == 1 and attrs.get("dilation_height", 1) == 1
                and attrs.get("dilation_width", 1) == 1
                and attrs.get("padding_mode", "zeros") == "zeros"
                and attrs.get("act", "none") in ("none", "relu"))
    if op_type == "Relu":
        return (attrs.get("alpha", 0.0) == 0.0 and attrs.get("threshold", 0.0) == 0.0
                and attrs.get("max_value", np.inf) == np.inf)
    if op_type == "Add":
        return attrs.get("act", "none") in ("none", "relu")
    if op_type == "MaxPool2d":
        return (not attrs.get("ceil_mode", False) and attrs.get("dilation_height", 1) == 1
                and attrs.get("dilation_width", 1) == 1)
    return False

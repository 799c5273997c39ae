"""Helpers shared by the float kernels: attribute reading, dtype and padding."""

from __future__ import annotations

from typing import Any

import numpy as np


def f32(x: Any) -> np.ndarray:
    """The input as a float32 array (no copy when it already is one)."""
    return np.asarray(x, dtype=np.float32)


def out32(x: np.ndarray) -> np.ndarray:
    """A kernel output: float32, C-contiguous."""
    return np.ascontiguousarray(x, dtype=np.float32)


def fresh(x: np.ndarray) -> np.ndarray:
    """A C-contiguous copy that never shares memory with a kernel input."""
    return np.array(x, order="C", copy=True)


def int_attr(attrs: dict, name: str, default: int) -> int:
    return int(attrs.get(name, default))


def require(attrs: dict, name: str, op: str) -> Any:
    """An attribute without a documented default: fail with a message naming op and key."""
    try:
        return attrs[name]
    except KeyError:
        raise KeyError(f"{op}: attribute {name!r} is required (see docs/ops.md)") from None


def pads4(attrs: dict) -> tuple[int, int, int, int]:
    """(pad_top, pad_bottom, pad_left, pad_right), each defaulting to 0."""
    return (
        int_attr(attrs, "pad_top", 0),
        int_attr(attrs, "pad_bottom", 0),
        int_attr(attrs, "pad_left", 0),
        int_attr(attrs, "pad_right", 0),
    )


def pad_hw(
    x: np.ndarray,
    pt: int,
    pb: int,
    pl: int,
    pr: int,
    value: float = 0.0,
    mode: str = "constant",
) -> np.ndarray:
    """Pad H and W of an NHWC array; the result is C-contiguous."""
    if min(pt, pb, pl, pr) < 0:
        raise ValueError(f"negative padding ({pt}, {pb}, {pl}, {pr}) is not supported")
    if not (pt or pb or pl or pr):
        return np.ascontiguousarray(x)
    if mode != "constant":
        return np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)), mode=mode)
    n, h, w, c = x.shape
    out = np.empty((n, h + pt + pb, w + pl + pr, c), dtype=x.dtype)
    # Fill only the border: cheaper than filling the whole array then overwriting it.
    out[:, :pt] = value
    out[:, pt + h :] = value
    out[:, pt : pt + h, :pl] = value
    out[:, pt : pt + h, pl + w :] = value
    out[:, pt : pt + h, pl : pl + w] = x
    return out


def tap(x: np.ndarray, i0: int, j0: int, sh: int, sw: int, ho: int, wo: int) -> np.ndarray:
    """The strided NHWC view of one kernel tap: x[:, i0 + sh*oy, j0 + sw*ox, :]."""
    return x[:, i0 : i0 + sh * (ho - 1) + 1 : sh, j0 : j0 + sw * (wo - 1) + 1 : sw, :]


def fold_act(y: np.ndarray, attrs: dict, op: str) -> np.ndarray:
    """Apply a folded activation (``act``, ``act_alpha``, ``act_max``) to a float32 result.

    act "relu" is the Relu family: y if y >= 0 else act_alpha * y, then min(y, act_max).
    Works in place when ``y`` is a float32 array it may own.
    """
    act = str(attrs.get("act", "none"))
    if act == "none":
        return y
    if act != "relu":
        raise ValueError(f"{op}: act must be 'none' or 'relu', not {act!r}")
    alpha = np.float32(attrs.get("act_alpha", 0.0))
    max_value = float(attrs.get("act_max", np.inf))
    if alpha == 0:
        np.maximum(y, np.float32(0), out=y)
    else:
        np.multiply(y, alpha, out=y, where=y < 0)
    if max_value != np.inf:
        np.minimum(y, np.float32(max_value), out=y)
    return y

"""AlignAxis and PruneAxis: pad an axis with zeros to a multiple of a unit, or cut it.

Pure data movement: the input dtype is kept.
"""

from __future__ import annotations

import numpy as np

from ._common import require


def _axis(axis: int, ndim: int, op: str) -> int:
    if not -ndim <= axis < ndim:
        raise ValueError(f"{op}: axis {axis} is out of range for rank {ndim}")
    return axis % ndim


def align_axis(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    axis = _axis(int(attrs.get("axis", -1)), x.ndim, "AlignAxis")
    unit = int(attrs.get("align_unit", 16))
    if unit < 1:
        raise ValueError(f"AlignAxis: align_unit {unit} must be >= 1")
    size = x.shape[axis]
    padded = -(-size // unit) * unit
    shape = list(x.shape)
    shape[axis] = padded
    y = np.zeros(shape, dtype=x.dtype)
    index = [slice(None)] * x.ndim
    index[axis] = slice(0, size)
    y[tuple(index)] = x
    return [y]


def prune_axis(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    axis = _axis(int(attrs.get("axis", -1)), x.ndim, "PruneAxis")
    size = int(require(attrs, "size", "PruneAxis"))
    if not 0 <= size <= x.shape[axis]:
        raise ValueError(f"PruneAxis: size {size} is outside [0, {x.shape[axis]}] on axis {axis}")
    index = [slice(None)] * x.ndim
    index[axis] = slice(0, size)
    return [np.array(x[tuple(index)], order="C", copy=True)]


def align_axis_int(inputs, attrs, in_types, out_types, *, fake=False):
    """AlignAxis on codes (zero padding is code 0 = real 0)."""
    return align_axis(inputs, attrs)


def prune_axis_int(inputs, attrs, in_types, out_types, *, fake=False):
    return prune_axis(inputs, attrs)

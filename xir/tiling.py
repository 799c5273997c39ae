"""Tiled hardware layouts (e.g. NCHWc16) to and from software layouts, on numpy arrays."""

from __future__ import annotations

import numpy as np

from .errors import FieldTypeError
from .types import Layout


def untile(arr: np.ndarray, layout: Layout) -> np.ndarray:
    """Software-layout copy of a tiled array (NCHWc16 -> NCHW: the tile merged into C)."""
    tokens = list(layout.tokens)
    while any(t for _, t in tokens):
        i = next(i for i, (_, t) in enumerate(tokens) if t)
        letter = tokens[i][0].upper()
        j = next((k for k, (ch, t) in enumerate(tokens) if ch == letter and not t), -1)
        if j < 0:
            raise FieldTypeError(f"layout {layout.spec}: tile {tokens[i][0]} has no axis {letter}",
                                 field="layout")
        arr = np.moveaxis(arr, i, j + 1)
        tok = tokens.pop(i)
        tokens.insert(j + 1, tok)
        shape = list(arr.shape)
        shape[j:j + 2] = [shape[j] * shape[j + 1]]
        arr = arr.reshape(shape)
        tokens.pop(j + 1)
    return arr


def tile(arr: np.ndarray, layout: Layout, shape) -> np.ndarray:
    """Tile a software-layout array into ``layout``: arr's axes are the layout's untiled letters
    in order; each tiled axis is zero-padded to (block count in ``shape``) x (tile length)."""
    tokens = list(layout.tokens)
    labels = [(ch, 0) for ch, t in tokens if not t]
    for ch, t in tokens:
        if not t:
            continue
        ax = labels.index((ch.upper(), 0))
        blocks = shape[tokens.index((ch.upper(), 0))]
        size = arr.shape[ax]
        if size > blocks * t:
            raise FieldTypeError(f"cannot tile {size} entries of axis {ch.upper()} into "
                                 f"{blocks} x {t}", field="layout")
        if size < blocks * t:
            widths = [(0, 0)] * arr.ndim
            widths[ax] = (0, blocks * t - size)
            arr = np.pad(arr, widths)
        new_shape = list(arr.shape)
        new_shape[ax:ax + 1] = [blocks, t]
        arr = arr.reshape(new_shape)
        labels[ax:ax + 1] = [(ch.upper(), 0), (ch, t)]
    return np.ascontiguousarray(np.transpose(arr, [labels.index(tok) for tok in tokens]))

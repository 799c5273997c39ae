"""`_T`, an imported ONNX tensor: a numpy constant or xir Values holding transposed views.

Constants fold while importing. A computed tensor is held as xir Values, one for each
permutation it is read in (`NHWC` for the 2-D ops), each made once and cached by the importer.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xir.values import Value

NHWC = (0, 2, 3, 1)


def _ident(rank: int) -> tuple[int, ...]:
    return tuple(range(rank))


class _T:
    """An imported ONNX tensor: a constant, or xir Values holding transposed views of it."""

    __slots__ = ("shape", "const", "views", "base", "src")

    def __init__(self, shape, const: np.ndarray | None = None, value: Value | None = None,
                 perm=None) -> None:
        self.shape = tuple(int(d) for d in shape)
        self.const = const
        self.views: dict[tuple[int, ...], Value] = {}
        self.base: tuple[int, ...] | None = None
        #: the ONNX initializer this constant is, unchanged (None: computed or folded): the
        #: provenance a refit maps initializer names back to layers with (xcompile.refit)
        self.src: str | None = None
        if value is not None:
            self.base = tuple(perm) if perm is not None else _ident(len(self.shape))
            self.views[self.base] = value

    @classmethod
    def constant(cls, array: Any) -> _T:
        arr = np.asarray(array)
        return cls(arr.shape, const=arr)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_const(self) -> bool:
        return self.const is not None

    @property
    def dtype(self) -> np.dtype:
        if self.const is not None:
            return self.const.dtype
        return self.views[self.base].dtype.numpy_dtype

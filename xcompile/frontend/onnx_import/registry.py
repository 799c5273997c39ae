"""The handler registry: which function turns an ONNX op type into xir ops.

A handler takes (importer, node, attributes, input tensors) and returns the output tensors, or
raises `_Unsupported` with a reason; the importer collects every reason before failing.
Handlers register with `@_handles(...)` when their module in `handlers/` is imported.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from xcompile.frontend.onnx_import.tensor import _T

if TYPE_CHECKING:
    from xcompile.frontend.onnx_import.importer import _Importer


class _Unsupported(Exception):
    """Internal: this node cannot be expressed in xir (the reason is collected)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


Handler = Callable[["_Importer", Any, dict, list], list[_T]]
_HANDLERS: dict[str, Handler] = {}


def _handles(*names: str):
    def deco(fn: Handler) -> Handler:
        for n in names:
            _HANDLERS[n] = fn
        return fn
    return deco

"""The lowering shared by every FMSH NPU target: a quantized network -> HardOps.

`adapt` pads the host/NPU edge to the channel unit, `lower` selects the ops the NPU runs, fuses
them into HardOps, assigns feature-map buffers and aliases, packs weights and emits instructions
with `npu_model.asm`; `relocate` rewrites instruction address words at deployment. Everything is
parametrised by a `TargetConfig` (see docs/zg330-lowering.md for the contract; `zg330backend` and
`buyibackend` hold one each).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .adapt import adapt
from .common import TargetConfig
from .lower import lower
from .relocate import RelocationError, relocate

__all__ = ["TargetConfig", "adapt", "lower", "relocate", "RelocationError", "make_target"]


def make_target(target: TargetConfig) -> Callable[..., Any]:
    """The compile hook of `target`: ``hook(adapted, options) -> Network`` with ``.suffix`` and
    ``.adapt(quantized, options)``, as `xrt_register_targets` expects."""

    def hook(adapted: Any, options: dict | None = None) -> Any:
        return lower(adapted, target, options)

    def adapt_(quantized: Any, options: dict | None = None) -> Any:
        return adapt(quantized, target, options)

    hook.suffix = target.suffix  # type: ignore[attr-defined]
    hook.adapt = adapt_  # type: ignore[attr-defined]
    hook.config = target  # type: ignore[attr-defined]
    hook.__doc__ = f"The compile hook: lower an adapted quantized network for {target.name}."
    return hook

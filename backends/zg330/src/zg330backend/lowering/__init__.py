"""ZG330 lowering: the compile target "zg330" (adapt + lower, `*_ZG.json/raw`).

`target` is what the plugin registers: ``target(adapted_net, options) -> Network`` with
``target.suffix == "ZG"`` and ``target.adapt(quantized_net, options) -> Network``. The contract
between this compiler and the runtime (`ZG330Backend`) is docs/zg330-lowering.md.
"""

from __future__ import annotations

from typing import Any

from .adapt import adapt
from .common import TAG, ZG_TARGET
from .lower import lower

__all__ = ["adapt", "lower", "target", "TAG", "ZG_TARGET"]


def target(adapted: Any, options: dict | None = None) -> Any:
    """The compile hook: lower an adapted quantized network for the ZG330."""
    return lower(adapted, options)


target.suffix = "ZG"  # type: ignore[attr-defined]
target.adapt = adapt  # type: ignore[attr-defined]

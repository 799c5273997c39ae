"""ZG330 lowering: the compile target "zg330" (adapt + lower, `*_ZG.json/raw`).

The lowering itself is shared with the other NPU targets (`npu_model.lowering`); this package
holds only the ZG330 target description (`common.ZG330_TARGET`). `target` is what the plugin
registers: ``target(adapted_net, options) -> Network`` with ``target.suffix == "ZG"`` and
``target.adapt(quantized_net, options) -> Network``. The contract between this compiler and the
runtime (`ZG330Backend`) is docs/zg330-lowering.md.
"""

from __future__ import annotations

from typing import Any

from npu_model import lowering as _shared

from .common import TAG, ZG330_TARGET, ZG_TARGET

__all__ = ["adapt", "lower", "target", "TAG", "ZG_TARGET", "ZG330_TARGET"]


def adapt(quantized: Any, options: dict | None = None) -> Any:
    """AlignAxis / PruneAxis around the quantized region's Casts, to the ZG330 channel unit."""
    return _shared.adapt(quantized, ZG330_TARGET, options)


def lower(adapted: Any, options: dict | None = None) -> Any:
    """The ZG330 generated stage of an adapted network (a new network; the input is kept)."""
    return _shared.lower(adapted, ZG330_TARGET, options)


def target(adapted: Any, options: dict | None = None) -> Any:
    """The compile hook: lower an adapted quantized network for the ZG330."""
    return lower(adapted, options)


target.suffix = ZG330_TARGET.suffix  # type: ignore[attr-defined]
target.adapt = adapt  # type: ignore[attr-defined]

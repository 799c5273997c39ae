"""ZG330 lowering: the compile target "zg330" (adapt + lower, `*_ZG.json/raw`).

The lowering itself is shared with the other NPU targets (`npu_model.lowering`); the ZG330 adds
only its target description (`chip.ZG330_TARGET`). The contract between this compiler and the
runtime (`ZG330Backend`) is docs/zg330-lowering.md.
"""

from __future__ import annotations

from typing import Any

from npu_model import lowering as _shared

from .chip import TAG, ZG330_TARGET, ZG_TARGET

__all__ = ["adapt", "lower", "target", "TAG", "ZG_TARGET", "ZG330_TARGET"]

#: the compile hook the plugin registers: ``target(adapted, options) -> Network``, with
#: ``target.suffix == "ZG"`` and ``target.adapt(quantized, options)``
target = _shared.make_target(ZG330_TARGET)
adapt = target.adapt


def lower(adapted: Any, options: dict | None = None) -> Any:
    """The ZG330 generated stage of an adapted network (a new network; the input is kept)."""
    return target(adapted, options)

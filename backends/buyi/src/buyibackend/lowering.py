"""Buyi lowering: the compile target "buyi" (`*_BY.json/raw`), the shared `npu_model.lowering`
with the Buyi's `TargetConfig` (channel unit 16 / 8, compile_target "@buyi", tags["buyi"]).

Option ``ocm`` (0 = none, default; 1..3 = the OCM planner's options): on the Buyi the OCM use is
decided at compile time and recorded in ``tags["buyi"]["ocm"]`` for the runtime."""

from __future__ import annotations

from typing import Any

from npu_model import lowering as _shared
from xrt.errors import InvalidArgumentError

from .chip import BUYI_TARGET, TAG

__all__ = ["adapt", "lower", "target", "BUYI_TARGET", "TAG"]

_shared_target = _shared.make_target(BUYI_TARGET)
adapt = _shared_target.adapt


def lower(adapted: Any, options: dict | None = None) -> Any:
    """The Buyi generated stage of an adapted network (a new network; the input is kept)."""
    opts = dict(options or {})
    ocm = opts.get("ocm") or 0
    if ocm not in (0, 1, 2, 3):
        raise InvalidArgumentError(f"buyi lowering: option ocm={ocm!r} is not 0 (none) or 1..3")
    out = _shared_target(adapted, opts)
    out.tags[TAG]["ocm"] = int(ocm)
    return out


def target(adapted: Any, options: dict | None = None) -> Any:
    """The compile hook: lower an adapted quantized network for the Buyi."""
    return lower(adapted, options)


target.suffix = BUYI_TARGET.suffix  # type: ignore[attr-defined]
target.adapt = adapt  # type: ignore[attr-defined]

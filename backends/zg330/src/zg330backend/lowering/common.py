"""ZG330 specifics of the lowering: its target description (the code is `npu_model.lowering`)."""

from __future__ import annotations

from npu_model.lowering.common import (
    ETM_ALIGN,
    ETM_RESERVED,
    TargetConfig,
    align,
    clone_network,
    map3,
    npu_dtype,
    scale_of,
)

from ..config import ZG330_CONFIG

#: compile_target of every HardOp this lowering makes
ZG_TARGET = "@zhuget(330)"
#: key of the lowering's annotations in value / op / network tags
TAG = "zg330"
#: the ZG330 as a lowering target
ZG330_TARGET = TargetConfig(name="zg330", npu=ZG330_CONFIG, compile_target=ZG_TARGET,
                            suffix="ZG", tag=TAG)

__all__ = ["ZG_TARGET", "TAG", "ZG330_TARGET", "ETM_ALIGN", "ETM_RESERVED", "align",
           "clone_network", "map3", "npu_dtype", "scale_of", "channel_unit"]


def channel_unit(bits_or_dtype) -> int:
    """The ZG330 channel unit for 8/16 bits or 'int8'/'int16'."""
    return ZG330_TARGET.channel_unit(bits_or_dtype)

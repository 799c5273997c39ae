"""The ZG330Backend data structures (ZG330Backend user guide, "数据结构"): the shared runtime's,
under the vendor's import path."""

from __future__ import annotations

from npu_runtime.structs import (
    ForwardInfo,
    HardOpInfo,
    LogicSegment,
    MemChunkInfo,
    OcmOpt,
    PhySegment,
    SegmentType,
    ValueInfo,
)

__all__ = ["ForwardInfo", "HardOpInfo", "LogicSegment", "MemChunkInfo", "OcmOpt", "PhySegment",
           "SegmentType", "ValueInfo"]

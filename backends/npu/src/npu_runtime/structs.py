"""The NPU backends' data structures, with the vendor's field names and defaults (ZG330Backend
user guide, "数据结构": ValueInfo, HardOpInfo, LogicSegment, MemChunkInfo, PhySegment,
ForwardInfo); the Buyi's are the same.

ValueInfo and HardOpInfo describe values and HardOps; LogicSegment is built by `init` (logical
addresses), PhySegment by `apply` (physical chunks); ForwardInfo is what forward needs.
Everything here is plain data so a deployed backend can be serialised into a snapshot.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from npu_model.planners.ocm import OcmOpt

__all__ = ["SegmentType", "OcmOpt", "ValueInfo", "HardOpInfo", "LogicSegment", "MemChunkInfo",
           "PhySegment", "ForwardInfo"]


class SegmentType(enum.IntEnum):
    """Kinds of ETM segments: WEIGHT, INSTR and FTMP are one chunk each, INPUT/OUTPUT one per
    value."""

    WEIGHT = 0
    INSTR = 1
    FTMP = 2
    INPUT = 3
    OUTPUT = 4


@dataclass
class ValueInfo:
    """A feature map's placement: segment, logical/physical address, size, aliasing."""

    value: Any = None
    real: bool = True
    is_ocm: bool = False
    is_host: bool = False
    real_to: list[Any] = field(default_factory=list)
    fake_from: Any = None
    logic_addr: int = 0
    phy_addr: int = 0
    byte_size: int = 0
    segment: SegmentType = SegmentType.FTMP


@dataclass
class HardOpInfo:
    """A HardOp's instruction and weight addresses and its sync position."""

    weights_logic_addr: int = 0
    weights_size: int = 0
    instr_logic_addr: int = 0
    instr_size: int = 0
    weight_phy_addr: int = 0
    instr_phy_addr: int = 0
    net_hardop: Any = None
    sync_idx: tuple[int, int] = (0, 0)
    merge_from: list[int] = field(default_factory=list)


@dataclass
class LogicSegment:
    """A segment's logical layout (made by init)."""

    segment_type: SegmentType
    info_map: dict[int, ValueInfo] = field(default_factory=dict)
    hardop_map: dict[int, HardOpInfo] = field(default_factory=dict)
    logic_addr: int = 0
    byte_size: int = 0


@dataclass
class MemChunkInfo:
    """A chunk backing a physical segment; `user_used` when the user supplied it."""

    memChunk: Any = None
    user_used: bool = False
    staged_chunk: dict[int, Any] = field(default_factory=dict)


@dataclass
class PhySegment:
    """A segment's physical placement (made by apply)."""

    segment_type: SegmentType
    byte_size: int = 0
    phy_addr: int = 0
    info_map: dict[int, ValueInfo] = field(default_factory=dict)
    hardop_map: dict[int, HardOpInfo] = field(default_factory=dict)
    multi_chunk: dict[int, MemChunkInfo] = field(default_factory=dict)
    single_chunk: MemChunkInfo = field(default_factory=MemChunkInfo)


@dataclass
class ForwardInfo:
    """Everything forward needs: values, HardOps, sync indices and value chunks."""

    value_map: dict[int, ValueInfo] = field(default_factory=dict)
    hardop_map: dict[int, HardOpInfo] = field(default_factory=dict)
    idx_map: dict[int, tuple[int, int]] = field(default_factory=dict)
    memchunk_map: dict[int, MemChunkInfo] = field(default_factory=dict)

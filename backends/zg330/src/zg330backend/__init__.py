"""zg330backend: the ZG330 NPU for icraft-xrt-sim.

Vendor-style use: ``from zg330backend import *`` gives `ZG330Backend`, `ZG330Device`,
`SegmentType`, `OcmOpt` and the data structures of seed 001. The hardware model itself lives in
the shared `npu_model` package; the compile target "zg330" in `zg330backend.lowering`.
"""

from __future__ import annotations

from .backend import ZG330Backend
from .config import ZG330_CONFIG
from .device import ZG330Device
from .structs import (
    ForwardInfo,
    HardOpInfo,
    LogicSegment,
    MemChunkInfo,
    OcmOpt,
    PhySegment,
    SegmentType,
    ValueInfo,
)

__all__ = ["ZG330Backend", "ZG330Device", "ZG330_CONFIG", "SegmentType", "OcmOpt", "ValueInfo",
           "HardOpInfo", "LogicSegment", "MemChunkInfo", "PhySegment", "ForwardInfo"]
__version__ = "0.1.0"

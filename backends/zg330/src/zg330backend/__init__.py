"""zg330backend: the ZG330 NPU for icraft-xrt-sim.

Vendor-style use: ``from zg330backend import *`` gives `ZG330Backend`, `ZG330Device`,
`SegmentType`, `OcmOpt` and the data structures of the ZG330Backend user guide. The hardware
model and the deployment runtime are shared (`npu_model`, `npu_runtime`); this package holds
the ZG330's description (`chip`), its device and backend classes with the ZG330's vendor
methods, its compile target (`lowering`) and its plugin.
"""

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

from .backend import ZG330Backend
from .chip import ZG330_CHIP, ZG330_CONFIG
from .device import ZG330Device

__all__ = ["ZG330Backend", "ZG330Device", "ZG330_CONFIG", "ZG330_CHIP", "SegmentType", "OcmOpt",
           "ValueInfo", "HardOpInfo", "LogicSegment", "MemChunkInfo", "PhySegment",
           "ForwardInfo"]
__version__ = "0.1.0"

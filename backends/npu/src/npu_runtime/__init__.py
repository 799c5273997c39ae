"""npu_runtime: what the NPU backends share -- the deployment runtime over the hardware model.

- `chip.Chip`: what differs between NPUs, as data (names, hardware, URLs, defaults);
- `device.NpuDevice`: the device base, holding its transport (`transport.LocalCore`, simulated
  or mock; `remote.SocketTransport`, served);
- `layout`, `settings`, `apply`, `forward`, `report`, `snapshot`: the stages of a deployment,
  `Layout` -> `Settings` -> `Deployment` -> `Forwarder`;
- `deploy`: FTMP / OCM planning glue over `npu_model.planners`;
- `backend.NpuBackend`: the vendor API both backends share, over those stages;
- `plugin.chip_hooks`: the hookimpls of a chip's plugin module.

A chip package (`zg330backend`, `buyibackend`) holds a `Chip`, subclasses of `NpuDevice` and
`NpuBackend` with its vendor methods, its lowering target and its plugin module; chips never
import each other (docs/architecture.md).
"""

from __future__ import annotations

from .chip import Chip
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

__all__ = ["Chip", "ForwardInfo", "HardOpInfo", "LogicSegment", "MemChunkInfo", "OcmOpt",
           "PhySegment", "SegmentType", "ValueInfo"]
__version__ = "0.1.0"

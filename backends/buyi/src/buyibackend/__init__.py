"""buyibackend: the Buyi NPU for icraft-xrt-sim.

Vendor-style use: ``from buyibackend import *`` gives `BuyiBackend`, `BuyiDevice` and
`SegmentType`. Only what differs from the ZG330 lives here (docs/buyi.md); the hardware model
and the lowering are `npu_model`'s, the deployment runtime is inherited from `zg330backend`.
"""

from __future__ import annotations

from zg330backend.structs import SegmentType

from .backend import BuyiBackend, OcmTensor
from .config import BUYI_CONFIG, BUYI_TARGET
from .device import BuyiDevice

__all__ = ["BuyiBackend", "BuyiDevice", "BUYI_CONFIG", "BUYI_TARGET", "SegmentType",
           "OcmTensor"]
__version__ = "0.1.0"

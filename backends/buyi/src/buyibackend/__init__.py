"""buyibackend: the Buyi NPU for icraft-xrt-sim.

Vendor-style use: ``from buyibackend import *`` gives `BuyiBackend`, `BuyiDevice` and
`SegmentType`. Only what differs from the other NPUs lives here (docs/buyi.md): the Buyi's
description (`chip`), its device and backend classes with the Buyi's vendor methods, its
compile target and its plugin; the hardware model and the deployment runtime are shared
(`npu_model`, `npu_runtime`).
"""

from __future__ import annotations

from npu_runtime.structs import SegmentType

from .backend import BuyiBackend, OcmTensor
from .chip import BUYI_CHIP, BUYI_CONFIG, BUYI_TARGET
from .device import BuyiDevice

__all__ = ["BuyiBackend", "BuyiDevice", "BUYI_CONFIG", "BUYI_CHIP", "BUYI_TARGET", "SegmentType",
           "OcmTensor"]
__version__ = "0.1.0"

"""zg330backend: the ZG330 NPU for icraft-xrt-sim.

Vendor-style use: ``from zg330backend import *`` gives `ZG330Device` (and, once the lowering
lands, `ZG330Backend`). The hardware model itself lives in the shared `npu_model` package.
"""

from __future__ import annotations

from .config import ZG330_CONFIG
from .device import ZG330Device

__all__ = ["ZG330Device", "ZG330_CONFIG"]
__version__ = "0.1.0"

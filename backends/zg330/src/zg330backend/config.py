"""ZG330 defaults: the shared NPU model's configuration plus the device's address map."""

from __future__ import annotations

from npu_model.config import NpuConfig

#: The ZG330 hardware (4 x 4 MPEs, 256 int8 MACs each, channel unit 32/16, 2 MiB OCM, 1 GiB ETM
#: at 0x4000_0000, icore 1 GHz, DDR 800 MHz x 16 bytes). See docs/zg330-hardware-model.md.
ZG330_CONFIG = NpuConfig(name="zg330")

#: Register window of the device (32-bit registers; map in zg330backend.regs)
REG_BASE = 0x9000_0000
REG_SIZE = 0x8000
#: Allocation alignment of the ETM/OCM regions (the compiler aligns everything to 64 bytes)
MEM_ALIGNMENT = 64
#: Model identification (register ID)
DEVICE_ID = 0x0330_0001

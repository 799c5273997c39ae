"""The Buyi ("布衣") as data: its hardware, its lowering target and its runtime defaults.

2 x 4 MPEs (rows x cols) of 16 x 8 int8 MACs (8 x 4 in int16), channel unit 16 / 8, 1 MiB OCM,
icore 500 MHz, DDR 666 MHz x 8 bytes: a smaller, older part than the ZG330 (docs/buyi.md; the
numbers are the simulator's, not a datasheet's). HardOps compiled for "@buyi" carry their
annotations in ``tags["buyi"]``; merging and feature-map reuse are off by default and switched
on explicitly (ZG330Backend user guide, section 1.3).
"""

from __future__ import annotations

from npu_model.config import MiB, NpuConfig
from npu_model.lowering import TargetConfig
from npu_runtime.chip import Chip

BUYI_CONFIG = NpuConfig(
    name="buyi", mpe_rows=2, mpe_cols=4,
    in_lanes_int8=16, out_lanes_int8=8, in_lanes_int16=8, out_lanes_int16=4,
    channel_unit_int8=16, channel_unit_int16=8,
    vector_lanes=64, ocm_size=1 * MiB, ocm_bytes_per_cycle=128,
    icore_clk_hz=500_000_000, ddr_clk_hz=666_000_000, ddr_bytes_per_cycle=8,
    mmu_entries=64)

#: compile_target of every Buyi HardOp
BUYI_COMPILE_TARGET = "@buyi"
#: key of the lowering's annotations in value / op / network tags
TAG = "buyi"
#: the Buyi as a lowering target (`xrt compile --target buyi` writes `*_BY.json/raw`)
BUYI_TARGET = TargetConfig(name="buyi", npu=BUYI_CONFIG, compile_target=BUYI_COMPILE_TARGET,
                           suffix="BY", tag=TAG)
#: data types `BuyiDevice.setDType` accepts (bits)
DTYPE_BITS = (8, 16)
#: Model identification (register ID)
DEVICE_ID = 0x0B01_0001

BUYI_CHIP = Chip(
    name="Buyi", target=BUYI_TARGET, device_id=DEVICE_ID,
    url_names={"sim": ("buyi",), "axi": ("ql100aiu", "buyi"), "mock": ("buyi",)},
    socket_names=("buyi", "ql100aiu"), merge=False, etm_reuse=False, mmu_switch=True)

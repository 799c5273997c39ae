"""The ZG330 ("诸葛" 330) as data: its hardware, its lowering target and its runtime defaults.

4 x 4 MPEs of 256 int8 MACs each, channel unit 32 / 16, 2 MiB OCM, 1 GiB ETM at 0x4000_0000,
icore 1 GHz, DDR 800 MHz x 16 bytes (docs/zg330-hardware-model.md); HardOps compiled for
"@zhuget(330)" carry their annotations in ``tags["zg330"]``; merging, ETM reuse and the OCM
option are on by default (ZG330Backend user guide, section 1.3).
"""

from __future__ import annotations

from npu_model.config import NpuConfig
from npu_model.lowering import TargetConfig
from npu_runtime.chip import Chip

#: The ZG330 hardware (the shared model's defaults)
ZG330_CONFIG = NpuConfig(name="zg330")
#: compile_target of every HardOp the ZG330 lowering makes
ZG_TARGET = "@zhuget(330)"
#: key of the lowering's annotations in value / op / network tags
TAG = "zg330"
#: the ZG330 as a lowering target (`xrt compile --target zg330` writes `*_ZG.json/raw`)
ZG330_TARGET = TargetConfig(name="zg330", npu=ZG330_CONFIG, compile_target=ZG_TARGET,
                            suffix="ZG", tag=TAG)
#: Model identification (register ID): ZG330, ISA version 1
DEVICE_ID = 0x0330_0001

ZG330_CHIP = Chip(
    name="ZG330", target=ZG330_TARGET, device_id=DEVICE_ID,
    url_names={"sim": ("zg330",), "axi": ("zg330aiu", "zg330"), "mock": ("zg330",)},
    socket_names=("zg330", "haps-zg330"), merge=True, etm_reuse=True)

"""ZG330Backend: the shared NPU runtime (`npu_runtime.NpuBackend`) with the ZG330's deployment
options (ZG330Backend class reference: disableMergeHardOp, disableEtmOptimize, ocmOptimize;
docs/zg330-deployment.md). Everything else -- init, apply, forward, fork, log, precheck,
snapshots, user chunks -- is the shared runtime's.
"""

from __future__ import annotations

from npu_runtime.backend import NpuBackend
from npu_runtime.structs import OcmOpt

from .chip import ZG330_CHIP
from .device import ZG330Device

__all__ = ["ZG330Backend"]


class ZG330Backend(NpuBackend):
    """The ZG330 NPU backend (name "ZG330"); binds HardOps compiled for @zhuget(330)."""

    name = "ZG330"
    default_url = "sim://zg330"
    supports_user_outputs = True
    chip = ZG330_CHIP
    device_class = ZG330Device
    OTHER_CHIP_METHODS = {
        "speedMode": "merging consecutive HardOps is on by default (disableMergeHardOp() "
                     "turns it off)",
        "compressFtmp": "feature-map reuse is on by default (disableEtmOptimize() turns it "
                        "off)",
        "userSetSegment": "use userReuseSegment(chunk, segment_type)",
        "mmuModeSwitch": "the ZG330's MMU is always on",
    }

    def disableMergeHardOp(self) -> None:
        """Run every HardOp with its own icoreCalc (default: consecutive HardOps merged)."""
        self._set_merge("disableMergeHardOp", False)

    def disableEtmOptimize(self) -> None:
        """Keep the compiler's one-slot-per-value FTMP layout (default: reuse planning on)."""
        self._set_etm_reuse("disableEtmOptimize", False)

    def ocmOptimize(self, option: OcmOpt) -> None:
        """Choose the OCM placement option (OcmOpt.NONE turns OCM use off)."""
        self._set_ocm("ocmOptimize", option)

    @property
    def zg330backend_id(self) -> int:
        """This backend's id (the vendor's field)."""
        return self.backend_id

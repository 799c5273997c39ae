"""BuyiBackend: the shared NPU runtime (`npu_runtime.NpuBackend`) with what the Buyi does
differently (ZG330Backend user guide, "一 新增功能说明", read from the Buyi's side):

- merge of consecutive HardOps (`speedMode`) and feature-map reuse (`compressFtmp`) are off by
  default and switched on explicitly; merging joins only HardOps of one precision, and the
  runtime sets the NPU's data type per run;
- there is no OCM option: the compiled network decides (``tags["buyi"]["ocm"]``), and OCM
  tensors cannot be read or dumped (`OcmTensor`);
- forward with caller-provided outputs is not supported;
- `userConnectNetwork` requires the inputs / outputs in the network's order;
- the device's MMU can be off (`BuyiDevice.mmuModeSwitch(False)`): the runtime then relocates
  the instructions to the physical segments at apply.

A Cast between int8 and int16 (the NPU's data-type converter) is lowered into a HardOp like any
other layer (`npu_model.lowering.layers.lower_requant_cast`): it runs through the hardware model
and its cycles come from the cycle model.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from npu_runtime.apply import Run
from npu_runtime.backend import NpuBackend
from npu_runtime.checks import check_network_tag
from npu_runtime.structs import OcmOpt, SegmentType
from xir.errors import NetworkFormatError
from xrt.errors import InvalidArgumentError, UnsupportedOpError
from xrt.tensor import Tensor

from .chip import BUYI_CHIP, TAG
from .device import BuyiDevice


class OcmTensor(Tensor):
    """A feature map in the Buyi's OCM: passed between HardOps, but not readable or dumpable
    (the Buyi runtime cannot express OCM tensors; the ZG330 can)."""

    def _refuse(self, what: str) -> None:
        raise UnsupportedOpError(
            f"BuyiBackend cannot {what} an OCM tensor: the Buyi runtime does not express "
            f"tensors in on-chip memory; compile the network without OCM use "
            f"(`xrt compile --target buyi`, no ocm option) to dump intermediate results")

    def dump(self, os: Any, format: str = "") -> None:  # noqa: A002
        self._refuse("dump")

    def numpy(self) -> np.ndarray:
        self._refuse("read")
        raise AssertionError  # unreachable

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        return self.numpy()


class BuyiBackend(NpuBackend):
    """The Buyi NPU backend (name "Buyi"); binds HardOps compiled for @buyi and the NPU's
    int8 <-> int16 Cast."""

    name = "Buyi"
    default_url = "sim://buyi"
    supports_user_outputs = False
    chip = BUYI_CHIP
    device_class = BuyiDevice
    OTHER_CHIP_METHODS = {
        "ocmOptimize": "the OCM use is decided by the compiled network (`xrt compile --target "
                       "buyi -o ocm=...`); the ZG330Backend chooses it at run time",
        "disableMergeHardOp": "merging is off by default; speedMode() turns it on "
                              "(disableMergeHardOp is the ZG330Backend's option)",
        "disableEtmOptimize": "feature-map reuse is off by default; compressFtmp() turns it on "
                              "(disableEtmOptimize is the ZG330Backend's option)",
    }

    def __init__(self, other: Any = None) -> None:
        super().__init__(other)
        if isinstance(other, NpuBackend):
            return
        self.settings.ocm = OcmOpt.NONE
        self._connected: dict[SegmentType, list[int]] = {SegmentType.INPUT: [],
                                                         SegmentType.OUTPUT: []}

    def _init(self) -> None:
        super()._init()
        net = getattr(self._view, "network", self._view)
        file = getattr(net, "source_file", None)
        ocm = check_network_tag(getattr(net, "tags", {}), TAG, file).get("ocm", 0)
        if ocm not in [o.value for o in OcmOpt] or isinstance(ocm, bool):
            raise NetworkFormatError(f"ocm must be one of {[o.value for o in OcmOpt]}, not "
                                     f"{ocm!r}", file=file, field=f"tags.{TAG}.ocm")
        self.settings.ocm = OcmOpt(ocm)

    @property
    def mmu_mode(self) -> bool:
        """Whether this backend runs with the MMU on (read from the device at apply)."""
        return self.settings.mmu_on

    # --- deployment options (the Buyi's names) ---------------------------------------------------
    def speedMode(self) -> None:
        """Merge consecutive HardOps into one icoreCalc (off by default on the Buyi)."""
        self._set_merge("speedMode", True)

    def compressFtmp(self) -> None:
        """Reuse feature-map memory by lifetime (off by default on the Buyi)."""
        self._set_etm_reuse("compressFtmp", True)

    def userSetSegment(self, memchunk: Any, segment_type: SegmentType) -> None:
        """The Buyi's name for segment reuse (`userReuseSegment`)."""
        self.userReuseSegment(memchunk, segment_type)

    def etmTotalBytes(self) -> int:
        """Total ETM bytes of the deployment (WEIGHT + INSTR + FTMP + INPUT + OUTPUT)."""
        return int(sum(ls.byte_size for ls in self.logic_segment_map.values()))

    # --- multi-network IO connection -------------------------------------------------------------
    def userConnectNetwork(self, memchunk: Any, v_id: int) -> None:
        """Deploy an INPUT / OUTPUT buffer into a user chunk. The Buyi connects two networks'
        inputs / outputs in order: connect the k-th input (output) of the view only after the
        first k-1, and the networks must list them in the same order."""
        self._config("userConnectNetwork")
        vi = self.value_info.get(int(v_id))
        if vi is not None and vi.segment in (SegmentType.INPUT, SegmentType.OUTPUT):
            order = self.io_order(vi.segment)
            done = self._connected[vi.segment]
            k = len(done)
            if k >= len(order) or order[k] != int(v_id):
                want = order[k] if k < len(order) else None
                raise InvalidArgumentError(
                    f"BuyiBackend.userConnectNetwork: v_id {v_id} connected out of order; the "
                    f"Buyi connects {vi.segment.name.lower()}s in the network's order {order} "
                    f"(next: {want}). Compile the two networks with their inputs/outputs in the "
                    f"same order (the ZG330Backend has no such constraint)")
        super().userConnectNetwork(memchunk, v_id)
        if vi is not None and vi.segment in self._connected:
            self._connected[vi.segment].append(int(v_id))

    def io_order(self, seg: SegmentType) -> list[int]:
        """The view's INPUT (OUTPUT) values in the order the Buyi connects them."""
        seen: list[int] = []
        for op in self._view.ops:
            if op.op_type != "HardOp":
                continue
            for v in (op.inputs if seg == SegmentType.INPUT else op.outputs):
                vi = self.value_info.get(v.v_id)
                if vi is not None and vi.segment == seg and v.v_id not in seen:
                    seen.append(v.v_id)
        return seen

    # --- the Buyi's steps ------------------------------------------------------------------------
    def run_key(self, op: Any) -> Any:
        """The precision a HardOp computes in (its inputs' bits): speedMode merges only
        consecutive HardOps of the same precision, as the vendor's does."""
        return 16 if any(v.tags[TAG]["dtype"] == "int16" for v in op.inputs) else 8

    def before_run(self, run: Run) -> None:
        """The runtime sets the NPU's data type per run; within one chip segment call
        (`Forwarder.run_cache`: no user code runs between its runs) only where it changes."""
        fw = self._forwarder
        cache = fw.run_cache if fw is not None else None
        if cache is not None and cache.get("buyi_dtype") == run.key:
            return
        self._device.setDType(run.key)
        if cache is not None:
            cache["buyi_dtype"] = run.key

    def result_tensor(self, t: Tensor, is_ocm: bool) -> Tensor:
        return OcmTensor(t.dtype(), t.chunk(), t.offset()) if is_ocm else t

    def forwardHardOp(self, op: Any, inputs: list[Tensor], outputs: list[Tensor]
                      ) -> list[Tensor]:
        if outputs:
            raise UnsupportedOpError(
                "BuyiBackend does not write forward results into caller-provided output "
                "tensors (ZG330Backend user guide 1.4: the ZG330Backend does); call "
                "forward(inputs) and copy the results")
        return super().forwardHardOp(op, inputs, outputs)

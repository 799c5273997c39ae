"""BuyiBackend: runs a network view's Buyi HardOps on a BuyiDevice (seed 001 section 一).

The deployment machinery (logical segments, FTMP planning, relocation, MMU table, forward,
precheck, log) is the ZG330 runtime's, inherited; this class states only where the Buyi differs:

- merge of consecutive HardOps (`speedMode`) and feature-map reuse (`compressFtmp`) are off by
  default and switched on explicitly;
- there is no OCM option: the compiled network decides (``tags["buyi"]["ocm"]``), and OCM
  tensors cannot be dumped (`OcmTensor`);
- `forward(inputs, outputs)` with caller-provided outputs is not supported;
- `userConnectNetwork` requires the inputs / outputs in the network's order;
- with the device's MMU off (`BuyiDevice.mmuModeSwitch(False)`) the instruction addresses are
  relocated to the physical segments at apply (`npu_model.lowering.relocate`);
- a Cast between int8 and int16 runs on the NPU's data-type converter.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from npu_model.lowering.relocate import relocate
from xrt.errors import CallOrderError, InvalidArgumentError, UnsupportedOpError
from xrt.tensor import Tensor
from zg330backend.backend import ZG330Backend
from zg330backend.structs import OcmOpt, SegmentType

from .config import BUYI_COMPILE_TARGET, TAG


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


class BuyiBackend(ZG330Backend):
    """The Buyi NPU backend (name "Buyi"); binds HardOps compiled for @buyi and the NPU's
    int8 <-> int16 Cast."""

    name = "Buyi"
    default_url = "sim://buyi"
    supports_user_outputs = False
    TAG = TAG
    COMPILE_TARGET = BUYI_COMPILE_TARGET

    def __init__(self, other: Any = None) -> None:
        super().__init__(other)
        if isinstance(other, ZG330Backend):
            return
        self.is_mergeHardop = False
        self.is_etmOptimize = False
        self.ocmopt = OcmOpt.NONE
        self.mmu_mode = True
        self._connected: dict[SegmentType, list[int]] = {SegmentType.INPUT: [],
                                                         SegmentType.OUTPUT: []}

    # --- binding -------------------------------------------------------------------------------
    def _device_ok(self, device: Any) -> bool:
        from .device import BuyiDevice

        return isinstance(device, BuyiDevice)

    def isOpSupported(self, op: Any) -> bool:
        if op.op_type == "Cast":
            return _is_converter_cast(op)
        return super().isOpSupported(op)

    def getForwardFunc(self, op: Any) -> Any:
        if op.op_type == "Cast" and _is_converter_cast(op):
            return _forward_cast
        return super().getForwardFunc(op)

    def init(self, network_view: Any, device: Any) -> None:
        casts = [op for op in network_view.ops if op.op_type == "Cast"]
        for op in casts:
            if not _is_converter_cast(op):
                raise UnsupportedOpError(
                    f"BuyiBackend runs a Cast only between int8 and int16 per-tensor quantized "
                    f"values (the NPU's data-type converter); op {op.op_id} is not one: bind it "
                    f"to HostBackend")
        view = _HardOpView(network_view) if casts else network_view
        super().init(view, device)
        self._view = network_view if not casts else view
        net = getattr(network_view, "network", network_view)
        tags = getattr(net, "tags", {}) or {}
        ocm = int((tags.get(TAG) or {}).get("ocm", 0)) if isinstance(tags, dict) else 0
        self.ocmopt = OcmOpt(ocm)
        self._estimate_ftmp()

    # --- deployment options (seed 001 1.2 / 1.3) -------------------------------------------------
    def speedMode(self) -> None:
        """Merge consecutive HardOps into one icoreCalc (off by default on the Buyi)."""
        self._config("speedMode")
        self.is_mergeHardop = True

    def compressFtmp(self) -> None:
        """Reuse feature-map memory by lifetime (off by default on the Buyi)."""
        self._config("compressFtmp")
        self.is_etmOptimize = True
        self._estimate_ftmp()

    def userSetSegment(self, memchunk: Any, segment_type: SegmentType) -> None:
        """The Buyi's name for segment reuse (`userReuseSegment`)."""
        self.userReuseSegment(memchunk, segment_type)

    def ocmOptimize(self, option: Any) -> None:
        raise UnsupportedOpError(
            "BuyiBackend has no OCM option: the OCM use is decided by the compiled network "
            "(`xrt compile --target buyi -o ocm=...`); the ZG330Backend chooses it at run time")

    def disableMergeHardOp(self) -> None:
        raise UnsupportedOpError("BuyiBackend: merging is off by default; speedMode() turns it "
                                 "on (disableMergeHardOp is the ZG330Backend's option)")

    def disableEtmOptimize(self) -> None:
        raise UnsupportedOpError("BuyiBackend: feature-map reuse is off by default; "
                                 "compressFtmp() turns it on (disableEtmOptimize is the "
                                 "ZG330Backend's option)")

    def etmTotalBytes(self) -> int:
        """Total ETM bytes of the deployment (WEIGHT + INSTR + FTMP + INPUT + OUTPUT)."""
        return int(sum(ls.byte_size for ls in self.logic_segment_map.values()))

    # --- multi-network IO connection (seed 001 1.1) ----------------------------------------------
    def userConnectNetwork(self, memchunk: Any, v_id: int) -> None:
        """Deploy an INPUT / OUTPUT buffer into a user chunk. The Buyi connects two networks'
        inputs / outputs in order: connect the k-th input (output) of the view only after the
        first k-1, and the networks must list them in the same order."""
        self._config("userConnectNetwork")
        vi = self.value_info.get(int(v_id))
        if vi is not None and vi.segment in (SegmentType.INPUT, SegmentType.OUTPUT):
            order = self._io_order(vi.segment)
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

    def _io_order(self, seg: SegmentType) -> list[int]:
        seen: list[int] = []
        for op in self._view.ops:
            if op.op_type != "HardOp":
                continue
            vals = op.inputs if seg == SegmentType.INPUT else op.outputs
            for v in vals:
                vi = self.value_info.get(v.v_id)
                if vi is not None and vi.segment == seg and v.v_id not in seen:
                    seen.append(v.v_id)
        return seen

    # --- MMU mode (seed 001 1.6) ------------------------------------------------------------
    def apply(self) -> None:
        self._require_init("apply")
        self.mmu_mode = bool(self._device.modeInfo())
        super().apply()

    def _upload(self) -> None:
        if not self.mmu_mode:
            # MMU off: the addresses in the instructions must be physical. The segments are
            # allocated now; rewrite every logical address the MMU would have mapped.
            self._plan_mmu()
            moves = [(lo, ph, n) for lo, ph, n in self._mmu if n]
            self._instr_words = {k: relocate(w, moves) for k, w in self._instr_words.items()}
        super()._upload()

    def _bind(self, b: Any, chunk: Any, offset: int) -> None:
        if self.mmu_mode or not self._mmu:
            return super()._bind(b, chunk, offset)
        # MMU off: the instructions hold the allocated chunk's physical address; a tensor
        # elsewhere is copied in instead of being mapped
        own = self.phy_segment_map[b.segment].multi_chunk[b.owner].memChunk
        if chunk is not own or offset:
            own.copyFrom(0, chunk, offset, b.byte_size)
        self._bound[b.owner] = (own.addr, own, 0)

    def _program_mmu(self) -> None:
        mode = bool(self._device.modeInfo())
        if mode != self.mmu_mode:
            raise CallOrderError(
                f"BuyiBackend was applied with the MMU {'on' if self.mmu_mode else 'off'}; the "
                f"device's MMU is now {'on' if mode else 'off'}: switch it back "
                f"(mmuModeSwitch) or create the session again")
        if self.mmu_mode:
            super()._program_mmu()

    def fork(self) -> BuyiBackend:
        if not self.mmu_mode:
            raise UnsupportedOpError("BuyiBackend.fork(): with the MMU off the instructions "
                                     "hold this backend's physical addresses; fork in MMU mode")
        return super().fork()  # type: ignore[return-value]

    def snapshotState(self) -> tuple[dict[str, Any], dict[str, bytes]]:
        if not self.mmu_mode:
            raise UnsupportedOpError("BuyiBackend snapshots need the MMU on (a snapshot's "
                                     "instructions are relocated at restore)")
        return super().snapshotState()

    # --- forward ---------------------------------------------------------------------------
    def _merge_key(self, op: Any) -> Any:
        """The precision a HardOp computes in (its inputs' bits): speedMode merges only
        consecutive HardOps of the same precision, as the vendor's does."""
        return 16 if any(v.tags[TAG]["dtype"] == "int16" for v in op.inputs) else 8

    def _execute(self, run: Any) -> float:
        self._device.setDType(run.key)  # the runtime sets the NPU's data type per run
        return super()._execute(run)

    def forwardHardOp(self, op: Any, inputs: list[Tensor], outputs: list[Tensor]
                      ) -> list[Tensor]:
        if outputs:
            raise UnsupportedOpError(
                "BuyiBackend does not write forward results into caller-provided output "
                "tensors (seed 001 1.4); call forward(inputs) and copy the results, or use the "
                "ZG330Backend")
        return super().forwardHardOp(op, inputs, outputs)

    def _tensor_of(self, v: Any) -> Tensor:
        t = super()._tensor_of(v)
        b = self._buffers[v.tags[TAG]["buffer"]]
        if b.segment == SegmentType.FTMP and self.value_info[b.owner].is_ocm:
            return OcmTensor(t.dtype(), t.chunk(), t.offset())
        return t


class _HardOpView:
    """The HardOps of a view (a Cast bound to the Buyi runs outside the deployment)."""

    def __init__(self, view: Any) -> None:
        self._inner = view
        self.ops = [op for op in view.ops if op.op_type == "HardOp"]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _is_converter_cast(op: Any) -> bool:
    """A Cast between per-tensor int8 and int16 quantized values (zero point 0)."""
    from npu_model.lowering.common import npu_dtype

    if op.op_type != "Cast" or len(op.inputs) != 1 or len(op.outputs) != 1:
        return False
    a, b = npu_dtype(op.inputs[0]), npu_dtype(op.outputs[0])
    return a is not None and b is not None and tuple(op.inputs[0].shape) == \
        tuple(op.outputs[0].shape)


def _forward_cast(op: Any, inputs: list[Tensor], outputs: list[Tensor], backend: Any
                  ) -> list[Tensor]:
    """The data-type converter: requantize between the two scales with the integer reference's
    rounding (host_backend's Cast kernel, so the result is bit-identical)."""
    from host_backend.backend import HostBackend

    t0 = time.perf_counter()
    host = getattr(backend, "_converter", None)
    if host is None:
        host = backend._converter = HostBackend()
    res = host.forwardOp(op, inputs, [])
    backend.setTimeElapses(op.op_id, 0.0, (time.perf_counter() - t0) * 1e3)
    return res


BuyiBackend.FORWARDS = {"HardOp": ZG330Backend.FORWARDS["HardOp"], "Cast": _forward_cast}

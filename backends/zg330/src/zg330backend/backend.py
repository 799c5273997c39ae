"""ZG330Backend: runs a network view's HardOps on a ZG330Device (seeds 000 / 001).

Lifecycle: ``init(view, device)`` reads the compiler's logical ETM layout (value mtypes and
``tags["zg330"]``, HardOp instr/params mtypes; docs/zg330-lowering.md) into LogicSegments;
configuration (merge, ETM reuse, OCM, user chunks) comes next; ``apply()`` allocates the
physical segments on the device's ETM, uploads instructions and weights, and builds the MMU
table; forward runs each HardOp -- or each run of consecutive HardOps when merging is on -- with
``device.icoreCalc`` on the instruction bytes in simulated ETM. Nothing is computed in Python.

Deployment options (docs/zg330-deployment.md): at apply, `deploy.plan` places the FTMP slots
(OCM residents per `ocmopt`, then ETM reuse by lifetime), the instruction address words are
relocated and uploaded; `userReuseSegment` / `userConnectNetwork` deploy into user chunks;
`fork()` shares INSTR/WEIGHT; `log()` writes a text and a JSON report.

This module holds the class itself -- construction, op binding, `init`, `fork`, snapshots,
`deinit` -- composed of one mixin per concern, in the order a backend goes through them:
layout.py (the logical layout `init` reads), options.py (settings between `init` and `apply`),
apply.py (planning, allocation, upload, MMU table), forward.py (binding and running HardOps),
report.py (precheck, log, profile); device_state.py holds what the backends of one device
share. The steps stay methods because BuyiBackend subclasses this class and overrides single
ones.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import numpy as np

from xrt.backend import Backend
from xrt.errors import CallOrderError, InvalidArgumentError, UnsupportedOpError, XrtError

from . import deploy
from .apply import ApplyMixin, _Run
from .forward import ForwardMixin, _forward_hardop
from .layout import SEGMENT_ALIGN, LayoutMixin, _Buffer
from .lowering.common import TAG, ZG_TARGET
from .options import OptionsMixin
from .report import ReportMixin
from .structs import (
    ForwardInfo,
    LogicSegment,
    MemChunkInfo,
    OcmOpt,
    PhySegment,
    SegmentType,
    ValueInfo,
)

__all__ = ["ZG330Backend", "SEGMENT_ALIGN"]

_backend_count = 0


class ZG330Backend(LayoutMixin, OptionsMixin, ApplyMixin, ForwardMixin, ReportMixin, Backend):
    """The ZG330 NPU backend (name "ZG330"); binds HardOps compiled for @zhuget(330)."""

    name = "ZG330"
    default_url = "sim://zg330"
    supports_user_outputs = True
    #: the lowering target this backend runs (tag key of the annotations, HardOp compile_target)
    TAG = TAG
    COMPILE_TARGET = ZG_TARGET

    def __init__(self, other: Any = None) -> None:
        super().__init__(other)
        if isinstance(other, Backend):
            return
        global _backend_count
        self.forward_info = ForwardInfo()
        self.logic_segment_map: dict[SegmentType, LogicSegment] = {}
        self.phy_segment_map: dict[SegmentType, PhySegment] = {}
        self.value_info: dict[int, ValueInfo] = {}
        self.zg330backend_id = _backend_count
        _backend_count += 1
        self.is_applied_ = False
        self.is_mergeHardop = True
        self.is_etmOptimize = True
        self.ocmopt = OcmOpt.BEST_SCORE
        self._user_segments: dict[SegmentType, Any] = {}
        self._user_io: dict[int, Any] = {}
        self._staged: dict[int, Any] = {}  # v_id -> user chunk (layouts differ: copied)
        self._buffers: dict[int, _Buffer] = {}
        self._runs: list[_Run] = []
        self._run_of: dict[int, int] = {}
        self._done_in_forward: set[int] = set()
        self._last_pos = -1
        self._order: dict[int, int] = {}
        self._mmu: list[tuple[int, int, int]] = []
        self._prof_chunk = None
        self._profile: dict[int, dict[str, float]] = {}
        self._n_layers = 0
        self._in_ids: set[int] = set()
        self._bound: dict[int, tuple[int, Any, int]] = {}  # owner -> (physical, chunk, offset)
        self.precheck_failures: list[tuple[int, str, str]] = []
        self._slots: list[deploy.Slot] = []
        self._plan: deploy.DeployPlan | None = None
        self._instr_words: dict[int, np.ndarray] = {}
        self._fingerprint: str | None = None
        self._ocm_chunk: Any = None
        self._holding = False
        self._is_fork = False

    # --- binding --------------------------------------------------------------------------
    def isOpSupported(self, op: Any) -> bool:
        if op.op_type != "HardOp":
            return False
        if op.compile_target != self.COMPILE_TARGET:
            raise UnsupportedOpError(
                f"op {op.op_id} (HardOp '{op.name}') was compiled for {op.compile_target}; "
                f"{type(self).__name__} runs HardOps compiled for {self.COMPILE_TARGET} only: "
                f"recompile with `xrt compile --target {self.TAG}` or bind it to the backend of "
                f"that target first")
        return True

    def getForwardFunc(self, op: Any) -> Any:
        return _forward_hardop if op.op_type == "HardOp" else None

    def memRegion(self) -> Any:
        self._require_init("memRegion")
        return self._device.defaultMemRegion()

    # --- init --------------------------------------------------------------------------------
    def init(self, network_view: Any, device: Any) -> None:
        if self._applied:
            raise CallOrderError(f"{self._label()}: init after apply; create a new backend")
        if not self._device_ok(device):
            raise InvalidArgumentError(
                f"ZG330Backend needs a ZG330 device (Device.Open('sim://zg330')), got {device!r}")
        for op in network_view.ops:
            if op.op_type != "HardOp":
                raise UnsupportedOpError(
                    f"ZG330Backend runs HardOps only; op {op.op_id} ({op.op_type}) is not one: "
                    f"bind it to HostBackend (Session.Create([ZG330Backend, HostBackend], ...))")
            self.isOpSupported(op)
            if op.instr is not None and op.instr.data is None:
                raise XrtError(f"HardOp {op.op_id} '{op.name}' has no instruction data: call "
                               f"network.loadParamsFromFile(raw) first")
        self._view = network_view
        self._device = device
        self._build_logic(network_view)

    def _device_ok(self, device: Any) -> bool:
        from .device import ZG330Device

        return isinstance(device, ZG330Device) and not getattr(device, "is_buyi", False)

    # --- fork ----------------------------------------------------------------------------------
    def fork(self) -> ZG330Backend:
        """A backend for another thread: shares this one's INSTR and WEIGHT chunks (and the
        deployment: plan, relocated instructions, logical layout), owns its FTMP, INPUT and
        OUTPUT chunks, profiler chunk and MMU table. Forwards on one device are serialised
        (a device lock). Close forks before the backend they were forked from."""
        self._after_apply("fork")
        global _backend_count
        region = self._device.defaultMemRegion()
        other = copy.copy(self)
        other._times = {}
        other.zg330backend_id = _backend_count
        _backend_count += 1
        other._is_fork = True
        other._holding = False
        other._deinited = False
        other._buffers = {k: dataclasses.replace(b) for k, b in self._buffers.items()}
        other.value_info = {k: dataclasses.replace(vi, real_to=list(vi.real_to))
                            for k, vi in self.value_info.items()}
        other._user_segments, other._user_io = {}, {}
        other._bound, other._profile, other._done_in_forward = {}, {}, set()
        other._last_pos = -1
        phy: dict[SegmentType, PhySegment] = {}
        for st in (SegmentType.WEIGHT, SegmentType.INSTR):
            ps = self.phy_segment_map[st]
            phy[st] = dataclasses.replace(ps, single_chunk=MemChunkInfo(
                ps.single_chunk.memChunk, True))  # borrowed: the parent frees it
        f = self.phy_segment_map[SegmentType.FTMP]
        ff = dataclasses.replace(f, single_chunk=MemChunkInfo())
        if f.single_chunk.memChunk is not None:
            chunk = region.malloc(max(f.byte_size, 1), True, SEGMENT_ALIGN)
            chunk.fill(0)
            ff.single_chunk, ff.phy_addr = MemChunkInfo(chunk, False), chunk.addr
        phy[SegmentType.FTMP] = ff
        for st in (SegmentType.INPUT, SegmentType.OUTPUT):
            phy[st] = other._io_segment(st, region, own=True)
        other.phy_segment_map = phy
        other.forward_info = ForwardInfo(
            value_map=dict(other.value_info), hardop_map=dict(self.forward_info.hardop_map),
            idx_map={k: (other.zg330backend_id, v[1])
                     for k, v in self.forward_info.idx_map.items()})
        other._applied = False
        other._prof_chunk = None
        other._zero_feature_maps()
        other._finish_apply()
        return other

    # --- snapshots (docs/snapshot-format.md) ---------------------------------------------------
    def snapshotState(self) -> tuple[dict[str, Any], dict[str, bytes]]:
        """The deployment as snapshot state: settings, plan, logical layout, value and HardOp
        infos, MMU layout; blobs "weight" and "instr" (relocated) segment images."""
        from .snapshot import dump_state

        self._after_apply("snapshotState")
        return dump_state(self)

    def restoreSnapshot(self, network_view: Any, device: Any, state: dict[str, Any],
                        blobs: dict[str, Any]) -> None:
        """Deploy from snapshot state on `device` without lowering or planning."""
        from .snapshot import restore_state

        if self._applied:
            raise CallOrderError("ZG330Backend.restoreSnapshot() on an applied backend")
        restore_state(self, network_view, device, state, blobs)

    def deinit(self) -> None:
        if self._deinited:
            return
        for ps in self.phy_segment_map.values():
            chunks = [ps.single_chunk] + list(ps.multi_chunk.values())
            for ci in chunks:
                if ci.memChunk is not None and not ci.user_used:
                    try:
                        ci.memChunk.free()
                    except Exception:  # pragma: no cover - device already closed
                        pass
        if self._prof_chunk is not None:
            try:
                self._prof_chunk.free()
            except Exception:  # pragma: no cover
                pass
        super().deinit()


ZG330Backend.FORWARDS = {"HardOp": _forward_hardop}

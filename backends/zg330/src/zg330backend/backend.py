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
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from npu_model.isa import F, Op, decode_arrays, set_word
from xrt.backend import Backend
from xrt.errors import CallOrderError, InvalidArgumentError, TensorError, UnsupportedOpError, \
    XrtError
from xrt.tensor import Tensor
from xir.types import TensorType

from . import deploy
from .lowering.common import TAG, ZG_TARGET
from .structs import ForwardInfo, HardOpInfo, LogicSegment, MemChunkInfo, OcmOpt, PhySegment, \
    SegmentType, ValueInfo

log = logging.getLogger(__name__)

SEGMENT_ALIGN = 4096
_ADDR_FIELDS = (F.IN_ADDR, F.IN1_ADDR, F.OUT_ADDR, F.WGT_ADDR, F.PRM_ADDR)
_backend_count = 0


def relocate_words(words: np.ndarray, moves: list[tuple[int, int, int]]) -> np.ndarray:
    """Instruction words with every operand address in ``[old, old + size)`` moved to
    ``new + (addr - old)``; ``moves`` = [(old, new, size)]. The address words are the SETs of
    IN/IN1/OUT/WGT/PRM_ADDR (docs/zg330-isa.md); nothing else holds an address."""
    out = np.array(words, dtype=np.uint64, copy=True)
    ops, fids, payloads = decode_arrays(out)
    for i in np.nonzero((ops == Op.SET) & np.isin(fids, [int(f) for f in _ADDR_FIELDS]))[0]:
        a = int(payloads[i])
        for old, new, size in moves:
            if old <= a < old + size:
                out[i] = np.uint64(set_word(F(int(fids[i])), new + (a - old)))
                break
    return out


@dataclass
class _Buffer:
    """A feature-map buffer of the compiled network (owner value + aliases)."""

    owner: int
    logic_addr: int
    byte_size: int
    members: list[int] = field(default_factory=list)
    segment: SegmentType = SegmentType.FTMP
    mmu_index: int = -1


@dataclass
class _Run:
    """HardOps executed by one icoreCalc."""

    op_ids: list[int]
    instr_logic: int = 0
    instr_size: int = 0
    sid: int = -1  # synthetic op id (merged runs of 2+ HardOps), else the op id


_arena_lock = threading.Lock()


def _ocm_arena(dev: Any) -> Any:
    """The device's OCM as one chunk shared by every ZG330Backend on it (a backend's OCM maps
    live only while it runs; forwards on one device are serialised by `_device_lock`).
    None when the OCM region is taken by someone else."""
    with _arena_lock:
        arena = getattr(dev, "_zg330_ocm_arena", None)
        if arena is not None and not arena.is_freed:
            return arena
        region = dev.getMemRegion("ocm")
        try:
            arena = region.malloc(region.size, True, SEGMENT_ALIGN)
        except Exception:  # the OCM is in use by the user: no OCM planning
            log.warning("ZG330: the OCM of %r is in use; OCM optimisation is off", dev)
            return None
        dev._zg330_ocm_arena = arena
        return arena


def _device_lock(dev: Any) -> Any:
    with _arena_lock:
        lk = getattr(dev, "_zg330_lock", None)
        if lk is None:
            lk = dev._zg330_lock = threading.RLock()
        return lk


def _hardops(view: Any) -> list[Any]:
    return [op for op in view.ops if op.op_type == "HardOp"]


class ZG330Backend(Backend):
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

    def _build_logic(self, view: Any) -> None:
        hard = _hardops(view)
        self._order = {op.op_id: i for i, op in enumerate(hard)}
        in_ids = {v.v_id for v in view.inputs()}
        self._in_ids = in_ids
        out_ids = {v.v_id for v in view.outputs()}
        values: dict[int, Any] = {}
        for op in hard:
            for v in op.inputs + op.outputs:
                if self.TAG not in v.tags:
                    raise XrtError(f"value {v.v_id} of HardOp {op.op_id} has no ETM placement "
                                   f"(tags['{self.TAG}']); the network was not lowered for "
                                   f"{self.TAG}")
                values[v.v_id] = v
        bufs: dict[int, _Buffer] = {}
        for v in values.values():
            t = v.tags[self.TAG]
            b = bufs.setdefault(t["buffer"], _Buffer(t["buffer"], t["base"], t["bytes"]))
            b.members.append(v.v_id)
        for b in bufs.values():
            if any(m in in_ids for m in b.members):
                b.segment = SegmentType.INPUT
            elif any(m in out_ids for m in b.members):
                b.segment = SegmentType.OUTPUT
        self._buffers = bufs
        segs = {s: LogicSegment(s) for s in SegmentType}
        vinfo: dict[int, ValueInfo] = {}
        for v in values.values():
            t = v.tags[self.TAG]
            b = bufs[t["buffer"]]
            esz = 2 if t["dtype"] == "int16" else 1
            owner = values.get(b.owner)
            vinfo[v.v_id] = ValueInfo(value=v, real=v.v_id == b.owner, is_host=False,
                                      fake_from=None if v.v_id == b.owner else owner,
                                      logic_addr=t["base"] + t["c_off"] * esz,
                                      byte_size=t["bytes"] if v.v_id == b.owner
                                      else v.storageBytes(), segment=b.segment)
        for v_id, vi in vinfo.items():
            if not vi.real and vi.fake_from is not None and vi.fake_from.v_id in vinfo:
                vinfo[vi.fake_from.v_id].real_to.append(vi.value)
            segs[vi.segment].info_map[v_id] = vi
        # scratch slots of fused HardOps live in FTMP too
        scratch = [(s["addr"], s["bytes"]) for op in hard
                   for s in op.device_info.get("scratch", [])]
        ftmp = [(b.logic_addr, b.byte_size) for b in bufs.values()
                if b.segment == SegmentType.FTMP] + scratch
        self._set_range(segs[SegmentType.FTMP], ftmp)
        for st in (SegmentType.INPUT, SegmentType.OUTPUT):
            self._set_range(segs[st], [(b.logic_addr, b.byte_size) for b in bufs.values()
                                       if b.segment == st], total=True)
        wr, ir = [], []
        hinfo: dict[int, HardOpInfo] = {}
        for op in hard:
            hi = HardOpInfo(net_hardop=op, sync_idx=(self.zg330backend_id, op.layer_count))
            if op.params:
                p = op.params[0]
                hi.weights_logic_addr, hi.weights_size = p.mtype.addr, p.storageBytes()
                wr.append((hi.weights_logic_addr, hi.weights_size))
            if op.instr is not None:
                hi.instr_logic_addr, hi.instr_size = op.instr.mtype.addr, op.instr.storageBytes()
                ir.append((hi.instr_logic_addr, hi.instr_size))
            hinfo[op.op_id] = hi
            segs[SegmentType.WEIGHT].hardop_map[op.op_id] = hi
            segs[SegmentType.INSTR].hardop_map[op.op_id] = hi
        self._set_range(segs[SegmentType.WEIGHT], wr)
        self._set_range(segs[SegmentType.INSTR], ir)
        self.logic_segment_map = segs
        self.value_info = dict(sorted(vinfo.items()))
        self._n_layers = sum(int(op.device_info.get("layers", 0)) for op in hard)
        self.forward_info = ForwardInfo(
            value_map=dict(vinfo), hardop_map=dict(hinfo),
            idx_map={op.op_id: (self.zg330backend_id, op.layer_count) for op in hard})
        self._build_slots(hard)
        self._logic_base = self._base_logic()
        self._estimate_ftmp()

    def _build_slots(self, hard: list[Any]) -> None:
        """The FTMP slots to plan: lifetimes over the view's HardOp order, ETM traffic scores."""
        slots: dict[int, deploy.Slot] = {}
        for b in self._buffers.values():
            if b.segment == SegmentType.FTMP:
                slots[b.owner] = deploy.Slot(b.owner, b.logic_addr, b.byte_size, 1 << 60, -1,
                                             members=sorted(b.members))
        scratch = []
        for pos, op in enumerate(hard):
            moves_data = op.instr is not None
            for k, v in enumerate(op.inputs + op.outputs):
                sl = slots.get(v.tags[self.TAG]["buffer"])
                if sl is None:
                    continue
                sl.start, sl.end = min(sl.start, pos), max(sl.end, pos)
                if moves_data:
                    sl.score += self.value_info[v.v_id].byte_size
            for sc in op.device_info.get("scratch", []):
                scratch.append(deploy.Slot(int(sc["v_id"]), int(sc["addr"]), int(sc["bytes"]),
                                           pos, pos, score=2 * int(sc["bytes"]), scratch=True))
        for sl in slots.values():
            if sl.end < 0:  # in no HardOp of the view (cannot happen for FTMP): keep it alive
                sl.start, sl.end = 0, max(len(hard) - 1, 0)
        self._slots = sorted(slots.values(), key=lambda s: s.old) + scratch

    def _base_logic(self) -> int:
        """First logical address above everything the compiler laid out for this view."""
        ends = [ls.logic_addr + ls.byte_size for ls in self.logic_segment_map.values()]
        ends += [b.logic_addr + b.byte_size for b in self._buffers.values()]
        ends += [s.old + s.size for s in self._slots]
        return deploy.align_up(max(ends, default=0) + 1, 1 << 20)

    def _estimate_ftmp(self) -> None:
        """The FTMP logic segment as it will be deployed (before OCM planning takes maps out
        of it): what a user allocates for `userReuseSegment(chunk, FTMP)`."""
        slots = [dataclasses.replace(s) for s in self._slots]
        p = deploy.plan(slots, etm_reuse=self.is_etmOptimize, ocm_option=OcmOpt.NONE,
                        ocm_capacity=0, base_logic=self._logic_base,
                        num_ops=len(self._order))
        lf = self.logic_segment_map[SegmentType.FTMP]
        lf.logic_addr, lf.byte_size = p.ftmp_logic, p.ftmp_size

    @staticmethod
    def _set_range(seg: LogicSegment, ranges: list[tuple[int, int]], total: bool = False
                   ) -> None:
        ranges = [r for r in ranges if r[1] > 0]
        if not ranges:
            return
        seg.logic_addr = min(a for a, _ in ranges)
        seg.byte_size = sum(n for _, n in ranges) if total else \
            max(a + n for a, n in ranges) - seg.logic_addr

    # --- configuration (before apply) --------------------------------------------------------
    def _config(self, what: str) -> None:
        if self._snapshot:
            raise CallOrderError(f"ZG330Backend.{what}(): this backend was restored from a "
                                 f"snapshot; merge, ETM reuse and OCM settings are frozen at "
                                 f"dump time (configure a normal session and dump again)")
        self._require_init(what)
        if self._applied:
            raise CallOrderError(f"ZG330Backend.{what}() must be called before apply(); the "
                                 f"backend is already deployed")

    def disableMergeHardOp(self) -> None:
        """Run every HardOp with its own icoreCalc (default: consecutive HardOps merged)."""
        self._config("disableMergeHardOp")
        self.is_mergeHardop = False

    def disableEtmOptimize(self) -> None:
        """Keep the compiler's one-slot-per-value FTMP layout (default: reuse planning on)."""
        self._config("disableEtmOptimize")
        self.is_etmOptimize = False
        self._estimate_ftmp()

    def ocmOptimize(self, option: OcmOpt) -> None:
        """Choose the OCM placement option (OcmOpt.NONE turns OCM use off)."""
        self._config("ocmOptimize")
        try:
            self.ocmopt = OcmOpt(option)
        except ValueError:
            raise InvalidArgumentError(f"ocmOptimize: {option!r} is not an OcmOpt "
                                       f"({', '.join(o.name for o in OcmOpt)})") from None

    def userReuseSegment(self, memchunk: Any, segment_type: SegmentType) -> None:
        """Deploy the WEIGHT, INSTR or FTMP segment into a chunk the user allocated
        (4096-aligned, at least the logic segment's byte_size). Backends of one network may
        share all three; backends of different networks only FTMP (run them one at a time)."""
        self._config("userReuseSegment")
        try:
            st = SegmentType(segment_type)
        except ValueError:
            raise InvalidArgumentError(f"userReuseSegment: {segment_type!r} is not a "
                                       f"SegmentType") from None
        if st not in (SegmentType.WEIGHT, SegmentType.INSTR, SegmentType.FTMP):
            raise InvalidArgumentError(f"userReuseSegment: {st.name} segments are one chunk per "
                                       f"value; use userConnectNetwork(chunk, v_id)")
        self._check_user_chunk(memchunk, self.logic_segment_map[st].byte_size,
                               f"the {st.name} segment")
        deploy.claim(memchunk, st, self.fingerprint())
        self._user_segments[st] = memchunk

    def fingerprint(self) -> str:
        """md5 of the view's HardOps (ids, instructions, weights): 'the same network'."""
        if self._fingerprint is None:
            arrays: list[Any] = []
            for op in _hardops(self._view):
                arrays.append(str(op.op_id))
                if op.instr is not None:
                    arrays.append(op.instr.data)
                if op.params:
                    arrays.append(op.params[0].data)
            self._fingerprint = deploy.digest(*arrays)
        return self._fingerprint

    def userConnectNetwork(self, memchunk: Any, v_id: int) -> None:
        """Deploy the INPUT or OUTPUT buffer of value `v_id` into a user chunk (to connect the
        output of one network to the input of another on ETM)."""
        self._config("userConnectNetwork")
        vi = self.value_info.get(int(v_id))
        if vi is None or vi.segment not in (SegmentType.INPUT, SegmentType.OUTPUT):
            io = sorted(v for v, i in self.value_info.items()
                        if i.segment in (SegmentType.INPUT, SegmentType.OUTPUT))
            raise InvalidArgumentError(f"userConnectNetwork: v_id {v_id} is not an input or "
                                       f"output of this ZG330Backend's view (those are {io})")
        b = self._buffers[vi.value.tags[self.TAG]["buffer"]]
        t = vi.value.tags[self.TAG]
        if int(v_id) == b.owner and t["c_off"] == 0 and t["pitch"] == t["c"] and \
                vi.value.storageBytes() == b.byte_size:
            self._check_user_chunk(memchunk, b.byte_size, f"v_id {v_id}")
            self._user_io[b.owner] = memchunk  # in place: the MMU maps the buffer to it
        else:  # the value is a window of a wider buffer: staged through the user chunk
            self._check_user_chunk(memchunk, vi.value.storageBytes(), f"v_id {v_id}")
            self._staged[int(v_id)] = memchunk

    def _check_user_chunk(self, chunk: Any, need: int, what: str) -> None:
        region = getattr(chunk, "region", None)
        if region is None or region.device() is not self._device or region.name != "etm":
            raise InvalidArgumentError(f"the chunk for {what} must be ETM memory of this "
                                       f"backend's device")
        if chunk.addr % SEGMENT_ALIGN:
            raise InvalidArgumentError(f"the chunk for {what} starts at {chunk.addr:#x}, not "
                                       f"{SEGMENT_ALIGN}-aligned: allocate it with "
                                       f"malloc(size, True, {SEGMENT_ALIGN})")
        if chunk.byte_size < need:
            raise InvalidArgumentError(f"the chunk for {what} has {chunk.byte_size} bytes, "
                                       f"{need} are needed (logic segment byte_size); "
                                       f"allocate at least that, {SEGMENT_ALIGN}-aligned")

    # --- apply ---------------------------------------------------------------------------------
    def apply(self) -> None:
        """Plan (OCM, then ETM reuse), relocate the instructions, allocate the physical
        segments, upload instructions and weights, build the MMU table."""
        self._require_init("apply")
        if self._applied:
            raise CallOrderError("ZG330Backend.apply() was already called; a backend is "
                                 "applied once")
        self._plan_ocm()
        self._plan_ftmp()
        self._relocate()
        self._allocate()
        self._upload()
        self._finish_apply()

    def _ocm_capacity(self) -> int:
        if self.ocmopt == OcmOpt.NONE:
            return 0
        arena = _ocm_arena(self._device)
        return 0 if arena is None else arena.byte_size

    def _plan_ocm(self) -> None:
        """OCM and ETM planning in one pass (`deploy.plan`): OCM residents first (the chosen
        `ocmopt`; BEST_SCORE resolves to the winner), then the ETM reuse plan of the rest."""
        p = deploy.plan(self._slots, etm_reuse=self.is_etmOptimize, ocm_option=self.ocmopt,
                        ocm_capacity=self._ocm_capacity(), base_logic=self._logic_base,
                        num_ops=len(self._order))
        self._plan = p
        self.ocmopt = OcmOpt(p.ocm_used) if self.ocmopt == OcmOpt.BEST_SCORE else self.ocmopt

    def _plan_ftmp(self) -> None:
        """Apply the plan to the logical structures: FTMP segment, buffers, ValueInfo."""
        p = self._plan
        lf = self.logic_segment_map[SegmentType.FTMP]
        lf.logic_addr, lf.byte_size = p.ftmp_logic, p.ftmp_size
        for sl in self._slots:
            if sl.scratch:
                continue
            b = self._buffers[sl.key]
            b.logic_addr = sl.new
            for m in b.members:
                vi = self.value_info[m]
                t = vi.value.tags[self.TAG]
                vi.logic_addr = sl.new + t["c_off"] * (2 if t["dtype"] == "int16" else 1)
                vi.is_ocm = sl.ocm

    def _relocate(self) -> None:
        moves = [(s.old, s.new, s.size) for s in self._slots if s.size]
        self._instr_words = {op.op_id: deploy.relocate(op.instr.data.view(np.uint64), moves)
                             for op in _hardops(self._view) if op.instr is not None}

    def _allocate(self) -> None:
        region = self._device.defaultMemRegion()
        phy: dict[SegmentType, PhySegment] = {}
        for st in (SegmentType.WEIGHT, SegmentType.INSTR, SegmentType.FTMP):
            ls = self.logic_segment_map[st]
            ps = PhySegment(st, byte_size=ls.byte_size, info_map=dict(ls.info_map),
                            hardop_map=dict(ls.hardop_map))
            user = self._user_segments.get(st)
            if ls.byte_size or user is not None:
                if user is not None:
                    self._check_user_chunk(user, ls.byte_size, f"the {st.name} segment")
                chunk = user if user is not None else region.malloc(ls.byte_size, True,
                                                                    SEGMENT_ALIGN)
                ps.single_chunk = MemChunkInfo(chunk, user is not None)
                ps.phy_addr = chunk.addr
            phy[st] = ps
        for st in (SegmentType.INPUT, SegmentType.OUTPUT):
            phy[st] = self._io_segment(st, region)
        self.phy_segment_map = phy
        if any(s.ocm for s in self._slots):
            self._ocm_chunk = _ocm_arena(self._device)

    def _io_segment(self, st: SegmentType, region: Any, own: bool = False) -> PhySegment:
        ls = self.logic_segment_map[st]
        ps = PhySegment(st, byte_size=ls.byte_size, info_map=dict(ls.info_map))
        for b in self._buffers.values():
            if b.segment != st:
                continue
            user = None if own else self._user_io.get(b.owner)
            chunk = user if user is not None else region.malloc(b.byte_size, True,
                                                                SEGMENT_ALIGN)
            ps.multi_chunk[b.owner] = MemChunkInfo(chunk, user is not None)
            if not own:
                ps.multi_chunk[b.owner].staged_chunk = {
                    m: self._staged[m] for m in b.members if m in self._staged}
        ps.phy_addr = min((c.memChunk.addr for c in ps.multi_chunk.values()), default=0)
        return ps

    def _upload(self) -> None:
        """Weights and relocated instructions into their chunks; feature maps zeroed."""
        phy = self.phy_segment_map
        w, i = phy[SegmentType.WEIGHT], phy[SegmentType.INSTR]
        lw, li = self.logic_segment_map[SegmentType.WEIGHT], self.logic_segment_map[SegmentType.INSTR]
        if i.single_chunk.user_used:
            deploy.claim_layout(i.single_chunk.memChunk, SegmentType.INSTR,
                                deploy.digest(*[self._instr_words[k]
                                                for k in sorted(self._instr_words)]))
        for op in _hardops(self._view):
            hi = self.forward_info.hardop_map[op.op_id]
            if op.params:
                off = hi.weights_logic_addr - lw.logic_addr
                w.single_chunk.memChunk.write(off, op.params[0].data.view(np.uint8).ravel())
                hi.weight_phy_addr = w.phy_addr + off
            if op.instr is not None:
                off = hi.instr_logic_addr - li.logic_addr
                i.single_chunk.memChunk.write(off, self._instr_words[op.op_id].view(np.uint8))
                hi.instr_phy_addr = i.phy_addr + off
        self._zero_feature_maps()

    def _zero_feature_maps(self) -> None:
        phy = self.phy_segment_map
        f = phy[SegmentType.FTMP].single_chunk
        if f.memChunk is not None and not f.user_used:
            f.memChunk.fill(0)
        for st in (SegmentType.INPUT, SegmentType.OUTPUT):
            for ci in phy[st].multi_chunk.values():
                if not ci.user_used:
                    ci.memChunk.fill(0)

    def _finish_apply(self) -> None:
        phy = self.phy_segment_map
        self._plan_mmu()
        for vi in self.value_info.values():
            vi.phy_addr = self._phys_of_logic(vi.logic_addr)
        self.forward_info.value_map = dict(self.value_info)
        self.forward_info.memchunk_map = {
            **{b: ci for st in (SegmentType.INPUT, SegmentType.OUTPUT)
               for b, ci in phy[st].multi_chunk.items()}}
        if phy[SegmentType.FTMP].single_chunk.memChunk is not None:
            for sl in self._slots:
                if not sl.ocm and not sl.scratch:
                    self.forward_info.memchunk_map[sl.key] = phy[SegmentType.FTMP].single_chunk
        if self._ocm_chunk is not None:
            oc = MemChunkInfo(self._ocm_chunk, False)
            for sl in self._slots:
                if sl.ocm and not sl.scratch:
                    self.forward_info.memchunk_map[sl.key] = oc
        self._plan_runs()
        self._restore_io()
        if self._n_layers:
            region = self._device.defaultMemRegion()
            self._prof_chunk = region.malloc(max(self._n_layers, 1) * 80, True, 64)
        self._applied = True
        self.is_applied_ = True

    def _plan_mmu(self) -> None:
        """MMU entries (logical, physical, size): WEIGHT, FTMP, the OCM window, one per
        INPUT/OUTPUT buffer. Programmed before a run whenever another backend ran in between."""
        entries: list[tuple[int, int, int]] = []
        w = self.phy_segment_map[SegmentType.WEIGHT]
        lw = self.logic_segment_map[SegmentType.WEIGHT]
        if lw.byte_size:
            entries.append((lw.logic_addr, w.phy_addr, lw.byte_size))
        lf = self.logic_segment_map[SegmentType.FTMP]
        f = self.phy_segment_map[SegmentType.FTMP]
        if lf.byte_size:
            entries.append((lf.logic_addr, f.phy_addr, lf.byte_size))
        if self._ocm_chunk is not None and self._plan is not None:
            size = deploy.align_up(max(self._plan.ocm_footprint, 64), 64)
            entries.append((self._plan.ocm_logic, self._ocm_chunk.addr, size))
        for st in (SegmentType.INPUT, SegmentType.OUTPUT):
            for owner, ci in self.phy_segment_map[st].multi_chunk.items():
                b = self._buffers[owner]
                b.mmu_index = len(entries)
                entries.append((b.logic_addr, ci.memChunk.addr, b.byte_size))
        if len(entries) > self._device.config.mmu_entries:
            raise XrtError(f"ZG330Backend needs {len(entries)} MMU entries, the device has "
                           f"{self._device.config.mmu_entries}")
        self._mmu = entries

    def _phys_of_logic(self, logic: int) -> int:
        for lo, ph, n in self._mmu:
            if lo <= logic < lo + n:
                return ph + (logic - lo)
        return 0

    def _plan_runs(self) -> None:
        hard = _hardops(self._view)
        view_ops = list(self._view.ops)
        pos = {op.op_id: i for i, op in enumerate(view_ops)}
        parent = getattr(self._view, "network", self._view)
        full_pos = {op.op_id: i for i, op in enumerate(parent.ops)}
        max_id = max(parent.opIds(), default=0)
        runs: list[_Run] = []
        prev = None
        for op in hard:
            reads_input = any(v.v_id in self._in_ids for v in op.inputs)
            adjacent = prev is not None and full_pos[op.op_id] == full_pos[prev.op_id] + 1 \
                and pos[op.op_id] == pos[prev.op_id] + 1
            if self.is_mergeHardop and runs and adjacent and not reads_input:
                runs[-1].op_ids.append(op.op_id)
            else:
                runs.append(_Run([op.op_id]))
            prev = op
        hmap = self.forward_info.hardop_map
        for k, r in enumerate(runs):
            with_instr = [hmap[o] for o in r.op_ids if hmap[o].instr_size]
            if with_instr:
                r.instr_logic = with_instr[0].instr_logic_addr
                last = with_instr[-1]
                r.instr_size = last.instr_logic_addr + last.instr_size - r.instr_logic
            if len(r.op_ids) > 1:
                max_id += 1
                r.sid = max_id
                self.forward_info.hardop_map[r.sid] = HardOpInfo(
                    instr_logic_addr=r.instr_logic, instr_size=r.instr_size,
                    instr_phy_addr=hmap[r.op_ids[0]].instr_phy_addr if with_instr else 0,
                    sync_idx=(self.zg330backend_id, hmap[r.op_ids[-1]].sync_idx[1]),
                    merge_from=list(r.op_ids))
            else:
                r.sid = r.op_ids[0]
        self._runs = runs
        self._run_of = {o: k for k, r in enumerate(runs) for o in r.op_ids}

    # --- forward ----------------------------------------------------------------------------------
    def _program_mmu(self) -> None:
        dev = self._device
        if getattr(dev, "_zg330_mmu_owner", None) is self:
            return
        dev.mmuClear()
        for i, (lo, ph, n) in enumerate(self._mmu):
            dev.mmuMap(i, lo, ph, n)
        dev._zg330_mmu_owner = self

    def _start_forward(self) -> None:
        dev = self._device
        self._done_in_forward = set()
        self._profile = {}
        self._restore_io()
        dev._zg330_mmu_owner = None
        if not dev.mock:
            dev.reset(1)
        if self._prof_chunk is not None:
            dev.configProfiler(self._prof_chunk)

    def forwardHardOp(self, op: Any, inputs: list[Tensor], outputs: list[Tensor]
                      ) -> list[Tensor]:
        """Run one HardOp (its whole merged run the first time). The device is held from the
        first HardOp of a forward to the last (its OCM maps and MMU table are this
        backend's meanwhile): forwards of backends in other threads wait."""
        if not self._applied:
            raise CallOrderError(f"ZG330Backend: forward of HardOp {op.op_id} before apply()")
        if op.op_id not in self._order:
            raise XrtError(f"HardOp {op.op_id} is not in this ZG330Backend's network view")
        if not self._holding:
            _device_lock(self._device).acquire()
            self._holding = True
        try:
            res = self._forward_locked(op, inputs, outputs)
        except BaseException:
            self._release_device()
            raise
        if self._order[op.op_id] == len(self._order) - 1:
            self._release_device()
        return res

    def _release_device(self) -> None:
        if self._holding:
            self._holding = False
            _device_lock(self._device).release()

    def _forward_locked(self, op: Any, inputs: list[Tensor], outputs: list[Tensor]
                        ) -> list[Tensor]:
        pos = self._order[op.op_id]
        if pos <= self._last_pos or not self._done_in_forward:
            self._start_forward()
        self._last_pos = pos
        memcpy_ms = 0.0
        feats = [v for v in op.inputs]
        if len(inputs) != len(feats):
            raise TensorError(f"HardOp {op.op_id} takes {len(feats)} inputs, got {len(inputs)}")
        for v, t in zip(feats, inputs):
            memcpy_ms += self._bind_input(op, v, t)
        run = self._runs[self._run_of[op.op_id]]
        first = op.op_id not in self._done_in_forward
        user = list(outputs or [])
        if first and user and run.op_ids[0] == op.op_id:
            for v, t in zip(op.outputs, user):
                self._map_user_output(v, t)
            user_mapped = True
        else:
            user_mapped = False
        if first:
            hard_ms = self._execute(run)
            self._done_in_forward.update(run.op_ids)
            if run.sid != op.op_id:
                self.setTimeElapses(run.sid, 0.0, hard_ms)
                hard_ms = 0.0
        else:
            hard_ms = 0.0
        results = []
        for k, v in enumerate(op.outputs):
            t = self._tensor_of(v)
            if v.v_id in self._staged and not self._is_fork:
                t0 = time.perf_counter()
                t = self._stage(v, self._staged[v.v_id], to_user=True)
                memcpy_ms += (time.perf_counter() - t0) * 1e3
            if k < len(user) and not user_mapped:
                t0 = time.perf_counter()
                user[k].copyFrom(0, t, 0, min(t.dtype().storageBytes(),
                                              user[k].dtype().storageBytes()))
                memcpy_ms += (time.perf_counter() - t0) * 1e3
                t = user[k]
            elif k < len(user):
                t = user[k]
            results.append(t)
        self.setTimeElapses(op.op_id, memcpy_ms, hard_ms)
        return results

    def _bind_input(self, op: Any, v: Any, t: Tensor) -> float:
        b = self._buffers[v.tags[self.TAG]["buffer"]]
        if v.v_id not in self._in_ids or b.segment != SegmentType.INPUT:
            return 0.0  # produced on the NPU by this backend: already in FTMP/OUTPUT
        if v.v_id in self._staged and not self._is_fork:
            ci = self.phy_segment_map[SegmentType.INPUT].multi_chunk[b.owner]
            self._bind(b, ci.memChunk, 0)
            t0 = time.perf_counter()
            src = self._staged[v.v_id]
            if not (t.isOn(self._device.defaultMemRegion()) and t.chunk() == src
                    and t.offset() == 0):
                src.copyFrom(0, t.chunk(), t.offset(), v.storageBytes())
            self._stage(v, src, to_user=False)
            return (time.perf_counter() - t0) * 1e3
        want = v.dtype
        got = t.dtype()
        if tuple(got.shape) != tuple(want.shape) or got.numpy_dtype != want.numpy_dtype:
            raise TensorError(f"HardOp {op.op_id} input v_id {v.v_id} must be "
                              f"{list(want.shape)} {want.numpy_dtype}, got {list(got.shape)} "
                              f"{got.numpy_dtype}")
        nbytes = want.storageBytes()
        region = self._device.defaultMemRegion()
        if t.isOn(region) and v.v_id == b.owner and nbytes == b.byte_size:
            self._bind(b, t.chunk(), t.offset())  # zero copy: the MMU maps the tensor itself
            return 0.0
        ci = self.phy_segment_map[SegmentType.INPUT].multi_chunk[b.owner]
        self._bind(b, ci.memChunk, 0)
        t0 = time.perf_counter()
        off = v.tags[self.TAG]["c_off"] * (2 if v.tags[self.TAG]["dtype"] == "int16" else 1)
        ci.memChunk.copyFrom(off, t.chunk(), t.offset(), nbytes)
        return (time.perf_counter() - t0) * 1e3

    def _bind(self, b: _Buffer, chunk: Any, offset: int) -> None:
        """Point the MMU entry of an INPUT/OUTPUT buffer at ``chunk + offset``."""
        phys = chunk.addr + offset
        self._bound[b.owner] = (phys, chunk, offset)
        lo, old, n = self._mmu[b.mmu_index]
        if old == phys:
            return
        self._mmu[b.mmu_index] = (lo, phys, n)
        if getattr(self._device, "_zg330_mmu_owner", None) is self:
            self._device.mmuMap(b.mmu_index, lo, phys, n)

    def _stage(self, v: Any, user: Any, to_user: bool) -> Tensor:
        """Copy value `v` between its channel window in its buffer and the dense user chunk
        (`staged_chunk`): the two networks lay the map out differently."""
        t = v.tags[self.TAG]
        b = self._buffers[t["buffer"]]
        _, chunk, base = self._bound[b.owner]
        dt = np.int16 if t["dtype"] == "int16" else np.int8
        esz = np.dtype(dt).itemsize
        buf = chunk.view(base, t["h"] * t["w"] * t["pitch"] * esz).view(dt).reshape(
            t["h"], t["w"], t["pitch"])
        dense = user.view(0, t["h"] * t["w"] * t["c"] * esz).view(dt).reshape(
            t["h"], t["w"], t["c"])
        win = slice(t["c_off"], t["c_off"] + t["c"])
        if to_user:
            dense[...] = buf[:, :, win]
        else:
            buf[:, :, win] = dense
        return Tensor(v.dtype, user, 0)

    def _restore_io(self) -> None:
        for st in (SegmentType.INPUT, SegmentType.OUTPUT):
            for owner, ci in self.phy_segment_map[st].multi_chunk.items():
                self._bind(self._buffers[owner], ci.memChunk, 0)

    def _map_user_output(self, v: Any, t: Tensor) -> None:
        b = self._buffers[v.tags[self.TAG]["buffer"]]
        if b.segment != SegmentType.OUTPUT or v.v_id != b.owner:
            return
        region = self._device.defaultMemRegion()
        if not t.isOn(region) or t.dtype().storageBytes() < b.byte_size:
            return
        self._bind(b, t.chunk(), t.offset())

    def _execute(self, run: _Run) -> float:
        if not run.instr_size:
            return 0.0
        self._program_mmu()
        li = self.logic_segment_map[SegmentType.INSTR]
        phys = self.phy_segment_map[SegmentType.INSTR].phy_addr + (run.instr_logic - li.logic_addr)
        dev = self._device
        base = dev.layerCount() if not dev.mock else 0
        dev.icoreCalc(phys, run.instr_size)
        hard_ms = dev.calcTime()
        self._collect_profile(base, dev.layerCount() - base)
        return hard_ms

    def _collect_profile(self, base: int, n: int) -> None:
        if self._prof_chunk is None or n <= 0:
            return
        dev = self._device
        rows, cols = dev.getRowsCols()
        peak = dev.config.peak_macs_per_cycle("int8", rows, cols)
        for r in dev.profile(base, n):
            d = self._profile.setdefault(int(r["tag"]), {"cycles": 0, "macs": 0, "etm_bytes": 0,
                                                         "ocm_bytes": 0, "utilisation": 0.0})
            d["cycles"] += int(r["cycles"])
            d["macs"] += int(r["macs"])
            d["etm_bytes"] += int(r["etm_rd"]) + int(r["etm_wr"])
            d["ocm_bytes"] += int(r["ocm_rd"]) + int(r["ocm_wr"])
            d["utilisation"] = d["macs"] / max(d["cycles"] * peak, 1)

    def _tensor_of(self, v: Any) -> Tensor:
        t = v.tags[self.TAG]
        b = self._buffers[t["buffer"]]
        esz = 2 if t["dtype"] == "int16" else 1
        if b.segment == SegmentType.FTMP and self.value_info[b.owner].is_ocm:
            chunk = self._ocm_chunk  # an OCM tensor: reads the on-chip memory
            base = b.logic_addr - self._plan.ocm_logic
        elif b.segment == SegmentType.FTMP:
            ps = self.phy_segment_map[SegmentType.FTMP]
            chunk = ps.single_chunk.memChunk
            base = b.logic_addr - self.logic_segment_map[SegmentType.FTMP].logic_addr
        else:
            _, chunk, base = self._bound[b.owner]
        dense = t["c_off"] == 0 and t["pitch"] == t["c"] and v.storageBytes() == t["bytes"]
        if dense:
            return Tensor(v.dtype, chunk, base)
        hw = TensorType(v.dtype.element_dtype, (1, t["h"], t["w"], t["pitch"]), "NHWC")
        return Tensor(hw, chunk, base)

    # --- after apply --------------------------------------------------------------------------------
    def profileInfo(self) -> dict[int, dict[str, float]]:
        """{op_id: {cycles, macs, etm_bytes, ocm_bytes, utilisation}} of the last forward, from
        the device's profiler records (one record per layer, tagged with the HardOp id)."""
        return {k: dict(v) for k, v in sorted(self._profile.items())}

    def precheck(self) -> bool:
        """Compare the instruction and weight bytes in ETM with the network's, per HardOp."""
        self._after_apply("precheck")
        self.precheck_failures = []
        ok = True
        li = self.logic_segment_map[SegmentType.INSTR]
        lw = self.logic_segment_map[SegmentType.WEIGHT]
        for op in _hardops(self._view):
            hi = self.forward_info.hardop_map[op.op_id]
            for what, p, seg, lseg, addr in (
                    ("instructions", op.instr, SegmentType.INSTR, li, hi.instr_logic_addr),
                    ("weights", op.params[0] if op.params else None, SegmentType.WEIGHT, lw,
                     hi.weights_logic_addr)):
                if p is None:
                    continue
                want = (self._instr_words[op.op_id] if what == "instructions"
                        else p.data).view(np.uint8).ravel()
                got = np.empty(want.size, np.uint8)
                self.phy_segment_map[seg].single_chunk.memChunk.read(got, addr - lseg.logic_addr,
                                                                     want.size)
                if hashlib.md5(got.tobytes()).digest() != hashlib.md5(want.tobytes()).digest():
                    log.error("precheck: %s of HardOp %d '%s' in ETM differ from the network",
                              what, op.op_id, op.name)
                    self.precheck_failures.append((op.op_id, op.name, what))
                    ok = False
        return ok

    def deployment_report(self) -> dict[str, Any]:
        """The deployment as plain data (what `log()` writes as JSON)."""
        self._after_apply("deployment_report")
        p = self._plan
        segs = []
        for st in SegmentType:
            ls = self.logic_segment_map[st]
            ps = self.phy_segment_map.get(st)
            segs.append({"segment": st.name, "logic_addr": ls.logic_addr,
                         "byte_size": ls.byte_size, "phy_addr": ps.phy_addr if ps else 0,
                         "user_chunk": bool(ps and (ps.single_chunk.user_used or any(
                             c.user_used for c in ps.multi_chunk.values()))),
                         "chunks": {str(k): {"phy_addr": c.memChunk.addr,
                                             "byte_size": c.memChunk.byte_size,
                                             "user": c.user_used}
                                    for k, c in (ps.multi_chunk.items() if ps else [])}})
        if self._ocm_chunk is not None:
            segs.append({"segment": "OCM", "logic_addr": p.ocm_logic,
                         "byte_size": p.ocm_footprint, "phy_addr": self._ocm_chunk.addr,
                         "user_chunk": False, "chunks": {}})
        values = []
        for v, vi in self.value_info.items():
            values.append({"v_id": v, "segment": vi.segment.name,
                           "memory": "OCM" if vi.is_ocm else "ETM",
                           "logic_addr": vi.logic_addr, "phy_addr": vi.phy_addr,
                           "offset": vi.logic_addr - (p.ocm_logic if vi.is_ocm else
                                                      self.logic_segment_map[vi.segment]
                                                      .logic_addr),
                           "byte_size": vi.byte_size, "real": vi.real,
                           "fake_from": vi.fake_from.v_id if vi.fake_from is not None else None,
                           "real_to": [r.v_id for r in vi.real_to]})
        for sl in self._slots:
            if sl.scratch:
                values.append({"v_id": sl.key, "segment": "FTMP", "scratch": True,
                               "memory": "OCM" if sl.ocm else "ETM", "logic_addr": sl.new,
                               "phy_addr": self._phys_of_logic(sl.new), "offset": sl.offset,
                               "byte_size": sl.size, "real": True, "fake_from": None,
                               "real_to": []})
        hardops = []
        for oid, hi in self.forward_info.hardop_map.items():
            hardops.append({"op_id": oid, "instr_logic_addr": hi.instr_logic_addr,
                            "instr_phy_addr": hi.instr_phy_addr, "instr_size": hi.instr_size,
                            "weights_logic_addr": hi.weights_logic_addr,
                            "weight_phy_addr": hi.weight_phy_addr,
                            "weights_size": hi.weights_size, "sync_idx": list(hi.sync_idx),
                            "merge_from": list(hi.merge_from)})
        return {"backend_id": self.zg330backend_id, "fork": self._is_fork,
                "merge": self.is_mergeHardop, "etm_optimize": self.is_etmOptimize,
                "ocm": {"option": self.ocmopt.name,
                        "requested": OcmOpt(p.ocm_requested).name, "score": p.ocm_score,
                        "per_option_scores": p.ocm_per_option, "capacity": p.ocm_capacity,
                        "footprint": p.ocm_footprint},
                "etm": {"ftmp_bytes": p.ftmp_size, "lower_bound": p.ftmp_lower_bound,
                        "no_reuse_bytes": p.ftmp_no_reuse,
                        "compiler_layout_bytes": p.ftmp_compiler, "strategy": p.strategy},
                "segments": segs,
                "mmu": [{"logic_addr": lo, "phy_addr": ph, "byte_size": n}
                        for lo, ph, n in self._mmu],
                "values": values, "hardops": hardops}

    def log(self) -> str:
        """Write the deployment log to ./.icraft/logs/ (text, and a .json twin); returns the
        text file's path."""
        self._after_apply("log")
        rep = self.deployment_report()
        base = os.path.join(os.getcwd(), ".icraft", "logs",
                            f"zg330backend_{self.zg330backend_id}")
        os.makedirs(os.path.dirname(base), exist_ok=True)
        e, o = rep["etm"], rep["ocm"]
        lines = [f"ZG330Backend {self.zg330backend_id}: merge={self.is_mergeHardop} "
                 f"etm_optimize={self.is_etmOptimize} ocmopt={self.ocmopt.name}",
                 f"ETM feature maps: {e['ftmp_bytes']} bytes (lower bound {e['lower_bound']}, "
                 f"no reuse {e['no_reuse_bytes']}, compiler layout "
                 f"{e['compiler_layout_bytes']}; {e['strategy']})",
                 f"OCM: option {o['option']} (requested {o['requested']}) score {o['score']:.0f} "
                 f"per option {o['per_option_scores']} footprint {o['footprint']} of "
                 f"{o['capacity']} bytes", ""]
        lines.append(f"{'segment':<8} {'logical':>14} {'bytes':>12} {'physical':>14}")
        for sg in rep["segments"]:
            lines.append(f"{sg['segment']:<8} {sg['logic_addr']:#14x} {sg['byte_size']:>12} "
                         f"{sg['phy_addr']:#14x}" + ("  (user chunk)" if sg["user_chunk"]
                                                      else ""))
            for k, c in sg["chunks"].items():
                lines.append(f"  v{k:<6} {'':>14} {c['byte_size']:>12} {c['phy_addr']:#14x}")
        lines += ["", "MMU"] + [f"  {m['logic_addr']:#14x} +{m['byte_size']:<10} -> "
                                f"{m['phy_addr']:#x}" for m in rep["mmu"]]
        lines += ["", f"{'value':>7} {'seg':<6} {'mem':<4} {'logical':>14} {'offset':>10} "
                      f"{'bytes':>10} {'physical':>14}  aliasing"]
        for v in rep["values"]:
            alias = ("scratch" if v.get("scratch") else
                     f"fake_from v{v['fake_from']}" if v["fake_from"] is not None else
                     f"real_to {v['real_to']}" if v["real_to"] else "")
            lines.append(f"{v['v_id']:>7} {v['segment']:<6} {v['memory']:<4} "
                         f"{v['logic_addr']:#14x} {v['offset']:>10} {v['byte_size']:>10} "
                         f"{v['phy_addr']:#14x}  {alias}")
        lines += ["", f"{'hardop':>7} {'instr logical':>14} {'instr phys':>14} {'bytes':>8} "
                      f"{'weights logical':>16} {'weights phys':>14} {'bytes':>9} sync  merged"]
        for h in rep["hardops"]:
            lines.append(f"{h['op_id']:>7} {h['instr_logic_addr']:#14x} "
                         f"{h['instr_phy_addr']:#14x} {h['instr_size']:>8} "
                         f"{h['weights_logic_addr']:#16x} {h['weight_phy_addr']:#14x} "
                         f"{h['weights_size']:>9} {tuple(h['sync_idx'])} {h['merge_from'] or ''}")
        with open(base + ".log", "w", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")
        with open(base + ".json", "w", encoding="utf-8") as fh:
            json.dump(rep, fh, indent=1)
        return base + ".log"

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

    def _after_apply(self, what: str) -> None:
        if not self._applied:
            raise CallOrderError(f"ZG330Backend.{what}() is called after apply()")

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


def _forward_hardop(op: Any, inputs: list[Tensor], outputs: list[Tensor], backend: Any
                    ) -> list[Tensor]:
    return backend.forwardHardOp(op, inputs, outputs)


ZG330Backend.FORWARDS = {"HardOp": _forward_hardop}

"""ZG330Backend: runs a network view's HardOps on a ZG330Device (seeds 000 / 001).

Lifecycle: ``init(view, device)`` reads the compiler's logical ETM layout (value mtypes and
``tags["zg330"]``, HardOp instr/params mtypes; docs/zg330-lowering.md) into LogicSegments;
configuration (merge, ETM reuse, OCM, user chunks) comes next; ``apply()`` allocates the
physical segments on the device's ETM, uploads instructions and weights, and builds the MMU
table; forward runs each HardOp -- or each run of consecutive HardOps when merging is on -- with
``device.icoreCalc`` on the instruction bytes in simulated ETM. Nothing is computed in Python.

Planning hooks for the next issue: `_plan_ftmp` (ETM reuse: new logical slots for FTMP buffers,
applied with `relocate_words`), `_plan_ocm` (OCM placement: extra MMU entries into OCM), and a
snapshot can serialise `logic_segment_map` / `phy_segment_map` / `forward_info` (plain data).
"""

from __future__ import annotations

import hashlib
import logging
import os
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


def _hardops(view: Any) -> list[Any]:
    return [op for op in view.ops if op.op_type == "HardOp"]


class ZG330Backend(Backend):
    """The ZG330 NPU backend (name "ZG330"); binds HardOps compiled for @zhuget(330)."""

    name = "ZG330"
    default_url = "sim://zg330"
    supports_user_outputs = True

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

    # --- binding --------------------------------------------------------------------------
    def isOpSupported(self, op: Any) -> bool:
        if op.op_type != "HardOp":
            return False
        if op.compile_target != ZG_TARGET:
            raise UnsupportedOpError(
                f"op {op.op_id} (HardOp '{op.name}') was compiled for {op.compile_target}; "
                f"ZG330Backend runs HardOps compiled for {ZG_TARGET} only: recompile with "
                f"`xrt compile --target zg330` or bind it to the backend of that target first")
        return True

    def getForwardFunc(self, op: Any) -> Any:
        return _forward_hardop if op.op_type == "HardOp" else None

    def memRegion(self) -> Any:
        self._require_init("memRegion")
        return self._device.defaultMemRegion()

    # --- init --------------------------------------------------------------------------------
    def init(self, network_view: Any, device: Any) -> None:
        from .device import ZG330Device

        if self._applied:
            raise CallOrderError(f"{self._label()}: init after apply; create a new backend")
        if not isinstance(device, ZG330Device):
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

    def _build_logic(self, view: Any) -> None:
        hard = _hardops(view)
        self._order = {op.op_id: i for i, op in enumerate(hard)}
        in_ids = {v.v_id for v in view.inputs()}
        self._in_ids = in_ids
        out_ids = {v.v_id for v in view.outputs()}
        values: dict[int, Any] = {}
        for op in hard:
            for v in op.inputs + op.outputs:
                if TAG not in v.tags:
                    raise XrtError(f"value {v.v_id} of HardOp {op.op_id} has no ETM placement "
                                   f"(tags['{TAG}']); the network was not lowered for zg330")
                values[v.v_id] = v
        bufs: dict[int, _Buffer] = {}
        for v in values.values():
            t = v.tags[TAG]
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
            t = v.tags[TAG]
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
        (4096-aligned, at least the logic segment's byte_size)."""
        self._config("userReuseSegment")
        st = SegmentType(segment_type)
        if st not in (SegmentType.WEIGHT, SegmentType.INSTR, SegmentType.FTMP):
            raise InvalidArgumentError(f"userReuseSegment: {st.name} segments are one chunk per "
                                       f"value; use userConnectNetwork(chunk, v_id)")
        self._check_user_chunk(memchunk, self.logic_segment_map[st].byte_size, st.name)
        self._user_segments[st] = memchunk

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
        b = self._buffers[vi.value.tags[TAG]["buffer"]]
        self._check_user_chunk(memchunk, b.byte_size, f"v_id {v_id}")
        self._user_io[b.owner] = memchunk

    def _check_user_chunk(self, chunk: Any, need: int, what: str) -> None:
        region = getattr(chunk, "region", None)
        if region is None or region.device() is not self._device or region.name != "etm":
            raise InvalidArgumentError(f"the chunk for {what} must be ETM memory of this "
                                       f"backend's device")
        if chunk.addr % SEGMENT_ALIGN:
            raise InvalidArgumentError(f"the chunk for {what} starts at {chunk.addr:#x}, not "
                                       f"{SEGMENT_ALIGN}-aligned")
        if chunk.byte_size < need:
            raise InvalidArgumentError(f"the chunk for {what} has {chunk.byte_size} bytes, "
                                       f"{need} are needed")

    # --- apply ---------------------------------------------------------------------------------
    def apply(self) -> None:
        """Allocate the physical segments, upload instructions and weights, plan the MMU."""
        self._require_init("apply")
        if self._applied:
            raise CallOrderError("ZG330Backend.apply() was already called; a backend is "
                                 "applied once")
        dev = self._device
        region = dev.defaultMemRegion()
        self._plan_ftmp()
        self._plan_ocm()
        phy: dict[SegmentType, PhySegment] = {}
        for st in (SegmentType.WEIGHT, SegmentType.INSTR, SegmentType.FTMP):
            ls = self.logic_segment_map[st]
            ps = PhySegment(st, byte_size=ls.byte_size, info_map=dict(ls.info_map),
                            hardop_map=dict(ls.hardop_map))
            if ls.byte_size:
                user = self._user_segments.get(st)
                chunk = user if user is not None else region.malloc(ls.byte_size, True,
                                                                    SEGMENT_ALIGN)
                ps.single_chunk = MemChunkInfo(chunk, user is not None)
                ps.phy_addr = chunk.addr
            phy[st] = ps
        for st in (SegmentType.INPUT, SegmentType.OUTPUT):
            ls = self.logic_segment_map[st]
            ps = PhySegment(st, byte_size=ls.byte_size, info_map=dict(ls.info_map))
            for b in self._buffers.values():
                if b.segment != st:
                    continue
                user = self._user_io.get(b.owner)
                chunk = user if user is not None else region.malloc(b.byte_size, True,
                                                                    SEGMENT_ALIGN)
                ps.multi_chunk[b.owner] = MemChunkInfo(chunk, user is not None)
            ps.phy_addr = min((c.memChunk.addr for c in ps.multi_chunk.values()), default=0)
            phy[st] = ps
        self.phy_segment_map = phy
        # upload, zero the feature-map chunks (padding channels read 0)
        w, i = phy[SegmentType.WEIGHT], phy[SegmentType.INSTR]
        lw, li = self.logic_segment_map[SegmentType.WEIGHT], self.logic_segment_map[SegmentType.INSTR]
        for op in _hardops(self._view):
            hi = self.forward_info.hardop_map[op.op_id]
            if op.params:
                off = hi.weights_logic_addr - lw.logic_addr
                w.single_chunk.memChunk.write(off, op.params[0].data.view(np.uint8).ravel())
                hi.weight_phy_addr = w.phy_addr + off
            if op.instr is not None:
                off = hi.instr_logic_addr - li.logic_addr
                i.single_chunk.memChunk.write(off, op.instr.data.view(np.uint8).ravel())
                hi.instr_phy_addr = i.phy_addr + off
        for st in (SegmentType.FTMP,):
            if phy[st].single_chunk.memChunk is not None and not phy[st].single_chunk.user_used:
                phy[st].single_chunk.memChunk.fill(0)
        for st in (SegmentType.INPUT, SegmentType.OUTPUT):
            for ci in phy[st].multi_chunk.values():
                if not ci.user_used:
                    ci.memChunk.fill(0)
        self._plan_mmu()
        for vi in self.value_info.values():
            vi.phy_addr = self._phys_of_logic(vi.logic_addr)
        self.forward_info.memchunk_map = {
            **{b: ci for st in (SegmentType.INPUT, SegmentType.OUTPUT)
               for b, ci in phy[st].multi_chunk.items()}}
        self._plan_runs()
        self._restore_io()
        if self._n_layers:
            self._prof_chunk = region.malloc(max(self._n_layers, 1) * 80, True, 64)
        self._applied = True
        self.is_applied_ = True

    def _plan_ftmp(self) -> None:
        """ETM reuse planning (next issue): re-place FTMP buffers by lifetime and relocate the
        address words (`relocate_words`). Today: the compiler's one-slot-per-value layout."""

    def _plan_ocm(self) -> None:
        """OCM planning (next issue): choose feature maps for OCM per `ocmopt`. Today: none;
        BEST_SCORE reports NONE as the winner."""
        if self.ocmopt == OcmOpt.BEST_SCORE:
            self.ocmopt = OcmOpt.NONE

    def _plan_mmu(self) -> None:
        """MMU entries: WEIGHT, FTMP split around the INPUT/OUTPUT buffers, one per INPUT/OUTPUT
        buffer. (logical, physical, size) triples, programmed before every run."""
        entries: list[tuple[int, int, int]] = []
        w = self.phy_segment_map[SegmentType.WEIGHT]
        lw = self.logic_segment_map[SegmentType.WEIGHT]
        if lw.byte_size:
            entries.append((lw.logic_addr, w.phy_addr, lw.byte_size))
        lf = self.logic_segment_map[SegmentType.FTMP]
        f = self.phy_segment_map[SegmentType.FTMP]
        holes = sorted((b.logic_addr, b.byte_size) for b in self._buffers.values()
                       if b.segment != SegmentType.FTMP)
        if lf.byte_size:
            lo, hi = lf.logic_addr, lf.logic_addr + lf.byte_size
            cur = lo
            for a, n in holes:
                if a >= hi or a + n <= lo:
                    continue
                if a > cur:
                    entries.append((cur, f.phy_addr + (cur - lo), a - cur))
                cur = max(cur, a + n)
            if cur < hi:
                entries.append((cur, f.phy_addr + (cur - lo), hi - cur))
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
        if not self._applied:
            raise CallOrderError(f"ZG330Backend: forward of HardOp {op.op_id} before apply()")
        if op.op_id not in self._order:
            raise XrtError(f"HardOp {op.op_id} is not in this ZG330Backend's network view")
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
        b = self._buffers[v.tags[TAG]["buffer"]]
        if v.v_id not in self._in_ids or b.segment != SegmentType.INPUT:
            return 0.0  # produced on the NPU by this backend: already in FTMP/OUTPUT
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
        off = v.tags[TAG]["c_off"] * (2 if v.tags[TAG]["dtype"] == "int16" else 1)
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

    def _restore_io(self) -> None:
        for st in (SegmentType.INPUT, SegmentType.OUTPUT):
            for owner, ci in self.phy_segment_map[st].multi_chunk.items():
                self._bind(self._buffers[owner], ci.memChunk, 0)

    def _map_user_output(self, v: Any, t: Tensor) -> None:
        b = self._buffers[v.tags[TAG]["buffer"]]
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
        t = v.tags[TAG]
        b = self._buffers[t["buffer"]]
        esz = 2 if t["dtype"] == "int16" else 1
        if b.segment == SegmentType.FTMP:
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
                want = p.data.view(np.uint8).ravel()
                got = np.empty(want.size, np.uint8)
                self.phy_segment_map[seg].single_chunk.memChunk.read(got, addr - lseg.logic_addr,
                                                                     want.size)
                if hashlib.md5(got.tobytes()).digest() != hashlib.md5(want.tobytes()).digest():
                    log.error("precheck: %s of HardOp %d '%s' in ETM differ from the network",
                              what, op.op_id, op.name)
                    self.precheck_failures.append((op.op_id, op.name, what))
                    ok = False
        return ok

    def log(self) -> str:
        """Write the deployment log to ./.icraft/logs/ and return its path."""
        self._after_apply("log")
        path = os.path.join(os.getcwd(), ".icraft", "logs",
                            f"zg330backend_{self.zg330backend_id}.log")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        lines = [f"ZG330Backend {self.zg330backend_id}: merge={self.is_mergeHardop} "
                 f"etm_optimize={self.is_etmOptimize} ocmopt={self.ocmopt.name}"]
        for st, ls in self.logic_segment_map.items():
            ps = self.phy_segment_map.get(st)
            lines.append(f"segment {st.name}: logical {ls.logic_addr:#x} +{ls.byte_size} -> "
                         f"physical {ps.phy_addr if ps else 0:#x}")
        for lo, ph, n in self._mmu:
            lines.append(f"mmu {lo:#x} +{n} -> {ph:#x}")
        for v, vi in self.value_info.items():
            lines.append(f"value {v}: {vi.segment.name} real={vi.real} logical "
                         f"{vi.logic_addr:#x} physical {vi.phy_addr:#x} bytes {vi.byte_size}")
        for oid, hi in self.forward_info.hardop_map.items():
            lines.append(f"hardop {oid}: instr {hi.instr_logic_addr:#x}+{hi.instr_size} "
                         f"weights {hi.weights_logic_addr:#x}+{hi.weights_size} "
                         f"sync {hi.sync_idx} merge_from {hi.merge_from}")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")
        return path

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

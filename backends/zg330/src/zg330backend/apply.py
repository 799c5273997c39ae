"""What `ZG330Backend.apply` does, in order: plan the FTMP slots (OCM residents, then ETM
reuse: `deploy.plan`), move the logical layout to the plan, relocate the instructions' address
words, allocate the physical segments (or take the user's chunks), upload instructions and
weights, zero the feature maps, then build the MMU table and the icoreCalc runs
(`_finish_apply`, which `fork` and snapshot restore share).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from xrt.errors import CallOrderError, XrtError

from . import deploy
from .device_state import _ocm_arena
from .layout import SEGMENT_ALIGN, _hardops
from .structs import HardOpInfo, MemChunkInfo, OcmOpt, PhySegment, SegmentType


@dataclass
class _Run:
    """HardOps executed by one icoreCalc."""

    op_ids: list[int]
    instr_logic: int = 0
    instr_size: int = 0
    sid: int = -1  # synthetic op id (merged runs of 2+ HardOps), else the op id
    key: Any = None  # what every HardOp of the run shares (`_merge_key`)


class ApplyMixin:
    """`apply` of ZG330Backend: logical plan to physical deployment."""

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
        lw = self.logic_segment_map[SegmentType.WEIGHT]
        li = self.logic_segment_map[SegmentType.INSTR]
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

    def _merge_key(self, op: Any) -> Any:
        """HardOps merge into one run only while this agrees; the ZG330 switches the MPE mode
        per layer, so any adjacent HardOps merge (BuyiBackend: same precision only)."""
        return None

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
            key = self._merge_key(op)
            if self.is_mergeHardop and runs and adjacent and not reads_input and \
                    runs[-1].key == key:
                runs[-1].op_ids.append(op.op_id)
            else:
                runs.append(_Run([op.op_id], key=key))
            prev = op
        hmap = self.forward_info.hardop_map
        for r in runs:
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

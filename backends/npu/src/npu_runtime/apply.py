"""`apply` as a stage: a `Layout` and `Settings` in, a `Deployment` out.

In order: plan the FTMP slots (OCM residents, then ETM reuse: `deploy.plan`), move a copy of the
logical layout to the plan (the `Layout` given stays as `init` made it; the `Deployment` holds
the copy), relocate the instructions' address words, allocate the physical segments (or take
the user's chunks), upload instructions and weights, zero the feature maps, then build the MMU
table, its index per INPUT/OUTPUT buffer, the physical addresses and the icoreCalc runs
(`finish`, which fork and snapshot restore share). With the device's MMU off the instructions
are relocated once more, to the physical segments.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from xrt.errors import XrtError

from . import bundle_weights, deploy
from .layout import SEGMENT_ALIGN, Layout, hardops
from .settings import Settings
from .structs import HardOpInfo, MemChunkInfo, OcmOpt, PhySegment, SegmentType, ValueInfo

#: run_key(op): HardOps merge into one run only while it agrees (None: any adjacent HardOps)
RunKey = Callable[[Any], Any]


@dataclass
class Run:
    """HardOps executed by one icoreCalc."""

    op_ids: list[int]
    instr_logic: int = 0
    instr_size: int = 0
    sid: int = -1  # synthetic op id (merged runs of 2+ HardOps), else the op id
    key: Any = None  # what every HardOp of the run shares (the chip's run_key)


@dataclass
class Deployment:
    """What `apply` made of a layout on a device: the plan, the physical segments, the
    relocated instructions, the MMU table and the runs. Forward, report and snapshots read
    it; the forward binds tensors by rewriting INPUT/OUTPUT entries of `mmu`."""

    plan: deploy.DeployPlan
    segments: dict[SegmentType, PhySegment]
    instr_words: dict[int, np.ndarray]
    ocm_chunk: Any = None
    #: (logical, physical, size) per MMU entry
    mmu: list[tuple[int, int, int]] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    run_of: dict[int, int] = field(default_factory=dict)
    #: HardOp infos, with one synthetic entry per merged run (`ForwardInfo.hardop_map`)
    hardop_info: dict[int, HardOpInfo] = field(default_factory=dict)
    #: buffer owner -> the chunk it lives in (`ForwardInfo.memchunk_map`)
    memchunk_map: dict[int, MemChunkInfo] = field(default_factory=dict)
    #: the profiler records' chunk (None: the view has no layers)
    prof_chunk: Any = None
    #: WEIGHT/INSTR chunks belong to the backend this one was forked from
    forked: bool = False
    #: INPUT and OUTPUT buffers packed into one chunk and one MMU entry per segment (the
    #: device has too few MMU entries for one per buffer): owner -> offset in the chunk. A
    #: packed buffer's address is fixed, so tensors are copied in rather than mapped.
    io_offsets: dict[int, int] = field(default_factory=dict)
    #: the layout as placed for this deployment (planned FTMP slots, moved buffers and values;
    #: shared with the forks, which place nothing)
    layout: Layout | None = None
    #: INPUT/OUTPUT buffer owner -> its MMU entry (the entry a forward rebinds)
    mmu_index: dict[int, int] = field(default_factory=dict)
    #: the placed ValueInfos with this deployment's physical addresses (the vendor's
    #: `value_info` after apply)
    value_info: dict[int, ValueInfo] = field(default_factory=dict)

    @property
    def packed_io(self) -> bool:
        return bool(self.io_offsets)

    def phys_of_logic(self, logic: int) -> int:
        for lo, ph, n in self.mmu:
            if lo <= logic < lo + n:
                return ph + (logic - lo)
        return 0

    def instr_phys(self, layout: Layout, run: Run) -> int:
        li = layout.segments[SegmentType.INSTR]
        return self.segments[SegmentType.INSTR].phy_addr + (run.instr_logic - li.logic_addr)

    def free(self) -> None:
        """Free every chunk this deployment allocated (not the user's, not a parent's)."""
        seen: set[int] = set()
        for st, ps in self.segments.items():
            if self.forked and st in (SegmentType.WEIGHT, SegmentType.INSTR):
                continue
            for ci in [ps.single_chunk] + list(ps.multi_chunk.values()):
                if ci.memChunk is not None and not ci.user_used and id(ci.memChunk) not in seen:
                    seen.add(id(ci.memChunk))
                    _free(ci.memChunk)
        _free(self.prof_chunk)


def _free(chunk: Any) -> None:
    if chunk is None:
        return
    try:
        chunk.free()
    except Exception:  # pragma: no cover - device already closed
        pass


def apply(view: Any, layout: Layout, settings: Settings, device: Any, backend_id: int,
          run_key: RunKey) -> Deployment:
    """Plan, relocate, allocate, upload, and finish: the deployment of `layout` on `device`."""
    capacity = 0
    if settings.ocm != OcmOpt.NONE:
        arena = device.share.ocm_arena(device)
        capacity = 0 if arena is None else arena.byte_size
    slots = [dataclasses.replace(s) for s in layout.slots]
    plan = deploy.plan(slots, etm_reuse=settings.etm_reuse, ocm_option=settings.ocm,
                       ocm_capacity=capacity, base_logic=layout.logic_base,
                       num_ops=len(layout.order))
    layout = layout.placed(slots)
    layout.move_to(plan)
    moves = [(s.old, s.new, s.size) for s in layout.slots if s.size]
    moves += bundle_weights.weight_moves(view, layout)  # a bundle member's weight blocks
    packed = settings.mmu_on and _entries_needed(layout, settings) > device.config.mmu_entries
    if packed:
        base = plan.ocm_logic + deploy.align_up(max(plan.ocm_footprint, 1), deploy.PAGE)
        moves += layout.pack_io(base, set(settings.user_io))
    words = {op.op_id: deploy.relocate(op.instr.data.view(np.uint64), moves)
             for op in hardops(view) if op.instr is not None}
    segments, offsets = allocate(layout, settings, device, packed)
    ocm_chunk = device.share.ocm_arena(device) if any(s.ocm for s in layout.slots) else None
    dep = Deployment(plan, segments, words, ocm_chunk, io_offsets=offsets, layout=layout)
    try:
        if not settings.mmu_on:
            # MMU off: the instructions must hold physical addresses; rewrite every logical
            # address the MMU would have mapped, now that the segments are allocated
            phys = [(lo, ph, n) for lo, ph, n in mmu_entries(layout, dep, device, False) if n]
            dep.instr_words = {k: deploy.relocate(w, phys) for k, w in words.items()}
        upload(view, layout, settings, dep)
        zero_feature_maps(dep.segments)
        finish(view, layout, settings, device, dep, backend_id, run_key)
    except BaseException:
        dep.free()
        raise
    return dep


def _entries_needed(layout: Layout, settings: Settings) -> int:
    """MMU entries of a deployment with one entry per INPUT/OUTPUT buffer."""
    fixed = sum(1 for st in (SegmentType.WEIGHT, SegmentType.FTMP)
                if layout.segments[st].byte_size) + any(s.ocm for s in layout.slots)
    return fixed + sum(1 for b in layout.buffers.values()
                       if b.segment in (SegmentType.INPUT, SegmentType.OUTPUT))


def allocate(layout: Layout, settings: Settings, device: Any, packed: bool = False
             ) -> tuple[dict[SegmentType, PhySegment], dict[int, int]]:
    """The physical segments -- one chunk each for WEIGHT, INSTR, FTMP (or the user's), one per
    buffer for INPUT and OUTPUT, or one per segment when `packed` -- and the packed buffers'
    offsets in their chunk."""
    region = device.defaultMemRegion()
    phy: dict[SegmentType, PhySegment] = {}
    offsets: dict[int, int] = {}
    try:
        for st in (SegmentType.WEIGHT, SegmentType.INSTR, SegmentType.FTMP):
            ls = layout.segments[st]
            ps = PhySegment(st, byte_size=ls.byte_size, info_map=dict(ls.info_map),
                            hardop_map=dict(ls.hardop_map))
            user = settings.user_segments.get(st)
            if ls.byte_size or user is not None:
                chunk = user if user is not None else region.malloc(ls.byte_size, True,
                                                                    SEGMENT_ALIGN)
                ps.single_chunk = MemChunkInfo(chunk, user is not None)
                ps.phy_addr = chunk.addr
            phy[st] = ps
        for st in (SegmentType.INPUT, SegmentType.OUTPUT):
            phy[st] = io_segment(layout, settings, st, region, offsets if packed else None)
    except BaseException:
        Deployment(None, phy, {}).free()  # type: ignore[arg-type]
        raise
    return phy, offsets


def io_segment(layout: Layout, settings: Settings | None, st: SegmentType, region: Any,
               offsets: dict[int, int] | None = None) -> PhySegment:
    """The INPUT or OUTPUT segment: a chunk per buffer (the user's where connected; `settings`
    None: all new, as a fork has them), or -- with `offsets` to fill -- one chunk for every
    buffer not in a user chunk, laid out as `Layout.pack_io` placed them."""
    ls = layout.segments[st]
    ps = PhySegment(st, byte_size=ls.byte_size, info_map=dict(ls.info_map))
    user_io = settings.user_io if settings is not None else {}
    if offsets is not None:
        group = layout.io_groups(set(user_io))[st]
        if group:
            base = group[0].logic_addr
            size = group[-1].logic_addr + group[-1].byte_size - base
            chunk = region.malloc(size, True, SEGMENT_ALIGN)
            for b in group:
                ps.multi_chunk[b.owner] = MemChunkInfo(chunk, False)
                offsets[b.owner] = b.logic_addr - base
    for b in layout.buffers.values():
        if b.segment != st or b.owner in ps.multi_chunk:
            continue
        user = user_io.get(b.owner)
        chunk = user if user is not None else region.malloc(b.byte_size, True, SEGMENT_ALIGN)
        ps.multi_chunk[b.owner] = MemChunkInfo(chunk, user is not None)
        if settings is not None:
            ps.multi_chunk[b.owner].staged_chunk = {
                m: settings.staged[m] for m in b.members if m in settings.staged}
    ps.phy_addr = min((c.memChunk.addr for c in ps.multi_chunk.values()), default=0)
    return ps


def upload(view: Any, layout: Layout, settings: Settings, dep: Deployment) -> None:
    """Weights and relocated instructions into their chunks."""
    w, i = dep.segments[SegmentType.WEIGHT], dep.segments[SegmentType.INSTR]
    lw = layout.segments[SegmentType.WEIGHT]
    li = layout.segments[SegmentType.INSTR]
    if i.single_chunk.user_used:
        deploy.claim_layout(i.single_chunk.memChunk, SegmentType.INSTR,
                            deploy.digest(*[dep.instr_words[k] for k in sorted(dep.instr_words)]))
    for op in hardops(view):
        hi = layout.hardop_info[op.op_id]
        if op.params:
            off = hi.weights_logic_addr - lw.logic_addr
            w.single_chunk.memChunk.write(off, op.params[0].data.view(np.uint8).ravel())
            hi.weight_phy_addr = w.phy_addr + off
        if op.instr is not None:
            off = hi.instr_logic_addr - li.logic_addr
            i.single_chunk.memChunk.write(off, dep.instr_words[op.op_id].view(np.uint8))
            hi.instr_phy_addr = i.phy_addr + off


def zero_feature_maps(segments: dict[SegmentType, PhySegment]) -> None:
    f = segments[SegmentType.FTMP].single_chunk
    if f.memChunk is not None and not f.user_used:
        f.memChunk.fill(0)
    for st in (SegmentType.INPUT, SegmentType.OUTPUT):
        for ci in segments[st].multi_chunk.values():
            if not ci.user_used:
                ci.memChunk.fill(0)


def mmu_entries(layout: Layout, dep: Deployment, device: Any, mmu_on: bool = True
                ) -> list[tuple[int, int, int]]:
    """MMU entries (logical, physical, size): WEIGHT, FTMP, the OCM window, one per
    INPUT/OUTPUT buffer or packed group (whose index `dep.mmu_index` records per buffer). With
    the MMU off the table is only the relocation map, so the device's entry count does not
    limit it."""
    entries: list[tuple[int, int, int]] = []
    lw = layout.segments[SegmentType.WEIGHT]
    if lw.byte_size:
        entries.append((lw.logic_addr, dep.segments[SegmentType.WEIGHT].phy_addr, lw.byte_size))
    lf = layout.segments[SegmentType.FTMP]
    if lf.byte_size:
        entries.append((lf.logic_addr, dep.segments[SegmentType.FTMP].phy_addr, lf.byte_size))
    if dep.ocm_chunk is not None:
        size = deploy.align_up(max(dep.plan.ocm_footprint, 64), 64)
        entries.append((dep.plan.ocm_logic, dep.ocm_chunk.addr, size))
    for st in (SegmentType.INPUT, SegmentType.OUTPUT):
        group: dict[int, int] = {}  # id of a packed chunk -> its entry
        for owner, ci in dep.segments[st].multi_chunk.items():
            b = layout.buffers[owner]
            if owner in dep.io_offsets:
                key = id(ci.memChunk)
                if key not in group:
                    group[key] = len(entries)
                    base = b.logic_addr - dep.io_offsets[owner]
                    entries.append((base, ci.memChunk.addr, ci.memChunk.byte_size))
                dep.mmu_index[owner] = group[key]
                continue
            dep.mmu_index[owner] = len(entries)
            entries.append((b.logic_addr, ci.memChunk.addr, b.byte_size))
    if mmu_on and len(entries) > device.config.mmu_entries:
        raise XrtError(f"{device.chip.name}Backend needs {len(entries)} MMU entries (WEIGHT, "
                       f"FTMP, the OCM window and the INPUT/OUTPUT buffers, packed: one entry "
                       f"per segment), the device has {device.config.mmu_entries}; turn the OCM "
                       f"off or deploy the network in parts (views)")
    return entries


def finish(view: Any, layout: Layout, settings: Settings, device: Any, dep: Deployment,
           backend_id: int, run_key: RunKey) -> None:
    """The MMU table, physical addresses, value chunks, runs and profiler chunk of `dep`."""
    phy = dep.segments
    dep.mmu_index = {}
    dep.mmu = mmu_entries(layout, dep, device, settings.mmu_on)
    dep.value_info = {k: dataclasses.replace(vi, phy_addr=dep.phys_of_logic(vi.logic_addr))
                      for k, vi in layout.value_info.items()}
    for ps in phy.values():
        ps.info_map = {k: dep.value_info[k] for k in ps.info_map if k in dep.value_info}
    dep.memchunk_map = {b: ci for st in (SegmentType.INPUT, SegmentType.OUTPUT)
                        for b, ci in phy[st].multi_chunk.items()}
    if phy[SegmentType.FTMP].single_chunk.memChunk is not None:
        for sl in layout.slots:
            if not sl.ocm and not sl.scratch:
                dep.memchunk_map[sl.key] = phy[SegmentType.FTMP].single_chunk
    if dep.ocm_chunk is not None:
        oc = MemChunkInfo(dep.ocm_chunk, False)
        for sl in layout.slots:
            if sl.ocm and not sl.scratch:
                dep.memchunk_map[sl.key] = oc
    dep.hardop_info = dict(layout.hardop_info)
    dep.runs = plan_runs(view, layout, settings, dep.hardop_info, backend_id, run_key)
    dep.run_of = {o: k for k, r in enumerate(dep.runs) for o in r.op_ids}
    if layout.n_layers:
        dep.prof_chunk = device.defaultMemRegion().malloc(layout.n_layers * 80, True, 64)


def plan_runs(view: Any, layout: Layout, settings: Settings, hmap: dict[int, HardOpInfo],
              backend_id: int, run_key: RunKey) -> list[Run]:
    """The icoreCalc runs: each HardOp alone, or (merging on) maximal stretches of HardOps
    adjacent in the network whose `run_key` agrees and that read no view input but the
    first. A merged run gets a synthetic op id and HardOpInfo in `hmap`."""
    hard = hardops(view)
    pos = {op.op_id: i for i, op in enumerate(view.ops)}
    parent = getattr(view, "network", view)
    full_pos = {op.op_id: i for i, op in enumerate(parent.ops)}
    max_id = max(parent.opIds(), default=0)
    runs: list[Run] = []
    prev = None
    for op in hard:
        reads_input = any(v.v_id in layout.in_ids for v in op.inputs)
        adjacent = prev is not None and full_pos[op.op_id] == full_pos[prev.op_id] + 1 \
            and pos[op.op_id] == pos[prev.op_id] + 1
        key = run_key(op)
        if settings.merge and runs and adjacent and not reads_input and runs[-1].key == key:
            runs[-1].op_ids.append(op.op_id)
        else:
            runs.append(Run([op.op_id], key=key))
        prev = op
    for r in runs:
        with_instr = [hmap[o] for o in r.op_ids if hmap[o].instr_size]
        if with_instr:
            r.instr_logic = with_instr[0].instr_logic_addr
            last = with_instr[-1]
            r.instr_size = last.instr_logic_addr + last.instr_size - r.instr_logic
        if len(r.op_ids) > 1:
            max_id += 1
            r.sid = max_id
            hmap[r.sid] = HardOpInfo(
                instr_logic_addr=r.instr_logic, instr_size=r.instr_size,
                instr_phy_addr=hmap[r.op_ids[0]].instr_phy_addr if with_instr else 0,
                sync_idx=(backend_id, hmap[r.op_ids[-1]].sync_idx[1]),
                merge_from=list(r.op_ids))
        else:
            r.sid = r.op_ids[0]
    return runs

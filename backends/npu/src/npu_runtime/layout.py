"""The logical layout of a network view: what a backend's `init` reads from the compiler.

`build_layout` turns the HardOps' value tags (``tags[chip.tag]``: buffer, base, bytes, c_off)
and instr/params mtypes (docs/zg330-lowering.md) into a `Layout`: the five LogicSegments, the
ValueInfo / HardOpInfo maps, the feature-map buffers (an owner value and its aliases) and the
FTMP slots `deploy.plan` places (lifetimes over the HardOp order, ETM traffic scores). All of it
is logical: no device memory is touched before `apply`. `apply` never changes it: it places a
copy (`Layout.placed`, then `move_to` / `pack_io` on the copy) that its `Deployment` holds, so a
backend's layout stays as `init` made it and a fork shares its parent's placed copy.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from . import deploy
from .checks import check_hardops
from .structs import HardOpInfo, LogicSegment, OcmOpt, SegmentType, ValueInfo

#: alignment of every physical segment chunk (and of user chunks deployed into)
SEGMENT_ALIGN = 4096


@dataclass
class Buffer:
    """A feature-map buffer of the compiled network (owner value + aliases)."""

    owner: int
    logic_addr: int
    byte_size: int
    members: list[int] = field(default_factory=list)
    segment: SegmentType = SegmentType.FTMP


@dataclass
class Layout:
    """A view's logical deployment, as `init` reads it (or, `placed`, as a plan moved it)."""

    tag: str
    #: HardOp id -> position in the view's HardOp order
    order: dict[int, int]
    #: v_ids of the view's inputs
    in_ids: set[int]
    buffers: dict[int, Buffer]
    value_info: dict[int, ValueInfo]
    hardop_info: dict[int, HardOpInfo]
    segments: dict[SegmentType, LogicSegment]
    slots: list[deploy.Slot]
    #: SYNCs (hardware layers) of all HardOps
    n_layers: int
    #: first logical address above the compiler's layout (FTMP and the OCM window go there)
    logic_base: int = 0

    def buffer_of(self, v: Any) -> Buffer:
        return self.buffers[v.tags[self.tag]["buffer"]]

    def window(self, v: Any) -> dict[str, Any]:
        """The lowering's placement of value `v` (buffer, base, bytes, c_off, pitch, h, w, c)."""
        return v.tags[self.tag]

    def ftmp_estimate(self, etm_reuse: bool) -> None:
        """Set the FTMP logic segment to what `apply` will deploy before OCM planning takes maps
        out of it: what a user allocates for `userReuseSegment(chunk, FTMP)`."""
        slots = [dataclasses.replace(s) for s in self.slots]
        p = deploy.plan(slots, etm_reuse=etm_reuse, ocm_option=OcmOpt.NONE, ocm_capacity=0,
                        base_logic=self.logic_base, num_ops=len(self.order))
        lf = self.segments[SegmentType.FTMP]
        lf.logic_addr, lf.byte_size = p.ftmp_logic, p.ftmp_size

    def placed(self, slots: list[deploy.Slot]) -> Layout:
        """A copy of this layout with the planned `slots`, for a deployment to move (its own
        buffers, segments, value and HardOp infos); this layout is left as it is."""
        vinfo = {k: dataclasses.replace(vi, real_to=list(vi.real_to))
                 for k, vi in self.value_info.items()}
        hinfo = {k: dataclasses.replace(hi) for k, hi in self.hardop_info.items()}
        segs = {st: dataclasses.replace(ls, info_map={k: vinfo[k] for k in ls.info_map},
                                        hardop_map={k: hinfo[k] for k in ls.hardop_map})
                for st, ls in self.segments.items()}
        return dataclasses.replace(
            self, order=dict(self.order), in_ids=set(self.in_ids),
            buffers={k: dataclasses.replace(b, members=list(b.members))
                     for k, b in self.buffers.items()},
            value_info=vinfo, hardop_info=hinfo, segments=segs, slots=list(slots))

    def move_to(self, plan: deploy.DeployPlan) -> None:
        """Apply a plan to the logical structures: FTMP segment, buffers, ValueInfo (on a
        `placed` copy: `apply` never moves the layout `init` made)."""
        lf = self.segments[SegmentType.FTMP]
        lf.logic_addr, lf.byte_size = plan.ftmp_logic, plan.ftmp_size
        for sl in self.slots:
            if sl.scratch:
                continue
            b = self.buffers[sl.key]
            b.logic_addr = sl.new
            for m in b.members:
                vi = self.value_info[m]
                t = self.window(vi.value)
                vi.logic_addr = sl.new + t["c_off"] * _esize(t)
                vi.is_ocm = sl.ocm


    def io_groups(self, exclude: set[int]) -> dict[SegmentType, list[Buffer]]:
        """The INPUT and OUTPUT buffers that share one chunk and one MMU entry when the
        deployment packs them (`exclude`: owners deployed into user chunks), by address."""
        return {st: sorted((b for b in self.buffers.values()
                            if b.segment == st and b.owner not in exclude),
                           key=lambda b: b.logic_addr)
                for st in (SegmentType.INPUT, SegmentType.OUTPUT)}

    def pack_io(self, base: int, exclude: set[int]) -> list[tuple[int, int, int]]:
        """Move the INPUT buffers, then the OUTPUT buffers, next to each other from logical
        address `base` (each group page-aligned, buffers 64-aligned): one MMU entry maps a
        group. Returns the moves (old, new, size) the instructions must follow."""
        moves = []
        at = base
        for st, group in self.io_groups(exclude).items():
            if not group:
                continue
            start = at = deploy.align_up(at, deploy.PAGE)
            for b in group:
                moves.append((b.logic_addr, at, b.byte_size))
                b.logic_addr = at
                for m in b.members:
                    vi = self.value_info[m]
                    vi.logic_addr = at + self.window(vi.value)["c_off"] * _esize(
                        self.window(vi.value))
                at = deploy.align_up(at + b.byte_size, deploy.ALIGN)
            seg = self.segments[st]
            seg.logic_addr, seg.byte_size = start, at - start
        return moves


def hardops(view: Any) -> list[Any]:
    """The HardOps of `view` in its order: what an NPU backend deploys and runs."""
    return [op for op in view.ops if op.op_type == "HardOp"]


def _esize(t: dict[str, Any]) -> int:
    return 2 if t["dtype"] == "int16" else 1


def build_layout(view: Any, tag: str, backend_id: int) -> Layout:
    """The logical layout of `view`'s HardOps as the lowering for `tag` laid them out."""
    hard = hardops(view)
    in_ids = {v.v_id for v in view.inputs()}
    out_ids = {v.v_id for v in view.outputs()}
    net = getattr(view, "network", view)
    check_hardops(hard, tag, getattr(net, "source_file", None), in_ids | out_ids)
    values: dict[int, Any] = {}
    for op in hard:
        for v in op.inputs + op.outputs:
            values[v.v_id] = v
    bufs: dict[int, Buffer] = {}
    for v in values.values():
        t = v.tags[tag]
        b = bufs.setdefault(t["buffer"], Buffer(t["buffer"], t["base"], t["bytes"]))
        b.members.append(v.v_id)
    for b in bufs.values():
        if any(m in in_ids for m in b.members):
            b.segment = SegmentType.INPUT
        elif any(m in out_ids for m in b.members):
            b.segment = SegmentType.OUTPUT
    segs = {s: LogicSegment(s) for s in SegmentType}
    vinfo: dict[int, ValueInfo] = {}
    for v in values.values():
        t = v.tags[tag]
        b = bufs[t["buffer"]]
        owner = values.get(b.owner)
        vinfo[v.v_id] = ValueInfo(value=v, real=v.v_id == b.owner, is_host=False,
                                  fake_from=None if v.v_id == b.owner else owner,
                                  logic_addr=t["base"] + t["c_off"] * _esize(t),
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
    _set_range(segs[SegmentType.FTMP], ftmp)
    for st in (SegmentType.INPUT, SegmentType.OUTPUT):
        _set_range(segs[st], [(b.logic_addr, b.byte_size) for b in bufs.values()
                              if b.segment == st], total=True)
    wr, ir = [], []
    hinfo: dict[int, HardOpInfo] = {}
    for op in hard:
        hi = HardOpInfo(net_hardop=op, sync_idx=(backend_id, op.layer_count))
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
    _set_range(segs[SegmentType.WEIGHT], wr)
    _set_range(segs[SegmentType.INSTR], ir)
    layout = Layout(tag=tag, order={op.op_id: i for i, op in enumerate(hard)}, in_ids=in_ids,
                    buffers=bufs, value_info=dict(sorted(vinfo.items())), hardop_info=hinfo,
                    segments=segs, slots=_slots(hard, bufs, vinfo, tag),
                    n_layers=sum(int(op.device_info.get("layers", 0)) for op in hard))
    layout.logic_base = _base_logic(layout)
    return layout


def _slots(hard: list[Any], bufs: dict[int, Buffer], vinfo: dict[int, ValueInfo], tag: str
           ) -> list[deploy.Slot]:
    """The FTMP slots to plan: lifetimes over the view's HardOp order, ETM traffic scores."""
    slots: dict[int, deploy.Slot] = {}
    for b in bufs.values():
        if b.segment == SegmentType.FTMP:
            slots[b.owner] = deploy.Slot(b.owner, b.logic_addr, b.byte_size, 1 << 60, -1,
                                         members=sorted(b.members))
    scratch = []
    for pos, op in enumerate(hard):
        moves_data = op.instr is not None
        for v in op.inputs + op.outputs:
            sl = slots.get(v.tags[tag]["buffer"])
            if sl is None:
                continue
            sl.start, sl.end = min(sl.start, pos), max(sl.end, pos)
            if moves_data:
                sl.score += vinfo[v.v_id].byte_size
        for sc in op.device_info.get("scratch", []):
            scratch.append(deploy.Slot(int(sc["v_id"]), int(sc["addr"]), int(sc["bytes"]),
                                       pos, pos, score=2 * int(sc["bytes"]), scratch=True))
    for sl in slots.values():
        if sl.end < 0:  # in no HardOp of the view (cannot happen for FTMP): keep it alive
            sl.start, sl.end = 0, max(len(hard) - 1, 0)
    return sorted(slots.values(), key=lambda s: s.old) + scratch


def _base_logic(layout: Layout) -> int:
    """First logical address above everything the compiler laid out for this view."""
    ends = [ls.logic_addr + ls.byte_size for ls in layout.segments.values()]
    ends += [b.logic_addr + b.byte_size for b in layout.buffers.values()]
    ends += [s.old + s.size for s in layout.slots]
    return deploy.align_up(max(ends, default=0) + 1, 1 << 20)


def _set_range(seg: LogicSegment, ranges: list[tuple[int, int]], total: bool = False) -> None:
    ranges = [r for r in ranges if r[1] > 0]
    if not ranges:
        return
    seg.logic_addr = min(a for a, _ in ranges)
    seg.byte_size = sum(n for _, n in ranges) if total else \
        max(a + n for a, n in ranges) - seg.logic_addr

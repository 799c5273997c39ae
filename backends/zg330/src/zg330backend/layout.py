"""The logical layout of a ZG330Backend's view: what `init` reads from the compiler.

`LayoutMixin._build_logic` turns the HardOps' value tags (``tags["zg330"]``: buffer, base, bytes,
c_off) and instr/params mtypes (docs/zg330-lowering.md) into the five LogicSegments, the
ValueInfo / HardOpInfo maps and the feature-map buffers (`_Buffer`: an owner value and its
aliases). `_build_slots` gives the FTMP buffers and fused-HardOp scratch maps the lifetimes and
traffic scores `deploy.plan` needs. All of it is logical: no device memory is touched before
`apply` (apply.py). `_hardops` and `SEGMENT_ALIGN` are here because every step after uses them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from xrt.errors import XrtError

from . import deploy
from .structs import ForwardInfo, HardOpInfo, LogicSegment, OcmOpt, SegmentType, ValueInfo

#: alignment of every physical segment chunk (and of user chunks deployed into)
SEGMENT_ALIGN = 4096


@dataclass
class _Buffer:
    """A feature-map buffer of the compiled network (owner value + aliases)."""

    owner: int
    logic_addr: int
    byte_size: int
    members: list[int] = field(default_factory=list)
    segment: SegmentType = SegmentType.FTMP
    mmu_index: int = -1


def _hardops(view: Any) -> list[Any]:
    """The HardOps of `view` in its order: what a ZG330Backend deploys and runs."""
    return [op for op in view.ops if op.op_type == "HardOp"]


class LayoutMixin:
    """`init`'s half of ZG330Backend: the logical segments, values, buffers and FTMP slots."""

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
            for v in op.inputs + op.outputs:
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

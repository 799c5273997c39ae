"""Deployment planning of the NPU backends (docs/zg330-deployment.md): where every feature-map slot
of a network view lives, in the ETM's FTMP segment or in the OCM, and the instruction words
relocated to match.

A *slot* is one feature-map buffer of the compiled network -- the owner value with its aliases
(`ValueInfo.real=False`, `fake_from` = owner, placed as one block) -- or the internal scratch
map of a fused HardOp. Its lifetime is the closed interval of HardOp positions (the view's
HardOp order) from its first writer to its last reader. The OCM planner
(`npu_model.planners.ocm`) picks the residents first; the ETM planner
(`npu_model.planners.etm`) packs the rest by lifetime (or one slot each, `disableEtmOptimize`).

The runtime owns the logical address space above the compiler's layout: FTMP at `ftmp_logic`,
the OCM window at `ocm_logic`; the address words of the instructions are moved there with
`relocate`. INPUT/OUTPUT buffers keep the compiler's addresses (one MMU entry each).
"""

from __future__ import annotations

import bisect
import hashlib
import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from npu_model.lowering.relocate import RelocationError
from npu_model.lowering.relocate import relocate as _relocate
from npu_model.planners import etm as etm_planner
from npu_model.planners import ocm as ocm_planner
from xrt.errors import InvalidArgumentError

from .structs import OcmOpt, SegmentType

ALIGN = 64
PAGE = 4096


def align_up(x: int, a: int) -> int:
    return (int(x) + a - 1) // a * a


@dataclass
class Slot:
    """A feature-map slot to place: a buffer (owner + aliases) or a HardOp's scratch map."""

    key: int            # owner v_id of the buffer, or the scratch map's v_id
    old: int            # the compiler's logical address
    size: int           # bytes
    start: int          # first HardOp position (inclusive)
    end: int            # last HardOp position (inclusive)
    score: int = 0      # ETM bytes moved by the layers that write and read it
    members: list[int] = field(default_factory=list)
    scratch: bool = False
    ocm: bool = False
    offset: int = 0     # in FTMP, or in the OCM window when `ocm`
    new: int = 0        # logical address after planning


@dataclass
class DeployPlan:
    """The result of planning; plain data (it goes into snapshots, OCM options by name)."""

    etm_reuse: bool
    #: the OCM option asked for, and the one planning used (BEST_SCORE resolves to a winner)
    ocm_requested: OcmOpt
    ocm_used: OcmOpt
    ocm_score: float = 0.0
    ocm_per_option: dict[str, float | None] = field(default_factory=dict)
    ocm_capacity: int = 0
    ocm_footprint: int = 0
    ftmp_logic: int = 0
    ftmp_size: int = 0
    ftmp_lower_bound: int = 0
    ftmp_no_reuse: int = 0
    ftmp_compiler: int = 0
    ocm_logic: int = 0
    strategy: str = ""

    def to_json(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["ocm_requested"], d["ocm_used"] = self.ocm_requested.name, self.ocm_used.name
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> DeployPlan:
        """The plan `to_json` wrote (OCM options by name; snapshots of state version 1 hold
        their int values)."""
        d = dict(d)
        for k in ("ocm_requested", "ocm_used"):
            d[k] = OcmOpt[d[k]] if isinstance(d[k], str) else OcmOpt(int(d[k]))
        return cls(**d)


def plan(slots: list[Slot], *, etm_reuse: bool, ocm_option: OcmOpt, ocm_capacity: int,
         base_logic: int, num_ops: int) -> DeployPlan:
    """Place `slots` in place (sets `ocm`, `offset`, `new`) and return the plan's figures."""
    p = DeployPlan(etm_reuse=etm_reuse, ocm_requested=OcmOpt(ocm_option), ocm_used=OcmOpt.NONE,
                   ocm_capacity=int(ocm_capacity))
    p.ftmp_compiler = sum(align_up(s.size, ALIGN) for s in slots)
    for s in slots:
        s.ocm, s.offset = False, 0
    if slots and ocm_option != OcmOpt.NONE and ocm_capacity > 0:
        op = ocm_planner.plan_ocm([s.size for s in slots], [s.start for s in slots],
                                  [s.end for s in slots], [s.score for s in slots],
                                  int(ocm_capacity), OcmOpt(ocm_option), alignment=ALIGN,
                                  num_ops=num_ops)
        p.ocm_used = op.option_used
        p.ocm_score = float(op.score)
        p.ocm_per_option = {k.name: v for k, v in op.per_option_scores.items()}
        p.ocm_footprint = int(op.footprint)
        for s, off in zip(slots, op.offsets):
            if off >= 0:
                s.ocm, s.offset = True, int(off)
    elif ocm_option != OcmOpt.NONE:
        p.ocm_used = OcmOpt.NONE if ocm_option == OcmOpt.BEST_SCORE else OcmOpt(ocm_option)
    rest = [s for s in slots if not s.ocm]
    if rest:
        inst = dict(sizes=[s.size for s in rest], starts=[s.start for s in rest],
                    ends=[s.end for s in rest], alignment=ALIGN, v_ids=[s.key for s in rest])
        p.ftmp_lower_bound = int(etm_planner.lower_bound(**inst))
        no_off, p.ftmp_no_reuse = etm_planner.plan_no_reuse(**inst)
        if etm_reuse:
            d = etm_planner.plan_etm_detailed(**inst)
            offs, total, p.strategy = d.offsets, int(d.total), str(d.strategy)
        else:
            offs, total, p.strategy = no_off, int(p.ftmp_no_reuse), "no-reuse"
        p.ftmp_no_reuse = int(p.ftmp_no_reuse)
        p.ftmp_size = int(total)
        for s, off in zip(rest, offs):
            s.offset = int(off)
    p.ftmp_logic = align_up(base_logic, PAGE)
    p.ocm_logic = p.ftmp_logic + align_up(max(p.ftmp_size, 1), PAGE)
    for s in slots:
        s.new = (p.ocm_logic if s.ocm else p.ftmp_logic) + s.offset
    return p


def relocate(words: np.ndarray, moves: list[tuple[int, int, int]]) -> np.ndarray:
    """Instruction words with their addresses moved (`npu_model.lowering.relocate`): every
    operand address word inside some ``[old, old + size)`` becomes
    ``new + (addr - old)``. The `old` ranges must not overlap."""
    try:
        return _relocate(words, moves)
    except RelocationError as exc:
        raise InvalidArgumentError(str(exc)) from None


# --- user chunks shared between backends ---------------------------------------------------------

#: chunk state -> {"segment", "network", "layout", "blocks"}: who deployed into a user chunk;
#: "blocks" (WEIGHT) maps each weight block's offset to its (bytes, md5)
_CLAIMS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _state(chunk: Any) -> Any:
    return chunk.identity()


def claim(chunk: Any, segment: SegmentType, network: str,
          blocks: dict[int, tuple[int, str]] | None = None) -> None:
    """Record that `chunk` holds `segment` of `network`; raise if another backend put a
    different segment, or (WEIGHT/INSTR) another network's segment, in it. A WEIGHT chunk is
    shared with another network when `blocks` (`bundle_weights.block_map`: offset -> (bytes,
    md5) of the weight blocks this backend writes) agrees with every block already there
    wherever the two meet: the members of one `xir.Bundle`, whose blocks are laid out alike."""
    st = _state(chunk)
    c = _CLAIMS.get(st)
    if c is None:
        _CLAIMS[st] = {"segment": segment, "network": network, "layout": None,
                       "blocks": dict(blocks or {})}
        return
    if c["segment"] != segment:
        raise InvalidArgumentError(
            f"userReuseSegment: this chunk already holds the {SegmentType(c['segment']).name} "
            f"segment of another backend; it cannot also hold the {segment.name} segment")
    clash = None
    if segment == SegmentType.WEIGHT and blocks:  # the bytes where each block goes decide
        clash = _clash(c.get("blocks") or {}, blocks)
        if clash is None:
            c["blocks"].update(blocks)
            return
    if segment in (SegmentType.WEIGHT, SegmentType.INSTR) and (c["network"] != network
                                                                or clash is not None):
        share = "the same network" if segment == SegmentType.INSTR else \
            f"the same network or members of one bundle whose weight blocks agree " \
            f"({clash or 'no weight blocks to compare'})"
        raise InvalidArgumentError(
            f"userReuseSegment: the {segment.name} segment can be shared only by backends of "
            f"{share}; this chunk holds the {segment.name} segment of another network "
            f"(only FTMP may be shared between different networks)")


def _clash(have: dict[int, tuple[int, str]], new: dict[int, tuple[int, str]]) -> str | None:
    """Why weight blocks `new` cannot join the blocks `have` in one chunk, or None: a block at
    an offset already taken must be the same bytes, any other must overlap none."""
    if not have:
        return "the chunk's blocks are unknown"
    spans = sorted((off, off + n) for off, (n, _) in have.items())
    starts = [a for a, _ in spans]
    for off, (n, md5) in sorted(new.items()):
        old = have.get(off)
        if old is not None:
            if old != (n, md5):
                return f"the block at offset {off} differs"
            continue
        i = bisect.bisect_right(starts, off) - 1
        if (i >= 0 and spans[i][1] > off) or (i + 1 < len(spans) and spans[i + 1][0] < off + n):
            return f"the block at offset {off} overlaps another"
    return None


def claim_layout(chunk: Any, segment: SegmentType, layout: str) -> None:
    """The INSTR words in a shared chunk must be the same for every backend using it."""
    c = _CLAIMS.get(_state(chunk))
    if c is None:
        return
    if c["layout"] is not None and c["layout"] != layout:
        raise InvalidArgumentError(
            f"userReuseSegment: the shared {segment.name} chunk holds instructions relocated "
            f"for another deployment (ETM reuse / OCM option differ between the backends); "
            f"configure the backends that share {segment.name} alike")
    c["layout"] = layout


def reclaim(chunk: Any, network: str) -> None:
    """The network in shared chunk `chunk` has new weights (refresh.py): record its new
    fingerprint, so later backends of that network may share it and others may not, and the
    md5 of every weight block now in the chunk (read back: what a bundle member joining it
    must agree with)."""
    c = _CLAIMS.get(_state(chunk))
    if c is not None:
        c["network"] = network
        blocks = c.get("blocks") or {}
        for off, (n, _) in list(blocks.items()):
            buf = np.empty(n, np.uint8)
            chunk.read(buf, off, n)
            blocks[off] = (n, digest(buf))


def digest(*arrays: Any) -> str:
    h = hashlib.md5()
    for a in arrays:
        if isinstance(a, (bytes, str)):
            h.update(a.encode() if isinstance(a, str) else a)
        else:
            h.update(np.ascontiguousarray(a).view(np.uint8).tobytes())
    return h.hexdigest()

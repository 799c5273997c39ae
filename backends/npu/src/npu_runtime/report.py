"""What a deployed NPU backend reports about itself, from its layout and deployment:
`precheck` (the instruction and weight bytes in ETM against the network's), `deployment_report`
and `write_log` (plan, segments, MMU table and the placement of every value, as data and as a
text + JSON file in ./.icraft/logs/). Nothing here changes the deployment.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from typing import Any

import numpy as np

from .apply import Deployment
from .layout import Layout, hardops
from .settings import Settings
from .structs import SegmentType

log = logging.getLogger(__name__)


def precheck(view: Any, layout: Layout, dep: Deployment) -> list[tuple[int, str, str]]:
    """(op id, name, "instructions" | "weights") of every HardOp whose bytes in ETM differ
    from the network's (the relocated instructions for the instruction stream)."""
    failures = []
    li = layout.segments[SegmentType.INSTR]
    lw = layout.segments[SegmentType.WEIGHT]
    for op in hardops(view):
        hi = dep.hardop_info[op.op_id]
        for what, p, seg, lseg, addr in (
                ("instructions", op.instr, SegmentType.INSTR, li, hi.instr_logic_addr),
                ("weights", op.params[0] if op.params else None, SegmentType.WEIGHT, lw,
                 hi.weights_logic_addr)):
            if p is None:
                continue
            want = (dep.instr_words[op.op_id] if what == "instructions"
                    else p.data).view(np.uint8).ravel()
            got = np.empty(want.size, np.uint8)
            dep.segments[seg].single_chunk.memChunk.read(got, addr - lseg.logic_addr, want.size)
            if hashlib.md5(got.tobytes()).digest() != hashlib.md5(want.tobytes()).digest():
                log.error("precheck: %s of HardOp %d '%s' in ETM differ from the network",
                          what, op.op_id, op.name)
                failures.append((op.op_id, op.name, what))
    return failures


def deployment_report(layout: Layout, settings: Settings, dep: Deployment, backend_id: int,
                      is_fork: bool) -> dict[str, Any]:
    """The deployment as plain data (what `write_log` writes as JSON)."""
    p = dep.plan
    segs = []
    for st in SegmentType:
        ls = layout.segments[st]
        ps = dep.segments.get(st)
        segs.append({"segment": st.name, "logic_addr": ls.logic_addr,
                     "byte_size": ls.byte_size, "phy_addr": ps.phy_addr if ps else 0,
                     "user_chunk": bool(ps and (ps.single_chunk.user_used or any(
                         c.user_used for c in ps.multi_chunk.values()))),
                     "chunks": {str(k): {"phy_addr": c.memChunk.addr + dep.io_offsets.get(k, 0),
                                         "byte_size": (layout.buffers[k].byte_size
                                                       if k in dep.io_offsets
                                                       else c.memChunk.byte_size),
                                         "user": c.user_used}
                                for k, c in (ps.multi_chunk.items() if ps else [])}})
    if dep.ocm_chunk is not None:
        segs.append({"segment": "OCM", "logic_addr": p.ocm_logic,
                     "byte_size": p.ocm_footprint, "phy_addr": dep.ocm_chunk.addr,
                     "user_chunk": False, "chunks": {}})
    values = []
    for v, vi in dep.value_info.items():
        values.append({"v_id": v, "segment": vi.segment.name,
                       "memory": "OCM" if vi.is_ocm else "ETM",
                       "logic_addr": vi.logic_addr, "phy_addr": vi.phy_addr,
                       "offset": vi.logic_addr - (p.ocm_logic if vi.is_ocm else
                                                  layout.segments[vi.segment].logic_addr),
                       "byte_size": vi.byte_size, "real": vi.real,
                       "fake_from": vi.fake_from.v_id if vi.fake_from is not None else None,
                       "real_to": [r.v_id for r in vi.real_to]})
    for sl in layout.slots:
        if sl.scratch:
            values.append({"v_id": sl.key, "segment": "FTMP", "scratch": True,
                           "memory": "OCM" if sl.ocm else "ETM", "logic_addr": sl.new,
                           "phy_addr": dep.phys_of_logic(sl.new), "offset": sl.offset,
                           "byte_size": sl.size, "real": True, "fake_from": None,
                           "real_to": []})
    hardops_ = []
    for oid, hi in dep.hardop_info.items():
        hardops_.append({"op_id": oid, "instr_logic_addr": hi.instr_logic_addr,
                         "instr_phy_addr": hi.instr_phy_addr, "instr_size": hi.instr_size,
                         "weights_logic_addr": hi.weights_logic_addr,
                         "weight_phy_addr": hi.weight_phy_addr,
                         "weights_size": hi.weights_size, "sync_idx": list(hi.sync_idx),
                         "merge_from": list(hi.merge_from)})
    return {"backend_id": backend_id, "fork": is_fork,
            "merge": settings.merge, "etm_optimize": settings.etm_reuse,
            "ocm": {"option": p.ocm_used.name, "requested": p.ocm_requested.name,
                    "score": p.ocm_score, "per_option_scores": p.ocm_per_option,
                    "capacity": p.ocm_capacity, "footprint": p.ocm_footprint},
            "etm": {"ftmp_bytes": p.ftmp_size, "lower_bound": p.ftmp_lower_bound,
                    "no_reuse_bytes": p.ftmp_no_reuse,
                    "compiler_layout_bytes": p.ftmp_compiler, "strategy": p.strategy},
            "packed_io": dep.packed_io,
            "segments": segs,
            "mmu": [{"logic_addr": lo, "phy_addr": ph, "byte_size": n}
                    for lo, ph, n in dep.mmu],
            "values": values, "hardops": hardops_}


def write_log(rep: dict[str, Any], name: str, backend_id: int) -> str:
    """Write report `rep` of backend `name` (e.g. "ZG330Backend") to ./.icraft/logs/ as text
    and a .json twin; returns the text file's path."""
    base = os.path.join(os.getcwd(), ".icraft", "logs", f"{name.lower()}_{backend_id}")
    os.makedirs(os.path.dirname(base), exist_ok=True)
    e, o = rep["etm"], rep["ocm"]
    lines = [f"{name} {backend_id}: merge={rep['merge']} "
             f"etm_optimize={rep['etm_optimize']} ocmopt={o['option']}",
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

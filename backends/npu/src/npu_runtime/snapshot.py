"""An NPU backend's state in a snapshot (docs/snapshot-format.md, "ZG330 state"; the Buyi's is
the same): the declared deployment -- `Settings`, the `Layout` as planned, the `DeployPlan`, the
MMU layout and the runs -- as a JSON object plus two blobs, the WEIGHT segment image and the
INSTR segment image with the instructions already relocated.

`restore` rebuilds a `Layout`, `Settings` and `Deployment` from them on another device: it
allocates the physical segments, uploads the two images as they are, and rebuilds the MMU table
and the runs (`apply.finish`). It never calls the planners, `relocate` or the lowering; the
settings (merge, ETM reuse, the OCM option) are the dump's and stay frozen. The backend adopts
what `restore` returns; nothing here touches a backend.

State version 1 is read and written; version-1 files written before the OCM option became one
type hold the plan's options as ints, and files written before INPUT/OUTPUT packing have no
"packed_io" (false); both are read as well.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from xrt.errors import SnapshotError, UnsupportedOpError

from . import apply as stage
from . import deploy
from .checks import check_hardops
from .layout import Buffer, Layout, hardops
from .settings import Settings
from .snapshot_checks import check_state
from .structs import HardOpInfo, LogicSegment, OcmOpt, SegmentType, ValueInfo

STATE_VERSION = 1


def _image(view: Any, layout: Layout, dep: stage.Deployment, st: SegmentType) -> np.ndarray:
    """The bytes `apply` uploaded to segment `st` (WEIGHT or INSTR), zero where nothing is."""
    ls = layout.segments[st]
    img = np.zeros(ls.byte_size, np.uint8)
    for op in hardops(view):
        hi = layout.hardop_info[op.op_id]
        if st == SegmentType.WEIGHT and op.params:
            data = op.params[0].data.view(np.uint8).ravel()
            off = hi.weights_logic_addr - ls.logic_addr
        elif st == SegmentType.INSTR and op.instr is not None:
            data = dep.instr_words[op.op_id].view(np.uint8)
            off = hi.instr_logic_addr - ls.logic_addr
        else:
            continue
        img[off:off + data.size] = data
    return img


def dump(view: Any, layout: Layout, settings: Settings, dep: stage.Deployment, device: Any,
         name: str) -> tuple[dict[str, Any], dict[str, bytes]]:
    """(state, blobs) of a deployment; `name` ("ZG330Backend") goes into messages."""
    if settings.uses_user_chunks:
        raise SnapshotError(f"{name}: a backend deployed into user chunks "
                            f"(userReuseSegment / userConnectNetwork) cannot be snapshotted: "
                            f"the chunks belong to the user, not to the snapshot")
    if not settings.mmu_on:
        raise UnsupportedOpError(f"{name} snapshots need the MMU on (a snapshot's "
                                 f"instructions are relocated at restore)")
    cfg = device.config
    values = [[v_id, vi.real, vi.is_ocm, vi.is_host,
               None if vi.fake_from is None else vi.fake_from.v_id,
               [r.v_id for r in vi.real_to], vi.logic_addr, vi.byte_size, int(vi.segment)]
              for v_id, vi in layout.value_info.items()]
    hard = [[oid, hi.weights_logic_addr, hi.weights_size, hi.instr_logic_addr, hi.instr_size]
            for oid, hi in ((o, layout.hardop_info[o]) for o in layout.order)]
    state = {
        "version": STATE_VERSION,
        "settings": {"merge": settings.merge, "etm_optimize": settings.etm_reuse,
                     "ocmopt": dep.plan.ocm_used.name},
        "device": {"etm_size": int(cfg.etm_size), "ocm_size": int(cfg.ocm_size),
                   "mmu_entries": int(cfg.mmu_entries)},
        "plan": dep.plan.to_json(),
        "logic_base": int(layout.logic_base),
        "n_layers": int(layout.n_layers),
        "segments": {st.name: [ls.logic_addr, ls.byte_size]
                     for st, ls in layout.segments.items()},
        "buffers": [[x.owner, x.logic_addr, x.byte_size, list(x.members), int(x.segment)]
                    for x in layout.buffers.values()],
        "slots": [dataclasses.asdict(s) for s in layout.slots],
        "values": values,
        "hardops": hard,
        "mmu": [[lo, n] for lo, _, n in dep.mmu],
        "runs": [[list(r.op_ids), r.sid] for r in dep.runs],
        "packed_io": dep.packed_io,
    }
    return state, {"weight": _image(view, layout, dep, SegmentType.WEIGHT).tobytes(),
                   "instr": _image(view, layout, dep, SegmentType.INSTR).tobytes()}


def restore(view: Any, device: Any, state: dict[str, Any], blobs: dict[str, Any], *,
            name: str, tag: str, backend_id: int, run_key: stage.RunKey
            ) -> tuple[Layout, Settings, stage.Deployment]:
    """The layout, settings and deployment `state` describes, deployed on `device`."""
    version = state.get("version") if isinstance(state, dict) else None
    if version != STATE_VERSION or isinstance(version, bool):
        raise SnapshotError(f"{name} state version {version!r} is not "
                            f"{STATE_VERSION}: dump the snapshot again with this backend")
    hard = hardops(view)
    if len(hard) != len(view.ops):
        raise UnsupportedOpError(f"{name} snapshot: the view holds ops other than HardOps")
    check_hardops(hard, tag, getattr(getattr(view, "network", view), "source_file", None),
                  {v.v_id for v in view.inputs() + view.outputs()})
    check_state(state, view, hard, tag, name)
    order = [h[0] for h in state["hardops"]]
    if order != [op.op_id for op in hard]:
        raise SnapshotError(f"{name} snapshot: HardOps {order} were deployed, the view holds "
                            f"{[op.op_id for op in hard]}")
    cfg = device.config
    if len(state["mmu"]) > cfg.mmu_entries:
        raise SnapshotError(f"{name} snapshot needs {len(state['mmu'])} MMU entries, "
                            f"{device!r} has {cfg.mmu_entries}")
    plan = deploy.DeployPlan.from_json(state["plan"])
    s = state["settings"]
    settings = Settings(merge=bool(s["merge"]), etm_reuse=bool(s["etm_optimize"]),
                        ocm=OcmOpt[s["ocmopt"]])
    values: dict[int, Any] = {v.v_id: v for op in hard for v in op.inputs + op.outputs}
    vinfo: dict[int, ValueInfo] = {}
    for v_id, real, is_ocm, is_host, fake, real_to, la, n, sg in state["values"]:
        vinfo[v_id] = ValueInfo(value=values[v_id], real=real, is_ocm=is_ocm, is_host=is_host,
                                real_to=[values[r] for r in real_to],
                                fake_from=None if fake is None else values.get(fake),
                                logic_addr=la, byte_size=n, segment=SegmentType(sg))
    segs = {st: LogicSegment(st, logic_addr=state["segments"][st.name][0],
                             byte_size=state["segments"][st.name][1]) for st in SegmentType}
    for v_id, vi in vinfo.items():
        segs[vi.segment].info_map[v_id] = vi
    ops = {op.op_id: op for op in hard}
    hinfo: dict[int, HardOpInfo] = {}
    for oid, wla, wsz, ila, isz in state["hardops"]:
        hinfo[oid] = HardOpInfo(weights_logic_addr=wla, weights_size=wsz, instr_logic_addr=ila,
                                instr_size=isz, net_hardop=ops[oid],
                                sync_idx=(backend_id, ops[oid].layer_count))
        segs[SegmentType.WEIGHT].hardop_map[oid] = hinfo[oid]
        segs[SegmentType.INSTR].hardop_map[oid] = hinfo[oid]
    layout = Layout(tag=tag, order={oid: i for i, oid in enumerate(order)},
                    in_ids={v.v_id for v in view.inputs()},
                    buffers={o: Buffer(o, la, n, list(m), SegmentType(sg))
                             for o, la, n, m, sg in state["buffers"]},
                    value_info=dict(sorted(vinfo.items())), hardop_info=hinfo, segments=segs,
                    slots=[deploy.Slot(**d) for d in state["slots"]],
                    n_layers=int(state["n_layers"]), logic_base=int(state["logic_base"]))
    images = {}
    for key, st in (("weight", SegmentType.WEIGHT), ("instr", SegmentType.INSTR)):
        if key not in blobs:
            raise SnapshotError(f"{name} snapshot: the {key} image is missing")
        img = np.frombuffer(blobs[key], np.uint8)
        if img.size != segs[st].byte_size:
            raise SnapshotError(f"{name} snapshot: the {st.name} image has {img.size} bytes, "
                                f"the segment {segs[st].byte_size}")
        images[st] = img
    ocm_chunk = None
    if any(sl.ocm for sl in layout.slots):
        ocm_chunk = device.share.ocm_arena(device)
        if ocm_chunk is None or ocm_chunk.byte_size < plan.ocm_footprint:
            raise SnapshotError(f"{name} snapshot places {plan.ocm_footprint} bytes in the OCM; "
                                f"the OCM of {device!r} is not available for that")
    # physical segments, the two images as they are, feature maps zeroed
    segments, offsets = stage.allocate(layout, settings, device, bool(state.get("packed_io")))
    dep = stage.Deployment(plan, segments, {}, ocm_chunk, io_offsets=offsets, layout=layout)
    try:
        li = segs[SegmentType.INSTR]
        for st, img in images.items():
            if img.size:
                dep.segments[st].single_chunk.memChunk.write(0, img)
        for oid, hi in hinfo.items():
            if hi.weights_size:
                hi.weight_phy_addr = dep.segments[SegmentType.WEIGHT].phy_addr + \
                    hi.weights_logic_addr - segs[SegmentType.WEIGHT].logic_addr
            if hi.instr_size:
                off = hi.instr_logic_addr - li.logic_addr
                hi.instr_phy_addr = dep.segments[SegmentType.INSTR].phy_addr + off
                dep.instr_words[oid] = images[SegmentType.INSTR][off:off + hi.instr_size] \
                    .view(np.uint64)
        stage.zero_feature_maps(dep.segments)
        stage.finish(view, layout, settings, device, dep, backend_id, run_key)
        # consistency: the MMU layout and the runs rebuilt are the dumped ones
        mmu = [[lo, n] for lo, _, n in dep.mmu]
        runs = [[list(r.op_ids), r.sid] for r in dep.runs]
        if mmu != state["mmu"] or runs != state["runs"]:
            raise SnapshotError(f"{name} snapshot: the MMU layout or the HardOp runs rebuilt "
                                f"on restore differ from the dumped ones")
    except BaseException:
        dep.free()
        raise
    return layout, settings, dep

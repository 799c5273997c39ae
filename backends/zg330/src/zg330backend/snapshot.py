"""ZG330Backend state in a snapshot (docs/snapshot-format.md, "ZG330 state").

`dump_state` turns what `apply` computed into a JSON object plus two blobs -- the WEIGHT segment
image and the INSTR segment image with the instructions already relocated. `restore_state`
rebuilds the backend from them on another device: it allocates the physical segments, uploads
the two images as they are, and rebuilds the MMU table and the run list (`_finish_apply`). It
never calls the ETM/OCM planners, `relocate` or the lowering; the settings (merge, ETM reuse,
the OCM option as resolved) are the dump's and stay frozen.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from xrt.errors import InvalidArgumentError, SnapshotError, UnsupportedOpError

from . import deploy
from .device_state import _ocm_arena
from .layout import _Buffer, _hardops
from .structs import ForwardInfo, HardOpInfo, LogicSegment, OcmOpt, SegmentType, ValueInfo

STATE_VERSION = 1


def _image(backend: Any, st: SegmentType) -> np.ndarray:
    """The bytes `apply` uploaded to segment `st` (WEIGHT or INSTR), zero where nothing is."""
    ls = backend.logic_segment_map[st]
    img = np.zeros(ls.byte_size, np.uint8)
    for op in _hardops(backend._view):
        hi = backend.forward_info.hardop_map[op.op_id]
        if st == SegmentType.WEIGHT and op.params:
            data = op.params[0].data.view(np.uint8).ravel()
            off = hi.weights_logic_addr - ls.logic_addr
        elif st == SegmentType.INSTR and op.instr is not None:
            data = backend._instr_words[op.op_id].view(np.uint8)
            off = hi.instr_logic_addr - ls.logic_addr
        else:
            continue
        img[off:off + data.size] = data
    return img


def dump_state(b: Any) -> tuple[dict[str, Any], dict[str, bytes]]:
    """(state, blobs) of an applied ZG330Backend."""
    if b._user_segments or b._user_io or b._staged:
        raise SnapshotError("ZG330Backend: a backend deployed into user chunks "
                            "(userReuseSegment / userConnectNetwork) cannot be snapshotted: "
                            "the chunks belong to the user, not to the snapshot")
    cfg = b._device.config
    vi_out = []
    for v_id, vi in b.value_info.items():
        vi_out.append([v_id, vi.real, vi.is_ocm, vi.is_host,
                       None if vi.fake_from is None else vi.fake_from.v_id,
                       [r.v_id for r in vi.real_to], vi.logic_addr, vi.byte_size,
                       int(vi.segment)])
    hard = []
    for oid in b._order:
        hi = b.forward_info.hardop_map[oid]
        hard.append([oid, hi.weights_logic_addr, hi.weights_size, hi.instr_logic_addr,
                     hi.instr_size])
    state = {
        "version": STATE_VERSION,
        "settings": {"merge": b.is_mergeHardop, "etm_optimize": b.is_etmOptimize,
                     "ocmopt": b.ocmopt.name},
        "device": {"etm_size": int(cfg.etm_size), "ocm_size": int(cfg.ocm_size),
                   "mmu_entries": int(cfg.mmu_entries)},
        "plan": b._plan.to_json(),
        "logic_base": int(b._logic_base),
        "n_layers": int(b._n_layers),
        "segments": {st.name: [ls.logic_addr, ls.byte_size]
                     for st, ls in b.logic_segment_map.items()},
        "buffers": [[x.owner, x.logic_addr, x.byte_size, list(x.members), int(x.segment)]
                    for x in b._buffers.values()],
        "slots": [dataclasses.asdict(s) for s in b._slots],
        "values": vi_out,
        "hardops": hard,
        "mmu": [[lo, n] for lo, _, n in b._mmu],
        "runs": [[list(r.op_ids), r.sid] for r in b._runs],
    }
    return state, {"weight": _image(b, SegmentType.WEIGHT).tobytes(),
                   "instr": _image(b, SegmentType.INSTR).tobytes()}


def restore_state(b: Any, view: Any, device: Any, state: dict[str, Any],
                  blobs: dict[str, Any]) -> None:
    """Make `b` (fresh from `ZG330Backend.Init()`) the applied backend `state` describes."""
    from .device import ZG330Device

    if not isinstance(device, ZG330Device):
        raise InvalidArgumentError(f"ZG330Backend needs a ZG330 device "
                                   f"(Device.Open('sim://zg330')), got {device!r}")
    if state.get("version") != STATE_VERSION:
        raise SnapshotError(f"ZG330Backend state version {state.get('version')!r} is not "
                            f"{STATE_VERSION}: dump the snapshot again with this backend")
    hard = _hardops(view)
    if len(hard) != len(view.ops):
        raise UnsupportedOpError("ZG330Backend snapshot: the view holds ops other than HardOps")
    order = [h[0] for h in state["hardops"]]
    if order != [op.op_id for op in hard]:
        raise SnapshotError(f"ZG330Backend snapshot: HardOps {order} were deployed, the view "
                            f"holds {[op.op_id for op in hard]}")
    cfg = device.config
    plan = deploy.DeployPlan(**state["plan"])
    if len(state["mmu"]) > cfg.mmu_entries:
        raise SnapshotError(f"ZG330Backend snapshot needs {len(state['mmu'])} MMU entries, "
                            f"{device!r} has {cfg.mmu_entries}")
    b._view, b._device = view, device
    s = state["settings"]
    b.is_mergeHardop, b.is_etmOptimize = bool(s["merge"]), bool(s["etm_optimize"])
    b.ocmopt = OcmOpt[s["ocmopt"]]
    b._plan = plan
    b._logic_base = int(state["logic_base"])
    b._n_layers = int(state["n_layers"])
    b._order = {oid: i for i, oid in enumerate(order)}
    b._in_ids = {v.v_id for v in view.inputs()}
    b._slots = [deploy.Slot(**d) for d in state["slots"]]
    b._buffers = {o: _Buffer(o, la, n, list(m), SegmentType(sg))
                  for o, la, n, m, sg in state["buffers"]}
    values: dict[int, Any] = {}
    for op in hard:
        for v in op.inputs + op.outputs:
            values[v.v_id] = v
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
    hinfo: dict[int, HardOpInfo] = {}
    ops = {op.op_id: op for op in hard}
    for oid, wla, wsz, ila, isz in state["hardops"]:
        hi = HardOpInfo(weights_logic_addr=wla, weights_size=wsz, instr_logic_addr=ila,
                        instr_size=isz, net_hardop=ops[oid],
                        sync_idx=(b.zg330backend_id, ops[oid].layer_count))
        hinfo[oid] = hi
        segs[SegmentType.WEIGHT].hardop_map[oid] = hi
        segs[SegmentType.INSTR].hardop_map[oid] = hi
    b.logic_segment_map = segs
    b.value_info = dict(sorted(vinfo.items()))
    b.forward_info = ForwardInfo(value_map=dict(vinfo), hardop_map=dict(hinfo),
                                 idx_map={oid: (b.zg330backend_id, ops[oid].layer_count)
                                          for oid in order})
    images = {}
    for name, st in (("weight", SegmentType.WEIGHT), ("instr", SegmentType.INSTR)):
        img = np.frombuffer(blobs[name], np.uint8)
        if img.size != segs[st].byte_size:
            raise SnapshotError(f"ZG330Backend snapshot: the {st.name} image has {img.size} "
                                f"bytes, the segment {segs[st].byte_size}")
        images[st] = img
    if any(sl.ocm for sl in b._slots):
        arena = _ocm_arena(device)
        if arena is None or arena.byte_size < plan.ocm_footprint:
            raise SnapshotError(f"ZG330Backend snapshot places {plan.ocm_footprint} bytes in "
                                f"the OCM; the OCM of {device!r} is not available for that")
    # physical segments, the two images as they are, feature maps zeroed
    b._allocate()
    try:
        li = segs[SegmentType.INSTR]
        b._instr_words = {}
        for st, img in images.items():
            ps = b.phy_segment_map[st]
            if img.size:
                ps.single_chunk.memChunk.write(0, img)
        for oid, hi in hinfo.items():
            if hi.weights_size:
                hi.weight_phy_addr = b.phy_segment_map[SegmentType.WEIGHT].phy_addr + \
                    hi.weights_logic_addr - segs[SegmentType.WEIGHT].logic_addr
            if hi.instr_size:
                off = hi.instr_logic_addr - li.logic_addr
                hi.instr_phy_addr = b.phy_segment_map[SegmentType.INSTR].phy_addr + off
                b._instr_words[oid] = images[SegmentType.INSTR][off:off + hi.instr_size] \
                    .view(np.uint64)
        b._zero_feature_maps()
        b._finish_apply()
        # consistency: the MMU layout and the runs rebuilt are the dumped ones
        mmu = [[lo, n] for lo, _, n in b._mmu]
        runs = [[list(r.op_ids), r.sid] for r in b._runs]
        if mmu != state["mmu"] or runs != state["runs"]:
            raise SnapshotError("ZG330Backend snapshot: the MMU layout or the HardOp runs "
                                "rebuilt on restore differ from the dumped ones")
    except BaseException:
        b.deinit()
        raise
    b._snapshot = True

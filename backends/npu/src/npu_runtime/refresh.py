"""New weights for a deployed network without re-apply: the device half of a refit (issue 29,
point 5; docs/memory-and-weights.md, "Weights refreshed on the device").

`refresh_weights(backend, source)` takes `source`, a network lowered for the same chip from the
same graph -- the same HardOps (ids, names, targets) with the same instruction streams, only
their weight blocks (`op.params[0]`: packed weights, biases and requantization words) differ --
and rewrites the deployment's WEIGHT segment in place: no planning, relocation or allocation,
the INSTR segment untouched. It is all or nothing:

- every HardOp is checked first (present in `source`, same instructions, a weight block of the
  same dtype and size); the first that is not raises `InvalidArgumentError` naming it, and
  nothing on the device or in the network changes;
- the writes happen under the device's forward lock, so a forward in another thread runs
  wholly before or wholly after them: it sees the old weights or the new, never a mix. A
  forward paused in the calling thread (`Session.stepTo`) would see a mix: refused
  (`CallOrderError`);
- afterwards the network object the backend was created from holds the new weight blocks
  (`Params.setData`), so `precheck`, `save` and snapshots agree with the chip. Forks share
  the WEIGHT chunk and the network: they see the new weights too. A WEIGHT chunk shared
  through `userReuseSegment` is refreshed for every backend pinned to it, which must all be
  bound to the same network object (else refused: the others would hold stale parameters).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xrt.errors import CallOrderError, InvalidArgumentError

from . import deploy
from .layout import hardops
from .structs import SegmentType


def refresh_weights(backend: Any, source: Any) -> dict[str, Any]:
    """Rewrite `backend`'s WEIGHT segment with `source`'s HardOp weight blocks; returns
    {"hardops": HardOps whose weights changed, "bytes": bytes written}."""
    name = type(backend).__name__
    view = backend._view
    dep = backend.deployment
    src_ops = {op.op_id: op for op in getattr(source, "ops", None) or ()}
    if not src_ops:
        raise InvalidArgumentError(f"{name}.refreshWeights: the source must be a network "
                                   f"lowered for {backend.chip.kind}, got {source!r}")
    lw = dep.layout.segments[SegmentType.WEIGHT]
    writes: list[tuple[Any, Any, int, np.ndarray]] = []
    for op in hardops(view):
        new = src_ops.get(op.op_id)
        where = f"HardOp {op.op_id} '{op.name}'"
        if new is None or new.op_type != "HardOp" or new.name != op.name:
            raise InvalidArgumentError(f"{name}.refreshWeights: {where} is not in the source "
                                       f"network (a network lowered from another graph?)")
        if new.compile_target != op.compile_target:
            raise InvalidArgumentError(f"{name}.refreshWeights: {where} of the source was "
                                       f"compiled for {new.compile_target}, not "
                                       f"{op.compile_target}")
        if (op.instr is None) != (new.instr is None) or (
                op.instr is not None and not np.array_equal(op.instr.data, new.instr.data)):
            raise InvalidArgumentError(
                f"{name}.refreshWeights: the instructions of {where} differ in the source "
                f"(other activation scales or shifts): its weights cannot be refreshed "
                f"alone; deploy the source network (Session.Create ... apply)")
        if not op.params:
            continue
        if not new.params or not new.params[0].hasData():
            raise InvalidArgumentError(f"{name}.refreshWeights: {where} of the source has no "
                                       f"weight data (load its raw first)")
        old_p, new_d = op.params[0], np.asarray(new.params[0].data)
        if new_d.dtype != old_p.data.dtype or new_d.shape != old_p.data.shape:
            raise InvalidArgumentError(
                f"{name}.refreshWeights: the weight block of {where} is {new_d.dtype}"
                f"{list(new_d.shape)} in the source, {old_p.data.dtype}"
                f"{list(old_p.data.shape)} deployed")
        if not np.array_equal(new_d, old_p.data):
            off = dep.hardop_info[op.op_id].weights_logic_addr - lw.logic_addr
            writes.append((op, old_p, off, np.ascontiguousarray(new_d)))
    chunk = dep.segments[SegmentType.WEIGHT].single_chunk.memChunk
    sharers = _sharers(backend, chunk)
    lock = backend._device.share.lock
    if lock._is_owned():  # this thread is inside a forward (paused between HardOps)
        raise CallOrderError(f"{name}.refreshWeights: a forward on this device is paused in "
                             f"this thread (Session.stepTo); finish it first, or it would "
                             f"run with old and new weights mixed")
    nbytes = 0
    with lock:  # forwards in other threads: wholly before or wholly after
        for _op, _params, off, data in writes:
            chunk.write(off, data.view(np.uint8).ravel())
            nbytes += data.nbytes
        for _op, params, _, data in writes:
            params.setData(data.copy())
        for b in sharers:
            b.invalidate_fingerprint()
        for st in (SegmentType.WEIGHT, SegmentType.INSTR):  # user chunks: "same network" now
            ci = dep.segments[st].single_chunk                # means the new weights
            if ci.user_used:
                deploy.reclaim(ci.memChunk, backend.fingerprint())
    return {"hardops": [op.op_id for op, *_ in writes], "bytes": nbytes}


def _sharers(backend: Any, chunk: Any) -> list[Any]:
    """The backends whose deployments read `chunk` as their WEIGHT segment (this one, and the
    others pinned to a user chunk); refused if one is bound to another network object."""
    out = [backend]
    if not backend.deployment.segments[SegmentType.WEIGHT].single_chunk.user_used:
        return out
    net = backend._view.network
    for other in chunk.holders():
        if other is backend or getattr(other, "_view", None) is None:
            continue
        if other._view.network is not net:
            raise InvalidArgumentError(
                f"{type(backend).__name__}.refreshWeights: the WEIGHT chunk is shared with "
                f"{other._pin_label()}, created from another network object; it would keep "
                f"stale parameters. Create the sessions that share weights from one network "
                f"object")
        out.append(other)
    return out

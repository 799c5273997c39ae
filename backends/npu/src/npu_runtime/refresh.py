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
  through `userReuseSegment` is refreshed for every backend pinned to it, each of which must
  hold the very Params objects written (the same network object, or a bundle member sharing
  the Params): else refused, since it would keep stale parameters.

`refit_prepare(backend, plan)` is the device half of `Session.refitWeights` (a plan of
`xcompile.refit`): each HardOp whose first origin op is a refitted layer gets its weight block
packed again by the target's lowering rule (`npu_model.lowering`: weights, biases and the
requantization words recomputed from the frozen scales) over a copy of the deployed block, and
the result is written as `refresh_weights` writes. No instruction is emitted again: a layer's
instructions depend on addresses, geometry and its output clip, which a refit keeps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from xir.errors import XirError
from xrt.errors import CallOrderError, InvalidArgumentError

from . import deploy
from .layout import hardops
from .structs import SegmentType

_Write = tuple[Any, Any, int, np.ndarray]  # (HardOp, its weight Params, offset, new block)


def refresh_weights(backend: Any, source: Any) -> dict[str, Any]:
    """Rewrite `backend`'s WEIGHT segment with `source`'s HardOp weight blocks; returns
    {"hardops": HardOps whose weights changed, "bytes": bytes written}."""
    return _commit(backend, _source_writes(backend, source), "refreshWeights")


def _source_writes(backend: Any, source: Any) -> list[_Write]:
    """The writes that bring `source`'s weight blocks to the device, every HardOp checked."""
    name = type(backend).__name__
    view = backend._view
    src_ops = {op.op_id: op for op in getattr(source, "ops", None) or ()}
    if not src_ops:
        raise InvalidArgumentError(f"{name}.refreshWeights: the source must be a network "
                                   f"lowered for {backend.chip.kind}, got {source!r}")
    blocks: dict[int, np.ndarray] = {}
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
        blocks[op.op_id] = new_d
    return _writes(backend, blocks)


def _writes(backend: Any, blocks: dict[int, np.ndarray]) -> list[_Write]:
    """The writes of the blocks that differ from the deployed ones (HardOp id -> new block of
    the deployed block's dtype and shape)."""
    dep = backend.deployment
    lw = dep.layout.segments[SegmentType.WEIGHT]
    writes: list[_Write] = []
    for op in hardops(backend._view):
        new_d = blocks.get(op.op_id)
        if new_d is None:
            continue
        old_p = op.params[0]
        if not np.array_equal(new_d, old_p.data):
            off = dep.hardop_info[op.op_id].weights_logic_addr - lw.logic_addr
            writes.append((op, old_p, off, np.ascontiguousarray(new_d)))
    return writes


def _not_paused(backend: Any, what: str) -> Any:
    """The device's forward lock, refused when this thread holds it (a paused forward)."""
    lock = backend._device.share.lock
    if lock._is_owned():  # this thread is inside a forward (paused between HardOps)
        raise CallOrderError(f"{type(backend).__name__}.{what}: a forward on this device is "
                             f"paused in this thread (Session.stepTo); finish it first, or it "
                             f"would run with old and new weights mixed")
    return lock


def _commit(backend: Any, writes: list[_Write], what: str) -> dict[str, Any]:
    """Write `writes` under the device's forward lock: all of them, before or after any
    forward of another thread; the network's Params follow."""
    dep = backend.deployment
    chunk = dep.segments[SegmentType.WEIGHT].single_chunk.memChunk
    sharers = _sharers(backend, chunk, writes)
    lock = _not_paused(backend, what)
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


def _sharers(backend: Any, chunk: Any, writes: list[_Write]) -> list[Any]:
    """The backends whose deployments read `chunk` as their WEIGHT segment (this one, and the
    others pinned to a user chunk). Each must hold the very Params objects written -- bound to
    the same network object, or a bundle member whose HardOps share those Params -- so that it
    sees the new parameters; one that does not is refused (it would keep stale ones)."""
    out = [backend]
    if not backend.deployment.segments[SegmentType.WEIGHT].single_chunk.user_used:
        return out
    net = backend._view.network
    for other in chunk.holders():
        if other is backend or getattr(other, "_view", None) is None:
            continue
        if other._view.network is not net:
            held = {id(op.params[0]) for op in hardops(other._view) if op.params}
            stale = next((op for op, params, _, _ in writes if id(params) not in held), None)
            if stale is not None:
                raise InvalidArgumentError(
                    f"{type(backend).__name__}.refreshWeights: the WEIGHT chunk is shared with "
                    f"{other._pin_label()}, created from another network object that does "
                    f"not hold the weight Params of HardOp {stale.op_id} '{stale.name}'; it "
                    f"would keep stale parameters. "
                    f"Create the sessions that share weights from one network object (or one "
                    f"bundle)")
        out.append(other)
    return out


def refit_prepare(backend: Any, plan: Any) -> Callable[[], None]:
    """The device half of a refit: check every HardOp that `plan` (`xcompile.refit`) touches
    and pack its new weight block; returns the function that writes them (nothing is
    written before). A layer fused behind another op of its HardOp, a rule that refuses the
    new parameters (a requantization shift or bias beyond the hardware's range) or a block
    of another size raise `InvalidArgumentError` naming the layer and its initializers."""
    from npu_model.lowering.common import ETM_ALIGN, align
    from npu_model.lowering.layers import NotLowerable
    from npu_model.lowering.lower import ALL_RULES

    name = type(backend).__name__
    cfg = backend.chip.target.npu
    blocks: dict[int, np.ndarray] = {}
    for op in hardops(backend._view):
        ids = [int(i) for i in (op.origin_ops_id or [op.op_id])]
        hit = [i for i in ids if i in plan.layers]
        if not hit:
            continue
        layer = plan.layers[hit[0]]
        where = (f"layer '{layer.op.name}' (op {hit[0]}; {', '.join(layer.names)}) in HardOp "
                 f"{op.op_id} '{op.name}'")
        if hit != ids[:1] or not op.params:
            raise InvalidArgumentError(f"{name}.refitWeights: {where}: the layer is not the "
                                       f"first op of its HardOp; its weights cannot be packed "
                                       f"alone: recompile")
        rule = ALL_RULES.get(layer.op.op_type)
        try:
            if rule is None:
                raise NotLowerable(f"no lowering rule for {layer.op.op_type}")
            consts = rule(layer.op, cfg).consts
        except (NotLowerable, ValueError, XirError) as exc:
            raise InvalidArgumentError(f"{name}.refitWeights: {where}: the new parameters "
                                       f"cannot be packed for {backend.chip.kind}: {exc}"
                                       ) from exc
        blob = np.array(op.params[0].data, dtype=np.uint8).reshape(-1)
        off = 0
        for c in consts:
            c = np.ascontiguousarray(c)
            c = (c if c.dtype == np.uint8 else c.view(np.uint8)).reshape(-1)
            if off + c.nbytes > blob.nbytes:
                raise InvalidArgumentError(f"{name}.refitWeights: {where}: the packed weights "
                                           f"outgrow the deployed block ({blob.nbytes} bytes)")
            blob[off:off + c.nbytes] = c
            off = align(off + c.nbytes, ETM_ALIGN)
        blocks[op.op_id] = blob.reshape(np.asarray(op.params[0].data).shape)
    _not_paused(backend, "refitWeights")
    writes = _writes(backend, blocks)
    chunk = backend.deployment.segments[SegmentType.WEIGHT].single_chunk.memChunk
    _sharers(backend, chunk, writes)  # refused now, not half-way

    def commit() -> None:
        done = _commit(backend, writes, "refitWeights")
        plan.report.hardops += done["hardops"]
        plan.report.bytes += done["bytes"]

    return commit

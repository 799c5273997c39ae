"""Forward of a deployed NPU backend: a `Forwarder` runs a `Deployment`.

It takes the device lock for the whole forward, binds the caller's tensors to the INPUT buffers
(zero copy by pointing the buffer's MMU entry at the tensor, else a copy, or a staged channel
window for a user-connected value), runs each HardOp's icoreCalc run once per forward, reads
the profiler records and returns tensors over the results in ETM or OCM (or the caller's output
tensors, mapped or copied into). A buffer whose address is fixed -- every buffer with the MMU off
(the instructions hold physical addresses), a packed INPUT/OUTPUT buffer (its MMU entry maps a
whole group) -- is copied into instead of being mapped.

Two ways in: `forward_hardop`, one HardOp per call (the session's per-op path, with per-op
times for its profile, callbacks and stepTo), and `forward_segment`, a run of consecutive
HardOps in one call (the session's plain forward: one call per chip segment). The segment path
runs the same runs on the same device memory in the same order -- bind the INPUT buffers, one
icoreCalc per run on the instructions in simulated ETM -- from a plan compiled once per
segment (`_Segment`: run positions, fed values, result places, staged values), which lives as
long as this forwarder, that is as long as its deployment: apply, a fork and a snapshot restore
make a new forwarder, and a weight refresh rewrites the WEIGHT segment in place, which changes
none of the runs, INPUT/OUTPUT bindings or result places a plan holds.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from npu_model.core import PROFILE_RECORD
from xir.types import TensorType
from xrt.device import HostDevice
from xrt.errors import CallOrderError, TensorError, XrtError
from xrt.tensor import Tensor

from .apply import Deployment, Run
from .layout import Buffer, Layout
from .settings import Settings
from .structs import SegmentType

#: columns of a profiler record (`npu_model.core.PROFILE_RECORD`, all uint64 words)
_TAG, _MACS, _CYCLES, _ETM_RD, _ETM_WR, _OCM_RD, _OCM_WR = (
    PROFILE_RECORD.names.index(f) for f in ("tag", "macs", "cycles", "etm_rd", "etm_wr",
                                           "ocm_rd", "ocm_wr"))


#: summaries of profiler records kept per forwarder (one per chip run of a forward is enough)
_MAX_CACHED = 256


class ChipSteps:
    """The steps of a forward a chip may change. The backend passes itself with every call --
    these steps and its `setTimeElapses` -- so the forwarder keeps no reference to it and
    dropping a backend frees it at once."""

    def before_run(self, run: Run) -> None:
        """Called before each icoreCalc (the Buyi sets the NPU's data type)."""

    def result_tensor(self, t: Tensor, is_ocm: bool) -> Tensor:
        """The tensor handed out for a result (the Buyi's OCM tensors cannot be read)."""
        return t


@dataclass
class _Segment:
    """The compiled plan of a chip segment (`Forwarder.forward_segment`)."""

    #: per HardOp that does something: (position in the run order, the HardOp, its run --
    #: None where an earlier HardOp of the segment starts that run --, its values fed from
    #: INPUT buffers)
    steps: list[tuple[int, Any, Run | None, tuple[Any, ...]]]
    #: the values handed back, in the order asked
    outs: list[Any]
    #: results staged into the user's chunk (`userConnectNetwork`): (value, chunk)
    staged: list[tuple[Any, Any]]
    #: whether the segment holds the view's last HardOp (the device is released after it)
    ends: bool
    #: the run-order position of its last HardOp
    last_pos: int


class Forwarder:
    """Runs the HardOps of one deployment; one per backend (a fork has its own)."""

    def __init__(self, layout: Layout, settings: Settings, dep: Deployment, device: Any,
                 is_fork: bool = False) -> None:
        self.layout, self.settings, self.dep, self.device = layout, settings, dep, device
        self.is_fork = is_fork
        self.holding = False
        self.done: set[int] = set()
        self.last_pos = -1
        #: buffer owner -> (physical address, chunk, offset) it is bound to now
        self.bound: dict[int, tuple[int, Any, int]] = {}
        #: per run of the last forward: (HardOp ids, their summed cycles, MACs, ETM bytes, OCM
        #: bytes as columns, peak MACs per cycle); `profile` adds them up when asked
        self._prof_runs: list[tuple[np.ndarray, np.ndarray, int]] = []
        #: a run's profiler records (bytes, peak) -> their per-HardOp sums: a replayed run
        #: writes the same records, summed once
        self._prof_sums: dict[tuple[bytes, int], tuple[np.ndarray, np.ndarray, int]] = {}
        #: (records summary, run ms, cycles) -> the HardOps' ms of the merged run (`_layer_ms`)
        self._layer_ms_of: dict[tuple[int, float, int], dict[int, float]] = {}
        #: op id -> simulated ms of the HardOps of a merged run, reported as each is forwarded
        self.pending_ms: dict[int, float] = {}
        #: the device's MMU generation right after this backend programmed the MMU
        self._mmu_generation: int | None = None
        #: op id -> (run position, run, inputs in INPUT buffers) of a HardOp (`_step_of`)
        self._steps: dict[int, tuple[int, Run, tuple[int, ...]]] = {}
        #: v_id -> where its results lie (`_place_of`), made on first use
        self._places: dict[int, tuple[TensorType, Any, int, bool, int]] = {}
        #: v_id of a value fed from an INPUT buffer -> what binding it needs that only the
        #: deployment decides (`_feed_of`), made on first use
        self._feeds: dict[int, tuple[Any, ...]] = {}
        #: buffer owner -> (chunk, offset) a result tensor over it was last made at, its type
        #: checked to fit there (`tensor_of`; `bound` holds those chunks too)
        self._fits: dict[int, tuple[Any, int]] = {}
        #: every INPUT/OUTPUT buffer with its own chunk, offset and address (`restore_io`)
        self._io_own = [(self.layout.buffers[owner], ci.memChunk,
                         dep.io_offsets.get(owner, 0))
                        for st in (SegmentType.INPUT, SegmentType.OUTPUT)
                        for owner, ci in dep.segments[st].multi_chunk.items()]
        self._io_own = [(b, c, off, c.addr + off) for b, c, off in self._io_own]
        #: (HardOps, wanted v_ids) -> the compiled plan of that chip segment
        self._segments: dict[tuple[tuple[Any, ...], tuple[int, ...]], _Segment] = {}
        #: device state read once per `forward_segment` call and reused by its runs (None
        #: outside one): no user code runs between the runs of one call, so the MMU mode,
        #: the enabled MPEs, the profiler area and the data type a chip step set stay what
        #: they were ("mmu", "rows_cols", "area", and the chip's own keys); and the profiler
        #: records of its runs are read once, after the last ("prof_base": the layer count
        #: before the first, `_flush_profile`). A socket device saves requests on each.
        self.run_cache: dict[str, Any] | None = None
        self.restore_io()

    # --- one HardOp ------------------------------------------------------------------------------
    def forward_hardop(self, op: Any, inputs: list[Tensor], outputs: list[Tensor],
                       steps: ChipSteps) -> list[Tensor]:
        """Run one HardOp (its whole merged run the first time). The device is held from the
        first HardOp of a forward to the last (its OCM maps and MMU table are this backend's
        meanwhile): forwards of backends in other threads wait."""
        order = self.layout.order
        if not self.holding:
            self.device.share.lock.acquire()
            self.holding = True
        try:
            res = self._forward_locked(op, inputs, outputs, steps)
        except BaseException:
            self.release()
            raise
        if order[op.op_id] == len(order) - 1:
            self.release()
        return res

    # --- one chip segment ------------------------------------------------------------------------
    def forward_segment(self, ops: tuple[Any, ...], feeds: dict[int, Tensor],
                        wanted: tuple[int, ...], steps: ChipSteps) -> list[Tensor]:
        """Run the HardOps `ops` (consecutive in the view, in its order) in one call: bind each
        one's INPUT buffers from `feeds` (v_id -> tensor), execute each of their runs once,
        stage the user-connected results and return tensors over the values `wanted` (v_ids).
        The device is held as by `forward_hardop` (from the first HardOp of a forward to the
        last). No per-op times are recorded (the session's plain forward reads none); the
        profiler's records are collected as on the per-op path (`profile`)."""
        key = (ops, wanted)
        seg = self._segments.get(key)
        if seg is None:
            seg = self._segments[key] = self._segment_of(ops, wanted)
        if not self.holding:
            self.device.share.lock.acquire()
            self.holding = True
        self.run_cache = {}
        try:
            for pos, op, run, fed in seg.steps:
                if pos <= self.last_pos or not self.done:
                    self._start_forward()
                self.last_pos = pos
                for v in fed:
                    t = feeds.get(v.v_id)
                    if t is None:
                        raise TensorError(f"HardOp {op.op_id} input v_id {v.v_id} ('{v.name}') "
                                          f"was not fed")
                    self._bind_input(op, v, t)
                if run is not None and op.op_id not in self.done:
                    self.pending_ms = {}
                    self._execute(run, steps, timed=False)
                    self.done.update(run.op_ids)
            self._flush_profile()
            self.last_pos = seg.last_pos  # where the per-op path leaves it
            staged = {v.v_id: self._stage(v, chunk, to_user=True) for v, chunk in seg.staged}
            results = [staged[v.v_id] if v.v_id in staged else self.tensor_of(v, steps)
                       for v in seg.outs] if staged else \
                [self.tensor_of(v, steps) for v in seg.outs]
        except BaseException:
            # the records of the runs that ran, as the per-op path keeps them; the run's
            # own error is the one raised
            with contextlib.suppress(Exception):
                self._flush_profile()
            self.release()
            raise
        finally:
            self.run_cache = None
        if seg.ends:
            self.release()
        return results

    def _segment_of(self, ops: tuple[Any, ...], wanted: tuple[int, ...]) -> _Segment:
        """The compiled plan of a chip segment: what `forward_segment` needs that only the
        deployment decides."""
        if not ops:
            raise XrtError("forwardSegment: a chip segment holds at least one HardOp")
        order = self.layout.order
        every = []
        for op in ops:
            if op.op_id not in order:
                raise XrtError(f"HardOp {op.op_id} is not in this backend's network view")
            step = self._steps.get(op.op_id)
            if step is None:
                step = self._steps[op.op_id] = self._step_of(op)
            pos, run, fed = step
            every.append((pos, op, run, tuple(op.inputs[k] for k in fed)))
        poses = [st[0] for st in every]
        steps = every
        if all(a < b for a, b in zip(poses, poses[1:])):
            # in run order (as a session's view has them): only the HardOps that bind an input
            # or come first of their run in this segment do anything -- the others' runs ran
            steps, seen = [], set()
            for pos, op, run, fed in every:
                first = id(run) not in seen
                seen.add(id(run))
                if fed or first:
                    steps.append((pos, op, run if first else None, fed))
        produced = {v.v_id: v for op in ops for v in op.outputs}
        missing = [vid for vid in wanted if vid not in produced]
        if missing:
            raise XrtError(f"values {missing} are outputs of none of HardOps "
                           f"{[op.op_id for op in ops]}")
        staged = self.settings.staged if not self.is_fork else {}
        return _Segment(steps=steps, outs=[produced[vid] for vid in wanted],
                        staged=[(v, staged[vid]) for vid, v in produced.items() if vid in staged],
                        ends=any(order[op.op_id] == len(order) - 1 for op in ops),
                        last_pos=poses[-1])

    def release(self) -> None:
        if self.holding:
            self.holding = False
            self.device.share.lock.release()

    def _forward_locked(self, op: Any, inputs: list[Tensor], outputs: list[Tensor],
                        steps: ChipSteps) -> list[Tensor]:
        step = self._steps.get(op.op_id)
        if step is None:
            step = self._steps[op.op_id] = self._step_of(op)
        pos, run, fed = step
        if pos <= self.last_pos or not self.done:
            self._start_forward()
        self.last_pos = pos
        memcpy_ms = 0.0
        if len(inputs) != len(op.inputs):
            raise TensorError(f"HardOp {op.op_id} takes {len(op.inputs)} inputs, got "
                              f"{len(inputs)}")
        for k in fed:
            memcpy_ms += self._bind_input(op, op.inputs[k], inputs[k])
        first = op.op_id not in self.done
        user = list(outputs or [])
        user_mapped = first and bool(user) and run.op_ids[0] == op.op_id
        if user_mapped:
            mapped = [self._map_user_output(v, t) for v, t in zip(op.outputs, user)]
            user_mapped = all(m is not False for m in mapped)
        if first:
            t0 = time.perf_counter()
            run_ms = self._execute(run, steps)
            sim_ms = (time.perf_counter() - t0) * 1e3
            self.done.update(run.op_ids)
            if run.sid != op.op_id:
                # a merged run: each HardOp's row gets its own simulated time (its layers'
                # cycles at the run's clock); the run's row the launch overhead and the host
                # time its simulation took
                self.pending_ms = self._layer_ms(run, run_ms)
                overhead = run_ms - sum(self.pending_ms.values())
                steps.setTimeElapses(run.sid, 0.0, max(0.0, overhead), host_ms=sim_ms)
            else:
                self.pending_ms = {op.op_id: run_ms}
        hard_ms = self.pending_ms.pop(op.op_id, 0.0)
        staged = self.settings.staged
        results = []
        for k, v in enumerate(op.outputs):
            t = self.tensor_of(v, steps)
            if v.v_id in staged and not self.is_fork:
                t0 = time.perf_counter()
                t = self._stage(v, staged[v.v_id], to_user=True)
                memcpy_ms += (time.perf_counter() - t0) * 1e3
            if k < len(user) and not user_mapped:
                t0 = time.perf_counter()
                user[k].copyFrom(0, t, 0, min(t.dtype().storageBytes(),
                                              user[k].dtype().storageBytes()))
                memcpy_ms += (time.perf_counter() - t0) * 1e3
                t = user[k]
            elif k < len(user):
                t = user[k]
            results.append(t)
        steps.setTimeElapses(op.op_id, memcpy_ms, hard_ms)
        return results

    def _step_of(self, op: Any) -> tuple[int, Run, tuple[int, ...]]:
        """(position in the run order, its run, the inputs bound to INPUT buffers) of HardOp
        `op`; the others were produced on the NPU by this backend and lie where they are."""
        lay = self.layout
        fed = tuple(k for k, v in enumerate(op.inputs)
                    if v.v_id in lay.in_ids and lay.buffer_of(v).segment == SegmentType.INPUT)
        return lay.order[op.op_id], self.dep.runs[self.dep.run_of[op.op_id]], fed

    def _start_forward(self) -> None:
        dev = self.device
        if self.run_cache:
            self.run_cache.clear()  # a fast reset and perhaps a new profiler area follow
        self.done = set()
        self._prof_runs = []
        self.restore_io()
        if not dev.mock:
            dev.reset(1)
        prof = self.dep.prof_chunk
        if prof is not None:
            area = dev.profiler_area()
            if area != (prof.addr, prof.byte_size):
                # (a fast reset keeps the profiler's registers: configured again only when
                # another backend pointed them elsewhere; each forward rewrites its records
                # slot by slot)
                dev.config_profiler(prof)
                area = dev.profiler_area()
            if self.run_cache is not None:  # a chip segment: its records are read from there
                self.run_cache["area"] = area

    # --- binding ---------------------------------------------------------------------------------
    def restore_io(self) -> None:
        """Bind every INPUT/OUTPUT buffer to its own chunk."""
        for b, chunk, offset, phys in self._io_own:
            self._bind(b, chunk, offset, phys)

    def _own(self, b: Buffer) -> tuple[Any, int]:
        """The chunk and offset the deployment gave buffer `b`."""
        return (self.dep.segments[b.segment].multi_chunk[b.owner].memChunk,
                self.dep.io_offsets.get(b.owner, 0))

    def _fixed(self, b: Buffer) -> bool:
        """Whether `b`'s address is fixed (MMU off, or packed): bind by copying."""
        return not self.settings.mmu_on or b.owner in self.dep.io_offsets

    def _feed_of(self, v: Any) -> tuple[Any, ...]:
        """(buffer, its own chunk, offset and address, the value's first byte there, its
        bytes, its type, shape and numpy dtype, whether it is the whole buffer) of a value fed
        from an INPUT buffer: the deployment's, so made once."""
        feed = self._feeds.get(v.v_id)
        if feed is None:
            lay = self.layout
            b = lay.buffer_of(v)
            own, own_off = self._own(b)
            w = lay.window(v)
            want = v.dtype
            nbytes = want.storageBytes()
            feed = self._feeds[v.v_id] = (
                b, own, own_off, own.addr + own_off,
                own_off + w["c_off"] * (2 if w["dtype"] == "int16" else 1),
                nbytes, want, tuple(want.shape), want.numpy_dtype,
                v.v_id == b.owner and nbytes == b.byte_size)
        return feed

    def _bind_input(self, op: Any, v: Any, t: Tensor) -> float:
        """Bind input `v` (one in an INPUT buffer, `_step_of`) to tensor `t`: map or copy."""
        b, own, own_off, own_phys, at, nbytes, want, shape, npdt, whole = self._feed_of(v)
        staged = self.settings.staged
        if staged and v.v_id in staged and not self.is_fork:
            self._bind(b, own, own_off)
            t0 = time.perf_counter()
            src = staged[v.v_id]
            if not (t.isOn(self.device.defaultMemRegion()) and t.chunk() == src
                    and t.offset() == 0):
                src.copyFrom(0, t.chunk(), t.offset(), v.storageBytes())
            self._stage(v, src, to_user=False)
            return (time.perf_counter() - t0) * 1e3
        got = t.dtype()
        if got is not want and (tuple(got.shape) != shape or got.numpy_dtype != npdt):
            raise TensorError(f"HardOp {op.op_id} input v_id {v.v_id} must be "
                              f"{list(shape)} {npdt}, got {list(got.shape)} "
                              f"{got.numpy_dtype}")
        if whole and t.isOn(self.device.defaultMemRegion()):
            self._bind(b, t.chunk(), t.offset())  # zero copy: the MMU maps the tensor itself
            return 0.0
        self._bind(b, own, own_off, own_phys)
        t0 = time.perf_counter()
        if t.isOn(HostDevice.MemRegion()):
            arr = t.numpy()  # a host array as it is: no chunk made for it
            if arr.nbytes == nbytes and arr.flags.c_contiguous and not own.is_freed:
                # the window's range in its chunk is the deployment's (checked when it was
                # made): the bytes go to the store as they are
                own.region.storage.write(own_phys - own_off + at, arr)
            else:
                own.write(at, arr, nbytes)
        else:
            own.copyFrom(at, t.chunk(), t.offset(), nbytes)
        return (time.perf_counter() - t0) * 1e3

    def _bind(self, b: Buffer, chunk: Any, offset: int, phys: int | None = None) -> None:
        """Point the MMU entry of an INPUT/OUTPUT buffer at ``chunk + offset`` (`phys`, when
        the caller knows it) -- a fixed buffer: copy into its own place instead."""
        if self._fixed(b):
            own, own_off = self._own(b)
            if chunk is not own or offset != own_off:
                own.copyFrom(own_off, chunk, offset, b.byte_size)
            self.bound[b.owner] = (own.addr + own_off, own, own_off)
            return
        if phys is None:
            phys = chunk.addr + offset
        self.bound[b.owner] = (phys, chunk, offset)
        index = self.dep.mmu_index[b.owner]
        lo, old, n = self.dep.mmu[index]
        if old == phys:
            return
        self.dep.mmu[index] = (lo, phys, n)
        if self.device.share.mmu_owner is self:
            # still ours only if nobody else wrote an MMU register since we programmed it
            clean = self._mmu_generation == self._device_mmu_generation()
            self.device.mmuMap(index, lo, phys, n)
            if clean:
                self._mmu_generation = self._device_mmu_generation()

    def _stage(self, v: Any, user: Any, to_user: bool) -> Tensor:
        """Copy value `v` between its channel window in its buffer and the dense user chunk
        (`staged_chunk`): the two networks lay the map out differently."""
        t = self.layout.window(v)
        _, chunk, base = self.bound[self.layout.buffer_of(v).owner]
        dt = np.int16 if t["dtype"] == "int16" else np.int8
        esz = np.dtype(dt).itemsize
        buf = chunk.view(base, t["h"] * t["w"] * t["pitch"] * esz).view(dt).reshape(
            t["h"], t["w"], t["pitch"])
        dense = user.view(0, t["h"] * t["w"] * t["c"] * esz).view(dt).reshape(
            t["h"], t["w"], t["c"])
        win = slice(t["c_off"], t["c_off"] + t["c"])
        if to_user:
            dense[...] = buf[:, :, win]
        else:
            buf[:, :, win] = dense
        return Tensor(v.dtype, user, 0)

    def _map_user_output(self, v: Any, t: Tensor) -> bool | None:
        """Map the caller's output tensor as `v`'s buffer; False when the buffer's address
        is fixed (the result is then copied into the tensor)."""
        b = self.layout.buffer_of(v)
        if b.segment != SegmentType.OUTPUT or v.v_id != b.owner:
            return None
        if self._fixed(b):
            return False
        if not t.isOn(self.device.defaultMemRegion()) or t.dtype().storageBytes() < b.byte_size:
            return None
        self._bind(b, t.chunk(), t.offset())
        return None

    # --- running ---------------------------------------------------------------------------------
    def _execute(self, run: Run, steps: ChipSteps, timed: bool = True) -> float:
        """One icoreCalc of `run` on its instructions in simulated ETM, the profiler records
        collected; returns the run's simulated ms (0.0 when not `timed`: nobody reads it)."""
        if not run.instr_size:
            return 0.0
        cache = self.run_cache
        if cache is None or "mmu" not in cache:
            self._check_mmu_mode()
            if cache is not None:
                cache["mmu"] = True
        if self.settings.mmu_on:
            self._program_mmu()
        steps.before_run(run)
        dev = self.device
        profiled = self.dep.prof_chunk is not None  # (else no layer count is read)
        if cache is not None:  # a chip segment: its records are read after its last run
            if profiled and "prof_base" not in cache:
                cache["prof_base"] = dev.layerCount() if not dev.mock else 0
            dev.icoreCalc(self.dep.instr_phys(self.layout, run), run.instr_size)
            return dev.calcTime() if timed else 0.0
        base = dev.layerCount() if profiled and not dev.mock else 0
        dev.icoreCalc(self.dep.instr_phys(self.layout, run), run.instr_size)
        hard_ms = dev.calcTime() if timed else 0.0
        if profiled:
            self._collect_profile(base, dev.layerCount() - base)
        return hard_ms

    def _flush_profile(self) -> None:
        """Collect the profiler records of the runs a `forward_segment` call made so far (one
        span of consecutive layers: their HardOps' tags tell them apart, as `profile` sums
        them per tag)."""
        cache = self.run_cache
        base = cache.pop("prof_base", None) if cache is not None else None
        if base is not None:
            self._collect_profile(base, self.device.layerCount() - base)

    def _layer_ms(self, run: Run, run_ms: float) -> dict[int, float]:
        """Simulated ms of each HardOp of `run` from its profiler records (cycles) and the
        run's clock (ms per cycle of the whole run); empty without records."""
        cycles = self.device.calcCycles() if run_ms else 0
        if not cycles or not self._prof_runs:
            return {}
        summary = self._prof_runs[-1]
        key = (id(summary), run_ms, cycles)
        done = self._layer_ms_of.get(key)
        if done is None:
            tags, sums, _ = summary
            ms: dict[int, float] = {}
            for tag, cyc in zip(tags.tolist(), (sums[:, 0] * (run_ms / cycles)).tolist()):
                ms[tag] = ms.get(tag, 0.0) + cyc
            done = {oid: ms[oid] for oid in run.op_ids if oid in ms}
            if len(self._layer_ms_of) >= _MAX_CACHED:
                self._layer_ms_of.clear()
            self._layer_ms_of[key] = done
        return dict(done)

    def _check_mmu_mode(self) -> None:
        if not self.device.chip.mmu_switch:
            return  # no switch: nothing to ask the (possibly remote) device on every run
        mode = self.device.mmu_enabled()
        if mode != self.settings.mmu_on:
            raise CallOrderError(
                f"{self.device.chip.name}Backend was applied with the MMU "
                f"{'on' if self.settings.mmu_on else 'off'}; the device's MMU is now "
                f"{'on' if mode else 'off'}: switch it back (mmuModeSwitch) or create the "
                f"session again")

    def _program_mmu(self) -> None:
        dev = self.device
        gen = self._device_mmu_generation()
        if dev.share.mmu_owner is self and gen is not None and gen == self._mmu_generation:
            return  # nobody wrote an MMU register since this backend programmed them
        dev.mmuClear()
        for i, (lo, ph, n) in enumerate(self.dep.mmu):
            dev.mmuMap(i, lo, ph, n)
        dev.share.mmu_owner = self
        self._mmu_generation = self._device_mmu_generation()

    def _device_mmu_generation(self) -> int | None:
        """The device's MMU generation; None for a device that cannot tell (a served device's
        client proxy), whose MMU is then programmed on every run."""
        return self.device.mmu_generation

    def _collect_profile(self, base: int, n: int) -> None:
        """Sum the run's profiler records (one per layer) per HardOp (a HardOp's layers are
        consecutive records with its tag)."""
        if self.dep.prof_chunk is None or n <= 0:
            return
        dev = self.device
        cache = self.run_cache
        if cache is None:
            raw = dev.profile_bytes(base, n)
        else:
            if "area" not in cache:
                cache["area"] = dev.profiler_area()
            raw = dev.profile_bytes(base, n, area=cache["area"])
        if not raw:
            return
        if cache is None:
            rows, cols = dev.getRowsCols()
        else:
            rows, cols = cache.get("rows_cols") or cache.setdefault("rows_cols",
                                                                     dev.getRowsCols())
        peak = dev.config.peak_macs_per_cycle("int8", rows, cols)
        key = (raw, peak)
        summary = self._prof_sums.get(key)
        if summary is None:
            summary = self._sum_records(np.frombuffer(raw, dtype=PROFILE_RECORD), peak)
            if len(self._prof_sums) >= _MAX_CACHED:
                self._prof_sums.clear()
                self._layer_ms_of.clear()  # keyed by the summaries' ids
            self._prof_sums[key] = summary
        self._prof_runs.append(summary)

    @staticmethod
    def _sum_records(recs: np.ndarray, peak: int) -> tuple[np.ndarray, np.ndarray, int]:
        """(HardOp tags, their summed cycles, MACs, ETM and OCM bytes, peak) of a run's
        records."""
        words = recs.view(np.uint64).reshape(len(recs), -1).astype(np.int64)
        tag = words[:, _TAG]
        starts = np.concatenate(([0], np.flatnonzero(tag[1:] != tag[:-1]) + 1))
        sums = np.add.reduceat(words, starts, axis=0)
        table = np.stack([sums[:, _CYCLES], sums[:, _MACS], sums[:, _ETM_RD] + sums[:, _ETM_WR],
                          sums[:, _OCM_RD] + sums[:, _OCM_WR]], axis=1)
        return tag[starts], table, peak

    @property
    def profile(self) -> dict[int, dict[str, float]]:
        """op id -> {cycles, macs, etm_bytes, ocm_bytes, utilisation} of the last forward."""
        out: dict[int, dict[str, float]] = {}
        for tags, sums, peak in self._prof_runs:
            for tag, (cyc, macs, etm, ocm) in zip(tags.tolist(), sums.tolist()):
                d = out.setdefault(tag, {"cycles": 0, "macs": 0, "etm_bytes": 0,
                                         "ocm_bytes": 0, "utilisation": 0.0})
                d["cycles"] += cyc
                d["macs"] += macs
                d["etm_bytes"] += etm
                d["ocm_bytes"] += ocm
                d["utilisation"] = d["macs"] / max(d["cycles"] * peak, 1)
        return out

    def tensor_of(self, v: Any, steps: ChipSteps) -> Tensor:
        """A tensor over value `v` where the deployment keeps it (ETM, OCM, a bound chunk)."""
        place = self._places.get(v.v_id)
        if place is None:
            place = self._places[v.v_id] = self._place_of(v)
        ttype, chunk, base, is_ocm, owner = place
        if chunk is None:  # an INPUT/OUTPUT buffer: wherever it is bound this forward
            _, chunk, base = self.bound[owner]
            fit = self._fits.get(owner)
            if fit is not None and fit[0] is chunk and fit[1] == base:  # checked last time
                return steps.result_tensor(Tensor.over_chunk(ttype, chunk, base), is_ocm)
            t = Tensor(ttype, chunk, base)  # checks that the type fits there
            self._fits[owner] = (chunk, base)
            return steps.result_tensor(t, is_ocm)
        return steps.result_tensor(Tensor.over_chunk(ttype, chunk, base), is_ocm)

    def _place_of(self, v: Any) -> tuple[TensorType, Any, int, bool, int]:
        """(tensor type, chunk, offset, in OCM, buffer owner) of value `v`; chunk None for a
        bound buffer. The type is `v`'s own where its buffer holds it densely, else the whole
        channel pitch (NHWC) of the buffer."""
        lay, dep = self.layout, self.dep
        t = lay.window(v)
        b = lay.buffer_of(v)
        is_ocm = b.segment == SegmentType.FTMP and lay.value_info[b.owner].is_ocm
        chunk, base = None, 0
        if is_ocm:
            chunk = dep.ocm_chunk  # an OCM tensor: reads the on-chip memory
            base = b.logic_addr - dep.plan.ocm_logic
        elif b.segment == SegmentType.FTMP:
            chunk = dep.segments[SegmentType.FTMP].single_chunk.memChunk
            base = b.logic_addr - lay.segments[SegmentType.FTMP].logic_addr
        dense = t["c_off"] == 0 and t["pitch"] == t["c"] and v.storageBytes() == t["bytes"]
        ttype = v.dtype if dense else \
            TensorType(v.dtype.element_dtype, (1, t["h"], t["w"], t["pitch"]), "NHWC")
        if chunk is not None:
            Tensor(ttype, chunk, base)  # the type fits there (checked once: `tensor_of`)
        return ttype, chunk, base, is_ocm, b.owner

"""Forward of a deployed ZG330Backend. `forwardHardOp` takes the device lock for the whole
forward, binds the caller's tensors to the INPUT buffers (zero copy by pointing the buffer's MMU
entry at the tensor, else a copy, or a staged channel window for a user-connected value), runs
the HardOp's icoreCalc run once per forward, reads the profiler records and returns tensors over
the results in ETM or OCM (or the caller's output tensors, mapped or copied into). The Buyi
backend overrides `_bind`, `_program_mmu`, `_execute`, `_tensor_of` and `forwardHardOp`.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from xir.types import TensorType
from xrt.errors import CallOrderError, TensorError, XrtError
from xrt.tensor import Tensor

from .apply import _Run
from .device_state import _device_lock
from .layout import _Buffer
from .structs import SegmentType


class ForwardMixin:
    """Binding and running the HardOps of a deployed ZG330Backend."""

    def forwardHardOp(self, op: Any, inputs: list[Tensor], outputs: list[Tensor]
                      ) -> list[Tensor]:
        """Run one HardOp (its whole merged run the first time). The device is held from the
        first HardOp of a forward to the last (its OCM maps and MMU table are this
        backend's meanwhile): forwards of backends in other threads wait."""
        if not self._applied:
            raise CallOrderError(f"ZG330Backend: forward of HardOp {op.op_id} before apply()")
        if op.op_id not in self._order:
            raise XrtError(f"HardOp {op.op_id} is not in this ZG330Backend's network view")
        if not self._holding:
            _device_lock(self._device).acquire()
            self._holding = True
        try:
            res = self._forward_locked(op, inputs, outputs)
        except BaseException:
            self._release_device()
            raise
        if self._order[op.op_id] == len(self._order) - 1:
            self._release_device()
        return res

    def _release_device(self) -> None:
        if self._holding:
            self._holding = False
            _device_lock(self._device).release()

    def _forward_locked(self, op: Any, inputs: list[Tensor], outputs: list[Tensor]
                        ) -> list[Tensor]:
        pos = self._order[op.op_id]
        if pos <= self._last_pos or not self._done_in_forward:
            self._start_forward()
        self._last_pos = pos
        memcpy_ms = 0.0
        feats = [v for v in op.inputs]
        if len(inputs) != len(feats):
            raise TensorError(f"HardOp {op.op_id} takes {len(feats)} inputs, got {len(inputs)}")
        for v, t in zip(feats, inputs):
            memcpy_ms += self._bind_input(op, v, t)
        run = self._runs[self._run_of[op.op_id]]
        first = op.op_id not in self._done_in_forward
        user = list(outputs or [])
        if first and user and run.op_ids[0] == op.op_id:
            for v, t in zip(op.outputs, user):
                self._map_user_output(v, t)
            user_mapped = True
        else:
            user_mapped = False
        if first:
            hard_ms = self._execute(run)
            self._done_in_forward.update(run.op_ids)
            if run.sid != op.op_id:
                self.setTimeElapses(run.sid, 0.0, hard_ms)
                hard_ms = 0.0
        else:
            hard_ms = 0.0
        results = []
        for k, v in enumerate(op.outputs):
            t = self._tensor_of(v)
            if v.v_id in self._staged and not self._is_fork:
                t0 = time.perf_counter()
                t = self._stage(v, self._staged[v.v_id], to_user=True)
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
        self.setTimeElapses(op.op_id, memcpy_ms, hard_ms)
        return results

    def _start_forward(self) -> None:
        dev = self._device
        self._done_in_forward = set()
        self._profile = {}
        self._restore_io()
        dev._zg330_mmu_owner = None
        if not dev.mock:
            dev.reset(1)
        if self._prof_chunk is not None:
            dev.configProfiler(self._prof_chunk)

    def _restore_io(self) -> None:
        for st in (SegmentType.INPUT, SegmentType.OUTPUT):
            for owner, ci in self.phy_segment_map[st].multi_chunk.items():
                self._bind(self._buffers[owner], ci.memChunk, 0)

    def _bind_input(self, op: Any, v: Any, t: Tensor) -> float:
        b = self._buffers[v.tags[self.TAG]["buffer"]]
        if v.v_id not in self._in_ids or b.segment != SegmentType.INPUT:
            return 0.0  # produced on the NPU by this backend: already in FTMP/OUTPUT
        if v.v_id in self._staged and not self._is_fork:
            ci = self.phy_segment_map[SegmentType.INPUT].multi_chunk[b.owner]
            self._bind(b, ci.memChunk, 0)
            t0 = time.perf_counter()
            src = self._staged[v.v_id]
            if not (t.isOn(self._device.defaultMemRegion()) and t.chunk() == src
                    and t.offset() == 0):
                src.copyFrom(0, t.chunk(), t.offset(), v.storageBytes())
            self._stage(v, src, to_user=False)
            return (time.perf_counter() - t0) * 1e3
        want = v.dtype
        got = t.dtype()
        if tuple(got.shape) != tuple(want.shape) or got.numpy_dtype != want.numpy_dtype:
            raise TensorError(f"HardOp {op.op_id} input v_id {v.v_id} must be "
                              f"{list(want.shape)} {want.numpy_dtype}, got {list(got.shape)} "
                              f"{got.numpy_dtype}")
        nbytes = want.storageBytes()
        region = self._device.defaultMemRegion()
        if t.isOn(region) and v.v_id == b.owner and nbytes == b.byte_size:
            self._bind(b, t.chunk(), t.offset())  # zero copy: the MMU maps the tensor itself
            return 0.0
        ci = self.phy_segment_map[SegmentType.INPUT].multi_chunk[b.owner]
        self._bind(b, ci.memChunk, 0)
        t0 = time.perf_counter()
        off = v.tags[self.TAG]["c_off"] * (2 if v.tags[self.TAG]["dtype"] == "int16" else 1)
        ci.memChunk.copyFrom(off, t.chunk(), t.offset(), nbytes)
        return (time.perf_counter() - t0) * 1e3

    def _bind(self, b: _Buffer, chunk: Any, offset: int) -> None:
        """Point the MMU entry of an INPUT/OUTPUT buffer at ``chunk + offset``."""
        phys = chunk.addr + offset
        self._bound[b.owner] = (phys, chunk, offset)
        lo, old, n = self._mmu[b.mmu_index]
        if old == phys:
            return
        self._mmu[b.mmu_index] = (lo, phys, n)
        if getattr(self._device, "_zg330_mmu_owner", None) is self:
            self._device.mmuMap(b.mmu_index, lo, phys, n)

    def _stage(self, v: Any, user: Any, to_user: bool) -> Tensor:
        """Copy value `v` between its channel window in its buffer and the dense user chunk
        (`staged_chunk`): the two networks lay the map out differently."""
        t = v.tags[self.TAG]
        b = self._buffers[t["buffer"]]
        _, chunk, base = self._bound[b.owner]
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

    def _map_user_output(self, v: Any, t: Tensor) -> None:
        b = self._buffers[v.tags[self.TAG]["buffer"]]
        if b.segment != SegmentType.OUTPUT or v.v_id != b.owner:
            return
        region = self._device.defaultMemRegion()
        if not t.isOn(region) or t.dtype().storageBytes() < b.byte_size:
            return
        self._bind(b, t.chunk(), t.offset())

    def _execute(self, run: _Run) -> float:
        if not run.instr_size:
            return 0.0
        self._program_mmu()
        li = self.logic_segment_map[SegmentType.INSTR]
        phys = self.phy_segment_map[SegmentType.INSTR].phy_addr + (run.instr_logic - li.logic_addr)
        dev = self._device
        base = dev.layerCount() if not dev.mock else 0
        dev.icoreCalc(phys, run.instr_size)
        hard_ms = dev.calcTime()
        self._collect_profile(base, dev.layerCount() - base)
        return hard_ms

    def _program_mmu(self) -> None:
        dev = self._device
        if getattr(dev, "_zg330_mmu_owner", None) is self:
            return
        dev.mmuClear()
        for i, (lo, ph, n) in enumerate(self._mmu):
            dev.mmuMap(i, lo, ph, n)
        dev._zg330_mmu_owner = self

    def _collect_profile(self, base: int, n: int) -> None:
        if self._prof_chunk is None or n <= 0:
            return
        dev = self._device
        rows, cols = dev.getRowsCols()
        peak = dev.config.peak_macs_per_cycle("int8", rows, cols)
        for r in dev.profile(base, n):
            d = self._profile.setdefault(int(r["tag"]), {"cycles": 0, "macs": 0, "etm_bytes": 0,
                                                         "ocm_bytes": 0, "utilisation": 0.0})
            d["cycles"] += int(r["cycles"])
            d["macs"] += int(r["macs"])
            d["etm_bytes"] += int(r["etm_rd"]) + int(r["etm_wr"])
            d["ocm_bytes"] += int(r["ocm_rd"]) + int(r["ocm_wr"])
            d["utilisation"] = d["macs"] / max(d["cycles"] * peak, 1)

    def _tensor_of(self, v: Any) -> Tensor:
        t = v.tags[self.TAG]
        b = self._buffers[t["buffer"]]
        if b.segment == SegmentType.FTMP and self.value_info[b.owner].is_ocm:
            chunk = self._ocm_chunk  # an OCM tensor: reads the on-chip memory
            base = b.logic_addr - self._plan.ocm_logic
        elif b.segment == SegmentType.FTMP:
            ps = self.phy_segment_map[SegmentType.FTMP]
            chunk = ps.single_chunk.memChunk
            base = b.logic_addr - self.logic_segment_map[SegmentType.FTMP].logic_addr
        else:
            _, chunk, base = self._bound[b.owner]
        dense = t["c_off"] == 0 and t["pitch"] == t["c"] and v.storageBytes() == t["bytes"]
        if dense:
            return Tensor(v.dtype, chunk, base)
        hw = TensorType(v.dtype.element_dtype, (1, t["h"], t["w"], t["pitch"]), "NHWC")
        return Tensor(hw, chunk, base)


def _forward_hardop(op: Any, inputs: list[Tensor], outputs: list[Tensor], backend: Any
                    ) -> list[Tensor]:
    """The forward function of HardOps (`FORWARDS`): the session calls it with the backend
    the op is bound to."""
    return backend.forwardHardOp(op, inputs, outputs)

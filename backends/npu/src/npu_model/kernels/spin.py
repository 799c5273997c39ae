"""A pool thread's short wait for the next cut call, spinning outside the GIL (`pool._Crew`).

A pool thread asleep on a lock is woken by the kernel: on a virtual machine whose vCPU has gone
idle that is a host-side wake of the vCPU (Firecracker's guests poll ``haltpoll`` up to 200 us
before halting, then an IPI and the host's scheduler), and between two cut calls of a forward
(a layer or two run inline, the chip model's Python around them) the gap is often longer than
that. So after each cut call a pool thread first watches a counter the caller bumps when it
hands out the next call (`wait_change`), for `pool.SPIN_S` at most, and only then goes to sleep
on its lock. It watches with an atomic load and ``pause`` in a loop compiled without the GIL,
so the caller's Python runs meanwhile; the time it may spin is counted in the CPU's time-stamp
counter (``rdtsc``: constant rate on the CPUs this runs on; `ticks_per_second` measures it).
A fresh install compiles `wait_change` in a compile worker first (`ready`).
libgomp's and onnxruntime's pools spin the same way between parallel regions (onnxruntime's
until the region after; the spectrum benchmark turns its spinning off, so this one's spin is
bounded to a fraction of a millisecond after a cut call, not the whole gap to the next one).
"""

from __future__ import annotations

import time

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from . import compile_pool
from .jit import compiled_for, kernel


@intrinsic
def _load_acquire(typingctx, arr):
    """``arr[0]`` read with an atomic acquire load (not hoisted out of a loop)."""
    sig = types.int64(arr)

    def codegen(context, builder, sig, args):
        a = context.make_array(sig.args[0])(context, builder, args[0])
        return builder.load_atomic(a.data, "acquire", 8)

    return sig, codegen


@intrinsic
def _pause(typingctx):
    """The x86 ``pause`` hint: a spin loop that yields the core's pipeline to its sibling."""
    sig = types.void()

    def codegen(context, builder, sig, args):
        fn = builder.module.globals.get("llvm.x86.sse2.pause") or ir.Function(
            builder.module, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse2.pause")
        builder.call(fn, [])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _ticks(typingctx):
    """The time-stamp counter (``rdtsc`` through ``llvm.readcyclecounter``)."""
    sig = types.int64()

    def codegen(context, builder, sig, args):
        fn = builder.module.globals.get("llvm.readcyclecounter") or ir.Function(
            builder.module, ir.FunctionType(ir.IntType(64), []), "llvm.readcyclecounter")
        return builder.call(fn, [])

    return sig, codegen


@kernel(nogil=True)
def wait_change(counter, seen, ticks):
    """Spin until ``counter[0] != seen`` or `ticks` time-stamp ticks have passed; return
    ``counter[0]`` (`seen` when it timed out)."""
    t0 = _ticks()
    while True:
        for _ in range(64):
            v = _load_acquire(counter)
            if v != seen:
                return v
            _pause()
        if _ticks() - t0 >= ticks:
            return _load_acquire(counter)


_rate: float | None = None


def ticks_per_second(counter: np.ndarray) -> float:
    """The time-stamp counter's rate, measured once: `wait_change` on `counter` (which must
    not change meanwhile) for 2 million ticks, timed by `time.perf_counter` (the fastest of
    three, after a first call that loads or compiles it)."""
    global _rate
    if _rate is None:
        seen = int(counter[0])
        wait_change(counter, seen, 1)
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            wait_change(counter, seen, 2_000_000)
            best = min(best, time.perf_counter() - t0)
        _rate = max(1.0, 2_000_000 / max(best, 1e-9))
    return _rate


def ready(counter: np.ndarray, ask: bool) -> bool:
    """Whether `wait_change` runs without compiling (compiled in this process, or in Numba's
    disk cache: `jit.compiled_for`). If not and `ask`: where compile workers are running (a
    fresh install's first forward) one is asked to put it in the disk cache after the
    network's kernels (`compile_pool.prefetch`) and pool threads sleep rather than spin till
    then (compiling it on the spot would hold the GIL ~0.1 s inside that forward); where none
    is, it is compiled here and now (the pool starting, outside any timed call)."""
    args = (counter, 0, 1)
    if compiled_for(wait_change, args):
        return True
    if not ask:
        return False
    global _asked
    if _asked or compile_pool.prefetch([(wait_change, args)]):
        _asked = True
        return False
    wait_change(counter, int(counter[0]) - 1, 1)  # (returns at once: counter[0] differs)
    return True


_asked = False  # a compile worker has `wait_change` (asked by `ready`)

"""The kernels a run will call, known before it runs, so that a fresh install compiles them
side by side (`kernels.compile_pool`; issue 30, item 4).

`Icore.run` decodes a run's words and calls a kernel for each layer as it goes, so on a fresh
install each kernel is compiled when its first layer comes, one after another. `prefetch_run`
decodes the same words first without running anything (`Icore._interpret` on a shallow copy
of the icore whose recording keeps the kernel calls instead of making them, and whose
counters are its own), and hands the calls to `compile_pool.prefetch`; the real decode then
runs as before and finds its kernels compiled, or being compiled by a worker (where the kernel
has a numpy twin, `kernels.twins`, the twin runs meanwhile instead of waiting), or takes them
itself. Nothing of the icore or of memory changes (the tests compare).

Once a dry decode finds every kernel it needs compiled or in the disk cache (a warm start),
the process stops making them (`active`): a warm start pays one extra decode, ~1 ms.
"""

from __future__ import annotations

from typing import Any

from .kernels import (
    compile_pool,
    twins,  # noqa: F401 - registers the numpy forms run while workers compile
)
from .program import Recording

#: False once a dry decode found nothing to compile (or compiling in workers is off)
active = True


class _DryRecording(Recording):
    """A recording that keeps each kernel call without making it."""

    def call(self, fn: Any, *args: Any) -> None:
        self.steps.append((fn, args))


def kernel_calls_of_run(icore: Any, *decode: Any) -> list[tuple[Any, tuple]]:
    """The kernel calls (callable, arguments) `icore` would make decoding a run (`decode`:
    `Icore._interpret`'s arguments), in order, without making them. A run that faults gives
    the calls before the fault."""
    rec = _DryRecording()
    dry = icore.dry_copy(rec)
    try:
        dry._interpret(*decode)
    except Exception:  # the real decode meets the same fault, after the same calls
        pass
    return compile_pool.kernel_calls(rec.steps)


def prefetch_run(icore: Any, *decode: Any) -> int:
    """Before `icore` decodes a run (`decode`: `Icore._interpret`'s arguments): start
    compiling the kernels it will call that are not compiled yet (`compile_pool.prefetch`).
    Returns the compiles queued."""
    global active
    if not active:
        return 0
    if not compile_pool.available():
        active = False
        return 0
    calls = kernel_calls_of_run(icore, *decode)
    if not compile_pool.pending(calls):
        active = False
        return 0
    return compile_pool.prefetch(calls)

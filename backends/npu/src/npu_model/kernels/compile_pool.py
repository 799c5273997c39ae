"""Compiling the kernels a run will call in worker processes (issue 30, item 4: a fresh
install's first forward within 4x of a warm start).

On a fresh install every kernel a network calls is compiled on its first call, one after
another, on one core (~10 s CPU for a small CNN). When a caller knows the kernels it is about
to call (`prefetch`: the kernel calls of a decoded run, with their arguments), the compiles
it would wait for one by one can run side by side: worker processes (plain
``python -m npu_model.kernels.compile_pool`` children, fed one kernel at a time over a pipe)
compile them into Numba's on-disk cache, which is file-based and safe across processes, and
the caller loads each from there when it reaches it. The caller compiles too, in the order it
needs the kernels; the workers take them from the other end, so nothing is compiled twice:
when the caller reaches a kernel no worker has started, it compiles it itself; when a worker
has it, it waits for that worker (`wait`, called from the jit dispatchers' ``compile``).

Nothing here changes what runs: a worker's compile is the same compile, loaded from the same
cache the caller would have written. Every failure falls back to the caller compiling: a
worker that dies or errs, a compile still unfinished after `TIMEOUT_S`, a cache directory
the workers cannot write (no workers then), Numba's JIT off.

Workers: ``XRT_COMPILE_WORKERS`` when set (0: none), else one less than the CPUs this process
may use, at most `MAX_WORKERS` and one less than the kernels to compile (the caller compiles
too); none on one CPU.
"""

from __future__ import annotations

import base64
import collections
import importlib
import os
import pickle
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from typing import Any

from numba import config
from numba.core.dispatcher import Dispatcher

from xir.errors import XirError

#: workers at most (each costs ~0.3 s to start and ~100 MB)
MAX_WORKERS = 8
#: seconds the caller waits for a worker's compile before compiling the kernel itself
TIMEOUT_S = 300.0
#: set in the workers' environment: a worker prefetches nothing itself
WORKER_ENV = "XRT_COMPILE_WORKER"

_QUEUED, _CALLER, _WORKER, _DONE, _FAILED = range(5)


class CompileWorkersError(XirError, ValueError):
    """``XRT_COMPILE_WORKERS`` that is not a non-negative integer."""


class _Job:
    __slots__ = ("disp", "sig", "state", "done")

    def __init__(self, disp: Dispatcher, sig: tuple) -> None:
        self.disp = disp
        self.sig = sig
        self.state = _QUEUED
        self.done = threading.Event()


_lock = threading.Lock()
_owner = os.getpid()  # the process whose workers and feeders these are (not a forked child)
_jobs: dict[tuple[int, tuple], _Job] = {}
_queue: collections.deque[_Job] = collections.deque()  # first needed on the left
_workers: list[_Worker] = []
#: what the workers did: compiled, failed, started; the calls run by a kernel's twin meanwhile
#: (for tests and the start-up benchmark)
stats = {"compiled": 0, "failed": 0, "workers": 0, "by_caller": 0, "twinned": 0}


def _configured_workers() -> int | None:
    env = os.environ.get("XRT_COMPILE_WORKERS", "").strip()
    if not env:
        return None
    try:
        n = int(env)
    except ValueError:
        n = -1
    if n < 0:
        raise CompileWorkersError(f"XRT_COMPILE_WORKERS={env!r}: expected a worker count >= 0")
    return n


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


def _writable(path: str) -> bool:
    """Whether a cache directory (or the nearest existing folder above it) takes files."""
    while path and not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            return False
        path = parent
    return bool(path) and os.access(path, os.W_OK | os.X_OK)


def _signature(disp: Dispatcher, args: tuple) -> tuple | None:
    try:
        return tuple(disp.typeof_pyval(a) for a in args)
    except Exception:  # an argument Numba cannot type: the call itself will say so
        return None


def _on_disk(disp: Dispatcher, sig: tuple) -> bool:
    try:
        key = disp._cache._index_key(sig, disp.targetctx.codegen())
        return key in disp._cache._cache_file._load_index()
    except Exception:
        return False


def _resolvable(disp: Dispatcher) -> bool:
    """Whether a worker can import this kernel by its module and name."""
    py = disp.py_func
    mod = sys.modules.get(py.__module__)
    return mod is not None and getattr(mod, py.__qualname__, None) is disp


def kernel_calls(steps: Iterable[tuple[Any, tuple]]) -> list[tuple[Dispatcher, tuple]]:
    """The Numba kernel calls among `steps` (callable, arguments) as the kernels see them: a
    `pool.Split` runs its kernel with the range ``0, total`` added; other callables (numpy
    functions, plain Python) are left out."""
    out = []
    for fn, args in steps:
        if isinstance(fn, Dispatcher):
            out.append((fn, tuple(args)))
        elif isinstance(getattr(fn, "kernel", None), Dispatcher) and hasattr(fn, "_extent"):
            out.append((fn.kernel, tuple(args) + (0, 1)))
    return out


def available() -> bool:
    """Whether `prefetch` may start workers at all: Numba's JIT on, not in a worker, and
    workers allowed (``XRT_COMPILE_WORKERS`` not 0, else more than one CPU)."""
    if config.DISABLE_JIT or os.environ.get(WORKER_ENV):
        return False
    wanted = _configured_workers()
    return wanted > 0 if wanted is not None else _cpus() > 1


def _uncompiled(disp: Any, args: tuple) -> tuple | None:
    """The signature `disp` would compile for `args` when it is a kernel neither compiled in
    this process nor in the disk cache, that a worker can import; else None."""
    if not isinstance(disp, Dispatcher) or not disp._can_compile:
        return None
    sig = _signature(disp, args)
    if sig is None or sig in disp.overloads or not _resolvable(disp) or _on_disk(disp, sig):
        return None
    return sig


def pending(calls: Iterable[tuple[Dispatcher, tuple]]) -> bool:
    """Whether any of `calls` (kernel, arguments) would compile its kernel."""
    seen = set()
    for disp, args in calls:
        if not isinstance(disp, Dispatcher):
            continue
        sig = _signature(disp, args)
        if sig is None or (id(disp), sig) in seen or sig in disp.overloads:
            continue
        seen.add((id(disp), sig))
        if _uncompiled(disp, args) is not None:
            return True
    return False


def prefetch(calls: Iterable[tuple[Dispatcher, tuple]]) -> int:
    """Start compiling, in worker processes, the kernels of `calls` (kernel, arguments; in the
    order they will be called) that are neither compiled in this process nor in the disk
    cache. Returns the compiles queued (0: nothing to gain, or no workers)."""
    if config.DISABLE_JIT or os.environ.get(WORKER_ENV) or os.getpid() != _owner:
        return 0
    wanted = _configured_workers()
    new: list[_Job] = []
    with _lock:
        for disp, args in calls:
            sig = _uncompiled(disp, args)
            if sig is None or (id(disp), sig) in _jobs:
                continue
            if not _writable(getattr(disp._cache, "_cache_path", "")):
                return 0  # the workers' compiles could not reach the caller
            job = _jobs[(id(disp), sig)] = _Job(disp, sig)
            new.append(job)
        if not new:
            return 0
        pending = sum(1 for j in _queue if j.state == _QUEUED) + len(new)
        n = min(MAX_WORKERS, _cpus() - 1, pending - 1) if wanted is None else wanted
        n -= sum(1 for w in _workers if w.alive)
        if n <= 0 and not any(w.alive for w in _workers):
            for job in new:  # no worker to give them to: the caller compiles as it goes
                del _jobs[(id(job.disp), job.sig)]
            return 0
        _queue.extend(new)
    for _ in range(max(0, n)):
        w = _Worker()
        if w.alive:
            _workers.append(w)
    return len(new)


def compiling(disp: Dispatcher, args: tuple) -> bool:
    """Whether a live worker has `disp` for the types of `args` queued or in hand: a caller
    with another way to compute the call (`jit.twin_of`) need not wait for it."""
    if not _jobs or os.getpid() != _owner:
        return False
    job = _jobs.get((id(disp), _signature(disp, args)))
    if job is None or job.state not in (_QUEUED, _WORKER) or not any(w.alive for w in _workers):
        return False
    stats["twinned"] += 1
    return True


def wait(disp: Dispatcher, sig: tuple) -> None:
    """Before the caller compiles `disp` for `sig`: when a worker has it, wait until the
    worker's compile is in the disk cache (or failed, or `TIMEOUT_S` passed); when it is
    queued, take it off the queue (the caller compiles it). Returns at once for a kernel not
    prefetched."""
    job = _jobs.get((id(disp), sig))
    if job is None or os.getpid() != _owner:  # (a forked child has no feeders: compile)
        return
    with _lock:
        if job.state == _QUEUED:
            job.state = _CALLER
            stats["by_caller"] += 1
            return
    if job.state == _CALLER:
        return
    deadline = time.monotonic() + TIMEOUT_S
    while not job.done.wait(0.5):
        if time.monotonic() > deadline or not any(w.alive for w in _workers):
            return


def _take() -> _Job | None:
    """The last-needed queued job (workers work from the far end of the queue)."""
    with _lock:
        while _queue:
            job = _queue.pop()
            if job.state == _QUEUED:
                job.state = _WORKER
                return job
        return None


class _Worker:
    """One worker process and the thread that feeds it jobs over its pipe."""

    def __init__(self) -> None:
        self.open = False
        env = dict(os.environ, **{WORKER_ENV: "1"})
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "npu_model.kernels.compile_pool"], env=env,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                text=True, bufsize=1)
        except OSError:
            self.proc = None
            return
        stats["workers"] += 1
        self.open = True  # False once its feeder has no more jobs for it
        self.thread = threading.Thread(target=self._feed, name="npu-compile-feed", daemon=True)
        self.thread.start()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.open and self.proc.poll() is None

    def _feed(self) -> None:
        proc = self.proc
        try:
            while (job := _take()) is not None:
                py = job.disp.py_func
                sig = base64.b64encode(pickle.dumps(job.sig)).decode()
                ok = False
                try:
                    proc.stdin.write(f"{py.__module__} {py.__qualname__} {sig}\n")
                    proc.stdin.flush()
                    ok = proc.stdout.readline().startswith("ok")
                finally:
                    job.state = _DONE if ok else _FAILED
                    stats["compiled" if ok else "failed"] += 1
                    job.done.set()
                if not ok:
                    break
        except (OSError, ValueError):
            pass
        finally:
            self.open = False
            try:
                proc.stdin.close()
                proc.wait()  # it exits at the end of its input: reap it
            except OSError:
                pass


def _serve() -> None:
    """A worker: compile each ``module qualname signature`` line read from stdin into the
    disk cache; answer ``ok`` or ``error ...``."""
    for line in sys.stdin:
        try:
            module, qualname, sig = line.split()
            disp = getattr(importlib.import_module(module), qualname)
            disp.compile(pickle.loads(base64.b64decode(sig)))
            reply = "ok"
        except Exception as exc:  # the caller compiles it and meets the error itself
            reply = f"error {type(exc).__name__}"
        sys.stdout.write(reply + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    _serve()

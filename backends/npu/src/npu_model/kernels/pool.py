"""The thread pool the MPE kernels split their work over (the simulated chip has 16 MPEs
working at once; the simulator may use every core too).

A `Split` kernel is a Numba kernel compiled with ``nogil=True`` whose last two arguments are a
range ``[lo, hi)`` of its independent work (output pixels, output rows, batch items). Calling
the `Split` with the kernel's other arguments runs it inline when the call is short and
otherwise cuts the whole range into up to `PARTS_PER_THREAD` parts per thread and runs them on
the pool threads (`_Crew`), the calling thread taking parts as well: a part goes to whichever
thread asks first, and a pool thread that wakes after the caller took the last part finds
nothing to do, so on a machine whose cores are busy the caller does the work itself instead of
waiting for a thread to be scheduled, and a thread scheduled late holds the call up by one
small part at most.

Short is measured, not guessed from multiply-add counts: the byte GEMM (`bgemm`) runs a 1x1
convolution at ~250 GMAC/s and a 3-channel stem at ~12, so one work threshold either splits
20 us kernels (a hand-off costs more than it saves: the two-thread transformer block ran 3.7 ms
against 0.55 ms on one thread, load 4.3) or leaves 500 us ones whole. The first call of each
shape runs inline and timed; later calls are cut by the time seen for it, and go back inline
for a while whenever cutting turns out slower (`Split`).
A measured call is cut only for the cores free at that instant (`free_cores`, from Linux's
runnable count): on a machine whose cores are all taken each part would queue for one. After
a cut call the pool threads spin for the next one a short while (`SPIN_S`, `spin`) before they
sleep, so that the next call does not wait for a sleeping vCPU to be woken.
Parts write disjoint outputs and every output is computed from its inputs alone (exact integer
arithmetic, whatever the part), so the result is byte-identical for any thread count.

Threads: ``XRT_THREADS`` when set (1 runs everything on the calling thread), else the CPU count
(`os.sched_getaffinity` where it exists); `set_threads` changes it at run time.
"""

from __future__ import annotations

import itertools
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from inspect import signature
from typing import Any

import numpy as np
from numba import config as numba_config

from xir.errors import XirError

from . import spin as _spin

#: work units (multiply-adds, roughly) a part must hold at least, measured time aside
MIN_WORK = 1 << 21
#: a call of a shape measured faster than this on one thread runs inline: waking a pool
#: thread and handing it a part costs ~10 us on an idle core (the caller's share ~6 us,
#: `_Crew`) and up to a scheduler time slice on a busy one (`free_cores` keeps calls inline
#: there), and a call this short gains too little from a second core to risk it. 150 us takes
#: in resnet50's 1x1 layers of 150-300 us (a third of its convolution time) and PP-OCRv4
#: detector's depthwise 1x1 ones (~180 us), which 300 us left inline
INLINE_S = 150e-6
#: the least measured time a part holds (a 150 us call in two parts)
PART_S = 75e-6
#: how long a pool thread watches for the next cut call after one before it sleeps (`spin`:
#: a sleeping thread's wake on a virtual machine may wait for the host to run its vCPU)
SPIN_S = 200e-6
#: parts per thread at most: a thread that starts late or is pre-empted holds the call up by
#: one small part while the others take the rest
PARTS_PER_THREAD = 4
#: most calls that could be cut staying inline after a cut call was slower than inline
MAX_BACKOFF = 256
#: a cut call wins when it takes less than this share of the shape's fastest inline time
WIN = 0.9
#: shapes remembered per kernel before the measurements start over
_MAX_SHAPES = 4096


class ThreadCountError(XirError, ValueError):
    """A thread count (``XRT_THREADS``, `set_threads`) that is not a positive integer."""


_threads: int | None = None


def _default_threads() -> int:
    env = os.environ.get("XRT_THREADS", "").strip()
    if env:
        try:
            n = int(env)
        except ValueError:
            n = 0
        if n < 1:
            raise ThreadCountError(f"XRT_THREADS={env!r}: expected a positive thread count")
        return n
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


def threads() -> int:
    """Threads the kernels may use (``XRT_THREADS`` or the CPU count, read once)."""
    global _threads
    if _threads is None:
        _threads = _default_threads()
    return _threads


def rest() -> None:
    """The end of a chip run: pool threads spinning for the next cut call (`SPIN_S`) sleep at
    once instead, so that they take no core from the work that follows (the host's ops, the
    user's program, or onnxruntime timed beside the simulator)."""
    _crew.rest()


def set_threads(n: int | None) -> None:
    """Use `n` threads from now on (None: ``XRT_THREADS`` / the CPU count again)."""
    global _threads
    if n is not None and (not isinstance(n, int) or n < 1):
        raise ThreadCountError(f"thread count {n!r}: expected an integer of at least 1")
    _threads = n
    _crew.stop()


#: other runnable tasks a cut call may share the cores with (`free_cores`): one other process
#: running on a 2-core machine still left cutting resnet50's layers 0.87-0.93x of one thread's
#: forward (the backoff sending the losing shapes inline), where keeping every call inline
#: gave 1.0x; with 11-18 runnable tasks a cut call took 5.6x
SHARE = 1
#: where Linux says how many tasks are runnable at this instant (its 4th field: runnable/all)
LOADAVG = "/proc/loadavg"
_loadavg_fd: int | None = None
_cpus = os.cpu_count() or 1


def free_cores() -> int | None:
    """The cores a call could run on at this instant, the caller's own included: the
    machine's CPU count less the tasks Linux counts runnable now (the caller among them),
    plus the caller's; None where the count cannot be read. A cut call on a machine whose
    cores are all taken makes each of its threads queue for a core, and a part pre-empted
    mid-way holds the call up for a scheduler slice: on 2 cores with 11-18 runnable tasks,
    resnet50's layers cut in two took 5.6x their inline time. The instantaneous count, read
    for each call that would be cut (~2 us), tells as soon as the cores come free, where the
    backoff on losing cuts (`_Backoff`) only learns it by trying; libgomp's ``OMP_DYNAMIC``
    sizes its teams the same way, from the 1-minute load average."""
    global _loadavg_fd
    try:
        if _loadavg_fd is None:
            _loadavg_fd = os.open(LOADAVG, os.O_RDONLY)
        running = int(os.pread(_loadavg_fd, 128, 0).split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError):
        return None
    running -= _crew.spinners()  # this pool's threads waiting for the next call
    return max(0, _cpus - running + SHARE) + 1


class _Job:
    """One cut call: parts ``[b[i], b[i+1])`` of `kernel`'s range taken by ticket (``next``
    on an `itertools.count` is atomic), each thread taking the next part until none is left;
    whoever finishes the last part releases `done`. An exception in a part is kept (the
    other parts still run) and raised by the caller."""

    __slots__ = ("kernel", "args", "b", "n", "ticket", "finished", "done", "errors", "helpers")

    def __init__(self, kernel: Callable[..., Any], args: tuple, b: list[int]) -> None:
        self.kernel, self.args, self.b, self.n = kernel, args, b, len(b) - 1
        self.ticket = itertools.count()
        self.finished = itertools.count()
        self.done = threading.Lock()
        self.done.acquire()
        self.errors: list[BaseException] = []
        self.helpers = 0  # pool threads that may take parts (`_Crew.run` sets it)

    def work(self) -> None:
        """Take and run parts until none is left (a thread arriving late finds none)."""
        n, b, kernel, args = self.n, self.b, self.kernel, self.args
        while (i := next(self.ticket)) < n:
            try:
                kernel(*args, b[i], b[i + 1])
            except BaseException as e:  # raised by the caller once every part has run
                self.errors.append(e)
            if next(self.finished) == n - 1:
                self.done.release()


class _Crew:
    """The pool threads: ``threads() - 1`` daemon threads. After a cut call each watches for
    the next one for `SPIN_S` (`spin.wait_change` on `counter`, which the caller bumps for
    every call it cuts; outside the GIL), then sleeps on a lock of its own until a cut call
    releases it; either way it then takes parts of the current `_Job` if it is one of the
    job's helpers (none left when it came late, after the caller took the last part).
    Cheaper than a ThreadPoolExecutor per cut call (no Future, work queue or idle semaphore:
    ~15 us -> ~3 us of the caller's time). One caller at a time uses the crew: another
    thread cutting a call meanwhile runs it inline (`busy`)."""

    def __init__(self) -> None:
        self.job: _Job | None = None
        self.wakes: list[threading.Lock] = []
        self.threads: list[threading.Thread] = []
        self.owner = 0  # the process that started them (a forked child has none of them)
        self.generation = 0  # a thread of an earlier generation ends when woken
        self.busy = threading.Lock()
        self.counter = np.zeros(1, dtype=np.int64)  # bumped for each cut call
        self.sleeping: list[bool] = []  # per thread: asleep on its lock (or about to be)
        self.spinning: list[bool] = []  # per thread: watching `counter` (a runnable task)
        self.resting = False  # `rest` woke the spinners: they sleep until the next cut call

    def start(self, n: int) -> None:
        self.stop()
        self.owner = os.getpid()
        self.sleeping = [False] * n
        self.spinning = [False] * n
        ticks = self.spin_ticks(ask=True) if n else 0
        for k in range(n):
            wake = threading.Lock()
            wake.acquire()
            t = threading.Thread(target=self._serve, args=(k, wake, self.generation, ticks),
                                 daemon=True, name=f"npu-kernel-{k}")
            self.wakes.append(wake)
            self.threads.append(t)
            t.start()

    def stop(self) -> None:
        """End the threads (each finishes the part it runs first)."""
        wakes, started = self.wakes, self.threads
        mine = self.owner == os.getpid()
        self.wakes, self.threads, self.owner, self.job = [], [], 0, None
        self.generation += 1
        self.counter[0] += 1  # a spinning thread stops watching
        if not mine:  # a forked child: the threads are the parent's
            return
        for wake in wakes:
            try:
                wake.release()
            except RuntimeError:  # released already: it will wake
                pass
        for t in started:
            if t is not threading.current_thread():
                t.join()

    def _serve(self, k: int, wake: threading.Lock, generation: int, spin_ticks: int) -> None:
        checked = time.perf_counter()
        seen = int(self.counter[0])
        wanted = True  # took part in the last cut call (else it sleeps rather than spins)
        while self.generation == generation:
            v = seen
            if not spin_ticks and SPIN_S > 0 and time.perf_counter() - checked > 1.0:
                spin_ticks = self.spin_ticks(ask=False)  # compiled meanwhile?
                checked = time.perf_counter()
            if spin_ticks and wanted:
                self.spinning[k] = True
                v = _spin.wait_change(self.counter, seen, spin_ticks)
                self.spinning[k] = False
            if v == seen:  # no cut call meanwhile: sleep until one releases the lock
                self.sleeping[k] = True
                if int(self.counter[0]) == seen:  # (one bumped it since: no sleep)
                    wake.acquire()
                self.sleeping[k] = False
                v = int(self.counter[0])
            seen = v
            job = self.job
            # a call cut for fewer threads (fewer cores free) leaves this one asleep, and so
            # does `rest` (no cut call comes before the caller's other work)
            wanted = not self.resting if job is None else k < job.helpers
            if job is not None and wanted and self.generation == generation:
                job.work()

    def spin_ticks(self, ask: bool) -> int:
        """`SPIN_S` in time-stamp ticks; 0 (sleep at once) where `SPIN_S` is 0, Numba's JIT
        is off, or the spinning kernel is not compiled yet (`spin.ready`, which asks for it
        where `ask`)."""
        if SPIN_S <= 0 or numba_config.DISABLE_JIT or not _spin.ready(self.counter, ask):
            return 0
        return int(SPIN_S * _spin.ticks_per_second(np.zeros(1, dtype=np.int64)))

    def rest(self) -> None:
        """Send the spinning threads to sleep now (`rest`)."""
        if any(self.spinning) and self.owner == os.getpid():
            self.resting = True
            self.counter[0] += 1

    def spinners(self) -> int:
        """Pool threads of this process spinning now (runnable tasks that are this pool's)."""
        return sum(self.spinning) if self.owner == os.getpid() else 0

    def ready(self) -> None:
        """Start the threads if they are not running (in this process, as many as
        `threads` calls for)."""
        if self.owner != os.getpid() or len(self.threads) != threads() - 1:
            self.start(threads() - 1)

    def run(self, job: _Job, helpers: int) -> None:
        """Run `job` on the calling thread and up to `helpers` pool threads; return once
        every part has run."""
        self.ready()
        job.helpers = helpers
        self.job = job
        self.resting = False
        self.counter[0] += 1  # a spinning thread sees it at once
        for k in range(helpers):
            if self.sleeping[k]:
                try:
                    self.wakes[k].release()
                except RuntimeError:  # released already: it is waking
                    pass
        job.work()  # the calling thread takes parts too, so a busy machine costs no wait
        job.done.acquire()  # the last part (maybe a pool thread's) has finished
        self.job = None
        if job.errors:
            raise job.errors[0]


_crew = _Crew()


class _Backoff:
    """When to try cutting calls again after a cut call ran slower than inline: after `skip`
    more calls that could have been cut; `backoff` doubles with each loss (up to
    `MAX_BACKOFF`) and goes back to 1 with a win."""

    __slots__ = ("skip", "backoff")

    def __init__(self) -> None:
        self.skip = 0
        self.backoff = 1

    def passed(self) -> None:
        if self.skip:
            self.skip -= 1

    def lost(self) -> None:
        self.skip = self.backoff
        self.backoff = min(2 * self.backoff, MAX_BACKOFF)

    def won(self) -> None:
        self.skip = 0
        self.backoff = 1


class _Shape(_Backoff):
    """What is known of a kernel's calls of one shape: `inline` the fastest wall time seen of
    a call on the calling thread alone (the slower ones lost time to other work on the
    machine), and its own `_Backoff`."""

    __slots__ = ("inline",)

    def __init__(self, inline: float) -> None:
        super().__init__()
        self.inline = inline


#: the machine's backoff, shared by every shape: a cut call losing to inline mostly means the
#: other cores are busy, which holds for the next kernel too (each try costs up to a
#: scheduler slice, so trying every shape in turn would cost one per shape)
_machine = _Backoff()


class Split:
    """`kernel` run in parts on the pool. `extent` names the kernel's arguments whose product
    is the range to split; `work` those whose product estimates the whole run's work, of which
    a part must hold `min_work` (a kernel slower per unit of work sets it lower). `groups`, a
    function and the names of the arguments it takes, multiplies the range by the number of
    groups it returns (a kernel whose range runs over groups of output channels too, as many
    as its shape calls for: `implicit.channel_groups`).

    Work counts do not say how long a call takes (the byte GEMM runs 12 to 250 GMAC/s by
    layer shape), so a call of a shape (the values of the `extent` and `work` arguments) not
    seen before runs inline on the calling thread, timed; a shape whose fastest inline call
    took `INLINE_S` or more is cut into parts of at least `PART_S`. A cut call not faster
    than `WIN` times that (the other cores busy: a pool thread pre-empted in its part holds
    the call up for a scheduler slice) sends that shape, and the other shapes of every
    kernel, back inline for 1, 2, 4 ... `MAX_BACKOFF` calls that could have been cut before
    the next try (`_Backoff`).
    ``INLINE_S = 0`` turns the timing off: the work count alone sizes the parts."""

    def __init__(self, kernel: Callable[..., Any], extent: Sequence[str],
                 work: Sequence[str], min_work: int = MIN_WORK,
                 groups: tuple[Callable[..., int], Sequence[str]] | None = None) -> None:
        self.kernel = kernel
        self.min_work = min_work
        names = list(signature(getattr(kernel, "py_func", kernel)).parameters)
        self._extent = [names.index(n) for n in extent]
        self._work = [names.index(n) for n in work]
        self._groups = None if groups is None else (groups[0],
                                                    [names.index(n) for n in groups[1]])
        self._shape = sorted(set(self._extent) | set(self._work)
                             | set(() if groups is None else self._groups[1]))
        self._shapes: dict[tuple[int, ...], _Shape] = {}
        self.__name__ = getattr(kernel, "__name__", "split")
        self.__doc__ = kernel.__doc__

    def total(self, args: tuple) -> int:
        """The length of the kernel's range for these arguments: the product of its
        `extent` arguments, times its `groups` function of the arguments it names."""
        total = 1
        for i in self._extent:
            total *= args[i]
        if self._groups is not None:
            fn, idx = self._groups
            total *= fn(*[args[i] for i in idx])
        return total

    def _known(self, args: tuple) -> _Shape | None:
        return self._shapes.get(tuple([args[i] for i in self._shape]))

    def may_cut(self, args: tuple) -> bool:
        """Whether a call with these arguments may be cut at the current thread count: not
        at one thread, nor for a shape measured below `INLINE_S` (its fastest inline time
        only falls); a replay may call the kernel over its whole range itself otherwise
        (what `__call__` would do, less its sizing: ~5-15 us a call)."""
        if threads() == 1:
            return False
        if INLINE_S <= 0:
            return True
        known = self._known(args)
        return known is None or known.inline >= INLINE_S

    def seconds(self, args: tuple) -> float | None:
        """The fastest inline time seen for a call of this shape (None: not seen yet)."""
        known = self._known(args)
        return None if known is None else known.inline

    def parts(self, args: tuple, using: int | None = None) -> list[int]:
        """Bounds of the parts the range of this call is cut into (``n + 1`` values) for
        `using` threads (`threads` when None)."""
        using = threads() if using is None else using
        total = self.total(args)
        work = math.prod(int(args[i]) for i in self._work)
        n = min(using * PARTS_PER_THREAD, total, work // self.min_work)
        if INLINE_S > 0 and n > 1:
            known = self._known(args)
            if (known is None or known.inline < INLINE_S or known.skip > 0
                    or _machine.skip > 0):
                n = 1
            else:
                n = min(n, int(known.inline / PART_S))
        n = max(1, n) if using > 1 else 1
        return [total * i // n for i in range(n + 1)]

    def _inline(self, args: tuple, total: int, known: _Shape | None) -> None:
        """The whole range on the calling thread, timed into what is known of its shape."""
        t0 = time.perf_counter()
        self.kernel(*args, 0, total)
        s = time.perf_counter() - t0
        if known is None:
            if len(self._shapes) >= _MAX_SHAPES:
                self._shapes.clear()  # a long-lived process running many networks: start over
            self._shapes[tuple([args[i] for i in self._shape])] = _Shape(s)
            if s >= INLINE_S and threads() > 1:  # its next call may be cut: threads ready
                _crew.ready()  # (starting one costs ~100 us: not in a measured cut call)
            return
        if s < known.inline:
            known.inline = s
        if known.inline >= INLINE_S:  # a call that could have been cut
            known.passed()
            _machine.passed()

    def __call__(self, *args: Any) -> None:
        """Run the kernel over its whole range (it writes its outputs; nothing is returned)."""
        total = self.total(args)
        if (_threads or threads()) == 1:  # one thread: no sizing, a plain call
            self.kernel(*args, 0, total)
            return
        timed = INLINE_S > 0
        known = self._known(args) if timed else None
        if timed and (known is None or known.inline < INLINE_S or known.skip
                      or _machine.skip):
            self._inline(args, total, known)
            return
        using = threads()
        if timed:  # measured calls use the cores free now (`free_cores`)
            free = free_cores()
            if free is not None:
                using = max(1, min(using, free))
        b = self.parts(args, using)
        n = len(b) - 1
        if n == 1:
            if timed:
                self._inline(args, total, known)
            else:
                self.kernel(*args, 0, total)
            return
        if not _crew.busy.acquire(blocking=False):  # another thread is cutting a call
            self.kernel(*args, 0, total)
            return
        try:
            t0 = time.perf_counter()
            _crew.run(_Job(self.kernel, args, b), min(n, using) - 1)
            s = time.perf_counter() - t0
        finally:
            _crew.busy.release()
        if known is not None:
            won = s < WIN * known.inline
            for backoff in (known, _machine):
                if won:
                    backoff.won()
                else:
                    backoff.lost()

"""A decoded instruction stream, replayed while the memory it was decoded from is unchanged.

Decoding a run (unpacking every SET payload, translating every operand through the MMU,
checking shapes, evaluating the cycle model) costs tens of microseconds per layer in Python,
as much as the arithmetic of a small network. `Icore.run` therefore records, while it
interprets a stream, what the stream did: the kernel calls with their operands (views of the
simulated memory), the profiler/timer record writes, and the counters it added. The next run
of the same stream replays that record instead of decoding again -- but only after checking,
byte for byte, that everything the decode read is still what it was: the instruction words in
ETM and every constant block (weights, requant parameters, lookup tables, resize taps, pooling
tables). When the MMU table changed (the runtime points an INPUT entry at the caller's tensor),
the recorded logical addresses are translated again and the program replays on the new
mapping, or, if any address no longer translates into the same kind of memory, the stream is
interpreted again and faults as it would. A corrupted instruction word or weight therefore
changes the result exactly as it would without the cache; the feature maps are read by the
kernels at replay time, as on the chip.

The byte comparison costs 0.2-0.4 ms a run on a small network. Where the memory can say when
those bytes may have changed (a store with ``track``: the runtime's
`npu_runtime.watched_memory.WatchedArena`), a program keeps a `Watch` over its instruction
words and constant blocks: the store bumps its ``gen`` on every write or fill into them and
counts in ``exposed`` every writable view over them that is still alive. While ``exposed`` is 0
and ``gen`` is what it was when the program last compared its bytes, the bytes are those
bytes and the comparison is skipped; otherwise it is made, as without a watch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from xir.numba_target import njit

try:
    from numpy.lib.array_utils import byte_bounds
except ImportError:  # numpy < 2
    byte_bounds = np.byte_bounds

from .kernels import interleave, pool, vector
from .mmu import MEM_ETM, MmuFault, MmuTable

#: Programs kept per icore (a network deploys a few runs; a sweep may deploy many)
MAX_PROGRAMS = 64
#: replays between two tries to bind the steps whose kernel had no compiled code yet (a fresh
#: install's first runs, while a worker compiles it: `direct_steps`)
REBIND_EVERY = 32


def same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two uint8 blocks hold the same bytes (as 8-byte words where they divide into
    them: a fifth of the time of numpy's byte compare on the 2 MB a MobileNet checks)."""
    if a.size != b.size:
        return False
    if a.size % 8 == 0:
        return _same_words(a.view(np.uint64), b.view(np.uint64))
    return bool(np.array_equal(a, b))


@njit(cache=True)
def _same_words(a, b):
    """``a == b`` everywhere, block by block (a block's OR of XORs vectorises)."""
    n = a.shape[0]
    for s in range(0, n, 1024):
        e = min(n, s + 1024)
        x = a[s:e]
        y = b[s:e]
        d = np.uint64(0)
        for i in range(x.shape[0]):
            d |= x[i] ^ y[i]
        if d != 0:
            return False
    return True


@njit(cache=True)
def _same_blocks(arena, starts, sizes, seen):
    """Whether ``arena[starts[i]:starts[i] + sizes[i]]``, one block after another, hold the
    words of `seen` (all the constant blocks of a program in one call; uint64 words)."""
    at = 0
    for i in range(starts.shape[0]):
        s = starts[i]
        n = sizes[i]
        if not _same_words(arena[s:s + n], seen[at:at + n]):
            return False
        at += n
    return True


def _bounds(a: np.ndarray) -> tuple[int, int]:
    """The [first, last + 1) byte addresses an array touches."""
    lo, hi = byte_bounds(a)
    return lo, hi


def join_record_writes(steps: list[tuple[Callable[..., Any], tuple]]
                       ) -> list[tuple[Callable[..., Any], tuple]]:
    """`steps` with the profiler/timer record writes of a run (``np.copyto`` of a record's
    bytes into its slot, one per layer: a microsecond each) joined into one copy per span of
    adjacent slots, run after the kernels. Exact where it is done: a span is joined only when
    its slots are byte-contiguous and distinct, and no other step's array (a kernel's
    operands, another write) touches the span or the records' bytes -- so no kernel reads or
    writes a slot and the order of the writes cannot be seen. Writes that do not qualify
    stay where they were."""
    writes = []
    for i, (fn, args) in enumerate(steps):
        if fn is np.copyto and len(args) == 2:
            dst, src = args
            if (isinstance(dst, np.ndarray) and isinstance(src, np.ndarray)
                    and dst.dtype == np.uint8 and src.dtype == np.uint8 and dst.ndim == 1
                    and src.shape == dst.shape and dst.flags.c_contiguous and dst.size):
                writes.append((dst.__array_interface__["data"][0], i, dst, src))
    if len(writes) < 2:
        return steps
    writes.sort(key=lambda w: w[0])
    spans: list[list[tuple[int, int, np.ndarray, np.ndarray]]] = [[writes[0]]]
    for w in writes[1:]:
        last = spans[-1][-1]
        if w[0] == last[0] + last[2].size:
            spans[-1].append(w)
        else:
            spans.append([w])
    spans = [sp for sp in spans if len(sp) >= 2]
    if not spans:
        return steps
    others = []  # (step, first byte, last byte + 1) of every array of every step
    for i, (_, args) in enumerate(steps):
        for a in args:
            if isinstance(a, np.ndarray) and a.size:
                others.append((i, *_bounds(a)))
    table = np.array(others, dtype=np.int64).reshape(-1, 3)
    joined: set[int] = set()
    tail = []
    for sp in spans:
        lo = sp[0][0]
        hi = sp[-1][0] + sp[-1][2].size
        mine = {w[1] for w in sp}
        rest = table[~np.isin(table[:, 0], list(mine))]
        srcs = np.array([_bounds(w[3]) for w in sp], dtype=np.int64)
        if np.any((rest[:, 1] < hi) & (rest[:, 2] > lo)) or np.any(
                (rest[:, 1][:, None] < srcs[:, 1]) & (rest[:, 2][:, None] > srcs[:, 0])):
            continue
        dst = np.lib.stride_tricks.as_strided(sp[0][2], shape=(hi - lo,), strides=(1,))
        tail.append((np.copyto, (dst, np.concatenate([w[3] for w in sp]))))
        joined |= mine
    if not joined:
        return steps
    return [st for i, st in enumerate(steps) if i not in joined] + tail


def _shuffle_group(steps: list[tuple[Callable[..., Any], tuple]], i: int
                   ) -> tuple[Callable[..., Any], tuple] | None:
    """The `interleave` kernel call doing what ``steps[i:i + K]`` do, when they are the K COPY
    STRIDED_OUT layers of a channel shuffle (`lower_channel_shuffle`: copy k moves channels
    ``[k n, (k + 1) n)`` to ``k, k + K, ...`` of the same pixels, ``step == K``); else None.
    Exact where joined: every copy reads one input view and writes one output view (the same
    arrays, geometry and dtype), each output pixel's ``K n`` elements are written once and
    pixels do not overlap, and the output bytes do not overlap the input bytes, so neither the
    order of the writes nor a copy reading another's output can be seen."""
    fn, a = steps[i]
    if fn is not vector.copy or len(a) != 12:
        return None
    x, xrs, xpitch, xoff, y, yrs, ypitch, yoff, h_n, w_n, n, k_n = a
    if not (isinstance(x, np.ndarray) and isinstance(y, np.ndarray)) or x.dtype != y.dtype \
            or not 2 <= k_n <= len(steps) - i or n < 1 or h_n < 1 or w_n < 1:
        return None
    px, py = x.__array_interface__["data"][0], y.__array_interface__["data"][0]
    xs, ys = [x], [y]
    for k in range(1, k_n):
        f2, b = steps[i + k]
        if f2 is not vector.copy or len(b) != 12:
            return None
        if not (isinstance(b[0], np.ndarray) and isinstance(b[4], np.ndarray)) \
                or b[0].__array_interface__["data"][0] != px or b[0].dtype != x.dtype \
                or b[4].__array_interface__["data"][0] != py or b[4].dtype != y.dtype:
            return None
        if tuple(b[k2] for k2 in (1, 2, 5, 6, 8, 9, 10, 11)) != \
                (xrs, xpitch, yrs, ypitch, h_n, w_n, n, k_n) or \
                b[3] != xoff + k * n or b[7] != yoff + k:
            return None
        xs.append(b[0])
        ys.append(b[4])
    span = k_n * n
    if (w_n > 1 and ypitch < span) or (h_n > 1 and yrs < (w_n - 1) * ypitch + span) or \
            min(xrs, xpitch, yrs, ypitch, xoff, yoff) < 0:
        return None  # pixels whose outputs overlap: the copies' order would show
    xv, yv = max(xs, key=lambda v: v.size), max(ys, key=lambda v: v.size)
    xend = (h_n - 1) * xrs + (w_n - 1) * xpitch + xoff + span
    yend = (h_n - 1) * yrs + (w_n - 1) * ypitch + yoff + span
    if xend > xv.size or yend > yv.size or not yv.flags.writeable or \
            not (xv.ndim == yv.ndim == 1 and xv.flags.c_contiguous and yv.flags.c_contiguous):
        return None
    e = x.itemsize
    if px + xoff * e < py + yend * e and py + yoff * e < px + xend * e:
        return None  # the output overlaps the input
    fn, takes_k = interleave.for_groups(k_n)
    return fn, (xv, xrs, xpitch, xoff, yv, yrs, ypitch, yoff, h_n, w_n, n) + \
        ((k_n,) if takes_k else ())


def join_shuffles(steps: list[tuple[Callable[..., Any], tuple]]
                  ) -> list[tuple[Callable[..., Any], tuple]]:
    """`steps` with each channel shuffle's K COPY calls (`vector.copy`, one output channel in
    K each) replaced by one `interleave` kernel call in their place (`_shuffle_group`
    says when that is exact); other steps stay as they are, in order."""
    out: list[tuple[Callable[..., Any], tuple]] = []
    i = 0
    while i < len(steps):
        joined = _shuffle_group(steps, i)
        if joined is None:
            out.append(steps[i])
            i += 1
            continue
        out.append(joined)
        i += int(steps[i][1][11])
    return out


def _entry(disp: Any, args: tuple) -> Callable[..., Any]:
    """The compiled code `disp` (a Numba dispatcher) runs for `args`, called without the
    dispatcher's per-call type resolution (its CPython wrapper: ``entry_point``); `disp`
    itself where none is compiled for their types yet (the dispatcher compiles it, or runs its
    twin meanwhile)."""
    try:
        sig = tuple(disp.typeof_pyval(a) for a in args)
    except (TypeError, ValueError):  # a value Numba has no type for: the dispatcher decides
        return disp
    cres = disp.overloads.get(sig)
    return disp if cres is None else cres.entry_point


#: one step of `Recording.direct_steps`: (the `pool.Split` it came from or None, the kernel
#: the split held then, the callable, its arguments, the step's own callable and arguments)
Direct = tuple[Any, Any, Callable[..., Any], tuple, Callable[..., Any], tuple]


def direct_step(fn: Callable[..., Any], args: tuple) -> tuple[Direct, bool]:
    """Step ``fn(*args)`` as run on one thread: a `pool.Split` as its kernel over the whole
    range (what the split runs at one thread, without its sizing), a Numba kernel through its
    compiled code (`_entry`); and whether that is bound (False: a kernel not compiled yet)."""
    if isinstance(fn, pool.Split):
        kernel = fn.kernel
        full = tuple(args) + (0, fn.parts(args)[-1])
        if not hasattr(kernel, "overloads"):  # not a Numba dispatcher (a test's spy)
            return (fn, kernel, kernel, full, fn, args), True
        call = _entry(kernel, full)
        return (fn, kernel, call, full, fn, args), call is not kernel
    if hasattr(fn, "overloads") and hasattr(fn, "typeof_pyval"):
        call = _entry(fn, args)
        return (None, None, call, args, fn, args), call is not fn
    return (None, None, fn, args, fn, args), True


def _offset_in(view: np.ndarray, arena: np.ndarray) -> int:
    """Where `view` starts in `arena` (-1 when it is not inside it)."""
    off = view.__array_interface__["data"][0] - arena.__array_interface__["data"][0]
    return off if 0 <= off and off + view.size <= arena.size else -1


@dataclass
class Const:
    """A constant block the decode read through the MMU, and the bytes it saw."""

    logical: int
    nbytes: int
    mem: int
    view: np.ndarray
    seen: np.ndarray


@dataclass
class Slot:
    """A kernel argument that is a feature map operand: where it came from."""

    step: int
    arg: int
    logical: int
    nbytes: int
    mem: int
    dtype: np.dtype


@dataclass
class Recording:
    """What one interpreted run did, gathered while it ran."""

    steps: list[tuple[Callable[..., Any], tuple]] = field(default_factory=list)
    consts: list[Const] = field(default_factory=list)
    slots: list[Slot] = field(default_factory=list)
    #: id of a feature map view -> (the view, logical address, bytes, memory)
    _operands: dict[int, tuple[np.ndarray, int, int, int]] = field(default_factory=dict)
    #: the constants as (memory, starts, sizes, their bytes) blocks checked in one call per
    #: memory (`consts_unchanged`); False: compared one by one; None until first needed and
    #: after a rebind
    _blocks: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]] | bool | None = None
    #: the steps as the replay runs them (`replay_steps`); None until first needed and after a
    #: rebind
    _fast: list[tuple[Callable[..., Any], tuple]] | None = None
    #: those steps as one thread runs them (`direct_steps`); None until first needed, after a
    #: rebind, and while some kernel had no compiled code, every `REBIND_EVERY` replays
    _direct: list[Direct] | None = None
    _unbound_replays: int = 0

    def replay_steps(self) -> list[tuple[Callable[..., Any], tuple]]:
        """`steps` with the record writes joined (`join_record_writes`) and each channel
        shuffle's COPY layers run as one call (`join_shuffles`)."""
        fast = self._fast
        if fast is None:
            fast = self._fast = join_shuffles(join_record_writes(self.steps))
        return fast

    def direct_steps(self) -> list[Direct]:
        """`replay_steps` as run on one thread (`direct_step`): a replay of a small network
        is a hundred kernel calls of a few microseconds each, and a `pool.Split`'s sizing and
        the dispatcher's type resolution over 30-odd arguments are a good part of that."""
        direct = self._direct
        if direct is not None and self._unbound_replays:
            self._unbound_replays -= 1
            if not self._unbound_replays:
                direct = None  # some kernel was not compiled: try to bind it again
        if direct is None:
            direct = []
            bound = True
            for fn, args in self.replay_steps():
                step, ok = direct_step(fn, args)
                direct.append(step)
                bound &= ok
            self._direct = direct
            self._unbound_replays = 0 if bound else REBIND_EVERY
        return direct

    def call(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run a kernel (or memory write) now and keep it for the replay."""
        fn(*args)
        step = len(self.steps)
        for k, a in enumerate(args):
            hit = self._operands.get(id(a)) if isinstance(a, np.ndarray) else None
            if hit is not None and hit[0] is a:
                self.slots.append(Slot(step, k, hit[1], hit[2], hit[3], a.dtype))
        self.steps.append((fn, args))

    def operand(self, arr: np.ndarray, logical: int, nbytes: int, mem: int) -> np.ndarray:
        """A feature map view made from logical address `logical` (re-made on a new MMU)."""
        self._operands[id(arr)] = (arr, logical, nbytes, mem)
        return arr

    def const(self, view: np.ndarray, logical: int, mem: int) -> np.ndarray:
        """A constant block the decode read: replayed only while its bytes are these."""
        self.consts.append(Const(logical, view.size, mem, view, view.copy()))
        return view

    def consts_unchanged(self, whole: Callable[[int], np.ndarray]) -> bool:
        """Whether every constant block still holds the bytes the decode saw (`whole(mem)`:
        the whole memory `mem` as one array, where the blocks are looked up)."""
        blocks = self._blocks
        if blocks is None:
            blocks = self._blocks = self._make_blocks(whole)
        if blocks is False:
            return all(same_bytes(c.view, c.seen) for c in self.consts)
        return all(_same_blocks(whole(mem).view(np.uint64), starts, sizes, seen)
                   for mem, starts, sizes, seen in blocks)

    def _make_blocks(self, whole: Callable[[int], np.ndarray]) -> Any:
        """The constants grouped per memory for `_same_blocks` (as 8-byte words); False when
        one is not whole words or not inside its memory's array (each is compared on its own
        then)."""
        by_mem: dict[int, list[Const]] = {}
        for c in self.consts:
            by_mem.setdefault(c.mem, []).append(c)
        blocks = []
        for mem, cs in by_mem.items():
            arena = whole(mem)
            starts = [_offset_in(c.view, arena) for c in cs]
            if arena.size % 8 or arena.__array_interface__["data"][0] % 8 or \
                    any(a < 0 or a % 8 or c.nbytes % 8 for a, c in zip(starts, cs)):
                return False
            blocks.append((mem, np.array(starts, dtype=np.int64) // 8,
                           np.array([c.nbytes for c in cs], dtype=np.int64) // 8,
                           np.concatenate([c.seen for c in cs]).view(np.uint64)))
        return blocks

    def rebind(self, mmu: MmuTable, peek: Callable[[int, int, int], np.ndarray],
               view: Callable[[int, int, int], np.ndarray], trusted: bool = False) -> bool | None:
        """Re-resolve every constant and operand through `mmu` (`peek(mem, phys, n)` reads a
        constant, `view(mem, phys, n)` makes an operand); None, changing nothing, when one no
        longer translates into the same memory, misaligned, or a constant's bytes differ;
        else whether a constant moved. `trusted`: the constants' bytes are known unchanged
        where they are (a clean watch), so one still at its place is not compared."""
        moved = False
        try:
            consts = []
            for c in self.consts:
                mem, phys = mmu.translate(c.logical, c.nbytes)
                if mem != c.mem:
                    return None
                v = peek(mem, phys, c.nbytes)
                here = _same_place(v, c.view)
                if not (trusted and here) and not same_bytes(v, c.seen):
                    return None
                moved |= not here
                consts.append((c, v))
            args = [list(a) for _, a in self.steps]
            for s in self.slots:
                mem, phys = mmu.translate(s.logical, s.nbytes)
                if mem != s.mem or phys % s.dtype.itemsize:
                    return None
                args[s.step][s.arg] = view(mem, phys, s.nbytes).view(s.dtype)
        except MmuFault:
            return None
        for c, v in consts:
            c.view = v
        if moved:
            self._blocks = None
        self.steps = [(fn, tuple(a)) for (fn, _), a in zip(self.steps, args)]
        self._fast = None
        self._direct = None
        return moved


class Watch:
    """What a store says about the bytes of one program (see the module docstring): `gen`
    changes with every access that may have changed them, `exposed` counts the writable views
    over them still alive."""

    __slots__ = ("gen", "exposed", "__weakref__")

    def __init__(self) -> None:
        self.gen = 0
        self.exposed = 0


def _same_place(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two views are the same bytes of memory."""
    return (a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
            and a.nbytes == b.nbytes)


@dataclass
class Program:
    """A recorded run: replayable while its code and constants are unchanged."""

    code: np.ndarray  # the instruction bytes (uint8) it was decoded from
    mmu: MmuTable  # the table it replays under (replaced when an equal or rebound one comes)
    rec: Recording
    result: Any  # the RunResult of the recorded run
    stats: dict[str, int]  # counters the run added
    rtiles: np.ndarray  # DMA tiles the run added per channel
    wtiles: np.ndarray
    #: the stores' watch over the code and constants (None: none, the bytes are compared),
    #: and its `gen` when the bytes were last found equal
    watch: Watch | None = None
    seen_gen: int = -1
    armable: bool = True  # False once a store could not watch

    def bind(self, code: np.ndarray, mmu: MmuTable, bus: Any) -> bool:
        """Whether replaying gives what decoding `code` under `mmu` would (re-resolving the
        operands when the MMU table changed). `bus` is the icore's memory: ``peek(mem, phys,
        n)`` reads the constants, ``view(mem, phys, n)`` makes operands, ``whole(mem)`` is
        all of memory `mem`, ``store(mem)`` its byte store (a watch where it has ``track``)."""
        w = self.watch
        if w is None and self.armable:
            w = self._arm(code, bus)
        clean = w is not None and w.exposed == 0 and w.gen == self.seen_gen
        same_mmu = mmu is self.mmu or mmu.segments == self.mmu.segments
        if clean and same_mmu:
            self.mmu = mmu
            return True
        gen = w.gen if w is not None else -1  # taken before the bytes are read
        if not clean and not same_bytes(self.code, code):
            return False
        if same_mmu:
            if not self.rec.consts_unchanged(bus.whole):
                return False
            self.mmu = mmu
        else:
            moved = self.rec.rebind(mmu, bus.peek, bus.view, trusted=clean)
            if moved is None:
                return False
            self.mmu = mmu
            if moved and w is not None:
                w = self._arm(code, bus)
                gen = w.gen if w is not None else -1
        self.seen_gen = gen
        return True

    def _arm(self, code: np.ndarray, bus: Any) -> Watch | None:
        """A new watch over `code` (in ETM) and the constants, from the stores they are in;
        None where a store cannot watch (the bytes are compared on every run then)."""
        self.watch = None
        self.seen_gen = -1
        views: dict[int, list[np.ndarray]] = {MEM_ETM: [code]}
        for c in self.rec.consts:
            views.setdefault(c.mem, []).append(c.view)
        w = Watch()
        for mem, vs in views.items():
            track = getattr(bus.store(mem), "track", None)
            if track is None or not track(w, vs):
                self.armable = False
                return None
        self.watch = w
        return w

    def replay(self) -> None:
        """Run the recorded steps again, each kernel straight on its compiled code
        (`Recording.direct_steps`), except a split whose kernel was replaced since (as a
        test's spy does) and, at more than one thread, a call its split may cut
        (`pool.Split.may_cut`): those run as splits (the pool sizes the parts). A call no
        thread count would cut skips the split's sizing: the PP-OCRv4 detector's replay at
        two threads 8.43 -> 7.20 ms of CPU."""
        cutting = pool.threads() != 1
        for split, kernel, call, args, fn, orig in self.rec.direct_steps():
            if split is not None and (split.kernel is not kernel
                                      or (cutting and split.may_cut(orig))):
                fn(*orig)
            else:
                call(*args)

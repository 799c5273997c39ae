"""The simulated ETM/OCM byte store, telling the icore which decoded runs are still current.

`Icore.run` replays a recorded decode of an instruction stream while the instruction words and
the constant blocks the decode read (weights, requant parameters, tables) are unchanged
(`npu_model.program`). Comparing those bytes on every run costs 0.2-0.4 ms on a small network
(a MobileNet's 2 MB of weights), several percent of a forward. `WatchedArena` lets the icore
skip the comparison: a decoded run registers a `Watch` over the ranges it read
(`track`), and the store bumps the watch's ``gen`` on every access that may change them:

  - `write` and `fill` (`MemChunk.write/fill/copyFrom` of a user or of the runtime: uploads,
    weight refreshes, snapshot restores, a served client's WRITE/FILL/COPY) overlapping a
    watched range;
  - a writable `view` handed out over a watched range (`MemChunk.view/numpy/read`, the
    icore's feature map operands): from the moment it exists until the last array made from
    it is gone, the watch counts it in ``exposed`` (the caller may write through it at any
    time), and its end bumps ``gen`` again.

A run whose watch has ``exposed == 0`` and the ``gen`` it saw when it last compared the bytes
replays without reading them; any other compares them byte for byte, as before, so the chip
still executes what is in its simulated memory. The icore reads the instructions and
constants through `peek`, a view it never writes through, which exposes nothing.

A view's lifetime is followed through its base object: the array returned is built over a
``memoryview`` of the arena, so every array derived from it (slices, dtype views, reshapes,
buffers) keeps that memoryview alive, and a weak reference to it says when the last is gone.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import numpy as np

from xrt.memory.ptr import as_uint8_view
from xrt.memory.storage import ArenaStorage


class _Tracked:
    """The merged byte ranges (arena offsets) one watch covers in one store."""

    __slots__ = ("lo", "hi", "starts", "ends", "ref")

    def __init__(self, ranges: list[tuple[int, int]], watch: Any) -> None:
        merged: list[list[int]] = []
        for s, e in sorted(ranges):
            if merged and s <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], e)
            else:
                merged.append([s, e])
        self.starts = np.array([m[0] for m in merged], dtype=np.int64)
        self.ends = np.array([m[1] for m in merged], dtype=np.int64)
        self.lo = int(self.starts[0])
        self.hi = int(self.ends[-1])
        self.ref = weakref.ref(watch)

    def hits(self, s: int, e: int) -> bool:
        """Whether [s, e) overlaps one of the ranges."""
        if e <= self.lo or s >= self.hi:
            return False
        i = int(np.searchsorted(self.ends, s, side="right"))
        return i < self.starts.size and int(self.starts[i]) < e


class WatchedArena(ArenaStorage):
    """An `ArenaStorage` that bumps the `Watch` of every decoded run whose instructions or
    constants an access may change (module docstring)."""

    def __init__(self, base: int, size: int, name: str = "arena") -> None:
        super().__init__(base, size, name)
        self._lock = threading.RLock()
        self._tracked: list[_Tracked] = []
        self._lo = self._hi = 0  # the span of every tracked range ([0, 0): none)
        #: live writable views: key -> [start, end, watches counting it (weak refs), ref]
        self._live: dict[int, list[Any]] = {}

    # --- accesses ---------------------------------------------------------------------------

    def write(self, addr: int, data: Any) -> None:
        src = as_uint8_view(data, "source data")
        off = self._offset(addr, src.size)
        self.arena[off:off + src.size] = src
        self._touched(off, src.size)

    def fill(self, addr: int, n: int, value: int = 0) -> None:
        super().fill(addr, n, value)
        self._touched(int(addr) - self.base, int(n))

    def view(self, addr: int, n: int) -> np.ndarray:
        """A writable view whose whole lifetime counts as a possible write (module doc)."""
        off = self._offset(addr, n)
        n = int(n)
        out = np.frombuffer(memoryview(self.arena[off:off + n]), np.uint8)
        base = out.base
        key = id(base)
        with self._lock:
            hits = [t.ref for t in self._hits(off, off + n)]
            for r in hits:
                w = r()
                if w is not None:
                    w.exposed += 1
                    w.gen += 1
            self._live[key] = [off, off + n, hits,
                               weakref.ref(base, lambda _r, k=key: self._ended(k))]
        return out

    def peek(self, addr: int, n: int) -> np.ndarray:
        """A view of `n` bytes at `addr` for a reader that never writes through it (the
        icore's instruction fetch and constant reads): it exposes nothing."""
        off = self._offset(addr, n)
        return self.arena[off:off + int(n)]

    # --- watches ----------------------------------------------------------------------------

    def track(self, watch: Any, views: list[np.ndarray]) -> bool:
        """Have `watch` (``gen``, ``exposed``) follow the bytes of `views` (arrays inside this
        arena). False, tracking nothing, when one is not inside it."""
        arena = self.arena
        if arena is None:
            return False
        a0 = arena.__array_interface__["data"][0]
        ranges = []
        for v in views:
            s = v.__array_interface__["data"][0] - a0
            if s < 0 or s + v.nbytes > arena.size:
                return False
            ranges.append((s, s + v.nbytes))
        if not ranges:
            return True
        t = _Tracked(ranges, watch)
        with self._lock:
            self._tracked = [x for x in self._tracked if x.ref() is not None]
            self._tracked.append(t)
            self._lo = min(x.lo for x in self._tracked)
            self._hi = max(x.hi for x in self._tracked)
            for live in self._live.values():
                if t.hits(live[0], live[1]):
                    watch.exposed += 1
                    live[2].append(t.ref)
        return True

    def _hits(self, s: int, e: int) -> list[_Tracked]:
        if e <= self._lo or s >= self._hi or s == e:
            return []
        return [t for t in self._tracked if t.hits(s, e)]

    def _touched(self, s: int, n: int) -> None:
        if n <= 0 or s + n <= self._lo or s >= self._hi:
            return
        with self._lock:
            for t in self._hits(s, s + n):
                w = t.ref()
                if w is not None:
                    w.gen += 1

    def _ended(self, key: int) -> None:
        """The last array made from a view is gone: its watches stop counting it."""
        with self._lock:
            live = self._live.pop(key, None)
            if live is None:
                return
            for r in live[2]:
                w = r()
                if w is not None:
                    w.exposed -= 1
                    w.gen += 1

"""`MemManager`: who owns which addresses in one MemRegion.

Each MemRegion has exactly one manager. It owns the region's `Allocator`, the record of every live
chunk, and the lock that serialises them.

Garbage collection can run a chunk's finalizer at any moment, even in the middle of an allocator
call on the same thread. So finalizers never touch the allocator directly: they queue the address
and free it only if the (non-reentrant) lock is free; otherwise the next manager call drains the
queue. User deleters (from `malloc(MemPtr, ..., deleter=...)`) run after the lock is released, so
a deleter may call back into the region.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from xrt.errors import DeviceError, DoubleFreeError
from xrt.memory.allocator import Allocator
from xrt.memory.chunk import MemChunk, _ChunkState
from xrt.memory.ptr import MemPtr

if TYPE_CHECKING:
    from xrt.memory.region import MemRegion

logger = logging.getLogger(__name__)

Deleter = Callable[[MemPtr], None]


class _Record:
    """Book-keeping for one live allocation; holds the state weakly when it is auto-freed."""

    __slots__ = ("size", "ref", "deleter", "begin", "cptr_key")

    def __init__(
        self, size: int, ref: Any, deleter: Deleter | None, begin: MemPtr, cptr_key: int | None
    ) -> None:
        self.size = size
        self.ref = ref
        self.deleter = deleter
        self.begin = begin
        self.cptr_key = cptr_key

    def state(self) -> _ChunkState | None:
        return self.ref() if isinstance(self.ref, weakref.ref) else self.ref


class MemManager:
    """Memory manager of one MemRegion: live chunks, queries, and the allocator behind them."""

    def __init__(self, region: MemRegion, allocator: Allocator) -> None:
        self._region = region
        self._alloc = allocator
        self._lock = threading.Lock()
        self._pending: collections.deque[int] = collections.deque()
        self._deferred: collections.deque[tuple[Deleter, MemPtr]] = collections.deque()
        self._records: dict[int, _Record] = {}
        self._by_cptr: dict[int, int] = {}
        self._closed = False

    # --- locking ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self._lock.acquire()
        try:
            self._drain()
            yield
        finally:
            self._lock.release()
        self._run_deleters(raise_errors=True)

    def _drain(self) -> None:
        while self._pending:
            addr = self._pending.popleft()
            if addr in self._records:
                self._release(addr, "auto-freed")

    def _run_deleters(self, raise_errors: bool) -> None:
        first: Exception | None = None
        while self._deferred:
            deleter, begin = self._deferred.popleft()
            try:
                deleter(begin)
            except Exception as exc:
                if raise_errors and first is None:
                    first = exc
                else:
                    logger.exception("deleter of %r in region %r failed", begin, self._region.name)
        if first is not None:
            raise first

    def _collect(self, addr: int) -> None:
        """Finalizer of an auto-freed chunk: queue its address, free it now if the lock is free."""
        try:
            self._pending.append(addr)
            if self._lock.acquire(blocking=False):
                try:
                    self._drain()
                finally:
                    self._lock.release()
                self._run_deleters(raise_errors=False)
        except Exception:  # never raise from a finalizer (also covers interpreter shutdown)
            with contextlib.suppress(Exception):
                logger.exception("auto-free of %#x in region %r failed", addr, self._region.name)

    # --- allocation (called by MemRegion / MemChunk) ------------------------------------------

    def _new_chunk(
        self,
        byte_size: int,
        auto_free: bool,
        alignment: int = 1,
        begin: MemPtr | None = None,
        deleter: Deleter | None = None,
    ) -> MemChunk:
        region = self._region
        with self._locked():
            if self._closed:
                raise DeviceError(
                    f"region {region.name!r}: its device is closed; open the device again to "
                    "allocate memory"
                )
            n = region._footprint(byte_size, alignment)
            if begin is not None and begin.has_addr():
                addr = self._alloc.reserve(begin.addr(), n)
            else:
                addr = self._alloc.alloc(n, alignment)
            try:
                ptr = region._attach(addr, byte_size, alignment, begin)
            except BaseException:
                self._alloc.free(addr)
                raise
            state = _ChunkState(region, self, addr, byte_size, ptr, auto_free)
            cptr_key = ptr.cptr_address() if ptr.has_cptr() else None
            if auto_free:
                # the finalizer holds the manager weakly: the global finalize registry must not
                # keep a dropped device (manager -> region -> device) alive through its chunks
                fin = weakref.finalize(state, _collect_weakly, weakref.ref(self), addr)
                fin.atexit = False
                state.finalizer = fin
                ref: Any = weakref.ref(state)
            else:
                ref = state
            # the deleter gets the caller's own MemPtr, as it releases the caller's memory
            self._records[addr] = _Record(
                byte_size, ref, deleter, begin if begin is not None else ptr, cptr_key
            )
            if cptr_key is not None:
                self._by_cptr[cptr_key] = addr
        return MemChunk._wrap(state)

    def _release(self, addr: int, why: str) -> None:
        """Free one live allocation (lock held)."""
        rec = self._records.pop(addr)
        self._alloc.free(addr)
        self._region._detach(addr)
        if rec.cptr_key is not None and self._by_cptr.get(rec.cptr_key) == addr:
            del self._by_cptr[rec.cptr_key]
        state = rec.state()
        if state is not None:
            state.freed, state.why = True, why
            if state.finalizer is not None:
                state.finalizer.detach()
        if rec.deleter is not None:
            self._deferred.append((rec.deleter, rec.begin))

    def _free_state(self, state: _ChunkState) -> None:
        with self._locked():
            if state.freed or state.addr not in self._records:
                raise DoubleFreeError(
                    f"MemChunk at {state.addr:#x} in region {self._region.name!r} was already "
                    f"freed ({state.why or 'unknown'}); free a chunk once"
                )
            self._release(state.addr, "freed explicitly")  # type: ignore[arg-type]

    def release_all(self, why: str, close: bool = False) -> int:
        """Free every live chunk (device reset or close); return how many were freed.

        With `close=True` the region refuses further allocations.
        """
        with self._locked():
            addrs = list(self._records)
            for addr in addrs:
                self._release(addr, why)
            self._alloc.reset()
            if close:
                self._closed = True
        return len(addrs)

    # --- vendor queries -----------------------------------------------------------------------

    def getAllMemChunk(self) -> list[MemChunk]:
        """Handles to every live chunk of the region, by address."""
        with self._locked():
            states = [self._records[a].state() for a, _ in self._alloc.allocations()]
        return [MemChunk._wrap(s) for s in states if s is not None]

    def getMemChunk(self, ptr: MemPtr, byte_size: int) -> MemChunk | None:
        """The live chunk that starts at `ptr` and has exactly `byte_size` bytes, else None.

        `ptr` is matched by address when it has one, else by its C pointer (host chunks).
        """
        if ptr.isNull():
            return None
        with self._locked():
            addr = ptr.addr() if ptr.has_addr() else self._by_cptr.get(ptr.cptr_address())
            rec = self._records.get(addr) if addr is not None else None
            state = rec.state() if rec is not None and rec.size == int(byte_size) else None
        return MemChunk._wrap(state) if state is not None else None

    def getMemRegionInfo(self) -> dict[str, Any]:
        """Facts about the region: name, kind, base, size, bytes used/free, chunk count."""
        region = self._region
        with self._locked():
            return {
                "name": region.name,
                "kind": region.kind,
                "base": region.base,
                "size": region.size,
                "used_bytes": self._alloc.used_bytes,
                "free_bytes": self._alloc.free_bytes,
                "largest_free_block": self._alloc.largest_free_block,
                "chunk_count": len(self._records),
                "default_alignment": region.default_alignment,
            }

    def clone(self, depth: int = 1) -> MemManager:
        """The same manager: it stands for the region's one address space, which is not copied."""
        return self

    # --- Pythonic helpers ---------------------------------------------------------------------

    @property
    def region(self) -> MemRegion:
        """The region this manager serves."""
        return self._region

    @property
    def allocator(self) -> Allocator:
        """The address-space allocator (read it; do not allocate behind the manager's back)."""
        return self._alloc

    @property
    def free_bytes(self) -> int:
        """Free bytes in the region."""
        with self._locked():
            return self._alloc.free_bytes

    @property
    def used_bytes(self) -> int:
        """Bytes held by live chunks (0-byte chunks count as 1: they own an address)."""
        with self._locked():
            return self._alloc.used_bytes

    @property
    def chunk_count(self) -> int:
        """Number of live chunks."""
        with self._locked():
            return len(self._records)

    def check(self) -> bool:
        """Verify the book-keeping: records match allocations, free blocks are coalesced."""
        with self._locked():
            allocs = self._alloc.allocations()
            if [a for a, _ in allocs] != sorted(self._records):
                return False
            if any(max(1, self._records[a].size) != n for a, n in allocs):
                return False
            blocks = self._alloc.free_blocks()
            spans = sorted(allocs + blocks)
            pos = self._alloc.base
            for a, n in spans:
                if a != pos:
                    return False
                pos = a + n
            if pos != self._alloc.base + self._alloc.size:
                return False
            return all(a + n != b for (a, n), (b, _) in zip(blocks, blocks[1:]))

    def __repr__(self) -> str:
        return f"MemManager({self._region.name!r}, chunks={len(self._records)})"


def _collect_weakly(manager_ref: Any, addr: int) -> None:
    """An auto-freed chunk's finalizer: hand the address to its manager while it lives (a
    dropped device's manager may be gone first; its memory went with it)."""
    manager = manager_ref()
    if manager is not None:
        manager._collect(addr)

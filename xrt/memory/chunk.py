"""`MemChunk`: a handle to one contiguous allocation in a memory region.

Ownership model. An allocation is a private `_ChunkState`; a `MemChunk` is a handle to it, like
the vendor's reference-counted MemChunk. `clone()` and `MemManager.getAllMemChunk()` give more
handles to the same state (they compare equal). With `auto_free=True` the allocation is released
by a `weakref.finalize` on the state once the last handle is gone; it is disabled at interpreter
exit (the process's memory goes with it), so nothing runs during shutdown.

Double free. `free()` is strict: freeing a chunk that is already free raises DoubleFreeError, as a
real double free would, so bugs surface. `close()` is the idempotent variant for owners, and it is
what the context manager calls on exit: `with region.malloc(n) as c: ...; c.free()` is fine.
The allocator underneath independently refuses to free an address that is not allocated.

In use. A runtime that deploys into a chunk the user allocated (an NPU backend's
`userReuseSegment`) pins it (`pin(holder, what)`): `free()` / `close()` of a pinned chunk raise
ChunkInUseError naming the holders, so no deployment is left pointing at memory the allocator may
hand out again. A pin is held weakly: a holder that is dropped (garbage collected) lets go of it.
Device close and region reset free pinned chunks too (the device is gone).

Use after free. Any data access on a freed chunk raises UseAfterFreeError naming the chunk and why
it was freed (explicit free, device close, region reset). Numpy views handed out earlier cannot be
revoked: they keep pointing at the old bytes, like a dangling pointer, so drop them with the chunk.
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from xrt.args import int_arg
from xrt.errors import (
    ChunkInUseError,
    DoubleFreeError,
    InvalidArgumentError,
    MemoryAccessError,
    UnsupportedOpError,
    UseAfterFreeError,
)
from xrt.memory.ptr import MemPtr, as_uint8_view

if TYPE_CHECKING:
    from xrt.memory.manager import MemManager
    from xrt.memory.region import MemRegion


#: guards the pin tables (sessions in several threads pin and unpin one shared chunk)
_PIN_LOCK = threading.Lock()


class _ChunkState:
    """One allocation; shared by every MemChunk handle to it. Holds no reference to handles."""

    __slots__ = ("region", "manager", "addr", "size", "begin", "auto_free", "freed", "why",
                 "finalizer", "pins", "__weakref__")

    def __init__(
        self,
        region: MemRegion | None,
        manager: MemManager | None,
        addr: int | None,
        size: int,
        begin: MemPtr,
        auto_free: bool,
    ) -> None:
        self.region = region
        self.manager = manager
        self.addr = addr
        self.size = size
        self.begin = begin
        self.auto_free = auto_free
        self.freed = False
        self.why = ""
        self.finalizer: weakref.finalize | None = None
        #: holder -> what it uses the chunk for (`MemChunk.pin`); weak: a dropped holder unpins
        self.pins: weakref.WeakKeyDictionary | None = None


class MemChunk:
    """A contiguous block of memory in a MemRegion (a handle; see the module docstring).

    `MemChunk()` is a null handle, usable for nothing but comparison; chunks come from
    `MemRegion.malloc` / `Device.malloc`.
    """

    __slots__ = ("_state",)

    def __init__(self) -> None:
        self._state: _ChunkState | None = None

    @classmethod
    def _wrap(cls, state: _ChunkState) -> MemChunk:
        chunk = cls.__new__(cls)
        chunk._state = state
        return chunk

    @staticmethod
    def Init() -> MemChunk:
        """An initialised (non-null) empty chunk: 0 bytes, null begin, on no region."""
        return MemChunk._wrap(_ChunkState(None, None, None, 0, MemPtr.NullPtr(), False))

    # --- state access -------------------------------------------------------------------------

    def _st(self) -> _ChunkState:
        if self._state is None:
            raise InvalidArgumentError(
                "null MemChunk has no memory; get chunks from MemRegion.malloc or Device.malloc"
            )
        return self._state

    def identity(self) -> object:
        """The allocation this handle refers to: the same object for every handle of one
        chunk (copies, `MemChunk(chunk)`), hashable and weak-referenceable, so a runtime can
        key what it records about a chunk by it (user chunks shared between backends)."""
        return self._st()

    def _live(self) -> _ChunkState:
        st = self._st()
        if st.freed:
            raise UseAfterFreeError(
                f"{self!r} was already freed ({st.why}); allocate a new chunk instead of "
                "using this one"
            )
        return st

    def _range(self, offset: int, nbytes: int, what: str) -> tuple[_ChunkState, int]:
        st = self._live()
        offset, nbytes = int_arg(offset, f"{what} offset"), int_arg(nbytes, f"{what} size")
        if offset < 0 or nbytes < 0 or offset + nbytes > st.size:
            raise MemoryAccessError(
                f"{self!r}: {what} of {nbytes} bytes at offset {offset} is outside the chunk "
                f"(size {st.size}); keep offset + size <= {st.size}"
            )
        return st, offset

    # --- vendor properties --------------------------------------------------------------------

    @property
    def begin(self) -> MemPtr:
        """Where the chunk starts: MemPtr(addr) on devices, MemPtr(buffer, addr) on the host."""
        return self._st().begin

    @property
    def byte_size(self) -> int:
        """Size of the chunk in bytes."""
        return self._st().size

    @property
    def region(self) -> MemRegion | None:
        """The MemRegion the chunk lives in (None for `MemChunk.Init()`)."""
        return self._st().region

    @property
    def addr(self) -> int:
        """Start address of the chunk (synthetic, but unique, for host chunks)."""
        return self._st().begin.addr()

    @property
    def auto_free(self) -> bool:
        """True when the chunk is freed automatically once its last handle is dropped."""
        return self._st().auto_free

    @property
    def is_freed(self) -> bool:
        """True once the chunk has been freed (explicitly, or by device close / region reset)."""
        return self._st().freed

    def isOn(self, region: MemRegion) -> bool:
        """True when the chunk lives in `region`."""
        return self._st().region is region

    # --- data access --------------------------------------------------------------------------

    def view(self, offset: int = 0, nbytes: int | None = None) -> np.ndarray:
        """Zero-copy writable uint8 numpy view of `nbytes` at `offset` (default: to the end).

        Raises UnsupportedOpError when the region's storage is remote; use read/write there.
        """
        st = self._live()
        if nbytes is None:
            nbytes = st.size - int_arg(offset, "view offset")
        st, offset = self._range(offset, nbytes, "view")
        if st.region is None:
            return np.zeros(0, dtype=np.uint8)
        v = st.region.storage.view(st.addr + offset, nbytes)
        if v is None:
            raise UnsupportedOpError(
                f"{self!r}: region {st.region.name!r} has remote storage with no zero-copy view; "
                "use chunk.read()/chunk.write()"
            )
        return v

    def numpy(self) -> np.ndarray:
        """Zero-copy uint8 numpy view of the whole chunk (local storage only)."""
        return self.view(0, None)

    def _read_bytes(self, offset: int, nbytes: int) -> np.ndarray | bytes:
        st, offset = self._range(offset, nbytes, "read")
        if nbytes == 0 or st.region is None:
            return np.zeros(0, dtype=np.uint8)
        storage = st.region.storage
        v = storage.view(st.addr + offset, nbytes)
        return v if v is not None else storage.read(st.addr + offset, nbytes)

    def read(self, dest: Any, src_offset: int = 0, byte_size: int | None = None) -> None:
        """Copy `byte_size` bytes from `src_offset` in the chunk into writable buffer `dest`.

        `byte_size` defaults to the size of `dest`.
        """
        dv = as_uint8_view(dest, "read destination")
        if byte_size is None:
            byte_size = dv.size
        byte_size = int_arg(byte_size, "read byte_size", 0)
        if not dv.flags.writeable:
            raise InvalidArgumentError(
                f"{self!r}: read destination is read-only; pass a writable buffer"
            )
        if byte_size > dv.size:
            raise MemoryAccessError(
                f"{self!r}: read of {byte_size} bytes into a destination of only {dv.size} bytes; "
                "pass a larger buffer or a smaller byte_size"
            )
        data = self._read_bytes(src_offset, byte_size)
        dv[:byte_size] = np.frombuffer(data, np.uint8) if isinstance(data, bytes) else data

    def write(self, dest_offset: int, src: Any, byte_size: int | None = None) -> None:
        """Copy `byte_size` bytes of buffer `src` into the chunk at `dest_offset`.

        `byte_size` defaults to the size of `src`.
        """
        sv = as_uint8_view(src, "write source")
        if byte_size is None:
            byte_size = sv.size
        byte_size = int_arg(byte_size, "write byte_size", 0)
        if byte_size > sv.size:
            raise MemoryAccessError(
                f"{self!r}: write of {byte_size} bytes from a source of only {sv.size} bytes; "
                "pass a larger source or a smaller byte_size"
            )
        st, dest_offset = self._range(dest_offset, byte_size, "write")
        if byte_size and st.region is not None:
            st.region.storage.write(st.addr + dest_offset, sv[:byte_size])

    def copyFrom(
        self, dest_offset: int, src_chunk: MemChunk, src_offset: int, byte_size: int
    ) -> None:
        """Copy `byte_size` bytes from `src_chunk` at `src_offset` to this chunk at `dest_offset`.

        Works across regions and devices; overlapping ranges in one chunk copy correctly.
        """
        byte_size = int_arg(byte_size, "copyFrom byte_size", 0)
        if not isinstance(src_chunk, MemChunk):
            raise InvalidArgumentError(f"copyFrom source must be a MemChunk, not "
                                       f"{type(src_chunk).__name__}")
        st, dest_offset = self._range(dest_offset, byte_size, "copy destination")
        data = src_chunk._read_bytes(src_offset, byte_size)
        if byte_size == 0 or st.region is None:
            return
        dst = st.region.storage.view(st.addr + dest_offset, byte_size)
        if dst is not None and not isinstance(data, bytes):
            np.copyto(dst, data)  # numpy handles overlap between src and dst
        else:
            st.region.storage.write(st.addr + dest_offset, data)

    def fill(self, value: int = 0, offset: int = 0, nbytes: int | None = None) -> None:
        """Set `nbytes` bytes (default: to the end) at `offset` to `value` (0..255)."""
        value = int_arg(value, "fill value", 0, 255)
        st = self._live()
        if nbytes is None:
            nbytes = st.size - int_arg(offset, "fill offset")
        st, offset = self._range(offset, nbytes, "fill")
        if nbytes and st.region is not None:
            st.region.storage.fill(st.addr + offset, nbytes, value)

    # --- lifetime -----------------------------------------------------------------------------

    def pin(self, holder: object, what: str) -> None:
        """Record that `holder` (any weak-referenceable object, e.g. a backend) uses the chunk
        for `what`; until `unpin(holder)` or the holder is dropped, `free()` is refused."""
        st = self._live()
        with _PIN_LOCK:
            if st.pins is None:
                st.pins = weakref.WeakKeyDictionary()
            st.pins[holder] = str(what)

    def unpin(self, holder: object) -> None:
        """`holder` no longer uses the chunk (a no-op when it held no pin)."""
        st = self._state
        if st is not None and st.pins is not None:
            with _PIN_LOCK:
                st.pins.pop(holder, None)

    def holders(self) -> list[object]:
        """The live objects that pinned the chunk (a runtime finds the other deployments
        sharing it)."""
        st = self._state
        if st is None or st.pins is None:
            return []
        with _PIN_LOCK:
            return list(st.pins.keys())

    def users(self) -> list[str]:
        """What the live pins use the chunk for (`pin`'s `what`), in no particular order."""
        st = self._state
        if st is None or st.pins is None:
            return []
        with _PIN_LOCK:
            return list(st.pins.values())

    def free(self) -> None:
        """Release the memory now. Freeing a chunk twice raises DoubleFreeError; freeing one
        a deployment still uses (pinned) raises ChunkInUseError."""
        st = self._st()
        if st.freed:
            raise DoubleFreeError(
                f"{self!r} was already freed ({st.why}); free a chunk once, or use close() / "
                "a with-block for idempotent release"
            )
        users = self.users()
        if users:
            raise ChunkInUseError(
                f"{self!r} is still used by {len(users)} deployment(s): {'; '.join(users)}; "
                "close those sessions (or deinit the backends) before freeing the chunk"
            )
        if st.manager is None:
            st.freed, st.why = True, "freed explicitly"
            return
        st.manager._free_state(st)

    def close(self) -> None:
        """Release the memory if it is still held; a no-op otherwise (idempotent)."""
        st = self._state
        if st is not None and not st.freed:
            self.free()

    def __enter__(self) -> MemChunk:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def clone(self, depth: int = 1) -> MemChunk:
        """Another handle to the same memory (at every depth: memory is never duplicated)."""
        return MemChunk._wrap(self._st()) if self._state is not None else MemChunk()

    # --- dunder -------------------------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MemChunk):
            return NotImplemented
        return self._state is other._state

    def __hash__(self) -> int:
        return id(self._state)

    def __repr__(self) -> str:
        st = self._state
        if st is None:
            return "MemChunk(null)"
        where = st.region.name if st.region is not None else "no region"
        at = f"{st.addr:#x}" if st.addr is not None else "null"
        flag = ", freed" if st.freed else ""
        return f"MemChunk({where!r} @ {at}, {st.size} bytes{flag})"

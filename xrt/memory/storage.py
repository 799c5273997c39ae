"""Byte stores behind memory regions, kept behind a tiny interface.

A `MemRegion` never touches bytes itself: it asks its `Storage` to `read`, `write`, `fill` or give
a zero-copy `view`. That is the seam where a socket device later puts a remote store (whose
`view` returns None, so callers fall back to `read`/`write`).

  - `ArenaStorage`: one lazily zeroed numpy uint8 arena for a whole device region (DDR, OCM).
    `np.zeros` of a few GiB is cheap: the OS maps pages on first touch.
  - `HostBufferStorage`: host memory where each chunk is its own numpy buffer (or a view of a
    user buffer), placed at a synthetic address so that addresses still work.

All addresses are absolute; every access is bounds-checked and raises MemoryAccessError naming
the address range and the store.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from bisect import bisect_right, insort
from typing import Any

import numpy as np

from xrt.errors import MemoryAccessError
from xrt.memory.ptr import as_uint8_view


class Storage(ABC):
    """Interface of a byte store addressed by absolute addresses.

    Subclasses implement `read` and `write`; a local store also overrides `view`. `fill` has a
    generic version built on `write`. A remote store keeps `view` returning None.
    """

    name: str = "storage"

    @abstractmethod
    def read(self, addr: int, n: int) -> bytes | np.ndarray:
        """Copy of the `n` bytes at `addr` (a uint8 array or bytes)."""

    @abstractmethod
    def write(self, addr: int, data: Any) -> None:
        """Store the bytes of buffer `data` at `addr`."""

    def view(self, addr: int, n: int) -> np.ndarray | None:
        """Zero-copy writable uint8 view of `n` bytes at `addr`, or None if the store is remote."""
        return None

    def fill(self, addr: int, n: int, value: int = 0) -> None:
        """Set `n` bytes at `addr` to `value` (0..255)."""
        self.write(addr, np.full(int(n), value, dtype=np.uint8))

    @property
    def is_local(self) -> bool:
        """True when `view` gives zero-copy access (the bytes live in this process)."""
        return type(self).view is not Storage.view

    def release(self) -> None:  # noqa: B027 - storages without a backing of their own keep none
        """Give the backing memory back (the device closed); later accesses fail."""

    def _out_of_range(self, addr: int, n: int, lo: int, hi: int) -> MemoryAccessError:
        return MemoryAccessError(
            f"{self.name}: access [{addr:#x}, {addr + n:#x}) ({n} bytes) is outside "
            f"[{lo:#x}, {hi:#x}); keep accesses inside the allocated memory"
        )


class ArenaStorage(Storage):
    """One numpy uint8 arena covering [base, base + size), zeroed lazily by the OS."""

    def __init__(self, base: int, size: int, name: str = "arena") -> None:
        self.base = int(base)
        self.size = int(size)
        self.name = name
        self.arena: np.ndarray | None = np.zeros(self.size, dtype=np.uint8)

    def release(self) -> None:
        self.arena = None

    def _offset(self, addr: int, n: int) -> int:
        if self.arena is None:
            raise MemoryAccessError(f"{self!r}: the device was closed; its memory is gone")
        addr, n = int(addr), int(n)
        off = addr - self.base
        if n < 0 or off < 0 or off + n > self.size:
            raise self._out_of_range(addr, n, self.base, self.base + self.size)
        return off

    def read(self, addr: int, n: int) -> np.ndarray:
        off = self._offset(addr, n)
        return self.arena[off : off + int(n)].copy()

    def write(self, addr: int, data: Any) -> None:
        src = as_uint8_view(data, "source data")
        off = self._offset(addr, src.size)
        self.arena[off : off + src.size] = src

    def view(self, addr: int, n: int) -> np.ndarray:
        off = self._offset(addr, n)
        return self.arena[off : off + int(n)]

    def fill(self, addr: int, n: int, value: int = 0) -> None:
        off = self._offset(addr, n)
        self.arena[off : off + int(n)] = value

    def __repr__(self) -> str:
        return f"ArenaStorage({self.name!r}, base={self.base:#x}, size={self.size})"


class HostBufferStorage(Storage):
    """Separate numpy buffers, each mapped at its own synthetic address.

    An access must stay inside one buffer: buffers are separate host allocations, so a range
    spanning two of them has no meaning.
    """

    def __init__(self, name: str = "host") -> None:
        self.name = name
        self._starts: list[int] = []
        self._bufs: dict[int, np.ndarray] = {}

    def register(self, addr: int, buf: np.ndarray) -> None:
        """Map flat uint8 array `buf` at `addr` (the caller keeps addresses disjoint)."""
        addr = int(addr)
        if addr in self._bufs:
            raise MemoryAccessError(f"{self.name}: a buffer is already mapped at {addr:#x}")
        insort(self._starts, addr)
        self._bufs[addr] = buf

    def unregister(self, addr: int) -> np.ndarray:
        """Remove and return the buffer mapped at `addr`."""
        addr = int(addr)
        buf = self._bufs.pop(addr)
        i = bisect_right(self._starts, addr) - 1
        del self._starts[i]
        return buf

    def clear(self) -> None:
        """Unmap every buffer."""
        self._starts.clear()
        self._bufs.clear()

    def _locate(self, addr: int, n: int) -> tuple[np.ndarray, int]:
        addr, n = int(addr), int(n)
        i = bisect_right(self._starts, addr) - 1
        if i >= 0 and n >= 0:
            start = self._starts[i]
            buf = self._bufs[start]
            off = addr - start
            if off + n <= buf.size:
                return buf, off
            raise self._out_of_range(addr, n, start, start + buf.size)
        raise MemoryAccessError(
            f"{self.name}: access [{addr:#x}, {addr + n:#x}) ({n} bytes) hits no mapped host "
            "buffer; use an address inside a live chunk"
        )

    def read(self, addr: int, n: int) -> np.ndarray:
        buf, off = self._locate(addr, n)
        return buf[off : off + int(n)].copy()

    def _writable(self, addr: int, n: int) -> np.ndarray:
        buf, off = self._locate(addr, n)
        if not buf.flags.writeable:
            raise MemoryAccessError(
                f"{self.name}: the buffer at {addr - off:#x} wraps read-only memory; "
                "wrap a writable buffer (bytearray, numpy array) to write to it"
            )
        return buf[off : off + int(n)]

    def write(self, addr: int, data: Any) -> None:
        src = as_uint8_view(data, "source data")
        self._writable(addr, src.size)[:] = src

    def view(self, addr: int, n: int) -> np.ndarray:
        buf, off = self._locate(addr, n)
        return buf[off : off + int(n)]

    def fill(self, addr: int, n: int, value: int = 0) -> None:
        self._writable(addr, n)[:] = value

    def __repr__(self) -> str:
        return f"HostBufferStorage({self.name!r}, buffers={len(self._starts)})"

"""`MemRegion` and `HostMemRegion`: managed address ranges that chunks are allocated from.

A device region (a simulated DDR such as "etm", an on-chip "ocm") keeps its bytes in one
`ArenaStorage`, or in whatever `Storage` the device passes (a remote store for a socket device).
The host region gives each chunk its own numpy buffer, at a unique synthetic address taken from
the same kind of allocator, so `chunk.begin.addr()` works on the host too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from xrt.args import bool_arg
from xrt.errors import InvalidArgumentError, InvalidPointerError, MemoryAccessError
from xrt.memory.allocator import Allocator, align_up, check_alignment
from xrt.memory.chunk import MemChunk
from xrt.memory.manager import MemManager
from xrt.memory.ptr import MemPtr, as_uint8_view
from xrt.memory.storage import ArenaStorage, HostBufferStorage, Storage

if TYPE_CHECKING:
    from xrt.device import Device


def _check_size(byte_size: Any, where: str) -> int:
    if isinstance(byte_size, bool) or not isinstance(byte_size, (int, np.integer)):
        raise InvalidArgumentError(
            f"{where}: byte_size must be an int, got {type(byte_size).__name__}"
        )
    if byte_size < 0:
        raise InvalidArgumentError(f"{where}: byte_size {byte_size} is negative; pass a size >= 0")
    return int(byte_size)


class MemRegion:
    """A managed memory range [base, base + size) of a device, with its MemManager.

    `storage` defaults to a lazily zeroed `ArenaStorage` over the range. `default_alignment` is
    the minimum alignment of every `malloc` (the larger of it and the requested one is used).
    """

    kind = "device"

    def __init__(
        self,
        name: str,
        device: Device | None,
        base: int,
        size: int,
        storage: Storage | None = None,
        default_alignment: int = 1,
    ) -> None:
        self.name = name
        self.base = int(base)
        self.size = int(size)
        self.default_alignment = check_alignment(default_alignment, f"region {name!r} alignment")
        self._device = device
        self.storage: Storage = storage if storage is not None else self._make_storage()
        self._manager = MemManager(self, Allocator(self.base, self.size, f"region {name!r}"))

    def _make_storage(self) -> Storage:
        return ArenaStorage(self.base, self.size, f"region {self.name!r}")

    def _footprint(self, byte_size: int, alignment: int) -> int:
        """Address-space bytes a chunk of `byte_size` takes (a 0-byte chunk still gets a
        unique address)."""
        return max(1, byte_size)

    # --- vendor API ---------------------------------------------------------------------------

    def malloc(self, *args: Any, **kwargs: Any) -> MemChunk:
        """Allocate a chunk. Two overloads, as in the vendor API:

        malloc(byte_size, auto_free=True, alignment=1)
            anywhere in the region, best fit.
        malloc(begin: MemPtr, byte_size, deleter=None, auto_free=True)
            at the fixed address `begin.addr()`; on the host a MemPtr carrying a buffer wraps that
            buffer zero-copy. `deleter(begin)` runs when the chunk is freed. Device regions use
            only the address of `begin`.
        """
        if (args and isinstance(args[0], MemPtr)) or "begin" in kwargs:
            return self._malloc_at(*args, **kwargs)
        return self._malloc(*args, **kwargs)

    def _malloc(self, byte_size: int, auto_free: bool = True, alignment: int = 1) -> MemChunk:
        byte_size = _check_size(byte_size, f"region {self.name!r} malloc")
        alignment = max(check_alignment(alignment), self.default_alignment)
        return self._manager._new_chunk(byte_size, bool_arg(auto_free, "malloc auto_free"),
                                        alignment)

    def _malloc_at(
        self,
        begin: MemPtr,
        byte_size: int,
        deleter: Callable[[MemPtr], None] | None = None,
        auto_free: bool = True,
    ) -> MemChunk:
        byte_size = _check_size(byte_size, f"region {self.name!r} malloc")
        if begin.isNull():
            raise InvalidPointerError(
                f"region {self.name!r}: malloc at a null MemPtr; pass MemPtr(addr) or, on the "
                "host, MemPtr(buffer)"
            )
        self._check_fixed(begin, byte_size)
        return self._manager._new_chunk(
            byte_size, bool_arg(auto_free, "malloc auto_free"), self.default_alignment, begin,
            deleter
        )

    def _check_fixed(self, begin: MemPtr, byte_size: int) -> None:
        if not begin.has_addr():
            raise InvalidPointerError(
                f"region {self.name!r} is device memory: {begin!r} has no address; pass "
                "MemPtr(addr) (a C pointer means nothing on the device)"
            )

    def memManager(self) -> MemManager:
        """The region's memory manager."""
        return self._manager

    def device(self) -> Device | None:
        """The device the region belongs to."""
        return self._device

    def attach(self, device: Device) -> None:
        """Make `device` the region's owner when it has none yet (a device registering a
        region built without one, `Device.add_mem_region`)."""
        if self._device is None:
            self._device = device

    def clone(self, depth: int = 1) -> MemRegion:
        """The same region: it stands for one piece of hardware memory, which is not copied."""
        return self

    # --- backing (called by the MemManager under its lock) ------------------------------------

    def _attach(self, addr: int, byte_size: int, alignment: int, begin: MemPtr | None) -> MemPtr:
        """Back a freshly allocated address range; return the chunk's begin pointer."""
        return MemPtr(addr)

    def _detach(self, addr: int) -> None:
        """Drop the backing of a freed range (device memory keeps its bytes, like DDR)."""

    # --- Pythonic helpers ---------------------------------------------------------------------

    @property
    def free_bytes(self) -> int:
        """Free bytes in the region."""
        return self._manager.free_bytes

    @property
    def used_bytes(self) -> int:
        """Bytes held by live chunks."""
        return self._manager.used_bytes

    def contains(self, addr: int, nbytes: int = 1) -> bool:
        """True when [addr, addr + nbytes) lies inside the region's range."""
        return self.base <= addr and addr + nbytes <= self.base + self.size

    def reset(self) -> int:
        """Free every chunk of the region (chunks then raise UseAfterFreeError); return count."""
        return self._manager.release_all("region reset")

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.name!r}, base={self.base:#x}, size={self.size}, "
            f"chunks={self._manager.chunk_count})"
        )


HOST_BASE = 0x1000_0000
HOST_SPACE = 1 << 46


class HostMemRegion(MemRegion):
    """Host memory: every chunk is its own numpy uint8 buffer at a unique synthetic address.

    `malloc(MemPtr(buffer), n)` wraps the first `n` bytes of a user buffer zero-copy (the user
    keeps it alive as long as the chunk lives; the chunk holds a reference to it too). The
    synthetic address space is large and holds no data, so only real buffers cost memory.
    """

    kind = "host"

    def __init__(
        self,
        name: str = "host",
        device: Device | None = None,
        base: int = HOST_BASE,
        size: int = HOST_SPACE,
        default_alignment: int = 64,
    ) -> None:
        super().__init__(name, device, base, size, None, default_alignment)

    def _make_storage(self) -> Storage:
        return HostBufferStorage(f"region {self.name!r}")

    def _footprint(self, byte_size: int, alignment: int) -> int:
        """Whole alignment units of the synthetic address space: no misaligned remainders pile
        up for the best-fit scan to step over (every host op's output is a chunk here)."""
        return align_up(max(1, byte_size), alignment)

    def _check_fixed(self, begin: MemPtr, byte_size: int) -> None:
        if begin.has_cptr():
            have = as_uint8_view(begin.cptr(), "MemPtr cptr").size
            if byte_size > have:
                raise MemoryAccessError(
                    f"region {self.name!r}: cannot wrap {byte_size} bytes of a buffer of only "
                    f"{have} bytes; pass byte_size <= {have}"
                )

    def _attach(self, addr: int, byte_size: int, alignment: int, begin: MemPtr | None) -> MemPtr:
        if begin is not None and begin.has_cptr():
            buf = as_uint8_view(begin.cptr(), "MemPtr cptr")[:byte_size]
        else:
            raw = np.zeros(byte_size + alignment - 1, dtype=np.uint8)
            skew = -raw.__array_interface__["data"][0] % alignment
            buf = raw[skew : skew + byte_size]
        self.storage.register(addr, buf)  # type: ignore[attr-defined]
        return MemPtr(buf, addr)

    def _detach(self, addr: int) -> None:
        self.storage.unregister(addr)  # type: ignore[attr-defined]

"""A pure address-space allocator: it hands out address ranges and holds no data.

Every memory region (host or device) places its chunks with one of these. Keeping placement apart
from the bytes lets the same allocator serve a local numpy arena, per-chunk host buffers or a
remote device, and lets it be tested in isolation (see the hypothesis state machine in the tests).

Placement is best fit: the smallest free block that can hold the request once its start is
rounded up to the alignment; ties go to the lowest address. Free blocks are coalesced with their
neighbours on `free`, so a fully freed allocator holds exactly one free block.

Data structures (all sorted lists maintained with `bisect`; inserts/removals are a C memmove):
  - free blocks by start address (`_free_starts`, with `_free_size[start]`),
  - free blocks by (size, start) for best-fit search (`_by_size`),
  - live allocations by start (`_alloc_starts`, with `_alloc_size[start]`).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort

from xrt.args import int_arg
from xrt.errors import (
    AddressInUseError,
    AlignmentError,
    DoubleFreeError,
    InvalidArgumentError,
    MemoryAccessError,
    OutOfDeviceMemoryError,
)


def check_alignment(alignment: int, what: str = "alignment") -> int:
    """Return `alignment` as an int, or raise AlignmentError unless it is a power of two >= 1."""
    alignment = int_arg(alignment, what)
    if alignment < 1 or alignment & (alignment - 1):
        raise AlignmentError(f"{what} {alignment} is not a power of two >= 1; pass 1, 2, 4, 8, ...")
    return alignment


def align_up(value: int, alignment: int) -> int:
    """Round `value` up to a multiple of `alignment` (a power of two)."""
    return (value + alignment - 1) & ~(alignment - 1)


class Allocator:
    """Best-fit allocator over the address range [base, base + size)."""

    def __init__(self, base: int, size: int, name: str = "allocator") -> None:
        base, size = int(base), int(size)
        if base < 0 or size <= 0:
            raise InvalidArgumentError(
                f"{name}: address range base={base:#x} size={size} is empty or negative; "
                "pass base >= 0 and size > 0"
            )
        self.name = name
        self.base = base
        self.size = size
        self._free_starts: list[int] = []
        self._free_size: dict[int, int] = {}
        self._by_size: list[tuple[int, int]] = []
        self._alloc_starts: list[int] = []
        self._alloc_size: dict[int, int] = {}
        self._free_bytes = 0
        self.reset()

    # --- free-block bookkeeping ---------------------------------------------------------------

    def _add_free(self, start: int, size: int) -> None:
        insort(self._free_starts, start)
        self._free_size[start] = size
        insort(self._by_size, (size, start))
        self._free_bytes += size

    def _remove_free(self, start: int) -> int:
        size = self._free_size.pop(start)
        del self._free_starts[bisect_left(self._free_starts, start)]
        del self._by_size[bisect_left(self._by_size, (size, start))]
        self._free_bytes -= size
        return size

    def _add_alloc(self, start: int, size: int) -> None:
        insort(self._alloc_starts, start)
        self._alloc_size[start] = size

    def _carve(self, block: int, block_size: int, start: int, size: int) -> None:
        """Take [start, start+size) out of free block `block`, keeping the two remainders free."""
        self._remove_free(block)
        if start > block:
            self._add_free(block, start - block)
        end, block_end = start + size, block + block_size
        if block_end > end:
            self._add_free(end, block_end - end)
        self._add_alloc(start, size)

    # --- public API ---------------------------------------------------------------------------

    def alloc(self, size: int, alignment: int = 1) -> int:
        """Allocate `size` bytes at an address that is a multiple of `alignment`; return it."""
        size = int(size)
        if size <= 0:
            raise InvalidArgumentError(f"{self.name}: cannot allocate {size} bytes; pass size > 0")
        alignment = check_alignment(alignment)
        # Blocks are visited smallest first (ties: lowest address). Only a block shorter than
        # size + alignment - 1 can fail to fit after rounding, so the scan stops quickly.
        i = bisect_left(self._by_size, (size, -1))
        by_size = self._by_size
        while i < len(by_size):
            block_size, block = by_size[i]
            start = align_up(block, alignment)
            if start + size <= block + block_size:
                self._carve(block, block_size, start, size)
                return start
            i += 1
        raise OutOfDeviceMemoryError(
            f"{self.name}: cannot allocate {size} bytes with alignment {alignment}: "
            f"{self._free_bytes} bytes free, largest free block {self.largest_free_block} bytes; "
            "free unused chunks or use a smaller request"
        )

    def reserve(self, addr: int, size: int) -> int:
        """Claim the fixed range [addr, addr + size); return addr.

        Raises MemoryAccessError when the range leaves [base, base + size) and
        AddressInUseError when it overlaps a live allocation.
        """
        addr, size = int(addr), int(size)
        if size <= 0:
            raise InvalidArgumentError(f"{self.name}: cannot reserve {size} bytes; pass size > 0")
        end = addr + size
        if addr < self.base or end > self.base + self.size:
            raise MemoryAccessError(
                f"{self.name}: range [{addr:#x}, {end:#x}) is outside "
                f"[{self.base:#x}, {self.base + self.size:#x}); pick an address inside the region"
            )
        i = bisect_right(self._free_starts, addr) - 1
        if i >= 0:
            block = self._free_starts[i]
            block_size = self._free_size[block]
            if end <= block + block_size:
                self._carve(block, block_size, addr, size)
                return addr
        j = bisect_left(self._alloc_starts, end)
        owner = self._alloc_starts[j - 1] if j > 0 else None
        hit = f" (allocation at {owner:#x})" if owner is not None else ""
        raise AddressInUseError(
            f"{self.name}: range [{addr:#x}, {end:#x}) overlaps a live allocation{hit}; "
            "free it first or pick a free address"
        )

    def free(self, addr: int) -> int:
        """Release the allocation that starts at `addr`; return its size.

        Neighbouring free blocks are merged. Freeing an address that is not the start of a live
        allocation (a double free, or a pointer never allocated) raises DoubleFreeError.
        """
        addr = int(addr)
        size = self._alloc_size.pop(addr, None)
        if size is None:
            raise DoubleFreeError(
                f"{self.name}: address {addr:#x} is not the start of a live allocation "
                "(freed twice or never allocated); free each allocation exactly once"
            )
        del self._alloc_starts[bisect_left(self._alloc_starts, addr)]
        start, end = addr, addr + size
        i = bisect_left(self._free_starts, addr)
        if i < len(self._free_starts) and self._free_starts[i] == end:
            end += self._remove_free(end)
        if i > 0:
            prev = self._free_starts[i - 1]
            if prev + self._free_size[prev] == start:
                start = prev
                self._remove_free(prev)
        self._add_free(start, end - start)
        return size

    def reset(self) -> None:
        """Drop every allocation at once (a device reset): one free block remains."""
        self._free_starts.clear()
        self._free_size.clear()
        self._by_size.clear()
        self._alloc_starts.clear()
        self._alloc_size.clear()
        self._free_bytes = 0
        self._add_free(self.base, self.size)

    # --- queries ------------------------------------------------------------------------------

    @property
    def free_bytes(self) -> int:
        """Total bytes in free blocks."""
        return self._free_bytes

    @property
    def used_bytes(self) -> int:
        """Total bytes held by live allocations."""
        return self.size - self._free_bytes

    @property
    def largest_free_block(self) -> int:
        """Size of the largest free block (0 when full)."""
        return self._by_size[-1][0] if self._by_size else 0

    def allocations(self) -> list[tuple[int, int]]:
        """Live allocations as (addr, size), sorted by address."""
        return [(a, self._alloc_size[a]) for a in self._alloc_starts]

    def free_blocks(self) -> list[tuple[int, int]]:
        """Free blocks as (addr, size), sorted by address."""
        return [(a, self._free_size[a]) for a in self._free_starts]

    def allocation_size(self, addr: int) -> int | None:
        """Size of the live allocation starting at `addr`, or None."""
        return self._alloc_size.get(int(addr))

    def find(self, addr: int) -> tuple[int, int] | None:
        """The live allocation (start, size) that contains `addr`, or None."""
        i = bisect_right(self._alloc_starts, int(addr)) - 1
        if i < 0:
            return None
        start = self._alloc_starts[i]
        size = self._alloc_size[start]
        return (start, size) if addr < start + size else None

    def __len__(self) -> int:
        return len(self._alloc_starts)

    def __repr__(self) -> str:
        return (
            f"Allocator({self.name!r}, base={self.base:#x}, size={self.size}, "
            f"allocations={len(self)}, free={self._free_bytes})"
        )

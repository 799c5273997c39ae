"""The MMU: logical segments -> physical chunks (ETM or OCM).

Every address an instruction carries is logical. The table has `NpuConfig.mmu_entries` entries;
each maps ``[logical, logical + size)`` to ``[physical, physical + size)``. The physical address
says which memory it is (ETM and OCM have disjoint physical ranges). An access must fall inside
one valid entry, all of it: a layer operand that straddles two entries or hits none is an MMU
fault (`MmuFault`), as on the board, where it would read garbage or hang.

The runtime programs the table through registers (the device's register map: one 32-byte entry
block per index, see docs/zg330-isa.md); `MmuTable.from_words` builds the table from those words.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

MEM_ETM = 0
MEM_OCM = 1


class MmuFault(RuntimeError):
    """A logical access that no valid MMU entry covers completely."""


@dataclass(frozen=True)
class Segment:
    logical: int
    size: int
    physical: int
    mem: int  # MEM_ETM or MEM_OCM


class MmuTable:
    """Sorted, non-overlapping logical segments; `translate` is a bisect."""

    def __init__(self, segments: list[Segment] | None = None) -> None:
        segs = sorted(segments or [], key=lambda s: s.logical)
        for a, b in zip(segs, segs[1:]):
            if a.logical + a.size > b.logical:
                raise MmuFault(
                    f"MMU entries overlap: logical [{a.logical:#x}, {a.logical + a.size:#x}) and "
                    f"[{b.logical:#x}, {b.logical + b.size:#x}); give each segment its own range"
                )
        self.segments = segs
        self._starts = [s.logical for s in segs]

    @classmethod
    def from_words(cls, entries: list[tuple[int, int, int, int]], mem_of) -> MmuTable:
        """Build from (logical, size, physical, flags) tuples; flags bit 0 = valid.

        `mem_of(physical, size)` returns MEM_ETM / MEM_OCM, or raises MmuFault when the physical
        range is in neither memory.
        """
        segs = [Segment(lo, sz, ph, mem_of(ph, sz)) for lo, sz, ph, fl in entries
                if fl & 1 and sz > 0]
        return cls(segs)

    def translate(self, logical: int, nbytes: int, what: str = "access") -> tuple[int, int]:
        """(mem, physical address) of ``[logical, logical + nbytes)``; MmuFault if unmapped."""
        i = bisect_right(self._starts, logical) - 1
        if i >= 0:
            s = self.segments[i]
            if logical + max(nbytes, 1) <= s.logical + s.size:
                return s.mem, s.physical + (logical - s.logical)
            if logical < s.logical + s.size:
                raise MmuFault(
                    f"MMU fault: {what} [{logical:#x}, {logical + nbytes:#x}) runs past the end "
                    f"of segment [{s.logical:#x}, {s.logical + s.size:#x}); a layer operand must "
                    "lie inside one segment"
                )
        raise MmuFault(
            f"MMU fault: {what} at logical {logical:#x} ({nbytes} bytes) is not mapped; program "
            f"an MMU entry for it ({len(self.segments)} valid entries)"
        )

    def __len__(self) -> int:
        return len(self.segments)

    def __repr__(self) -> str:
        return f"MmuTable({len(self)} segments)"

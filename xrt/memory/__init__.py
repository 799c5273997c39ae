"""Memory layer of xrt: pointers, chunks, regions, managers and the allocator behind them."""

from __future__ import annotations

from xrt.memory.allocator import Allocator, align_up, check_alignment
from xrt.memory.chunk import MemChunk
from xrt.memory.manager import MemManager
from xrt.memory.ptr import MemPtr, PtrType, as_uint8_view
from xrt.memory.region import HostMemRegion, MemRegion
from xrt.memory.storage import ArenaStorage, HostBufferStorage, Storage

__all__ = [
    "Allocator",
    "ArenaStorage",
    "HostBufferStorage",
    "HostMemRegion",
    "MemChunk",
    "MemManager",
    "MemPtr",
    "MemRegion",
    "PtrType",
    "Storage",
    "align_up",
    "as_uint8_view",
    "check_alignment",
]

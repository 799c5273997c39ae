"""Allocator: best-fit placement, coalescing and accounting, with a hypothesis state machine."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from xrt.errors import (
    AddressInUseError,
    AlignmentError,
    DoubleFreeError,
    InvalidArgumentError,
    MemoryAccessError,
    OutOfDeviceMemoryError,
    XrtError,
)
from xrt.memory.allocator import Allocator

BASE = 0x1000
SIZE = 4096


class AllocatorMachine(RuleBasedStateMachine):
    """Random alloc/reserve/free against a model dict of live allocations."""

    def __init__(self) -> None:
        super().__init__()
        self.a = Allocator(BASE, SIZE, "test")
        self.live: dict[int, int] = {}

    def _overlaps(self, addr: int, size: int) -> bool:
        return any(addr < a + n and a < addr + size for a, n in self.live.items())

    @rule(size=st.integers(1, 600), align_log=st.integers(0, 8))
    def alloc(self, size: int, align_log: int) -> None:
        alignment = 1 << align_log
        # best fit expected from the model's free blocks
        candidates = []
        for start, n in self.a.free_blocks():
            aligned = (start + alignment - 1) // alignment * alignment
            if aligned + size <= start + n:
                candidates.append((n, start, aligned))
        try:
            addr = self.a.alloc(size, alignment)
        except OutOfDeviceMemoryError as exc:
            assert not candidates
            assert f"{size} bytes" in str(exc) and f"alignment {alignment}" in str(exc)
            return
        assert candidates, "allocation succeeded where no free block fits"
        assert addr == min(candidates)[2]
        assert addr % alignment == 0
        assert BASE <= addr and addr + size <= BASE + SIZE
        assert not self._overlaps(addr, size)
        self.live[addr] = size

    @rule(offset=st.integers(-16, SIZE + 16), size=st.integers(1, 300))
    def reserve(self, offset: int, size: int) -> None:
        addr = BASE + offset
        inside = BASE <= addr and addr + size <= BASE + SIZE
        try:
            got = self.a.reserve(addr, size)
        except MemoryAccessError:
            assert not inside
            return
        except AddressInUseError:
            assert inside and self._overlaps(addr, size)
            return
        assert got == addr and inside and not self._overlaps(addr, size)
        self.live[addr] = size

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def free(self, data: st.DataObject) -> None:
        addr = data.draw(st.sampled_from(sorted(self.live)))
        assert self.a.free(addr) == self.live.pop(addr)
        with pytest.raises(DoubleFreeError):
            self.a.free(addr)

    @invariant()
    def accounting(self) -> None:
        assert self.a.allocations() == sorted(self.live.items())
        assert self.a.free_bytes == SIZE - sum(self.live.values())
        blocks = self.a.free_blocks()
        assert self.a.largest_free_block == max((n for _, n in blocks), default=0)
        # allocations and free blocks tile the range exactly
        pos = BASE
        for start, n in sorted(blocks + self.a.allocations()):
            assert start == pos and n > 0
            pos += n
        assert pos == BASE + SIZE
        # coalesced: no two free blocks touch
        for (a, n), (b, _) in zip(blocks, blocks[1:]):
            assert a + n < b

    def teardown(self) -> None:
        for addr in list(self.live):
            self.a.free(addr)
        assert self.a.free_blocks() == [(BASE, SIZE)]


TestAllocatorMachine = AllocatorMachine.TestCase
TestAllocatorMachine.settings = settings(max_examples=60, stateful_step_count=80, deadline=None)


def test_best_fit_prefers_smallest_block_then_lowest_address() -> None:
    a = Allocator(0, 1000)
    x = [a.alloc(100) for _ in range(6)]  # 0..600, tail free 400
    a.free(x[1])  # hole of 100 at 100
    a.free(x[4])  # hole of 100 at 400
    assert a.alloc(50) == 100  # two equal holes: lowest address wins
    assert a.alloc(100) == 400  # the 100-hole beats the 400-tail
    assert a.alloc(60) == 600  # remaining hole is only 50: the tail


def test_alignment_padding_is_kept_free() -> None:
    a = Allocator(0, 256)
    a.reserve(0, 3)
    addr = a.alloc(16, 64)
    assert addr == 64
    assert (3, 61) in a.free_blocks()


def test_fully_freed_allocator_has_one_block() -> None:
    a = Allocator(0x100, 1024)
    addrs = [a.alloc(n, 8) for n in (10, 200, 33, 7, 400)]
    for addr in addrs[::2] + addrs[1::2]:
        a.free(addr)
    assert a.free_blocks() == [(0x100, 1024)]
    assert a.free_bytes == 1024 and len(a) == 0


def test_out_of_memory_message_names_request_and_state() -> None:
    a = Allocator(0, 1024, "ddr")
    a.alloc(1000)
    with pytest.raises(OutOfDeviceMemoryError) as info:
        a.alloc(100, 16)
    msg = str(info.value)
    assert "ddr" in msg and "100 bytes" in msg and "alignment 16" in msg
    assert "24 bytes free" in msg and "largest free block 24" in msg
    assert isinstance(info.value, MemoryError) and isinstance(info.value, XrtError)


@pytest.mark.parametrize("alignment", [0, 3, -4, 12])
def test_bad_alignment(alignment: int) -> None:
    with pytest.raises(AlignmentError):
        Allocator(0, 64).alloc(8, alignment)


def test_bad_sizes() -> None:
    with pytest.raises(InvalidArgumentError):
        Allocator(0, 0)
    with pytest.raises(InvalidArgumentError):
        Allocator(0, 64).alloc(0)
    with pytest.raises(InvalidArgumentError):
        Allocator(0, 64).reserve(0, -1)


def test_reserve_errors_and_find() -> None:
    a = Allocator(0, 100)
    a.reserve(10, 10)
    with pytest.raises(AddressInUseError, match="0xa"):
        a.reserve(15, 10)
    with pytest.raises(MemoryAccessError):
        a.reserve(95, 10)
    assert a.find(15) == (10, 10)
    assert a.find(20) is None and a.find(5) is None
    with pytest.raises(DoubleFreeError):
        a.free(11)


def test_reset_and_many_allocations_are_fast() -> None:
    a = Allocator(0, 1 << 30)
    addrs = [a.alloc(64, 64) for _ in range(20000)]
    for addr in addrs[::2]:
        a.free(addr)
    assert len(a.free_blocks()) == 10001
    a.reset()
    assert a.free_blocks() == [(0, 1 << 30)]

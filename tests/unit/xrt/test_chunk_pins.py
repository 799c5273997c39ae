"""`MemChunk.pin`: a chunk a deployment uses cannot be freed (ChunkInUseError naming the users);
pins are weak (a dropped holder lets go) and per holder; device close frees pinned chunks too."""

from __future__ import annotations

import gc

import pytest

from xrt import Device
from xrt.errors import ChunkInUseError, DoubleFreeError, UseAfterFreeError


class Holder:
    """Stands for a backend: any weak-referenceable object."""


@pytest.fixture
def region():
    dev = Device.Open("sim://zg330")
    yield dev.defaultMemRegion()
    dev.close()


def test_a_pinned_chunk_refuses_free_and_close_naming_its_users(region):
    c = region.malloc(4096, True, 4096)
    a, b = Holder(), Holder()
    c.pin(a, "backend A (FTMP segment)")
    c.clone().pin(b, "backend B (FTMP segment)")  # any handle of the allocation
    assert sorted(c.users()) == ["backend A (FTMP segment)", "backend B (FTMP segment)"]
    with pytest.raises(ChunkInUseError, match=r"2 deployment\(s\).*backend A"):
        c.free()
    with pytest.raises(ChunkInUseError):
        c.close()
    c.unpin(a)
    c.unpin(a)  # not pinned by a any more: a no-op
    with pytest.raises(ChunkInUseError, match=r"1 deployment\(s\): backend B"):
        c.free()
    c.write(0, bytes(range(16)))  # still live and usable
    c.unpin(b)
    c.free()
    with pytest.raises(DoubleFreeError):
        c.free()


def test_a_dropped_holder_lets_go(region):
    c = region.malloc(64)
    h = Holder()
    c.pin(h, "gone soon")
    del h
    gc.collect()
    assert c.users() == []
    c.free()


def test_pinning_a_freed_chunk_is_use_after_free(region):
    c = region.malloc(64)
    c.free()
    with pytest.raises(UseAfterFreeError):
        c.pin(Holder(), "late")


def test_device_close_frees_pinned_chunks():
    dev = Device.Open("sim://zg330")
    c = dev.defaultMemRegion().malloc(4096)
    h = Holder()
    c.pin(h, "deployment")
    dev.close()
    assert c.is_freed

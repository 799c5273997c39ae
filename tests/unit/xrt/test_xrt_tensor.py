"""Tensor: construction overloads, zero-copy numpy interop, moves, reads/writes, readiness."""

from __future__ import annotations

import datetime as dt
import gc

import numpy as np
import pytest

import xir
from xrt import HostDevice, MemPtr, Tensor, TensorError
from xrt.memory import MemRegion


@pytest.fixture
def far_region():
    region = MemRegion("far", HostDevice.Default(), 0x10_0000, 1 << 20)
    yield region


def test_wraps_numpy_without_copy_both_ways():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = Tensor(a)
    assert t.dtype().shape == (3, 4) and t.dtype().element_dtype == xir.FP32
    view = np.asarray(t)
    assert np.shares_memory(view, a)
    a[0, 0] = 42
    assert t.numpy()[0, 0] == 42
    assert not np.shares_memory(np.asarray(t, copy=True), a)
    assert np.asarray(t, dtype=np.float64).dtype == np.float64
    with pytest.raises(ValueError):
        np.asarray(t, dtype=np.float64, copy=False)


def test_non_contiguous_input_is_copied_and_layout_recorded():
    a = np.arange(24, dtype=np.int16).reshape(2, 3, 4)[:, ::2]
    t = Tensor(a, "NHC")
    assert t.dtype().layout.spec == "NHC"
    np.testing.assert_array_equal(np.asarray(t), a)
    with pytest.raises(TensorError, match="axes"):
        Tensor(np.zeros((2, 2), np.float32), "NHWC")


def test_typed_constructors_and_misuse():
    ttype = xir.TensorType(xir.INT8, [2, 5])
    empty = Tensor(ttype)
    assert not empty.hasData()
    with pytest.raises(TensorError, match="no data"):
        empty.numpy()
    t = Tensor.empty(ttype)
    assert t.hasData() and t.dtype() is ttype
    with pytest.raises(TensorError, match="int8"):
        Tensor(np.zeros((2, 5), np.float32), ttype)
    with pytest.raises(TensorError, match="needs 10"):
        Tensor(np.zeros((3, 5), np.int8), ttype)
    v = xir.Params.from_array(3, np.ones((2, 2), np.float32))
    np.testing.assert_array_equal(np.asarray(Tensor(v)), np.ones((2, 2)))
    assert Tensor().__repr__() == "Tensor()"


def test_to_moves_between_regions_and_back(far_region):
    a = np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32)
    t = Tensor(a)
    assert t.to(HostDevice.MemRegion()) is t
    far = t.to(far_region)
    assert far.isOn(far_region) and not far.isOn(HostDevice.MemRegion())
    assert far.memRegion() is far_region
    np.testing.assert_array_equal(np.asarray(far), a)
    back = far.to(HostDevice.MemRegion())
    np.testing.assert_array_equal(np.asarray(back), a)
    assert far.data().addr() >= far_region.base


def test_read_write_copy_fill_and_bounds():
    t = Tensor.empty(xir.TensorType(xir.INT32, [4]))
    t.copyData(np.array([1, 2, 3, 4], np.int32))
    out = np.zeros(2, np.int32)
    t.read(out, 4, 8)
    np.testing.assert_array_equal(out, [2, 3])
    t.write(0, np.array([9], np.int32), 4)
    assert np.asarray(t)[0] == 9
    u = Tensor.empty(xir.TensorType(xir.INT32, [4]))
    u.copyFrom(0, t, 0, 16)
    np.testing.assert_array_equal(np.asarray(u), [9, 2, 3, 4])
    with pytest.raises(TensorError, match="outside"):
        t.read(out, 12, 8)
    with pytest.raises(TensorError, match="buffer has"):
        t.copyData(np.zeros(3, np.int32))
    f = Tensor(xir.TensorType(xir.FP32, [2, 3])).fill(lambda i: i * 0.5)
    np.testing.assert_array_equal(np.asarray(f).ravel(), np.arange(6) * 0.5)
    deep = f.clone(2)
    np.asarray(deep)[0, 0] = 7
    assert np.asarray(f)[0, 0] == 0


def test_ready_and_wait_for_ready():
    t = Tensor(np.zeros(2, np.float32))
    assert t.isReady()
    t.setReady(False)
    assert not t.waitForReady(dt.timedelta(milliseconds=5))
    polls = []

    def ready_on_third_poll(device) -> bool:
        polls.append(device)
        return len(polls) >= 3

    t.setCheckFunc(ready_on_third_poll)
    assert t.waitForReady(dt.timedelta(seconds=1))
    assert len(polls) == 3


def test_auto_freed_memory_returns_to_the_region(far_region):
    used = far_region.used_bytes
    t = Tensor(xir.TensorType(xir.FP32, [256])).mallocOn(far_region)
    assert far_region.used_bytes >= used + 1024
    del t
    gc.collect()
    far_region.malloc(1).free()  # lets the region drain its deferred frees
    assert far_region.used_bytes == used


def test_set_data_on_a_user_chunk():
    chunk = HostDevice.MemRegion().malloc(64)
    t = Tensor(xir.TensorType(xir.UINT8, [16]), chunk, 32)
    assert t.offset() == 32 and t.chunk() is chunk
    np.asarray(t)[:] = 5
    raw = np.zeros(64, np.uint8)
    chunk.read(raw, 0, 64)
    assert raw[32:48].tolist() == [5] * 16 and raw[:32].sum() == 0
    with pytest.raises(TensorError, match="does not fit"):
        t.setData(chunk, 60)
    assert isinstance(t.data(), MemPtr)

"""`Tensor.to(host)` of a device tensor: a fresh, writable copy of exactly the tensor's bytes
(at its offset in the chunk), independent of the device memory afterwards, also from a served
device; a tensor over a freed chunk is refused."""

from __future__ import annotations

import numpy as np
import pytest

from xir.types import TensorType
from xrt import Device, HostDevice, Tensor
from xrt.errors import XrtError
from xrt.remote.server import DeviceServer


def _device_tensor(dev, values: np.ndarray, offset: int) -> tuple[Tensor, object]:
    chunk = dev.malloc(offset + values.nbytes + 64)
    chunk.fill(0x5A)
    chunk.write(offset, values.view(np.uint8))
    ttype = Tensor(values).dtype()
    return Tensor(TensorType(ttype.element_dtype, ttype.shape, ttype.layout), chunk, offset), \
        chunk


@pytest.mark.parametrize("url", ["sim://zg330", "sim://buyi"])
def test_copy_is_the_bytes_and_independent(url):
    pytest.importorskip(url[6:] + "backend")
    dev = Device.Open(url)
    try:
        values = np.arange(-600, 600, dtype=np.int16).reshape(2, 600)
        t, chunk = _device_tensor(dev, values, 128)
        host = t.to(HostDevice.MemRegion())
        got = np.asarray(host)
        np.testing.assert_array_equal(got, values)
        assert got.dtype == np.int16 and got.flags.writeable and got.flags.c_contiguous
        assert host.isOn(HostDevice.MemRegion()) and not t.isOn(HostDevice.MemRegion())
        got[0, 0] = 7  # the copy is the caller's
        chunk.fill(0, 128, values.nbytes)  # and the device's bytes are the device's
        np.testing.assert_array_equal(np.asarray(host)[0, 1:], values[0, 1:])
        assert np.asarray(t.to(HostDevice.MemRegion())).sum() == 0
        chunk.free()
        with pytest.raises(XrtError):
            t.to(HostDevice.MemRegion())
    finally:
        dev.close()


def test_copy_from_a_served_device():
    pytest.importorskip("zg330backend")
    srv = DeviceServer(Device.Open("sim://zg330"), close_device=True).start()
    host, port = srv.address
    dev = Device.Open(f"socket://zg330@{host}:{port}")
    try:
        values = np.linspace(-1, 1, 3000, dtype=np.float32)
        t, _ = _device_tensor(dev, values, 64)
        got = np.asarray(t.to(HostDevice.MemRegion()))
        np.testing.assert_array_equal(got, values)
        assert got.flags.writeable
    finally:
        dev.close()
        srv.shutdown()

"""BuyiDevice: URLs, the seed-002 methods, MMU mode, data type, MPE enable and the cycle model."""

from __future__ import annotations

import numpy as np
import pytest
from buyi_testlib import compiled, rand_x, run_buyi

from buyibackend import BuyiDevice
from npu_runtime import regs as R
from xrt import Device
from xrt.errors import DeviceUrlError, InvalidArgumentError, UnsupportedOpError
from zg330backend import ZG330Device


def test_urls_open_buyi_devices():
    for url in ("sim://buyi", "axi://ql100aiu?npu=0x40000000&dma=0x80000000", "mock://buyi"):
        d = Device.Open(url)
        try:
            assert isinstance(d, BuyiDevice) and BuyiDevice(d) is d
            assert d.check()
        finally:
            Device.Close(d)
    d = Device.Open("axi://ql100aiu?npu=0x40000000&dma=0x80000000")
    assert d.url_params == {"npu": "0x40000000", "dma": "0x80000000"}
    Device.Close(d)
    with pytest.raises(DeviceUrlError):
        Device.Open("axi://zg330aiu-not-buyi")
    z = Device.Open("sim://zg330")
    assert not isinstance(z, BuyiDevice)
    with pytest.raises(InvalidArgumentError):
        BuyiDevice(z)
    Device.Close(z)


def test_mock_cannot_compute():
    d = Device.Open("mock://buyi")
    with pytest.raises(UnsupportedOpError, match="sim://buyi"):
        d.icoreCalc(d.config.etm_base, 64)
    Device.Close(d)


def test_default_array_and_clock_differ_from_zg330(bdev):
    z = ZG330Device()
    assert bdev.getRowsCols() == (2, 4) != z.getRowsCols()
    assert bdev.config.channel_unit("int8") == 16 != z.config.channel_unit("int8")
    assert bdev.clkFreq() == 500.0
    bdev.setClkFreq(250)
    assert bdev.clkFreq() == 250.0
    Device.Close(z)


def test_set_dtype_and_mode_info(bdev):
    assert bdev.dtype() == 8
    bdev.setDType(16)
    assert bdev.dtype() == 16
    with pytest.raises(InvalidArgumentError):
        bdev.setDType(4)
    assert bdev.modeInfo() == 1
    bdev.mmuModeSwitch(False)
    assert bdev.modeInfo() == 0
    bdev.mmuModeSwitch(True)
    assert bdev.modeInfo() == 1


def test_update_buffer_programs_the_segment_table(bdev):
    base = bdev.config.etm_base
    bdev.updateBuffer([(0x1000, base + 0x10000, 0x2000), (0x8000, base + 0x40000, 0x1000)])
    segs = bdev.mmu_table().segments
    assert [(s.logical, s.physical, s.size) for s in segs] == [
        (0x1000, base + 0x10000, 0x2000), (0x8000, base + 0x40000, 0x1000)]
    bdev.mmuModeSwitch(False)  # MMU off: identity over ETM and OCM
    assert bdev.mmu_table().translate(base + 0x123, 4)[1] == base + 0x123


def test_mpe_registers(bdev):
    bdev.writeReg(3, 1, R.MPE_SCRATCH, 0xABCD)
    assert bdev.readReg(3, 1, R.MPE_SCRATCH) == 0xABCD
    assert bdev.readReg(3, 1, R.MPE_ID) == (3 << 8) | 1
    with pytest.raises(InvalidArgumentError):
        bdev.readReg(4, 0, 0)  # 4 columns: cid 0..3


def test_fewer_mpes_run_slower_with_the_same_results(bdev):
    q, z = compiled("tiny_cnn")
    x = rand_x(q)
    s, full = run_buyi(z, bdev, x, profile=True)
    n_layers = bdev.layerCount()
    t_full = _npu_ms(s)
    assert n_layers > 0
    bdev.setEnabledMPE(1, 1)
    assert bdev.getRowsCols() == (1, 1)
    s1, one = run_buyi(z, bdev, x, profile=True)
    t_one = _npu_ms(s1)
    np.testing.assert_array_equal(full[0], one[0])
    assert t_one > 1.5 * t_full
    assert bdev.calcTime() > 0
    with pytest.raises(InvalidArgumentError):
        bdev.setEnabledMPE(3, 1)  # the array has 2 rows


def _npu_ms(s) -> float:
    """Simulated NPU time (ms) of the last forward: the 'hard' column of the time profile."""
    return sum(v[2] for v in s.timeProfileResults().values())

"""Device, HostDevice and RegRegion: regions, overloads, registers, hooks, lifecycle."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

from xrt.device import Device, HostDevice
from xrt.errors import (
    DeviceError,
    InvalidArgumentError,
    MemoryAccessError,
    UseAfterFreeError,
    XrtError,
)
from xrt.memory import HostMemRegion, MemRegion
from xrt.regs import RegRegion

REG_BASE = 0x4000_0000


def make_device(url: str = "sim://test") -> Device:
    dev = Device(url)
    dev.add_mem_region(MemRegion("etm", dev, 0, 1 << 24, default_alignment=64))
    dev.add_mem_region(MemRegion("ocm", dev, 0x1_0000_0000, 1 << 16))
    dev.add_reg_region(RegRegion("regs", dev, REG_BASE, 0x100))
    dev.add_reg_region(RegRegion("dma", dev, 0x5000_0000, 0x40, word_bytes=8))
    return dev


@pytest.fixture
def dev() -> Device:
    d = make_device()
    yield d
    d.close()


# --- HostDevice -------------------------------------------------------------------------------


def test_host_device_singleton() -> None:
    h = HostDevice.Default()
    assert h is HostDevice.Default() and h.url == "host://"
    region = HostDevice.MemRegion()
    assert isinstance(region, HostMemRegion) and region is h.defaultMemRegion()
    assert region.device() is h and h.getMemRegion("host") is region
    c = h.malloc(16)
    assert c.isOn(region)
    h.close()  # the process-wide host device stays open
    Device.Close(h)
    assert h.is_open and HostDevice.Default() is h
    with pytest.raises(DeviceError, match="no register regions"):
        h.defaultRegRegion()


def test_private_host_device_closes() -> None:
    with HostDevice() as h:
        c = h.malloc(8)
    assert not h.is_open
    with pytest.raises(UseAfterFreeError, match="device closed"):
        c.numpy()
    with pytest.raises(DeviceError, match="closed"):
        h.malloc(8)


# --- regions and malloc -----------------------------------------------------------------------


def test_regions_and_defaults(dev: Device) -> None:
    assert dev.defaultMemRegion().name == "etm"
    assert dev.defaultRegRegion().name == "regs"
    assert dev.setDefaultMemRegion("ocm") is dev
    assert dev.malloc(10).isOn(dev.getMemRegion("ocm"))
    assert dev.malloc("etm", 10).isOn(dev.getMemRegion("etm"))
    assert dev.setDefaultRegRegion("dma").defaultRegRegion().name == "dma"
    with pytest.raises(DeviceError, match=r"no memory region 'ddr'.*\['etm', 'ocm'\]"):
        dev.getMemRegion("ddr")
    with pytest.raises(DeviceError, match=r"\['dma', 'regs'\]"):
        dev.getRegRegion("nope")
    with pytest.raises(XrtError):
        dev.setDefaultMemRegion("nope")
    with pytest.raises(InvalidArgumentError):
        dev.malloc("etm")
    with pytest.raises(DeviceError, match="already has"):
        dev.add_mem_region(MemRegion("etm", dev, 0, 16))
    assert dev.getMemRegion("etm").device() is dev
    assert dev.clone() is dev and dev.getMemRegion("etm").clone() is dev.getMemRegion("etm")


def test_malloc_options(dev: Device) -> None:
    c = dev.malloc("etm", 100, alignment=4096)
    assert c.addr % 4096 == 0
    k = dev.malloc(50, auto_free=False)
    assert not k.auto_free
    k.free()


# --- registers --------------------------------------------------------------------------------


def test_reg_read_write_relative_and_masking(dev: Device) -> None:
    dev.writeReg(REG_BASE + 8, 0x1234)
    assert dev.readReg(REG_BASE + 8) == 0x1234
    assert dev.readReg(8, True) == 0x1234 and dev.readReg(8, relative=True) == 0x1234
    assert dev.readReg("regs", 8, relative=True) == 0x1234
    dev.writeReg("regs", 12, -1, True)
    assert dev.readReg("regs", REG_BASE + 12) == 0xFFFF_FFFF
    dev.writeReg(REG_BASE, 0x1_2345_6789)  # masked to 32 bits
    assert dev.readReg(REG_BASE) == 0x2345_6789
    dev.writeReg("dma", 8, 0x1_2345_6789, relative=True)  # 64-bit words keep it
    assert dev.readReg("dma", 8, True) == 0x1_2345_6789
    assert dev.readReg(REG_BASE + 4) == 0  # unwritten registers read 0
    dev.writeReg(REG_BASE + 4, np.uint32(5))
    assert dev.readReg(REG_BASE + 4) == 5
    dev.reset(0)
    assert dev.readReg(REG_BASE) == 0


def test_reg_errors_name_address_and_region(dev: Device) -> None:
    with pytest.raises(MemoryAccessError, match=r"'regs'.*0x40000002.*aligned"):
        dev.readReg(REG_BASE + 2)
    with pytest.raises(MemoryAccessError, match=r"'regs'.*0x40000100.*outside"):
        dev.writeReg(REG_BASE + 0x100, 1)
    with pytest.raises(MemoryAccessError, match="relative=True"):
        dev.readReg(8)
    with pytest.raises(MemoryAccessError, match="'dma'"):
        dev.readReg("dma", 4, True)  # 8-byte words
    with pytest.raises(InvalidArgumentError):
        dev.writeReg(REG_BASE, 1.5)
    with pytest.raises(InvalidArgumentError):
        dev.readReg()
    with pytest.raises(InvalidArgumentError):
        RegRegion("r", None, 0, 16, word_bytes=3)


def test_reg_hooks() -> None:
    regs = RegRegion("ctrl", None, 0x100, 0x40)
    writes: list[tuple[int, int]] = []

    def start(addr: int, value: int) -> None:
        writes.append((addr, value))
        regs.poke(0x108, 1)  # device model: set "done", no hooks

    remove = regs.on_write(0x4, start, relative=True)
    regs.on_read(0x10C, lambda addr, value: value + 100)
    regs.on_read(0x10C, lambda addr, value: None)  # None keeps the value
    regs.write(0x104, 7)
    assert writes == [(0x104, 7)] and regs.read(0x108) == 1
    assert regs.read(0x10C) == 100 and regs.peek(0x10C) == 0
    remove()
    remove()  # removing twice is harmless
    regs.write(0x104, 8)
    assert writes == [(0x104, 7)] and regs.peek(0x104) == 8
    assert regs.clone() is regs and regs.device() is None and "ctrl" in repr(regs)


# --- status, version, lifecycle ---------------------------------------------------------------


def test_status_version_wait_time(dev: Device, capsys: pytest.CaptureFixture[str]) -> None:
    keep = dev.malloc("etm", 1000)
    dev.showStatus(1)
    out = capsys.readouterr().out
    assert "sim://test" in out and "'etm'" in out and "used 1024" not in out
    assert "used 1000" in out and repr(keep) in out and "'regs'" in out
    assert dev.check(0)
    v = dev.version()
    assert v["device"] == "Device" and all(isinstance(x, str) for x in v.values())
    dev.setWaitTime(250)
    assert dev.wait_time == 250
    with pytest.raises(InvalidArgumentError):
        dev.setWaitTime(-1)


def test_close_is_idempotent_and_frees(dev: Device) -> None:
    c = dev.malloc(64)
    with dev as same:
        assert same is dev
    assert not dev.is_open and not dev.check(0)
    dev.close()
    Device.Close(dev)
    with pytest.raises(UseAfterFreeError):
        c.write(0, b"x")
    for call in (lambda: dev.malloc(1), lambda: dev.readReg(REG_BASE), dev.reset):
        with pytest.raises(DeviceError, match="sim://test.*closed"):
            call()


def test_open_dispatches_to_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[str] = []

    def open_device(url: str) -> Device:
        opened.append(url)
        return make_device(url)

    fake = types.ModuleType("xrt.plugins")
    fake.open_device = open_device  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "xrt.plugins", fake)
    d = Device.Open("sim://fake")
    assert opened == ["sim://fake"] and d.url == "sim://fake"
    Device.Close(d)
    assert not d.is_open


def test_star_import_brings_the_whole_error_hierarchy():
    """Vendor-style `from xrt import *` exposes every XrtError subclass by name."""
    import xrt
    from xrt import errors

    ns: dict = {}
    exec("from xrt import *", ns)
    hierarchy = {n for n, c in vars(errors).items()
                 if isinstance(c, type) and issubclass(c, xrt.XrtError)}
    assert {"DeviceError", "CallOrderError", "XrtError"} <= hierarchy <= set(ns)
    assert "Session" in ns and "Tensor" in ns

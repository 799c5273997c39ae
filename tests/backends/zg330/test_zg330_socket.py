"""`socket://zg330@host:port` does what `sim://zg330` does: tiny_cnn through a whole
Session.Create([ZG330Backend, HostBackend]) with byte-identical outputs, and the device API
(registers, counters, timing, reset) answers the same as in-process."""

from __future__ import annotations

import numpy as np
import pytest
from test_zg330_backend import _compiled, _x

from host_backend import HostBackend
from npu_runtime import regs as R
from npu_runtime.regs import REG_BASE
from xrt import Device, HostDevice, Session
from xrt.errors import InvalidArgumentError, UnsupportedOpError
from xrt.remote.server import DeviceServer
from zg330backend import ZG330Backend, ZG330Device
from zg330backend.chip import DEVICE_ID
from zg330backend.device import ZG330SocketDevice


@pytest.fixture
def served():
    srv = DeviceServer(Device.Open("sim://zg330"), close_device=True).start()
    host, port = srv.address
    dev = Device.Open(f"socket://zg330@{host}:{port}")
    yield srv, dev
    dev.close()
    srv.shutdown()


def _run(z, dev, x):
    s = Session.Create([ZG330Backend, HostBackend], z.view(0), [dev, HostDevice.Default()])
    s.enableTimeProfile(True)
    s.apply()
    outs = [np.asarray(t).copy() for t in s.forward([x])]
    outs += [np.asarray(t).copy() for t in s.forward([x])]
    prof = ZG330Backend(s.backends[0]).profileInfo()
    ok = ZG330Backend(s.backends[0]).precheck()
    s.close()
    return outs, prof, ok, (dev.calcTime(), dev.layerCount(), dev.rTileCount(0),
                            dev.wTileCount(1), dev.readReg(0, 0, R.MPE_MACS_LO))


def test_tiny_cnn_socket_byte_identical_to_sim(served):
    srv, sock = served
    _, z = _compiled("tiny_cnn")
    x = _x(z)
    sim = Device.Open("sim://zg330")
    try:
        want = _run(z, sim, x)
    finally:
        sim.close()
    got = _run(z, sock, x)
    assert len(want[0]) == len(got[0]) > 0
    for a, b in zip(want[0], got[0]):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    assert got[1] == want[1] and got[2] and want[2]
    assert got[3] == want[3]
    assert sock.server_info()["requests"] > 0


def test_socket_device_is_a_zg330_device_with_remote_storage(served):
    _, dev = served
    assert isinstance(dev, ZG330Device) and isinstance(dev, ZG330SocketDevice)
    assert ZG330Device(dev) is dev
    c = dev.malloc(128)
    assert c.region.storage.view(c.addr, 16) is None and not c.region.storage.is_local
    with pytest.raises(UnsupportedOpError):
        c.numpy()
    d = dev.malloc("ocm", 256)
    d.fill(3)
    c.copyFrom(0, d, 10, 100)
    back = np.empty(128, np.uint8)
    c.read(back)
    assert (back[:100] == 3).all()
    c.region.storage.copy(c.addr + 100, d.region.storage, d.addr, 28)  # on the server
    c.read(back)
    assert (back == 3).all()


def test_device_api_matches_sim(served):
    _, dev = served
    sim = Device.Open("sim://zg330")
    try:
        for d in (sim, dev):
            d.setIcoreClkFreq(500_000_000)
            d.setDDRClkFreq(600_000_000)
            d.setMasterCID(2)
            d.writeReg(1, 2, R.MPE_SCRATCH, 0xABCD)
            d.setRowsCols(2, 3)
        for d in (sim, dev):
            assert d.readReg(1, 2, R.MPE_SCRATCH) == 0xABCD
            assert d.readReg(3, 1, R.MPE_ID) == (3 << 8) | 1
        assert dev.getRowsCols() == sim.getRowsCols() == (2, 3)
        assert dev.readReg(REG_BASE + R.ID) == sim.readReg(REG_BASE + R.ID) == DEVICE_ID
        assert dev.readReg("regs", R.ICORE_CLK_HZ, True) == 500_000_000
        assert dev.layerCount() == sim.layerCount() == 0
        offs = (R.ICORE_CLK_HZ, R.DDR_CLK_HZ, R.MPE_EN)  # raw batches reach the server too
        assert dev.defaultRegRegion().peek_words(offs) == \
            sim.defaultRegRegion().peek_words(offs) == [500_000_000, 600_000_000, 2 | 3 << 16]
        with pytest.raises(InvalidArgumentError, match="raw register writes"):
            dev.defaultRegRegion().poke_words({R.MPE_EN: 3 | 2 << 16})  # the server's model only
        assert dev.getRowsCols() == (2, 3)
        assert dev.check(1) and sim.check(1)
        assert "ZG330" in dev.status(0) and dev.version()["id"] == sim.version()["id"]
        for d in (sim, dev):
            t = d.malloc(32 * 8)
            d.configTimer(t)
        dev.reset(0)
        sim.reset(0)
        assert dev.getRowsCols() == sim.getRowsCols() == (4, 4)
        assert dev.readReg("regs", R.ICORE_CLK_HZ, True) == sim.readReg("regs", R.ICORE_CLK_HZ,
                                                                        True)
        assert dev.stats().keys() == sim.stats().keys()
        dev.clear_stats()
        assert len(dev.mmu_table()) == len(sim.mmu_table()) == 0
        page = dev.malloc(4096)  # held: a freed chunk may not be mapped
        dev.mmuMap(0, 0x1000, page.addr, 4096)
        assert len(dev.mmu_table()) == 1
        dev.mmuClear()
        assert len(dev.mmu_table()) == 0
    finally:
        sim.close()


def test_show_layer_time_over_the_socket(served, capsys):
    _, dev = served
    _, z = _compiled("tiny_cnn")
    t = dev.malloc(32 * 64)
    s = Session.Create([ZG330Backend, HostBackend], z.view(0), [dev, HostDevice.Default()])
    s.apply()
    dev.configTimer(t)
    s.forward([_x(z)])
    n = dev.layerCount()
    assert n > 0
    recs = dev.layerTimes(0, n)
    assert len(recs) == n and (recs["end"] >= recs["start"]).all()
    dev.showLayerTime(0, n)
    assert "cycles" in capsys.readouterr().out
    s.close()


def test_illegal_register_write_is_refused_over_the_socket(served):
    """The server answers an illegal register write with InvalidArgumentError naming the
    register, stores nothing, and keeps serving."""
    from xrt.errors import InvalidArgumentError

    _, dev = served
    before = dev.readReg(REG_BASE + R.ICORE_CLK_HZ)
    with pytest.raises(InvalidArgumentError, match="ICORE_CLK_HZ"):
        dev.writeReg(REG_BASE + R.ICORE_CLK_HZ, 0)
    assert dev.readReg(REG_BASE + R.ICORE_CLK_HZ) == before
    q, z = _compiled("tiny_cnn")
    x = _x(q)
    assert np.isfinite(_run(z, dev, x)[0][0]).all()


def test_one_client_cannot_reach_another_clients_memory(served):
    """Cross-client attempts through every door are refused (docs/socket-protocol.md, "Threat
    model"): reads and writes, mmuMap, MMU entries written as registers, icoreCalc on foreign
    instructions, record areas, raw register pokes and CTRL START; the victim's data is intact
    and no error quotes it."""
    from xrt.errors import InvalidArgumentError, MemoryAccessError

    srv, victim = served
    host, port = srv.address
    thief = Device.Open(f"socket://zg330@{host}:{port}")
    try:
        secret = victim.defaultMemRegion().malloc(4096, True, 4096)
        secret.write(0, np.full(4096, 0x5A, np.uint8))
        addr = secret.addr
        own = thief.defaultMemRegion().malloc(4096, True, 4096)
        errors = []
        attempts = [
            lambda: thief.mmuMap(0, 0x1000, addr, 4096),
            lambda: thief.icoreCalc(addr, 64),
            lambda: thief.writeReg("regs", R.CTRL, R.CTRL_START, True),
        ]
        for attempt in attempts:
            with pytest.raises((MemoryAccessError, InvalidArgumentError)) as exc:
                attempt()
            errors.append(str(exc.value))
        # an MMU entry written as registers lands in the thief's own shadow; its run is refused
        base = REG_BASE + R.mmu_entry(1)
        thief.writeReg(base + R.MMU_PHYS_LO, addr & 0xFFFF_FFFF)
        thief.writeReg(base + R.MMU_PHYS_HI, addr >> 32)
        thief.writeReg(base + R.MMU_SIZE_LO, 4096)
        thief.writeReg(base + R.MMU_FLAGS, R.MMU_VALID)
        assert thief.readReg(base + R.MMU_PHYS_LO) == addr & 0xFFFF_FFFF
        assert victim.readReg(base + R.MMU_FLAGS) == 0
        with pytest.raises(MemoryAccessError, match="MMU entry 1"):
            thief.icoreCalc(own.addr, 64)
        thief.mmuClear()
        thief.writeReg(REG_BASE + R.TIMER_ADDR_LO, addr & 0xFFFF_FFFF)
        thief.writeReg(REG_BASE + R.TIMER_ADDR_HI, addr >> 32)
        thief.writeReg(REG_BASE + R.TIMER_SIZE, 256)
        with pytest.raises(MemoryAccessError, match="timer records"):
            thief.icoreCalc(own.addr, 64)
        assert not any("5a5a" in e.lower() or "0x5a" in e.lower() for e in errors)
        back = np.zeros(4096, np.uint8)
        secret.read(back)
        assert (back == 0x5A).all()
    finally:
        thief.close()

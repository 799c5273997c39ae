"""`socket://buyi@host:port` does what `sim://buyi` does: tiny_cnn (int8 and int16) through
Session.Create([BuyiBackend, HostBackend]) with byte-identical outputs, and the Buyi's own
methods (data type, MMU mode, MPE enable, clock, segment table) act on the served device."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from buyi_testlib import compiled, rand_x, run_buyi

from buyibackend import BuyiDevice
from buyibackend.device import BuyiSocketDevice
from npu_runtime import regs as R
from npu_runtime.regs import REG_BASE
from xrt import Device
from xrt.errors import DeviceError, InvalidArgumentError, MemoryAccessError
from xrt.remote.server import DeviceServer


@pytest.fixture
def served():
    srv = DeviceServer(Device.Open("sim://buyi"), close_device=True).start()
    host, port = srv.address
    dev = Device.Open(f"socket://buyi@{host}:{port}")
    yield srv, dev
    dev.close()
    srv.shutdown()


def _run(net, dev, x):
    s, out = run_buyi(net, dev, x, profile=True)
    out += [np.asarray(t).copy() for t in s.forward([x])]
    ok = s.backends[0].precheck()
    s.close()
    return out, ok, (dev.calcTime(), dev.layerCount(), dev.dtype(), dev.modeInfo())


def _same(want, got):
    assert len(want) == len(got) > 0
    for a, b in zip(want, got):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("mmu", [True, False], ids=["mmu_on", "mmu_off"])
@pytest.mark.parametrize("bits", [8, 16])
def test_tiny_cnn_socket_byte_identical_to_sim(served, bits, mmu):
    srv, sock = served
    q, z = compiled("tiny_cnn", bits=bits)
    x = rand_x(q)
    sim = Device.Open("sim://buyi")
    try:
        sim.mmuModeSwitch(mmu)
        want = _run(z, sim, x)
    finally:
        sim.close()
    sock.mmuModeSwitch(mmu)
    got = _run(z, sock, x)
    _same(want[0], got[0])
    assert got[1] and want[1]
    assert got[2] == want[2] and got[2][2] == bits and got[2][3] == int(mmu)
    assert srv.device.dtype() == bits and srv.device.modeInfo() == int(mmu)
    assert sock.server_info()["requests"] > 0


def test_socket_device_is_a_buyi_device(served):
    srv, dev = served
    assert isinstance(dev, BuyiDevice) and isinstance(dev, BuyiSocketDevice)
    assert BuyiDevice(dev) is dev
    assert dev.config == srv.device.config and dev.getRowsCols() == (2, 4)
    assert dev.check(1) and "BuyiSocketDevice" in repr(dev)
    c = dev.malloc(128)
    assert not c.region.storage.is_local
    # one set of fields whatever the transport (nothing probes them); the device holds its
    # transport instead of mixing one in
    assert set(vars(dev)) == set(vars(srv.device))
    assert {"transport", "share", "config", "mock", "_mmu_on", "_dtype_bits"} <= set(vars(dev))
    assert dev.sim is None and srv.device.sim is not None  # the served device runs the model
    assert dev.mmu_generation >= 0 and srv.device.mmu_generation >= 0


def test_buyi_methods_round_trip(served):
    srv, dev = served
    sim = srv.device
    # data type and MMU mode live on the served model (icoreCalc reads them there)
    assert dev.dtype() == 8
    dev.setDType(16)
    assert dev.dtype() == sim.dtype() == 16
    with pytest.raises(InvalidArgumentError, match="8 or 16"):
        dev.setDType(4)
    assert dev.modeInfo() == 1
    dev.mmuModeSwitch(False)
    assert dev.modeInfo() == sim.modeInfo() == 0
    base = dev.config.etm_base
    assert dev.mmu_table().translate(base + 0x123, 4)[1] == base + 0x123
    dev.mmuModeSwitch(True)
    assert dev.modeInfo() == sim.modeInfo() == 1
    # MPE enable, clock and the segment table go through the registers
    dev.setEnabledMPE(1, 2)
    assert dev.getRowsCols() == sim.getRowsCols() == (1, 2)
    with pytest.raises(InvalidArgumentError):
        dev.setEnabledMPE(3, 1)  # the array has 2 rows
    assert dev.clkFreq() == 500.0
    dev.setClkFreq(250)
    assert dev.clkFreq() == sim.clkFreq() == 250.0
    held = [dev.malloc(0x2000), dev.malloc(0x1000)]  # a client maps only its own chunks
    segs = [(0x1000, held[0].addr, 0x2000), (0x8000, held[1].addr, 0x1000)]
    with pytest.raises(MemoryAccessError, match="not inside a chunk this client allocated"):
        dev.updateBuffer([(0x1000, base + 0x400000, 0x1000)])
    dev.updateBuffer(segs)
    assert [(s.logical, s.physical, s.size) for s in dev.mmu_table().segments] == segs
    # the served device holds a client's entries only while that client's run goes on
    assert sim.mmu_table().segments == []
    dev.writeReg(3, 1, R.MPE_SCRATCH, 0xABCD)
    assert dev.readReg(3, 1, R.MPE_SCRATCH) == sim.readReg(3, 1, R.MPE_SCRATCH) == 0xABCD
    assert dev.readReg(REG_BASE + R.ID) == sim.readReg(REG_BASE + R.ID)
    assert dev.layerCount() == 0 and dev.calcTime() == sim.calcTime()


def test_vendor_name_and_wrong_servers(served):
    srv, _ = served
    host, port = srv.address
    with Device.Open(f"socket://ql100aiu@{host}:{port}") as d:
        assert isinstance(d, BuyiSocketDevice)
    with pytest.raises(DeviceError, match="not a ZG330"):
        Device.Open(f"socket://zg330@{host}:{port}")
    z = DeviceServer(Device.Open("sim://zg330"), close_device=True).start()
    try:
        zh, zp = z.address
        with pytest.raises(DeviceError, match="xrt serve buyi"):
            Device.Open(f"socket://buyi@{zh}:{zp}")
    finally:
        z.shutdown()


def test_xrt_serve_buyi_subprocess():
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "xrt", "serve", "buyi", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        assert "serving sim://buyi on 127.0.0.1:" in line, line + proc.stderr.read()
        port = int(line.split("127.0.0.1:")[1].split()[0])
        q, z = compiled("tiny_cnn")
        x = rand_x(q)
        sim = Device.Open("sim://buyi")
        try:
            want = _run(z, sim, x)[0]
        finally:
            sim.close()
        with Device.Open(f"socket://buyi@127.0.0.1:{port}") as d:
            _same(want, _run(z, d, x)[0])
    finally:
        proc.terminate()
        try:
            _, err = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:  # pragma: no cover
            proc.kill()
            _, err = proc.communicate(timeout=5)
    assert proc.returncode == 0, err

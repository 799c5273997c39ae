"""LEASE (docs/socket-protocol.md): a small region of a served device leased whole by several
clients that share nothing, time-shared by the server. Any xrt Device, no plugin: each client
reads back only its own bytes, whoever wrote last; the server holds the region while leases
last; the refused cases raise project errors; a client's lease goes with it."""

from __future__ import annotations

import numpy as np
import pytest

from xrt import Device
from xrt.errors import (
    AddressInUseError,
    CallOrderError,
    InvalidArgumentError,
    OutOfDeviceMemoryError,
)
from xrt.memory.region import MemRegion
from xrt.remote import RemoteDevice
from xrt.remote import protocol as P
from xrt.remote.protocol import Msg
from xrt.remote.server import DeviceServer

SMALL = 0x8000_0000


@pytest.fixture
def server():
    dev = Device("test://lease")
    dev.add_mem_region(MemRegion("main", dev, 0x1000_0000, 1 << 24), default=True)
    dev.add_mem_region(MemRegion("small", dev, SMALL, 1 << 16))
    srv = DeviceServer(dev, lease_max_bytes=1 << 20, quota_bytes=1 << 22).start()
    yield srv
    srv.shutdown()


def _client(srv) -> RemoteDevice:
    host, port = srv.address
    return RemoteDevice(f"socket://lease@{host}:{port}")


def test_each_leaseholder_reads_back_only_its_own_bytes(server):
    a, b, c = (_client(server) for _ in range(3))
    try:
        leases = [d.getMemRegion("small").lease() for d in (a, b, c)]
        assert {x.addr for x in leases} == {SMALL}
        rng = np.random.default_rng(0)
        want = [rng.integers(0, 256, 1 << 16, dtype=np.uint8) for _ in leases]
        for x, w in zip(leases, want):
            x.write(0, w)
        for i in (2, 0, 1, 0, 2):  # any order: each gets its own bytes back
            back = np.empty(1 << 16, np.uint8)
            leases[i].read(back)
            assert np.array_equal(back, want[i])
        leases[1].fill(7)
        back = np.empty(16, np.uint8)
        leases[0].read(back)
        assert np.array_equal(back, want[0][:16])
        assert server.info()["client_chunks"] == {k: 1 for k in server.info()["client_chunks"]}
    finally:
        for d in (a, b, c):
            d.close()


def test_the_server_holds_a_leased_region_and_gives_it_back_zeroed(server):
    a, b = _client(server), _client(server)
    try:
        lease = a.getMemRegion("small").lease()
        lease.fill(0xEE)
        with pytest.raises(OutOfDeviceMemoryError):
            b.malloc("small", 64)  # the region is the server's while leased
        with pytest.raises(CallOrderError, match="already leases"):
            a.getMemRegion("small").lease()
        lease.free()
        a.server_info()  # carries the queued free
        own = b.malloc("small", 64)
        assert server.info()["used_bytes"]["small"] == 64
        back = np.empty(64, np.uint8)
        own.read(back)
        assert not back.any()  # the leaseholder's bytes are gone
        with pytest.raises(AddressInUseError, match="once they are freed"):
            a.getMemRegion("small").lease()
        own.free()
    finally:
        a.close()
        b.close()


def test_refused_leases(server):
    a = _client(server)
    try:
        with pytest.raises(InvalidArgumentError, match="larger than"):
            a.getMemRegion("main").lease()  # 16 MiB > lease_max_bytes
        with pytest.raises(InvalidArgumentError, match="whole region"):
            a.remote.request(Msg.LEASE, P.REGION.pack(1, SMALL + 64))
        with pytest.raises(InvalidArgumentError, match="region index"):
            a.remote.request(Msg.LEASE, P.REGION.pack(9, SMALL))
        big = a.malloc("main", (1 << 22) - 4096)
        with pytest.raises(OutOfDeviceMemoryError, match="quota"):
            a.getMemRegion("small").lease()  # a lease counts against the client's quota
        big.free()
        assert a.getMemRegion("small").lease().byte_size == 1 << 16
    finally:
        a.close()


def test_a_lease_goes_with_its_client(server):
    a, b = _client(server), _client(server)
    la = a.getMemRegion("small").lease()
    lb = b.getMemRegion("small").lease()
    la.fill(1)
    lb.fill(2)
    a.close()  # BYE: a's lease ends, b's bytes stay
    back = np.empty(8, np.uint8)
    lb.read(back)
    assert (back == 2).all()
    b.close()
    assert server.info()["used_bytes"]["small"] == 0
    assert server.info()["chunks"]["small"] == 0

"""The socket device server under misuse: every bad frame gets an error reply or a clean close,
the server keeps serving, and a client that goes away has its memory freed.

Each test serves a ZG330 simulator from a thread of the test process (loopback, short timeouts);
one test starts the real `xrt serve` command in a subprocess.
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from xrt import Device
from xrt.errors import (
    CallOrderError,
    DeviceError,
    DoubleFreeError,
    MemoryAccessError,
    OutOfDeviceMemoryError,
    UnsupportedOpError,
    XrtError,
    XrtTimeoutError,
)
from xrt.remote import protocol as P
from xrt.remote.protocol import Msg, ProtocolError
from xrt.remote.server import DeviceServer

pytest.importorskip("zg330backend")


_OPEN: list = []


@pytest.fixture(autouse=True)
def _close_raw_sockets():
    yield
    while _OPEN:
        _OPEN.pop().close()


class Raw:
    """A bare protocol peer: send any bytes, read frames back, notice a close."""

    def __init__(self, addr, timeout: float = 5.0) -> None:
        self.sock = socket.create_connection(addr, timeout=timeout)
        _OPEN.append(self)
        self.reader = P.FrameReader(P.MAX_PAYLOAD * 2, "server")
        self.timeout = timeout

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def frame(self, mtype: int, req_id: int, payload: bytes = b"") -> None:
        P.send_parts(self.sock, P.frame(mtype, req_id, payload))

    def hello(self) -> dict:
        self.frame(Msg.HELLO, 1, P.U16.pack(P.VERSION))
        t, rid, payload = self.recv()
        assert t == Msg.HELLO | P.REPLY and rid == 1
        return P.decode_json(payload)

    def recv(self):
        return self.reader.read(self.sock, time.monotonic() + self.timeout)

    def error(self):
        """The next frame, which must be an ERROR: (request id, exception)."""
        t, rid, payload = self.recv()
        assert t == Msg.ERROR, hex(t)
        return rid, P.decode_error(payload)

    def closed_by_server(self) -> bool:
        """True when the server closes the connection (EOF or reset) within the timeout."""
        try:
            while True:
                self.reader.read(self.sock, time.monotonic() + self.timeout)
        except (EOFError, ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()


def wait_until(pred, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.02)
    return pred()


@pytest.fixture
def server():
    dev = Device.Open("sim://zg330")
    srv = DeviceServer(dev, frame_timeout=0.5, test_hooks=True, max_clients=4,
                       close_device=True).start()
    yield srv
    srv.shutdown()


def url(srv, name="zg330") -> str:
    host, port = srv.address
    return f"socket://{name}@{host}:{port}"


def healthy(srv) -> None:
    """A normal client still works: allocate, write, read back, free; nothing left over."""
    with Device.Open(url(srv)) as d:
        c = d.malloc(4096)
        data = np.random.default_rng(7).integers(0, 256, 4096, dtype=np.uint8)
        c.write(0, data)
        back = np.empty(4096, np.uint8)
        c.read(back)
        assert (back == data).all()
        assert d.layerCount() == d.layerCount()
        c.free()
    assert wait_until(lambda: srv.info()["clients"] == 0)
    assert srv.info()["chunks"] == {"etm": 0, "ocm": 0}
    assert srv.device.check()


# --- malformed frames -----------------------------------------------------------------------------

def test_bad_magic_gets_error_and_close(server):
    r = Raw(server.address)
    r.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    rid, exc = r.error()
    assert isinstance(exc, ProtocolError) and "magic" in str(exc)
    assert r.closed_by_server()
    healthy(server)


def test_wrong_version_gets_error_and_close(server):
    r = Raw(server.address)
    r.send(struct.pack("<4sHHII", P.MAGIC, 99, Msg.HELLO, 1, 2) + b"\x63\x00")
    _, exc = r.error()
    assert isinstance(exc, ProtocolError) and "version 99" in str(exc)
    assert r.closed_by_server()
    healthy(server)


def test_hello_with_wrong_client_version_is_refused(server):
    r = Raw(server.address)
    r.frame(Msg.HELLO, 5, P.U16.pack(P.VERSION + 1))
    rid, exc = r.error()
    assert rid == 5 and isinstance(exc, ProtocolError)
    r.close()
    healthy(server)


def test_oversized_length_is_refused_without_reading_it(server):
    r = Raw(server.address)
    r.hello()
    r.send(struct.pack("<4sHHII", P.MAGIC, P.VERSION, Msg.WRITE, 2, 0xFFFF_FFF0))
    _, exc = r.error()
    assert isinstance(exc, ProtocolError) and "maximum" in str(exc)
    assert r.closed_by_server()
    healthy(server)


def test_unknown_command_gets_error_and_connection_goes_on(server):
    r = Raw(server.address)
    r.hello()
    r.frame(0x0777, 9, b"xyz")
    rid, exc = r.error()
    assert rid == 9 and isinstance(exc, ProtocolError) and "unknown message type" in str(exc)
    r.frame(Msg.MALLOC, 10, P.MALLOC_REQ.pack(0, 64, 64))  # still in step
    t, rid, payload = r.recv()
    assert t == Msg.MALLOC | P.REPLY and rid == 10 and len(payload) == 8
    r.close()
    assert wait_until(lambda: server.info()["chunks"]["etm"] == 0)  # freed on disconnect
    healthy(server)


@pytest.mark.parametrize("mtype,payload", [
    (Msg.MALLOC, b"\x00\x01"),                              # too short
    (Msg.READ, P.READ_REQ.pack(9, 0, 4)),                    # no such region
    (Msg.CALL, b"{not json"),                                # broken JSON
    (Msg.CALL, P.encode_json({"m": "close", "a": []})),      # not on the allow-list
    (Msg.CALL, P.encode_json({"m": "icoreCalc", "a": [[1]]})),  # argument types
    (Msg.FREE, b"\x00" * 11),                                # not 8 + 8 n bytes
    (Msg.REG_READ, struct.pack("<QB", 0x1234_5678, 0)),     # outside the register window
])
def test_malformed_payload_gets_error_reply(server, mtype, payload):
    r = Raw(server.address)
    r.hello()
    r.frame(mtype, 3, payload)
    rid, exc = r.error()
    assert rid == 3 and isinstance(exc, XrtError)
    r.frame(Msg.REG_READ, 4, P.REG_READ_REQ.pack(0x9000_0000, 0))  # connection still usable
    t, rid, payload = r.recv()
    assert rid == 4 and P.U64.unpack(payload)[0] == 0x0330_0001
    r.close()
    healthy(server)


def test_requests_before_hello_are_refused(server):
    r = Raw(server.address)
    r.frame(Msg.MALLOC, 1, P.MALLOC_REQ.pack(0, 64, 64))
    _, exc = r.error()
    assert isinstance(exc, CallOrderError)
    r.hello()
    r.close()
    healthy(server)


# --- clients that go away -------------------------------------------------------------------------

def test_client_disconnecting_mid_transfer_has_its_memory_freed(server):
    r = Raw(server.address)
    r.hello()
    r.frame(Msg.MALLOC, 2, P.MALLOC_REQ.pack(0, 1 << 20, 64))
    _, _, payload = r.recv()
    addr = P.U64.unpack(payload)[0]
    assert server.info()["chunks"]["etm"] == 1
    head = struct.pack("<4sHHII", P.MAGIC, P.VERSION, Msg.WRITE, 3, 8 + (1 << 20))
    r.send(head + P.REGION.pack(0, addr) + b"\x55" * 1000)  # then vanish
    r.close()
    assert wait_until(lambda: server.info()["clients"] == 0)
    assert server.info()["chunks"] == {"etm": 0, "ocm": 0}
    healthy(server)


def test_client_stalling_mid_frame_is_dropped(server):
    r = Raw(server.address)
    r.hello()
    r.frame(Msg.MALLOC, 2, P.MALLOC_REQ.pack(1, 4096, 64))
    r.recv()
    r.send(struct.pack("<4sHHII", P.MAGIC, P.VERSION, Msg.WRITE, 3, 100) + b"\x00" * 10)
    assert r.closed_by_server()  # frame_timeout is 0.5 s
    assert wait_until(lambda: server.info()["chunks"]["ocm"] == 0)
    healthy(server)


def test_client_device_close_frees_and_gc_frees_are_sent(server):
    d = Device.Open(url(server))
    a = d.malloc(1000)
    b = d.malloc("ocm", 2000)
    assert server.info()["chunks"] == {"etm": 1, "ocm": 1}
    del b  # auto-free from the garbage collector: queued, sent with the next request
    assert d.server_info()["chunks"] == {"etm": 1, "ocm": 0}
    d.close()
    assert a.is_freed
    assert wait_until(lambda: server.info()["chunks"] == {"etm": 0, "ocm": 0})


def test_too_many_clients_get_an_error(server):
    devs = [Device.Open(url(server)) for _ in range(4)]
    with pytest.raises(DeviceError, match="already has 4 clients"):
        Device.Open(url(server))
    for d in devs:
        d.close()
    healthy(server)


# --- concurrency ----------------------------------------------------------------------------------

def test_two_clients_at_once_do_not_corrupt_each_other(server):
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def work(seed: int) -> None:
        try:
            rng = np.random.default_rng(seed)
            with Device.Open(url(server)) as d:
                start.wait()
                for _ in range(25):
                    n = int(rng.integers(1, 300_000))
                    region = "ocm" if rng.random() < 0.3 and n < 200_000 else "etm"
                    c = d.malloc(region, n)
                    data = rng.integers(0, 256, n, dtype=np.uint8)
                    c.write(0, data)
                    d.readReg(0, seed, 0x14)
                    back = np.empty(n, np.uint8)
                    c.read(back)
                    assert (back == data).all(), "data of one client changed under it"
                    c.free()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    healthy(server)


def test_clients_cannot_touch_each_others_memory(server):
    with Device.Open(url(server)) as a, Device.Open(url(server)) as b:
        ca = a.malloc(4096)
        ca.fill(0x11)
        conn = b.transport.remote.connection
        with pytest.raises(MemoryAccessError, match="not inside a chunk this client"):
            conn.request(Msg.WRITE, P.REGION.pack(0, ca.addr), b"\x00" * 16)
        with pytest.raises(DoubleFreeError):
            conn.request(Msg.FREE, P.REGION.pack(0, 0)[:8] + P.U64.pack(ca.addr))
        back = np.empty(4096, np.uint8)
        ca.read(back)
        assert (back == 0x11).all()


# --- errors crossing the wire ---------------------------------------------------------------------

def test_server_errors_are_raised_as_the_same_xrt_class(server):
    with Device.Open(url(server)) as d:
        with pytest.raises(OutOfDeviceMemoryError):
            d.malloc(3 << 30)
        with pytest.raises(UnsupportedOpError, match="does not let clients call"):
            d.call("close")
        with pytest.raises(DeviceError, match="illegal|fault|MMU|instruction"):
            c = d.malloc(64)
            c.write(0, np.full(64, 0xFF, np.uint8))
            d.icoreCalc(c.addr, 64)
        assert d.transport.description["version"] == P.VERSION


def test_wait_time_exceeded_raises_timeout_and_connection_recovers(server):
    with Device.Open(url(server)) as d:
        d.setWaitTime(100)
        t0 = time.monotonic()
        with pytest.raises(XrtTimeoutError, match="within 100 ms"):
            d.call("_sleep", 600)
        assert time.monotonic() - t0 < 0.5
        d.setWaitTime(5000)
        c = d.malloc(128)  # the late reply is recognised by its request id and dropped
        c.write(0, np.arange(128, dtype=np.uint8))
        back = np.empty(128, np.uint8)
        c.read(back)
        assert (back == np.arange(128)).all()
        assert isinstance(d.layerCount(), int)
    healthy(server)


def test_lost_connection_raises_device_error_not_oserror(server):
    d = Device.Open(url(server))
    c = d.malloc(64)
    server.shutdown()
    with pytest.raises(DeviceError, match="connection"):
        for _ in range(3):  # the first request may still be written before the reset is seen
            d.layerCount()
    with pytest.raises(DeviceError, match="lost"):
        c.write(0, b"abc")
    d.close()  # closing a dead connection is clean
    d.close()


def test_connection_refused_is_a_device_error():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(DeviceError, match="cannot connect"):
        Device.Open(f"socket://zg330@127.0.0.1:{port}")


def test_bad_socket_urls_are_url_errors():
    from xrt.errors import DeviceUrlError

    for bad in ("socket://zg330@127.0.0.1", "socket://zg330@:5", "socket://nothing@h:1"):
        with pytest.raises(DeviceUrlError):
            Device.Open(bad)


# --- the real command -----------------------------------------------------------------------------

def test_xrt_serve_subprocess_port_zero():
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "xrt", "serve", "zg330", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        assert "serving sim://zg330 on 127.0.0.1:" in line, line + proc.stderr.read()
        port = int(line.split("127.0.0.1:")[1].split()[0])
        with Device.Open(f"socket://haps-zg330@127.0.0.1:{port}") as d:
            assert d.version()["device"] == "ZG330 (simulator)"
            c = d.malloc(256)
            c.write(0, np.arange(256, dtype=np.uint8))
            back = np.empty(256, np.uint8)
            c.read(back)
            assert (back == np.arange(256)).all()
    finally:
        proc.terminate()
        try:
            _, err = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:  # pragma: no cover
            proc.kill()
            _, err = proc.communicate(timeout=5)
    assert proc.returncode == 0, err
    assert "server stopped" in err


# --- authentication, silence, memory per client ---------------------------------------------------

def test_token_is_required_off_loopback_and_checked(monkeypatch):
    from xrt.errors import InvalidArgumentError

    dev = Device.Open("sim://zg330")
    try:
        with pytest.raises(InvalidArgumentError, match="token"):
            DeviceServer(dev, host="0.0.0.0")
    finally:
        dev.close()
    srv = DeviceServer(Device.Open("sim://zg330"), token="s3cret", close_device=True).start()
    try:
        monkeypatch.delenv("XRT_SERVE_TOKEN", raising=False)
        with pytest.raises(DeviceError, match="token"):
            Device.Open(url(srv))
        monkeypatch.setenv("XRT_SERVE_TOKEN", "wrong")
        with pytest.raises(DeviceError, match="token"):
            Device.Open(url(srv))
        assert wait_until(lambda: srv.info()["clients"] == 0)
        monkeypatch.setenv("XRT_SERVE_TOKEN", "s3cret")
        healthy(srv)
    finally:
        srv.shutdown()


def test_silent_connections_are_dropped_and_free_their_slot():
    """Connections that never say HELLO (or go idle) are dropped, so they cannot lock the
    server's client slots."""
    srv = DeviceServer(Device.Open("sim://zg330"), max_clients=2, handshake_timeout=0.3,
                       idle_timeout=0.6, close_device=True).start()
    try:
        silent = [Raw(srv.address) for _ in range(2)]
        assert all(r.closed_by_server() for r in silent)
        idle = Raw(srv.address)
        idle.hello()
        assert idle.closed_by_server()
        healthy(srv)
    finally:
        srv.shutdown()


def test_payload_is_allocated_as_it_arrives(server):
    """A header announcing a large payload does not make the server allocate it at once."""
    import tracemalloc

    raws = []
    tracemalloc.start()
    try:
        for _ in range(3):  # the fixture serves 4 clients
            r = Raw(server.address)
            r.hello()
            r.send(struct.pack("<4sHHII", P.MAGIC, P.VERSION, Msg.WRITE, 2, 16 << 20) + b"x" * 10)
            raws.append(r)
        time.sleep(0.2)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20  # 3 headers of 16 MiB each: not one payload allocated
    for r in raws:
        r.close()


def test_quota_bounds_one_clients_memory():
    srv = DeviceServer(Device.Open("sim://zg330"), quota_bytes=1 << 20,
                       close_device=True).start()
    try:
        with Device.Open(url(srv)) as d:
            keep = d.malloc(768 << 10)
            with pytest.raises(OutOfDeviceMemoryError, match="quota"):
                d.malloc(512 << 10)
            keep.free()
            d.malloc(512 << 10).free()
        healthy(srv)
    finally:
        srv.shutdown()

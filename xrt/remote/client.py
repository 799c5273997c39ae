"""The client side of `socket://`: a connection, and remote memory/register regions over it.

A remote device is an ordinary `xrt.Device` that holds a `RemoteEndpoint` (composition: the
device knows its endpoint, the endpoint and its regions never call back into the device):

  - `RemoteEndpoint`: the connection, the server's HELLO description, `call(name, *args)` (a
    method of the served device, from its allow-list) and the regions below, built from the
    description and added to the device that holds the endpoint;
  - `RemoteStorage`: the byte store of a memory region; `read`/`write`/`fill` are requests,
    `view` is None (Tensor and chunk code then copy);
  - `RemoteAllocator`: the region's allocator; the server places every chunk (so clients never
    overlap), a local mirror keeps `MemManager` book-keeping and checks working;
    `RemoteMemRegion.lease()` takes the whole region as this client's own, time-shared with
    the other clients that lease it (the server keeps each one's bytes: docs/socket-protocol.md);
  - `RemoteRegRegion`: register reads and writes run on the server, with its device-model hooks.

Frees are queued and sent, batched, in front of the next request: a chunk's auto-free runs from
the garbage collector at any moment, possibly in the middle of another request on this thread.

`Device.setWaitTime(ms)` is the per-request timeout (0: wait without limit). A timed-out request
raises XrtTimeoutError and the connection stays usable (its late reply is recognised by its
request id and dropped); a lost connection raises DeviceError. Neither surfaces as OSError.
"""

from __future__ import annotations

import collections
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from xrt.device import Device
from xrt.errors import (
    DeviceError,
    UnsupportedOpError,
    XrtTimeoutError,
)
from xrt.memory.allocator import Allocator
from xrt.memory.chunk import MemChunk
from xrt.memory.manager import MemManager
from xrt.memory.ptr import MemPtr, as_uint8_view
from xrt.memory.region import MemRegion
from xrt.memory.storage import Storage
from xrt.regs import RegRegion
from xrt.url import DeviceUrl

from . import protocol as P
from .protocol import Msg, ProtocolError

log = logging.getLogger(__name__)


class Connection:
    """One client connection: framed requests with ids, timeouts and queued frees.

    Thread-safe: requests from several threads are serialised on the connection.
    """

    def __init__(self, host: str, port: int, timeout_ms: int, label: str) -> None:
        self.label = label
        self._lock = threading.Lock()
        self._next_id = 1
        self._ignore: set[int] = set()
        self._frees: collections.deque[tuple[int, int]] = collections.deque()
        self.closed = False
        self.broken = ""
        self.max_payload = P.MAX_PAYLOAD
        self.chunk = P.CHUNK
        try:
            self.sock = socket.create_connection((host, port),
                                                 timeout=timeout_ms / 1e3 if timeout_ms else None)
        except OSError as exc:
            raise DeviceError(f"cannot connect to {label}: {exc}; start the device server "
                              f"there (e.g. `xrt serve zg330 --port {port}`)") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._reader = P.FrameReader(P.MAX_PAYLOAD, label)

    # --- requests -----------------------------------------------------------------------------

    def request(self, mtype: int, *parts: Any, timeout_ms: int = 0) -> bytearray:
        """Send one request and return its reply payload (an ERROR reply is raised)."""
        with self._lock:
            self._usable()
            deadline = time.monotonic() + timeout_ms / 1e3 if timeout_ms else None
            frames: list[Any] = []
            free_ids = []
            while self._frees:
                frames += self._free_frames(free_ids)
            req_id = self._new_id()
            frames += P.frame(mtype, req_id, *parts)
            try:
                self._send(frames, deadline)
                for fid in free_ids:
                    self._ignore.add(fid)  # their replies are checked below as they come
                return self._wait(req_id, mtype, deadline)
            except TimeoutError:
                self._ignore.add(req_id)
                raise XrtTimeoutError(
                    f"{self.label}: no reply to {Msg(mtype).name} within {timeout_ms} ms; raise "
                    "the limit with device.setWaitTime(ms) (0: no limit)") from None
            except (OSError, EOFError) as exc:
                self._break(f"{type(exc).__name__}: {exc}")
                raise DeviceError(f"{self.label}: connection lost ({self.broken}); open the "
                                  "device again") from None
            except ProtocolError as exc:
                self._break(str(exc))
                raise

    def _new_id(self) -> int:
        rid = self._next_id
        self._next_id = (self._next_id + 1) & 0xFFFF_FFFF or 1
        return rid

    def _free_frames(self, ids: list[int]) -> list[Any]:
        by_region: dict[int, list[int]] = {}
        while self._frees:
            r, addr = self._frees.popleft()
            by_region.setdefault(r, []).append(addr)
        out: list[Any] = []
        for r, addrs in by_region.items():
            for i in range(0, len(addrs), 4096):
                rid = self._new_id()
                ids.append(rid)
                body = P.REGION.pack(r, 0)[:8] + np.asarray(addrs[i:i + 4096], "<u8").tobytes()
                out += P.frame(Msg.FREE, rid, body)
        return out

    def _send(self, frames: list[Any], deadline: float | None) -> None:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError()
            self.sock.settimeout(left)
        else:
            self.sock.settimeout(None)
        try:
            P.send_parts(self.sock, frames)
        except TimeoutError:
            # part of a frame may be out: the stream is unusable from here on
            self._break("timed out in the middle of sending a request")
            raise

    def _wait(self, req_id: int, mtype: int, deadline: float | None) -> bytearray:
        while True:
            rtype, rid, payload = self._reader.read(self.sock, deadline)
            if rid == req_id:
                if rtype == Msg.ERROR:
                    raise P.decode_error(payload)
                if rtype != (mtype | P.REPLY):
                    raise ProtocolError(f"{self.label}: reply type {rtype:#06x} to request "
                                        f"type {mtype:#06x}")
                return payload
            if rid in self._ignore:
                self._ignore.discard(rid)
                if rtype == Msg.ERROR and rid:
                    log.warning("%s: late or queued request %d failed: %s", self.label, rid,
                                P.decode_error(payload))
                continue
            if rtype == Msg.ERROR:
                raise P.decode_error(payload)  # request id 0: the server is closing on us
            raise ProtocolError(f"{self.label}: reply with unknown request id {rid}")

    def _usable(self) -> None:
        if self.closed:
            raise DeviceError(f"{self.label}: the connection is closed; open the device again")
        if self.broken:
            raise DeviceError(f"{self.label}: the connection was lost ({self.broken}); open the "
                              "device again")

    def _break(self, why: str) -> None:
        self.broken = why
        try:
            self.sock.close()
        except OSError:
            pass

    def queue_free(self, region: int, addr: int) -> None:
        """Free `addr` on the server in front of the next request (safe from finalizers)."""
        if not self.closed and not self.broken:
            self._frees.append((region, addr))

    def close(self) -> None:
        """Say BYE (the server frees this client's memory) and close. Idempotent."""
        if self.closed:
            return
        try:
            if not self.broken:
                self._frees.clear()
                self.request(Msg.BYE, timeout_ms=2000)
        except Exception as exc:  # the server may be gone already; it frees on disconnect
            log.debug("%s: BYE failed: %s", self.label, exc)
        finally:
            self.closed = True
            try:
                self.sock.close()
            except OSError:
                pass


# --- memory -----------------------------------------------------------------------------------

class RemoteStorage(Storage):
    """The bytes of a remote memory region: every access is a request; no zero-copy view."""

    def __init__(self, remote: RemoteEndpoint, index: int, name: str) -> None:
        self._remote = remote
        self.index = index
        self.name = name

    def read(self, addr: int, n: int) -> np.ndarray:
        addr, n = int(addr), int(n)
        out = np.empty(n, dtype=np.uint8)
        step = self._remote.connection.chunk
        for off in range(0, n, step):
            k = min(step, n - off)
            data = self._remote.request(Msg.READ, P.READ_REQ.pack(self.index, addr + off, k))
            if len(data) != k:
                raise ProtocolError(f"{self.name}: READ of {k} bytes returned {len(data)}")
            out[off:off + k] = np.frombuffer(data, np.uint8)
        return out

    def write(self, addr: int, data: Any) -> None:
        src = as_uint8_view(data, "source data")
        step = self._remote.connection.chunk
        for off in range(0, src.size, step):
            part = src[off:off + step]
            self._remote.request(Msg.WRITE, P.REGION.pack(self.index, int(addr) + off),
                                  np.ascontiguousarray(part))

    def fill(self, addr: int, n: int, value: int = 0) -> None:
        self._remote.request(Msg.FILL, P.FILL_REQ.pack(self.index, int(value) & 0xFF,
                                                        int(addr), int(n)))

    def copy(self, dst: int, src_storage: RemoteStorage, src: int, n: int) -> None:
        """Copy `n` bytes on the server (both stores on the same remote device)."""
        self._remote.request(Msg.COPY, P.COPY_REQ.pack(self.index, src_storage.index,
                                                        int(dst), int(src), int(n)))

    def __repr__(self) -> str:
        return f"RemoteStorage({self.name!r} on {self._remote.url!r})"


class RemoteAllocator(Allocator):
    """Places chunks on the server; the inherited state mirrors this client's allocations."""

    def __init__(self, remote: RemoteEndpoint, index: int, base: int, size: int,
                 name: str) -> None:
        super().__init__(base, size, name)
        self._remote = remote
        self.index = index
        #: the thread in `RemoteMemRegion.lease`, whose reserve is a LEASE (None: no lease)
        self.leasing: int | None = None

    def alloc(self, size: int, alignment: int = 1) -> int:
        addr = U64(self._remote.request(Msg.MALLOC, P.MALLOC_REQ.pack(self.index, int(size),
                                                                       int(alignment))))
        return super().reserve(addr, size)

    def reserve(self, addr: int, size: int) -> int:
        if self.leasing == threading.get_ident():
            got = U64(self._remote.request(Msg.LEASE, P.REGION.pack(self.index, int(addr))))
        else:
            got = U64(self._remote.request(Msg.RESERVE, P.RESERVE_REQ.pack(
                self.index, int(addr), int(size))))
        return super().reserve(got, size)

    def free(self, addr: int) -> int:
        size = super().free(addr)
        self._remote.connection.queue_free(self.index, int(addr))
        return size


def U64(payload: Any) -> int:
    if len(payload) != 8:
        raise ProtocolError(f"expected an 8-byte reply, got {len(payload)} bytes")
    return P.U64.unpack(payload)[0]


class RemoteMemRegion(MemRegion):
    """A memory region of a remote device (remote storage, server-side placement)."""

    def __init__(self, device: Device, remote: RemoteEndpoint, index: int, name: str, base: int,
                 size: int, alignment: int) -> None:
        storage = RemoteStorage(remote, index, f"region {name!r} on {remote.url}")
        super().__init__(name, device, base, size, storage, alignment)
        self._alloc = RemoteAllocator(remote, index, base, size, f"region {name!r}")
        self._manager = MemManager(self, self._alloc)
        self._lease_lock = threading.Lock()

    def lease(self, auto_free: bool = True) -> MemChunk:
        """The whole region as one chunk of this client's own, time-shared on the server with
        the other clients that lease it: each one reads back only what it wrote, and their runs
        never see each other's bytes (the server keeps the bytes of the clients not running).
        Refused while a client holds an ordinary chunk in the region."""
        with self._lease_lock:
            self._alloc.leasing = threading.get_ident()
            try:
                return self.malloc(MemPtr(self.base), self.size, None, auto_free)
            finally:
                self._alloc.leasing = None


class RemoteRegRegion(RegRegion):
    """Registers of a remote device: reads and writes run on the server, hooks included."""

    def __init__(self, device: Device, remote: RemoteEndpoint, name: str, base: int, size: int,
                 word_bytes: int) -> None:
        super().__init__(name, device, base, size, word_bytes)
        self._remote = remote
        self._watches: list[tuple[int, int, Callable[[], None]]] = []

    def watch(self, lo: int, hi: int, changed: Callable[[], None]) -> None:
        """Call `changed()` after each write of this client to a register in [lo, hi)
        (absolute) and after each reset: for a client's cache of server state that only its own
        writes change (its MMU entries, which the server keeps per client)."""
        self._watches.append((int(lo), int(hi), changed))

    def read(self, addr: int, relative: bool = False) -> int:
        a = self.absolute(addr, relative)
        return U64(self._remote.request(Msg.REG_READ, P.REG_READ_REQ.pack(a, 0)))

    def write(self, addr: int, data: int, relative: bool = False) -> None:
        a = self.absolute(addr, relative)
        try:
            self._remote.request(Msg.REG_WRITE, P.REG_WRITE_REQ.pack(a, self._value(data), 0))
        finally:
            for lo, hi, changed in self._watches:
                if lo <= a < hi:
                    changed()

    # the stored values live on the server: peek/poke and their batches (peek_words,
    # poke_words) read and write them raw, without hooks
    def _load(self, addr: int) -> int:
        return U64(self._remote.request(Msg.REG_READ, P.REG_READ_REQ.pack(addr, P.REG_RAW)))

    def _store(self, addr: int, value: int) -> None:
        self._remote.request(Msg.REG_WRITE, P.REG_WRITE_REQ.pack(addr, value, P.REG_RAW))

    def reset(self) -> None:
        try:
            self._remote.request(Msg.REG_RESET)
        finally:
            for _, _, changed in self._watches:
                changed()

    def on_write(self, *args: Any, **kwargs: Any) -> Any:
        raise UnsupportedOpError(f"{self!r} is remote: register hooks live in the server's "
                                 "device model")

    on_read = on_write


# --- the endpoint ---------------------------------------------------------------------------------

class RemoteEndpoint:
    """One client's link to a `DeviceServer`: the connection, the server's description (its
    HELLO reply), `call` and the remote regions. A Device holds one and adds its regions
    (`attach`); nothing here refers back to that device except the regions' `device()`.

    `wait_time` gives the per-request timeout in ms (the holding device's `setWaitTime`).
    """

    def __init__(self, url: str, wait_time: Callable[[], int]) -> None:
        host, port = DeviceUrl.parse(url).require_server()
        self.url = str(url)
        self._wait_time = wait_time
        self.connection = Connection(host, port, wait_time(), self.url)
        conn = self.connection
        try:
            token = os.environ.get("XRT_SERVE_TOKEN", "").encode("utf-8")
            desc = P.decode_json(self.request(
                Msg.HELLO, P.U16.pack(P.VERSION) + b"xrt-client" + (b"\0" + token if token
                                                                    else b"")))
            conn.max_payload = int(desc.get("max_payload", P.MAX_PAYLOAD))
            conn.chunk = max(1, min(int(desc.get("chunk", P.CHUNK)), conn.max_payload - 64))
            conn._reader.max_payload = max(conn.max_payload, P.MAX_PAYLOAD)
        except BaseException:
            conn.close()
            raise
        #: the server's HELLO reply: protocol version, device class, regions, methods, config
        self.description: dict[str, Any] = desc

    def attach(self, device: Device) -> None:
        """Add the served device's memory regions and its register region to `device`."""
        desc = self.description
        for i, m in enumerate(desc["mem"]):
            device.add_mem_region(
                RemoteMemRegion(device, self, i, m["name"], m["base"], m["size"],
                                m["alignment"]),
                default=m["name"] == desc.get("default_mem"))
        if desc.get("reg"):
            g = desc["reg"]
            device.add_reg_region(
                RemoteRegRegion(device, self, g["name"], g["base"], g["size"], g["word_bytes"]),
                default=True)

    def request(self, mtype: int, *parts: Any) -> bytearray:
        """One request with the holding device's wait time; its reply payload."""
        return self.connection.request(mtype, *parts, timeout_ms=self._wait_time())

    def call(self, method: str, *args: Any) -> Any:
        """Call `method(*args)` on the served device (numbers and strings in and out)."""
        args = [a.item() if isinstance(a, np.generic) else a for a in args]
        out = P.decode_json(self.request(Msg.CALL, P.encode_json({"m": method, "a": args})))
        return out["r"]

    def server_info(self) -> dict[str, Any]:
        """The server's counters: clients, requests, live chunks per region."""
        return self.call("server_info")

    def close(self) -> None:
        """Say BYE (the server frees this client's memory) and close. Idempotent."""
        self.connection.close()


class RemoteDevice(Device):
    """A device of any kind behind `socket://name@host:port`: memory, registers and `call`.

    Device plugins hold a `RemoteEndpoint` in their own device class instead, so backends see
    the device type they expect (see npu_runtime's socket transport).
    """

    def __init__(self, url: str) -> None:
        Device.__init__(self, url)
        self.remote = RemoteEndpoint(url, lambda: self.wait_time)
        self.remote.attach(self)

    @property
    def description(self) -> dict[str, Any]:
        """The server's HELLO reply."""
        return self.remote.description

    def call(self, method: str, *args: Any) -> Any:
        """Call `method(*args)` on the served device (its allow-list)."""
        return self.remote.call(method, *args)

    def server_info(self) -> dict[str, Any]:
        """The server's counters: clients, requests, live chunks per region."""
        return self.remote.server_info()

    def reset(self, level: int = 0) -> None:
        self._check_open()
        self.call("reset", int(level))

    def version(self) -> dict[str, str]:
        v = Device.version(self)
        v.update({"server": str(self.description.get("server", "")), "protocol": str(P.VERSION)})
        return v

    def _on_close(self) -> None:
        self.remote.close()

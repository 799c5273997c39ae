"""`DeviceServer`: serve one xrt device to socket clients (the board side of `socket://`).

One thread per client; every request runs under one device lock, so requests from several
clients are serialised and never interleave on the device. Each client owns the chunks it
allocated: it may read and write only inside them, and they are freed when it says BYE,
disconnects, stalls mid-frame or sends a frame that breaks the protocol.

A small region (an NPU's on-chip memory) may instead be *leased* whole by any number of clients
(LEASE): the server time-shares it. The region holds the bytes of one leaseholder at a time;
before a request of another leaseholder runs, the server keeps the bytes of the one switched in
and puts back those of the one asking (zeros the first time). So clients that share nothing
each have the region as their own -- none waits for another to disconnect, none reads or
overwrites another's bytes, even between the runs of one forward.

What a client may call beyond memory and registers is an explicit allow-list per device class
(`expose`), so a remote peer can never reach `close()` or private state.
"""

from __future__ import annotations

import hmac
import logging
import socket
import struct
import threading
import time
from bisect import bisect_right, insort
from typing import Any

import numpy as np

from xrt.errors import (
    AddressInUseError,
    CallOrderError,
    DeviceError,
    DoubleFreeError,
    InvalidArgumentError,
    MemoryAccessError,
    OutOfDeviceMemoryError,
    UnsupportedOpError,
    XrtError,
)

from . import protocol as P
from .protocol import Msg, ProtocolError

log = logging.getLogger(__name__)

#: "module.QualName" of a device class -> names of the methods clients may CALL
_EXPOSED: dict[str, frozenset[str]] = {}


def expose(device_class: str, methods: Any) -> None:
    """Let clients CALL `methods` on devices of class `device_class` ("module.QualName";
    a string so that registering needs no import of the device model)."""
    _EXPOSED[device_class] = _EXPOSED.get(device_class, frozenset()) | frozenset(methods)


def exposed_methods(device: Any) -> frozenset[str]:
    """The methods clients may CALL on `device` (allow-lists of its class and base classes)."""
    out: frozenset[str] = frozenset()
    for cls in type(device).__mro__:
        out |= _EXPOSED.get(f"{cls.__module__}.{cls.__qualname__}", frozenset())
    return out


def _jsonable(v: Any) -> Any:
    if isinstance(v, (bool, str)) or v is None:
        return v
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return float(v)
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    raise DeviceError(f"result of type {type(v).__name__} cannot be sent to a client")


class _Lease:
    """One client's hold on a time-shared region (the whole region, `addr` its base): stored
    among the client's chunks, so ownership checks, quotas and frees treat it as one. `image`
    keeps the client's bytes while another leaseholder's are in the region."""

    def __init__(self, shared: _Shared, addr: int, byte_size: int) -> None:
        self.shared = shared
        self.addr = int(addr)
        self.byte_size = int(byte_size)
        self.image: np.ndarray | None = None  # None: zeros (never switched out)

    def free(self) -> None:
        self.shared.release(self)


class _Shared:
    """A region time-shared by its leaseholders: the server's own chunk over the whole region
    (so no client allocates in it meanwhile), the lease whose bytes are in it now."""

    def __init__(self, region: Any, arena: Any) -> None:
        self.region = region
        self.arena = arena
        self.leases: list[_Lease] = []
        self.holder: _Lease | None = None

    def switch_in(self, lease: _Lease) -> None:
        """Make `lease`'s bytes the region's (keeping the present holder's)."""
        if self.holder is lease:
            return
        storage, base, size = self.region.storage, self.region.base, self.region.size
        if self.holder is not None:
            self.holder.image = np.asarray(storage.read(base, size), np.uint8)
        if lease.image is None:
            storage.fill(base, size, 0)
        else:
            storage.write(base, lease.image)
            lease.image = None
        self.holder = lease

    def release(self, lease: _Lease) -> None:
        """End `lease`; its bytes are dropped (zeroed where they are in the region), and the
        region goes back to the allocator with the last lease."""
        self.leases.remove(lease)
        lease.image = None
        if self.holder is lease:
            self.holder = None
            if not self.arena.is_freed:  # (freed: the device was closed under the server)
                self.region.storage.fill(self.region.base, self.region.size, 0)
        if not self.leases and not self.arena.is_freed:
            self.arena.free()


class _Client:
    """One connection: its socket and the chunks it owns, per region index."""

    def __init__(self, cid: int, sock: socket.socket, peer: str, nregions: int) -> None:
        self.cid = cid
        self.sock = sock
        self.peer = peer
        self.hello = False
        self.scope: dict[str, Any] = {}  # the device guard's per-client state
        self.chunks: list[dict[int, Any]] = [{} for _ in range(nregions)]
        self.starts: list[list[int]] = [[] for _ in range(nregions)]
        self.leases: list[_Lease] = []
        self.send_lock = threading.Lock()

    def add(self, r: int, chunk: Any) -> None:
        self.chunks[r][chunk.addr] = chunk
        insort(self.starts[r], chunk.addr)

    def remove(self, r: int, addr: int) -> Any:
        chunk = self.chunks[r].pop(addr)
        self.starts[r].remove(addr)
        if isinstance(chunk, _Lease):
            self.leases.remove(chunk)
        return chunk

    def owns(self, r: int, addr: int, n: int) -> bool:
        i = bisect_right(self.starts[r], addr) - 1
        if i < 0:
            return False
        start = self.starts[r][i]
        return addr + n <= start + max(1, self.chunks[r][start].byte_size)


class _PhysOwner:
    """What a device guard asks of one client's memory: `owns(addr, n)`, whether a physical
    range lies in one chunk the client allocated, and `ranges()`, all its (addr, bytes)."""

    def __init__(self, c: _Client, regions: list) -> None:
        self.c, self.regions = c, regions

    def __call__(self, addr: int, n: int) -> bool:
        for r, region in enumerate(self.regions):
            if region.base <= addr < region.base + region.size:
                return self.c.owns(r, int(addr), max(1, int(n)))
        return False

    def ranges(self) -> list[tuple[int, int]]:
        return [(a, max(1, ch.byte_size)) for chunks in self.c.chunks for a, ch in chunks.items()]


class DeviceServer:
    """Serve `device` on (host, port); `port=0` picks a free port (see `address`).

    `frame_timeout` (s) bounds how long a started frame may take to arrive; an idle client may
    stay connected indefinitely. `test_hooks=True` adds the CALL method `_sleep(ms)` (holds the
    device for `ms` milliseconds), used by tests of client timeouts. `close_device` closes the
    device when the server shuts down. A region of at most `lease_max_bytes` may be leased
    (time-shared whole; switching costs a copy of it).
    """

    def __init__(self, device: Any, host: str = "127.0.0.1", port: int = 0, *,
                 max_clients: int = 32, frame_timeout: float = 10.0,
                 max_payload: int = P.MAX_PAYLOAD, test_hooks: bool = False,
                 close_device: bool = False, name: str = "", token: str | None = None,
                 handshake_timeout: float = 5.0, idle_timeout: float = 600.0,
                 quota_bytes: int | None = None, lease_max_bytes: int = 64 << 20) -> None:
        if token is None and host not in ("127.0.0.1", "localhost", "::1"):
            raise InvalidArgumentError(
                f"serving on {host!r} (not loopback) needs a shared-secret token (--token or "
                f"XRT_SERVE_TOKEN): anyone who can reach the port could use the device")
        self.token = token
        self.handshake_timeout = float(handshake_timeout)
        self.idle_timeout = float(idle_timeout)
        self.quota_bytes = None if quota_bytes is None else int(quota_bytes)
        self.lease_max_bytes = int(lease_max_bytes)
        #: region index -> its time-sharing state while some client leases it
        self._shared: dict[int, _Shared] = {}
        self.device = device
        self.name = name or device.url or type(device).__name__
        self.max_clients = int(max_clients)
        self.frame_timeout = float(frame_timeout)
        self.max_payload = int(max_payload)
        self.test_hooks = bool(test_hooks)
        self.close_device = close_device
        from xrt import plugins

        plugins.registry()  # plugins expose their device methods when they register
        self.methods = exposed_methods(device)
        #: the device's client policy (`Device.serve_guard`, e.g. npu_runtime's ClientGuard):
        #: what a client's CALLs and register accesses may touch
        self.guard = device.serve_guard
        self.regions = list(device.mem_regions.values())
        regs = list(device.reg_regions.values())
        self.reg = regs[0] if regs else None
        self.lock = threading.RLock()  # the device lock: one request at a time
        self._clients: dict[int, _Client] = {}
        self._next_cid = 1
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._listener = socket.create_server((host, int(port)), reuse_port=False)
        self._listener.settimeout(0.2)
        self._accept_thread: threading.Thread | None = None
        self.requests = 0
        self.errors = 0
        #: requests that failed with something other than a project error (a server bug)
        self.internal_errors = 0

    # --- lifecycle ----------------------------------------------------------------------------

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) the server listens on."""
        host, port = self._listener.getsockname()[:2]
        return host, port

    def start(self) -> DeviceServer:
        """Accept clients in a background thread; return self."""
        self._accept_thread = threading.Thread(target=self.serve_forever, daemon=True,
                                               name=f"xrt-serve-{self.address[1]}")
        self._accept_thread.start()
        return self

    def serve_forever(self) -> None:
        """Accept clients until `shutdown()`."""
        while not self._stop.is_set():
            try:
                sock, addr = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._stop.is_set():
                    break
                raise
            self._accept(sock, f"{addr[0]}:{addr[1]}")

    def _accept(self, sock: socket.socket, peer: str) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.lock:
            if len(self._clients) >= self.max_clients:
                busy = DeviceError(f"server {self.name!r} already has {self.max_clients} "
                                   "clients; try again later")
                try:
                    sock.settimeout(1.0)
                    P.send_parts(sock, P.frame(Msg.ERROR, 0, P.error_payload(busy)))
                except OSError:
                    pass
                sock.close()
                return
            client = _Client(self._next_cid, sock, peer, len(self.regions))
            self._next_cid += 1
            self._clients[client.cid] = client
        t = threading.Thread(target=self._serve_client, args=(client,), daemon=True,
                             name=f"xrt-client-{client.cid}")
        self._threads = [x for x in self._threads if x.is_alive()] + [t]
        t.start()

    def shutdown(self) -> None:
        """Stop accepting, drop every client (freeing its memory), close the device if owned."""
        self._stop.set()
        try:
            self._listener.close()
        except OSError:
            pass
        with self.lock:
            clients = list(self._clients.values())
        for c in clients:
            try:
                c.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in list(self._threads) + ([self._accept_thread] if self._accept_thread else []):
            if t is not threading.current_thread():
                t.join(timeout=5)
        if self.close_device:
            self.device.close()

    def __enter__(self) -> DeviceServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # --- per client ---------------------------------------------------------------------------

    def _serve_client(self, c: _Client) -> None:
        reader = P.FrameReader(self.max_payload, f"client {c.peer}")
        why = "disconnected"
        last = time.monotonic()
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                deadline = now + 0.2
                if not c.hello and not reader.in_progress and \
                        now - last > self.handshake_timeout:
                    why = f"sent no HELLO within {self.handshake_timeout} s"
                    break
                if not reader.in_progress and now - last > self.idle_timeout:
                    why = f"idle for over {self.idle_timeout} s"
                    break
                if reader.in_progress:
                    limit = reader.started + self.frame_timeout
                    if now >= limit:
                        why = f"stalled mid-frame for over {self.frame_timeout} s"
                        break
                    deadline = min(deadline, limit)
                try:
                    mtype, req_id, payload = reader.read(c.sock, deadline)
                except TimeoutError:
                    continue
                except ProtocolError as exc:
                    self.errors += 1
                    self._send(c, P.frame(Msg.ERROR, 0, P.error_payload(exc)))
                    why = f"protocol error: {exc}"
                    break
                last = time.monotonic()
                parts, close = self._handle(c, mtype, req_id, payload)
                self._send(c, parts)
                if mtype == Msg.HELLO and not c.hello:
                    why = "failed the handshake"
                    break
                if close:
                    why = "said BYE"
                    break
        except (EOFError, OSError) as exc:
            why = f"disconnected ({type(exc).__name__})"
        finally:
            self._drop(c, why)

    def _send(self, c: _Client, parts: list[Any]) -> None:
        with c.send_lock:
            c.sock.settimeout(self.frame_timeout)
            P.send_parts(c.sock, parts)

    def _drop(self, c: _Client, why: str) -> None:
        with self.lock:
            self._clients.pop(c.cid, None)
            n = self._free_all(c)
        log.info("client %s %s; freed %d chunks", c.peer, why, n)
        try:
            c.sock.close()
        except OSError:
            pass

    def _free_all(self, c: _Client) -> int:
        n = 0
        for r, chunks in enumerate(c.chunks):
            for addr in list(chunks):
                chunk = c.remove(r, addr)
                try:
                    chunk.free()
                except XrtError:  # the device was closed or reset under it
                    pass
                n += 1
        return n

    # --- requests -----------------------------------------------------------------------------

    def _handle(self, c: _Client, mtype: int, req_id: int, payload: bytearray
                ) -> tuple[list[Any], bool]:
        """Run one request; return the reply frame and whether to close afterwards."""
        self.requests += 1
        try:
            if mtype == Msg.HELLO:
                out: list[Any] = [self._hello(c, payload)]
            elif not c.hello:
                raise CallOrderError("send HELLO (the version handshake) before any other "
                                     "request")
            elif mtype == Msg.BYE:
                with self.lock:
                    self._free_all(c)
                return P.frame(Msg.BYE | P.REPLY, req_id), True
            else:
                handler = self._HANDLERS.get(mtype)
                if handler is None:
                    raise ProtocolError(f"unknown message type {mtype:#06x}; this server speaks "
                                        f"protocol version {P.VERSION}")
                with self.lock:
                    for lease in c.leases:  # this client's bytes back in its leased regions
                        lease.shared.switch_in(lease)
                    out = handler(self, c, payload)
            return P.frame(mtype | P.REPLY, req_id, *out), False
        except (struct.error, ValueError, TypeError, KeyError, IndexError, UnicodeDecodeError,
                AttributeError, OverflowError) as exc:
            if not isinstance(exc, XrtError):
                exc = ProtocolError(f"malformed payload for message type {mtype:#06x} "
                                    f"({len(payload)} bytes): {type(exc).__name__}: {exc}")
            return self._error(req_id, exc), False
        except XrtError as exc:
            return self._error(req_id, exc), False
        except Exception as exc:  # a device-model bug must not take the server down
            log.exception("request %#06x from %s failed", mtype, c.peer)
            self.internal_errors += 1
            return self._error(req_id, DeviceError(f"internal error in the device server: "
                                                   f"{type(exc).__name__}: {exc}")), False

    def _error(self, req_id: int, exc: BaseException) -> list[Any]:
        self.errors += 1
        return P.frame(Msg.ERROR, req_id, P.error_payload(exc))

    def _hello(self, c: _Client, payload: bytearray) -> bytes:
        (version,) = P.U16.unpack_from(payload, 0)
        if version != P.VERSION:
            raise ProtocolError(f"client speaks protocol version {version}, server "
                                f"{P.VERSION}; use matching xrt versions")
        if self.token is not None:
            _, _, given = bytes(payload[2:]).partition(b"\0")
            if not hmac.compare_digest(given, self.token.encode("utf-8")):
                raise DeviceError(f"server {self.name!r} refused the client: wrong or missing "
                                  "token (set XRT_SERVE_TOKEN to the server's --token)")
        c.hello = True
        dev = self.device
        with self.lock:
            desc: dict[str, Any] = {
                "version": P.VERSION, "server": self.name, "device_class": type(dev).__name__,
                "max_payload": self.max_payload, "chunk": min(P.CHUNK, self.max_payload),
                "mem": [{"name": r.name, "base": r.base, "size": r.size,
                         "alignment": r.default_alignment} for r in self.regions],
                "default_mem": dev.defaultMemRegion().name if self.regions else None,
                "reg": None if self.reg is None else {
                    "name": self.reg.name, "base": self.reg.base, "size": self.reg.size,
                    "word_bytes": self.reg.word_bytes},
                "methods": sorted(self.methods),
                "mock": False,
            }
            desc.update({str(k): _jsonable(v) for k, v in dev.serve_description().items()})
        return P.encode_json(desc)

    def _region(self, r: int) -> Any:
        if not 0 <= r < len(self.regions):
            raise InvalidArgumentError(f"memory region index {r} is outside "
                                       f"0..{len(self.regions) - 1}")
        return self.regions[r]

    def _check_owned(self, c: _Client, r: int, addr: int, n: int) -> None:
        if not c.owns(r, addr, n):
            raise MemoryAccessError(
                f"[{addr:#x}, {addr + n:#x}) in region {self.regions[r].name!r} is not inside a "
                "chunk this client allocated; clients may touch only their own memory")

    def _owns_phys(self, c: _Client) -> _PhysOwner:
        return _PhysOwner(c, self.regions)

    def _quota(self, c: _Client, size: int) -> None:
        if self.quota_bytes is None:
            return
        held = sum(ch.byte_size for chunks in c.chunks for ch in chunks.values())
        if held + size > self.quota_bytes:
            raise OutOfDeviceMemoryError(f"client {c.peer} holds {held} bytes; {size} more "
                                         f"exceed its quota of {self.quota_bytes} bytes (--quota)")

    def _malloc(self, c: _Client, p: bytearray) -> list[Any]:
        r, size, alignment = P.MALLOC_REQ.unpack(p)
        self._quota(c, int(size))
        chunk = self._region(r).malloc(int(size), False, max(1, int(alignment)))
        c.add(r, chunk)
        return [P.U64.pack(chunk.addr)]

    def _reserve(self, c: _Client, p: bytearray) -> list[Any]:
        from xrt.memory.ptr import MemPtr

        r, addr, size = P.RESERVE_REQ.unpack(p)
        self._quota(c, int(size))
        chunk = self._region(r).malloc(MemPtr(int(addr)), int(size), None, False)
        c.add(r, chunk)
        return [P.U64.pack(chunk.addr)]

    def _lease(self, c: _Client, p: bytearray) -> list[Any]:
        r, addr = P.REGION.unpack(p)
        region = self._region(r)
        if addr != region.base:
            raise InvalidArgumentError(f"LEASE of region {region.name!r} at {addr:#x}: a lease "
                                       f"is the whole region, at its base {region.base:#x}")
        if region.size > self.lease_max_bytes:
            raise InvalidArgumentError(
                f"region {region.name!r} ({region.size} bytes) is larger than the "
                f"{self.lease_max_bytes} bytes a server time-shares; allocate chunks in it")
        shared = self._shared.get(r)
        if shared is not None and any(x.shared is shared for x in c.leases):
            raise CallOrderError(f"client {c.peer} already leases region {region.name!r}; "
                                 "free that lease first")
        self._quota(c, region.size)
        if shared is None or shared.arena.is_freed:
            from xrt.memory.ptr import MemPtr

            try:
                arena = region.malloc(MemPtr(region.base), region.size, None, False)
            except AddressInUseError:
                raise AddressInUseError(
                    f"region {region.name!r} holds chunks allocated by clients; it can be "
                    "leased (time-shared) once they are freed") from None
            shared = self._shared[r] = _Shared(region, arena)
        lease = _Lease(shared, region.base, region.size)
        shared.leases.append(lease)
        c.add(r, lease)
        c.leases.append(lease)
        shared.switch_in(lease)
        return [P.U64.pack(lease.addr)]

    def _free(self, c: _Client, p: bytearray) -> list[Any]:
        if len(p) < 8 or (len(p) - 8) % 8:
            raise ProtocolError(f"FREE payload of {len(p)} bytes is not 8 + 8 n")
        r = p[0]
        self._region(r)
        bad = []
        for (addr,) in struct.iter_unpack("<Q", memoryview(p)[8:]):
            if addr in c.chunks[r]:
                c.remove(r, addr).free()
            else:
                bad.append(addr)
        if bad:
            raise DoubleFreeError(f"FREE of {len(bad)} addresses this client does not hold "
                                  f"(first {bad[0]:#x}); free each chunk once")
        return []

    def _read(self, c: _Client, p: bytearray) -> list[Any]:
        r, addr, n = P.READ_REQ.unpack(p)
        if n > self.max_payload:
            raise InvalidArgumentError(f"READ of {n} bytes exceeds the frame maximum "
                                       f"{self.max_payload}; read in chunks")
        self._check_owned(c, r, addr, n)
        data = self._region(r).storage.read(addr, n)
        return [data]

    def _write(self, c: _Client, p: bytearray) -> list[Any]:
        r, addr = P.REGION.unpack_from(p, 0)
        data = memoryview(p)[P.REGION.size:]
        self._check_owned(c, r, addr, len(data))
        self._region(r).storage.write(addr, data)
        return []

    def _fill(self, c: _Client, p: bytearray) -> list[Any]:
        r, value, addr, n = P.FILL_REQ.unpack(p)
        self._check_owned(c, r, addr, n)
        self._region(r).storage.fill(addr, n, value)
        return []

    def _copy(self, c: _Client, p: bytearray) -> list[Any]:
        rd, rs, dst, src, n = P.COPY_REQ.unpack(p)
        self._check_owned(c, rd, dst, n)
        self._check_owned(c, rs, src, n)
        sd, ss = self._region(rd).storage, self._region(rs).storage
        if n:
            sd.write(dst, ss.read(src, n))
        return []

    def _need_reg(self) -> Any:
        if self.reg is None:
            raise UnsupportedOpError(f"device {self.name!r} has no register region")
        return self.reg

    def _reg_read(self, c: _Client, p: bytearray) -> list[Any]:
        addr, flags = P.REG_READ_REQ.unpack(p)
        reg = self._need_reg()
        v = self.guard.reg_read(c.scope, reg.absolute(addr)) if self.guard else None
        if v is None:
            v = reg.peek(addr) if flags & P.REG_RAW else reg.read(addr)
        return [P.U64.pack(v)]

    def _reg_write(self, c: _Client, p: bytearray) -> list[Any]:
        addr, value, flags = P.REG_WRITE_REQ.unpack(p)
        reg = self._need_reg()
        if flags & P.REG_RAW:
            raise InvalidArgumentError("raw register writes (poke) bypass the device's checks; "
                                       "a client may only write registers (writeReg)")
        if self.guard is not None and self.guard.reg_write(c.scope, reg.absolute(addr), value):
            return []
        reg.write(addr, value)
        return []

    def _reg_reset(self, c: _Client, p: bytearray) -> list[Any]:
        reg = self._need_reg()
        if self.guard is not None:  # the client's shadow MMU and run registers too
            self.guard.reg_reset(c.scope)
        reg.reset()  # power-on values: the clocks come back, never 0
        return []

    def _call(self, c: _Client, p: bytearray) -> list[Any]:
        req = P.decode_json(p)
        if not isinstance(req, dict) or not isinstance(req.get("m"), str):
            raise ProtocolError("CALL payload must be a JSON object {\"m\": name, \"a\": [...]}")
        name, args = req["m"], req.get("a", [])
        if not isinstance(args, list) or not all(
                isinstance(a, (int, float, str, bool)) or a is None for a in args):
            raise ProtocolError(f"CALL {name}: arguments must be a list of numbers/strings")
        if name == "server_info":
            result: Any = self.info()
        elif name == "_sleep" and self.test_hooks:
            time.sleep(min(float(args[0]), 60_000) / 1e3)
            result = None
        elif name in self.methods:
            handled = self.guard.call(c.scope, name, args, self._owns_phys(c)) \
                if self.guard is not None else None
            result = handled[0] if handled is not None else getattr(self.device, name)(*args)
        else:
            raise UnsupportedOpError(f"device {self.name!r} does not let clients call "
                                     f"{name!r}; callable: {', '.join(sorted(self.methods))}")
        return [P.encode_json({"r": _jsonable(result)})]

    def info(self) -> dict[str, Any]:
        """Clients, requests, and live chunks per region (server-wide and per client)."""
        with self.lock:
            return {
                "clients": len(self._clients), "requests": self.requests, "errors": self.errors,
                "internal_errors": self.internal_errors,
                "chunks": {r.name: r.memManager().chunk_count for r in self.regions},
                "used_bytes": {r.name: r.used_bytes for r in self.regions},
                "client_chunks": {str(c.cid): sum(len(x) for x in c.chunks)
                                  for c in self._clients.values()},
            }

    _HANDLERS = {
        Msg.MALLOC: _malloc, Msg.RESERVE: _reserve, Msg.LEASE: _lease, Msg.FREE: _free,
        Msg.READ: _read,
        Msg.WRITE: _write, Msg.FILL: _fill, Msg.COPY: _copy, Msg.REG_READ: _reg_read,
        Msg.REG_WRITE: _reg_write, Msg.REG_RESET: _reg_reset, Msg.CALL: _call,
    }

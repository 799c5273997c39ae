"""The xrt socket protocol: framed binary messages between a device client and a device server.

Every message is one frame: a 16-byte little-endian header, then `length` payload bytes.

    offset  size  field
    0       4     magic b"XRTS"
    4       2     protocol version (1)
    6       2     message type (requests < 0x8000; a reply is request type | 0x8000; ERROR)
    8       4     request id (chosen by the client, echoed in the reply)
    12      4     payload length in bytes (at most the receiver's maximum, `MAX_PAYLOAD`)

Control payloads are small packed structs or UTF-8 JSON (HELLO reply, CALL); bulk memory moves
as raw bytes after a small struct, chunked by the client into frames of at most `CHUNK` bytes.
The full specification is docs/socket-protocol.md; this module is its one implementation of
framing, used by both `xrt.remote.server` and `xrt.remote.client`.

Checks are layered: magic, version and length are checked as soon as a header is complete (the
receiver closes the connection, since the stream cannot be trusted any more); a payload that
does not parse for its type gets an ERROR reply and the connection goes on.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from enum import IntEnum
from typing import Any

from xrt import errors as _errors
from xrt.errors import DeviceError, ProtocolError, XrtError  # noqa: F401 (re-exported)

MAGIC = b"XRTS"
VERSION = 1
HEADER = struct.Struct("<4sHHII")
HEADER_SIZE = HEADER.size  # 16
#: largest payload a peer accepts by default (a frame is at most HEADER_SIZE + this)
MAX_PAYLOAD = 16 << 20
#: bulk transfers are split into frames of at most this many data bytes
CHUNK = 4 << 20
REPLY = 0x8000


class Msg(IntEnum):
    """Message types. Request payloads (little endian); replies use type | 0x8000."""

    HELLO = 0x0001  # u16 client version, utf-8 client name -> JSON device description
    BYE = 0x0002  # empty -> empty; the server frees the client's memory and closes
    MALLOC = 0x0010  # u8 region, 7 pad, u64 size, u64 alignment -> u64 addr
    RESERVE = 0x0011  # u8 region, 7 pad, u64 addr, u64 size -> u64 addr
    FREE = 0x0012  # u8 region, 7 pad, u64 addr * n -> empty
    LEASE = 0x0013  # u8 region, 7 pad, u64 region base -> u64 addr (the whole region, time-shared)
    READ = 0x0020  # u8 region, 7 pad, u64 addr, u64 n -> n raw bytes
    WRITE = 0x0021  # u8 region, 7 pad, u64 addr, raw bytes -> empty
    FILL = 0x0022  # u8 region, u8 value, 6 pad, u64 addr, u64 n -> empty
    COPY = 0x0023  # u8 dst region, u8 src region, 6 pad, u64 dst, u64 src, u64 n -> empty
    REG_READ = 0x0030  # u64 addr, u8 flags (1 = peek: no hooks) -> u64 value
    REG_WRITE = 0x0031  # u64 addr, u64 value, u8 flags (1 = poke) -> empty
    REG_RESET = 0x0032  # empty -> empty
    CALL = 0x0040  # JSON {"m": method, "a": [args]} -> JSON {"r": result}
    ERROR = 0x7FFF  # reply only: u16 n, n bytes class name, utf-8 message


REGION = struct.Struct("<B7xQ")  # region, addr   (READ/WRITE/FREE prefix)
MALLOC_REQ = struct.Struct("<B7xQQ")  # region, size, alignment
RESERVE_REQ = struct.Struct("<B7xQQ")  # region, addr, size
READ_REQ = struct.Struct("<B7xQQ")  # region, addr, n
FILL_REQ = struct.Struct("<BB6xQQ")  # region, value, addr, n
COPY_REQ = struct.Struct("<BB6xQQQ")  # dst region, src region, dst, src, n
REG_READ_REQ = struct.Struct("<QB")
REG_WRITE_REQ = struct.Struct("<QQB")
U16 = struct.Struct("<H")
U64 = struct.Struct("<Q")
REG_RAW = 1  # REG_READ/REG_WRITE flag: peek/poke (no device-model hooks)


def frame(mtype: int, req_id: int, *parts: Any) -> list[Any]:
    """Header plus payload parts (bytes-like objects), ready for `send_parts`."""
    n = sum(memoryview(p).nbytes for p in parts)
    return [HEADER.pack(MAGIC, VERSION, int(mtype), req_id & 0xFFFF_FFFF, n), *parts]


def send_parts(sock: socket.socket, parts: list[Any]) -> None:
    """Send every buffer of `parts` in order without joining them (no copy of bulk data)."""
    views = [memoryview(p).cast("B") for p in parts if memoryview(p).nbytes]
    while views:
        sent = sock.sendmsg(views)
        while views and sent >= views[0].nbytes:
            sent -= views[0].nbytes
            views.pop(0)
        if sent:
            views[0] = views[0][sent:]


def encode_json(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), allow_nan=True).encode()


def decode_json(payload: Any) -> Any:
    return json.loads(bytes(payload).decode("utf-8"))


# --- errors -------------------------------------------------------------------------------------

def error_payload(exc: BaseException) -> bytes:
    """ERROR payload for `exc`: its class name (an xrt error class where possible) and message."""
    name = type(exc).__name__ if isinstance(exc, XrtError) else "DeviceError"
    msg = str(exc) if isinstance(exc, XrtError) else f"{type(exc).__name__}: {exc}"
    raw = name.encode()[:200]
    return U16.pack(len(raw)) + raw + msg.encode("utf-8", "replace")


def error_class(name: str) -> type[XrtError]:
    """The xrt error class called `name` (DeviceError when no such class exists)."""
    if name == "ProtocolError":
        return ProtocolError
    cls = getattr(_errors, name, None)
    if isinstance(cls, type) and issubclass(cls, XrtError):
        return cls
    return DeviceError


def decode_error(payload: Any) -> XrtError:
    """The exception an ERROR payload describes (same xrt class, same message)."""
    data = bytes(payload)
    try:
        (n,) = U16.unpack_from(data, 0)
        name = data[2:2 + n].decode("ascii")
        msg = data[2 + n:].decode("utf-8", "replace")
    except (struct.error, UnicodeDecodeError):
        return ProtocolError(f"malformed ERROR reply ({len(data)} bytes)")
    cls = error_class(name)
    return cls(msg if cls.__name__ == name else f"{name}: {msg}")


# --- receiving ----------------------------------------------------------------------------------

class FrameReader:
    """Reads frames from a socket, keeping a partly received frame across timeouts.

    `read(sock, deadline)` returns `(type, request id, payload)` or raises `socket.timeout` when
    `deadline` (time.monotonic) passes; the bytes read so far are kept, so the next call goes on
    where this one stopped and the stream stays in step. EOF raises `EOFError`; a bad header
    raises ProtocolError (the stream cannot be trusted after that).
    """

    def __init__(self, max_payload: int = MAX_PAYLOAD, peer: str = "peer") -> None:
        self.max_payload = int(max_payload)
        self.peer = peer
        self._head = bytearray(HEADER_SIZE)
        self._got = 0
        self._hdr: tuple[int, int, int] | None = None
        self._payload = bytearray()
        self._filled = 0
        self.started = 0.0  # monotonic time the current frame began to arrive

    @property
    def in_progress(self) -> bool:
        """True when part of a frame has been received."""
        return self._got > 0

    def _recv_into(self, sock: socket.socket, view: memoryview, deadline: float | None) -> int:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("deadline passed")
            sock.settimeout(left)
        else:
            sock.settimeout(None)
        n = sock.recv_into(view)
        if n == 0:
            raise EOFError(f"{self.peer} closed the connection")
        return n

    def check_header(self) -> tuple[int, int, int]:
        magic, version, mtype, req_id, length = HEADER.unpack(self._head)
        if magic != MAGIC:
            raise ProtocolError(f"frame from {self.peer} has bad magic {bytes(magic)!r} "
                                f"(expected {MAGIC!r}); is this an xrt socket peer?")
        if version != VERSION:
            raise ProtocolError(f"frame from {self.peer} uses protocol version {version}; this "
                                f"side speaks version {VERSION}; use matching xrt versions")
        if length > self.max_payload:
            raise ProtocolError(f"frame from {self.peer} announces {length} payload bytes, "
                                f"more than the maximum {self.max_payload}; send bulk data in "
                                f"chunks of at most {CHUNK} bytes")
        return mtype, req_id, length

    def read(self, sock: socket.socket, deadline: float | None) -> tuple[int, int, bytearray]:
        view = memoryview(self._head)
        while self._got < HEADER_SIZE:
            n = self._recv_into(sock, view[self._got:], deadline)
            if self._got == 0:
                self.started = time.monotonic()
            self._got += n
        if self._hdr is None:
            self._hdr = self.check_header()
            self._payload = bytearray()
            self._filled = 0
        mtype, req_id, length = self._hdr
        while self._filled < length:
            # the buffer grows with the bytes that arrive (doubling from 64 KiB), never to what
            # a header alone announces
            if len(self._payload) == self._filled:
                self._payload.extend(bytes(min(length - self._filled,
                                               max(1 << 16, self._filled))))
            with memoryview(self._payload) as pv, pv[self._filled:] as tail:
                self._filled += self._recv_into(sock, tail, deadline)
        payload = self._payload
        self._got, self._hdr, self._payload, self._filled = 0, None, bytearray(), 0
        return mtype, req_id, payload

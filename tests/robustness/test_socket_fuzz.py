"""Property: random and mutated frames never take the socket device server down.

One server is shared by every example (short frame timeout). Each example opens a raw
connection, sends a handful of frames — valid requests mutated by bit flips, truncation, wrong
lengths, random types, or plain random bytes — then closes. Afterwards a normal client still
works and no chunk is left allocated. 1,000+ frames in a few seconds.
"""

from __future__ import annotations

import socket
import struct
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xrt import Device
from xrt.remote import protocol as P
from xrt.remote.protocol import Msg
from xrt.remote.server import DeviceServer

pytest.importorskip("zg330backend")

FRAMES = {"n": 0}
ETM = 0x4000_0000
REGS = 0x9000_0000


@pytest.fixture(scope="module")
def server():
    srv = DeviceServer(Device.Open("sim://zg330"), frame_timeout=0.05, close_device=True,
                       max_payload=1 << 20).start()
    yield srv
    srv.shutdown()


def _valid_payloads():
    return [
        (Msg.HELLO, P.U16.pack(P.VERSION)),
        (Msg.MALLOC, P.MALLOC_REQ.pack(0, 4096, 64)),
        (Msg.MALLOC, P.MALLOC_REQ.pack(1, 100, 1)),
        (Msg.RESERVE, P.RESERVE_REQ.pack(0, ETM + (1 << 24), 128)),
        (Msg.FREE, P.REGION.pack(0, 0)[:8] + P.U64.pack(ETM)),
        (Msg.READ, P.READ_REQ.pack(0, ETM, 64)),
        (Msg.WRITE, P.REGION.pack(0, ETM) + b"\xAA" * 64),
        (Msg.FILL, P.FILL_REQ.pack(0, 7, ETM, 64)),
        (Msg.COPY, P.COPY_REQ.pack(0, 0, ETM, ETM + 64, 32)),
        (Msg.REG_READ, P.REG_READ_REQ.pack(REGS + 0x48, 0)),
        (Msg.REG_WRITE, P.REG_WRITE_REQ.pack(REGS + 0x4000 + 0x14, 5, 0)),
        (Msg.CALL, P.encode_json({"m": "layerCount", "a": []})),
        (Msg.CALL, P.encode_json({"m": "getRowsCols", "a": []})),
        (Msg.CALL, P.encode_json({"m": "mmuMap", "a": [0, 0, ETM, 64, True]})),
        (Msg.REG_RESET, b""),
    ]


VALID = _valid_payloads()


@st.composite
def frames(draw):
    kind = draw(st.sampled_from(["valid", "flip", "truncate", "length", "type", "random",
                                 "payload"]))
    mtype, payload = draw(st.sampled_from(VALID))
    raw = bytearray(P.HEADER.pack(P.MAGIC, P.VERSION, mtype, draw(st.integers(0, 2**32 - 1)),
                                  len(payload)) + payload)
    if kind == "flip":
        for _ in range(draw(st.integers(1, 4))):
            i = draw(st.integers(0, len(raw) - 1))
            raw[i] ^= 1 << draw(st.integers(0, 7))
    elif kind == "truncate":
        raw = raw[:draw(st.integers(0, len(raw)))]
    elif kind == "length":
        struct.pack_into("<I", raw, 12, draw(st.sampled_from(
            [0, 1, len(payload) + 1, 2**20, 2**20 + 1, 2**31, 2**32 - 1])))
    elif kind == "type":
        struct.pack_into("<H", raw, 6, draw(st.integers(0, 0xFFFF)))
    elif kind == "random":
        raw = bytearray(draw(st.binary(min_size=0, max_size=64)))
    elif kind == "payload":
        junk = draw(st.binary(min_size=0, max_size=48))
        raw = bytearray(P.HEADER.pack(P.MAGIC, P.VERSION, mtype, 1, len(junk)) + junk)
    return bytes(raw)


def _exchange(addr, blobs) -> None:
    s = socket.create_connection(addr, timeout=2)
    try:
        s.sendall(P.HEADER.pack(P.MAGIC, P.VERSION, Msg.HELLO, 0, 2) + P.U16.pack(P.VERSION))
        for b in blobs:
            s.sendall(b)
            FRAMES["n"] += 1
        s.shutdown(socket.SHUT_WR)
        end = time.monotonic() + 2
        while time.monotonic() < end:  # drain replies until the server closes
            s.settimeout(max(0.01, end - time.monotonic()))
            if not s.recv(1 << 16):
                break
    except OSError:
        pass  # the server may close on a bad frame while we still send (reset, ENOTCONN)
    finally:
        s.close()


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(blobs=st.lists(frames(), min_size=2, max_size=10))
def test_random_and_mutated_frames_never_break_the_server(server, blobs):
    _exchange(server.address, blobs)


def test_server_consistent_after_fuzzing(server):
    assert FRAMES["n"] >= 1000, f"only {FRAMES['n']} frames were sent"
    end = time.monotonic() + 5
    while server.info()["clients"] and time.monotonic() < end:
        time.sleep(0.02)
    info = server.info()
    assert info["clients"] == 0
    assert info["chunks"] == {"etm": 0, "ocm": 0}, "fuzzing clients leaked chunks"
    assert server.device.check()
    host, port = server.address
    with Device.Open(f"socket://zg330@{host}:{port}") as d:
        c = d.malloc(1 << 16)
        data = np.random.default_rng(3).integers(0, 256, 1 << 16, dtype=np.uint8)
        c.write(0, data)
        back = np.empty_like(data)
        c.read(back)
        assert (back == data).all()
        assert d.getRowsCols() == (4, 4)

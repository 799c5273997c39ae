"""Hostile frames never take the socket device server down or change what it computes.

Each exchange opens a raw connection, sends a handful of frames -- valid requests mutated by bit
flips, truncation, wrong lengths, random types, or plain random bytes -- then closes. Afterwards
the server has no client and no chunk left, no request failed with anything but a project error
(`internal_errors` 0), and a session run through `socket://` gives byte-identical outputs to the
run before the fuzzing. Register writes (in-process and over the socket) are fuzzed the same
way: every write is accepted or refused with InvalidArgumentError, and the chip's results stay
exact. The default run sends about 1,000 frames; the full count (10,000) is marked slow.
"""

from __future__ import annotations

import random
import socket
import struct
import time

import numpy as np
import pytest

import xrt
from xrt import Device
from xrt.remote import protocol as P
from xrt.remote.protocol import Msg
from xrt.remote.server import DeviceServer

pytest.importorskip("zg330backend")

ETM = 0x4000_0000
REGS = 0x9000_0000
FAST_FRAMES = 1000
FULL_FRAMES = 10_000


@pytest.fixture(scope="module")
def server():
    srv = DeviceServer(Device.Open("sim://zg330"), frame_timeout=0.05, close_device=True,
                       max_payload=1 << 20).start()
    yield srv
    srv.shutdown()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """tiny_cnn lowered for the ZG330, and a sample input."""
    from xcompile import zoo
    from xcompile.quant.quantize import quantize_network
    from zg330backend.lowering import adapt, lower

    q = quantize_network(zoo.build("tiny_cnn"), zoo.calibration_set("tiny_cnn", count=2),
                         bits=8, method="minmax", weight_rounding="nearest")
    net = lower(adapt(q))
    x = np.random.default_rng(0).standard_normal(net.inputs()[0].shape).astype(np.float32)
    return net, x


def _outputs(net, x, device) -> list[bytes]:
    from host_backend import HostBackend
    from xrt import Session
    from zg330backend import ZG330Backend

    with Session.Create([ZG330Backend, HostBackend], net.view(0),
                        [device, Device.Open("host://")]) as s:
        s.apply()
        return [np.asarray(t).tobytes() for t in s.forward([x])]


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


def random_frame(rng: random.Random) -> bytes:
    """A valid request, mutated one of six ways, or random bytes."""
    kind = rng.choice(["valid", "flip", "truncate", "length", "type", "random", "payload"])
    mtype, payload = rng.choice(VALID)
    raw = bytearray(P.HEADER.pack(P.MAGIC, P.VERSION, mtype, rng.randrange(2**32),
                                  len(payload)) + payload)
    if kind == "flip":
        for _ in range(rng.randint(1, 4)):
            raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
    elif kind == "truncate":
        raw = raw[:rng.randint(0, len(raw))]
    elif kind == "length":
        struct.pack_into("<I", raw, 12, rng.choice(
            [0, 1, len(payload) + 1, 2**20, 2**20 + 1, 2**31, 2**32 - 1]))
    elif kind == "type":
        struct.pack_into("<H", raw, 6, rng.randrange(0x10000))
    elif kind == "random":
        raw = bytearray(rng.randbytes(rng.randint(0, 64)))
    elif kind == "payload":
        junk = rng.randbytes(rng.randint(0, 48))
        raw = bytearray(P.HEADER.pack(P.MAGIC, P.VERSION, mtype, 1, len(junk)) + junk)
    return bytes(raw)


def _exchange(addr, blobs) -> None:
    s = socket.create_connection(addr, timeout=2)
    try:
        s.sendall(P.HEADER.pack(P.MAGIC, P.VERSION, Msg.HELLO, 0, 2) + P.U16.pack(P.VERSION))
        for b in blobs:
            s.sendall(b)
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


def _fuzz(server, frames: int, seed: int) -> int:
    rng = random.Random(seed)
    sent = 0
    while sent < frames:
        blobs = [random_frame(rng) for _ in range(rng.randint(2, 10))]
        _exchange(server.address, blobs)
        sent += len(blobs)
    return sent


def _settled(server) -> dict:
    end = time.monotonic() + 5
    while server.info()["clients"] and time.monotonic() < end:
        time.sleep(0.02)
    return server.info()


def _check_server_after(server, tiny, before: list[bytes]) -> None:
    info = _settled(server)
    assert info["clients"] == 0
    assert info["chunks"] == {"etm": 0, "ocm": 0}, "fuzzing clients leaked chunks"
    assert info["internal_errors"] == 0, "a hostile frame reached a server bug"
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
        assert _outputs(*tiny, d) == before  # byte-identical results after the fuzzing


def test_random_and_mutated_frames_never_break_the_server(server, tiny):
    host, port = server.address
    with Device.Open(f"socket://zg330@{host}:{port}") as d:
        before = _outputs(*tiny, d)
    assert _fuzz(server, FAST_FRAMES, 1) >= FAST_FRAMES
    _check_server_after(server, tiny, before)


@pytest.mark.slow
def test_hostile_frames_full_count(server, tiny):
    host, port = server.address
    with Device.Open(f"socket://zg330@{host}:{port}") as d:
        before = _outputs(*tiny, d)
    sent = _fuzz(server, FULL_FRAMES, 2)
    info = _settled(server)
    print(f"\n{sent} hostile frames: {info['requests']} requests answered, {info['errors']} "
          f"refused with a project error, {info['internal_errors']} internal errors")
    _check_server_after(server, tiny, before)


def _register_writes(device, rng: random.Random, count: int) -> tuple[int, int]:
    """`count` writes of random values to random registers (offsets in the register window,
    MMU entries and MPE banks included); returns (accepted, refused)."""
    from npu_runtime import regs as R

    offsets = sorted(set(R.WRITABLE) | set(R._READ_ONLY)) + [
        R.MMU_BASE + 16 * k + j for k in range(4) for j in (0, 4, 8, 12)] + [R.MPE_BASE + 0x14]
    accepted = refused = 0
    for _ in range(count):
        off = rng.choice(offsets) if rng.random() < 0.8 else rng.randrange(0, 0x8000, 4)
        value = rng.choice([0, 1, 2, 0xFFFFFFFF, rng.randrange(2**32), rng.randrange(2**16)])
        try:
            device.writeReg(REGS + off, value)
            accepted += 1
        except xrt.InvalidArgumentError:
            refused += 1
        except xrt.XrtError:
            refused += 1
    return accepted, refused


@pytest.mark.parametrize("where", ["in-process", "socket"])
def test_register_writes_are_checked_and_results_stay_exact(server, tiny, where):
    host, port = server.address
    url = "sim://zg330" if where == "in-process" else f"socket://zg330@{host}:{port}"
    with Device.Open(url) as d:
        before = _outputs(*tiny, d)
        accepted, refused = _register_writes(d, random.Random(7), 1000)
        assert accepted and refused
        d.reset(0)  # a full reset: the power-on clocks and enables, whatever was written
        assert _outputs(*tiny, d) == before
    assert server.info()["internal_errors"] == 0

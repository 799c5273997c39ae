"""Snapshots held in memory: `Session.dumpSnapshotToMemory()` gives the bytes `dumpSnapshot`
writes, `Session.CreateWithSnapshot` takes them (or any buffer) as well as a path; the same
checks as a file, with "<buffer>" where the file name would be. On the HostBackend; both chips
are in tests/backends/npu_runtime/test_snapshot_memory_chips.py."""

from __future__ import annotations

import numpy as np
import pytest

from host_backend import HostBackend
from xir import NetworkBuilder
from xrt import HostDevice, Session, SnapshotError, Tensor, XrtError


def host_net():
    rng = np.random.default_rng(0)
    b = NetworkBuilder("snapmem")
    x = b.input([1, 5, 5, 2], layout="NHWC", name="x")
    w = b.params(rng.standard_normal((3, 3, 2, 4)).astype(np.float32), "w", layout="HWIO")
    b.output(b.relu(b.conv2d(x, w, pad_top=1, pad_bottom=1, pad_left=1, pad_right=1)))
    return b.build()


def run(s: Session, x: np.ndarray) -> list[np.ndarray]:
    return [np.asarray(t).copy() for t in s.forward([Tensor(x)])]


@pytest.fixture(scope="module")
def host_session():
    s = Session.Create([HostBackend], host_net().view(0), [HostDevice.Default()])
    s.apply()
    yield s
    s.close()


X = np.random.default_rng(5).standard_normal((1, 5, 5, 2)).astype(np.float32)


def test_memory_snapshot_is_the_file_snapshot(host_session, tmp_path):
    data = host_session.dumpSnapshotToMemory()
    host_session.dumpSnapshot(tmp_path / "s.snap")
    assert isinstance(data, bytes) and data == (tmp_path / "s.snap").read_bytes()
    assert host_session.dump_snapshot_to_memory() == data


@pytest.mark.parametrize("kind", ["bytes", "bytearray", "memoryview", "numpy"])
def test_create_with_snapshot_from_memory(host_session, kind):
    data = host_session.dumpSnapshotToMemory()
    buf = {"bytes": data, "bytearray": bytearray(data), "memoryview": memoryview(data),
           "numpy": np.frombuffer(data, np.uint8)}[kind]
    r = Session.CreateWithSnapshot(buf, [HostBackend], [HostDevice.Default()])
    try:
        assert [a.tobytes() for a in run(r, X)] == [a.tobytes() for a in run(host_session, X)]
    finally:
        r.close()


def test_the_session_keeps_no_reference_to_the_callers_buffer(host_session):
    buf = bytearray(host_session.dumpSnapshotToMemory())
    r = Session.CreateWithSnapshot(buf, [HostBackend], [HostDevice.Default()])
    try:
        want = run(r, X)
        buf[:] = bytes(len(buf))  # the caller reuses its buffer
        buf.extend(b"more")  # not pinned by any view
        assert [a.tobytes() for a in run(r, X)] == [a.tobytes() for a in want]
    finally:
        r.close()


def test_corrupted_or_truncated_buffer_is_refused_naming_the_buffer(host_session):
    data = bytearray(host_session.dumpSnapshotToMemory())
    data[len(data) // 2] ^= 0x40
    with pytest.raises(SnapshotError, match="'<buffer>' is corrupted"):
        Session.CreateWithSnapshot(data, [HostBackend], [HostDevice.Default()])
    with pytest.raises(SnapshotError, match="'<buffer>' is truncated"):
        Session.CreateWithSnapshot(bytes(data[:-7]), [HostBackend], [HostDevice.Default()])
    with pytest.raises(SnapshotError, match="not an xrt snapshot"):
        Session.CreateWithSnapshot(b"PK\x03\x04" + bytes(100), [HostBackend],
                                   [HostDevice.Default()])


@pytest.mark.parametrize("thing", [12, 3.5, ["a"], None])
def test_non_buffers_are_refused(thing):
    with pytest.raises(XrtError, match="snapshot"):
        Session.CreateWithSnapshot(thing, [HostBackend], [HostDevice.Default()])


def test_dump_to_memory_needs_an_applied_session():
    s = Session.Create([HostBackend], host_net().view(0), [HostDevice.Default()])
    try:
        with pytest.raises(XrtError, match="dumpSnapshotToMemory"):
            s.dumpSnapshotToMemory()
    finally:
        s.close()


def test_damaged_buffers_only_ever_raise_snapshot_errors(host_session):
    """100 random damages (flips, cuts, insertions) of a snapshot held in memory: each is a
    SnapshotError naming <buffer>, never another exception and never a session."""
    data = host_session.dumpSnapshotToMemory()
    rng = np.random.default_rng(12)
    for k in range(100):
        bad = bytearray(data)
        at = int(rng.integers(0, len(bad)))
        if k % 3 == 0:
            bad[at] ^= int(rng.integers(1, 256))
        elif k % 3 == 1:
            del bad[at:]
        else:
            bad[at:at] = b"\0" * int(rng.integers(1, 65))
        with pytest.raises(SnapshotError, match="<buffer>"):
            Session.CreateWithSnapshot(memoryview(bad) if k % 2 else bytes(bad), [HostBackend],
                                       [HostDevice.Default()])

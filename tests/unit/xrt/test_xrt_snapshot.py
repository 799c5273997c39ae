"""Snapshot container (xrt/snapshot.py) and the generic Session / Backend snapshot hooks, on the
HostBackend only: no backend is imported by the core."""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest

from host_backend import HostBackend
from xrt import CallOrderError, HostDevice, Session, SnapshotError, Tensor, XrtError
from xrt.snapshot import FORMAT_VERSION, MAGIC, parse_snapshot, read_snapshot, write_snapshot


def _host(net):
    s = Session.Create([HostBackend], net.view(0), [HostDevice.Default()])
    s.apply()
    return s


class StatefulHost(HostBackend):
    """A HostBackend that stores state and a blob, to check the hooks' round trip."""

    name = "StatefulHost"
    restored: dict = {}

    def snapshotState(self):
        super().snapshotState()
        return {"answer": 42, "ops": [op.op_id for op in self.network_view.ops]}, \
            {"table": np.arange(100, dtype=np.int32).tobytes()}

    def restoreSnapshot(self, network_view, device, state, blobs):
        StatefulHost.restored = {"state": state, "table": bytes(blobs["table"]),
                                 "ops": [op.op_id for op in network_view.ops]}
        super().restoreSnapshot(network_view, device, state, blobs)


def test_container_round_trip_and_alignment(tmp_path):
    p = tmp_path / "a.snap"
    secs = {"one": b"x" * 100, "two": b"", "three": np.arange(7, dtype=np.uint64).tobytes()}
    size = write_snapshot(p, {"network": {"view_op_ids": []}, "backends": [], "bindings": []}, secs)
    assert os.path.getsize(p) == size
    snap = read_snapshot(p)
    for name, data in secs.items():
        assert bytes(snap.section(name)) == data
    assert all(e["offset"] % 64 == 0 for e in snap.header["sections"])
    data = p.read_bytes()
    assert data[:8] == MAGIC and struct.unpack_from("<I", data, 8)[0] == FORMAT_VERSION
    assert [f for f in os.listdir(tmp_path) if f != "a.snap"] == []  # no temporary left
    with pytest.raises(SnapshotError, match="section 'four' is missing"):
        snap.section("four")


def test_host_session_round_trip(cnn, rng, tmp_path):
    x = rng.standard_normal((1, 8, 8, 3)).astype(np.float32)
    s = _host(cnn)
    want = np.asarray(s.forward([Tensor(x)])[0]).copy()
    p = tmp_path / "host.snap"
    s.dumpSnapshot(p)
    r = Session.CreateWithSnapshot(p, [HostBackend], [HostDevice.Default()])
    assert r.backends[0].snapshot and not s.backends[0].snapshot
    r.apply()  # already applied: nothing to do
    np.testing.assert_array_equal(np.asarray(r.forward([Tensor(x)])[0]), want)
    assert [op.op_id for op in r.network_view.ops] == [op.op_id for op in cnn.ops]
    with pytest.raises(CallOrderError, match="frozen"):
        r.backends[0].setFakeQf(True)


def test_backend_state_and_blobs_round_trip(cnn, tmp_path):
    s = Session.Create([StatefulHost], cnn.view(0), [HostDevice.Default()])
    s.apply()
    p = tmp_path / "st.snap"
    s.dumpSnapshot(p)
    Session.CreateWithSnapshot(p, [StatefulHost], [HostDevice.Default()])
    got = StatefulHost.restored
    assert got["state"]["answer"] == 42
    assert got["table"] == np.arange(100, dtype=np.int32).tobytes()
    assert got["ops"] == got["state"]["ops"] == [op.op_id for op in cnn.ops]


def test_dump_before_apply_raises(cnn, tmp_path):
    s = Session.Create([HostBackend], cnn.view(0), [HostDevice.Default()])
    with pytest.raises(CallOrderError, match="before Session.apply"):
        s.dumpSnapshot(tmp_path / "x.snap")
    assert not (tmp_path / "x.snap").exists()


@pytest.fixture
def snap_bytes(cnn, tmp_path):
    p = tmp_path / "good.snap"
    _host(cnn).dumpSnapshot(p)
    return p.read_bytes()


def _load(tmp_path, data, name="bad.snap"):
    p = tmp_path / name
    p.write_bytes(data)
    return Session.CreateWithSnapshot(p, [HostBackend], [HostDevice.Default()])


@pytest.mark.parametrize("case,pattern", [
    ("truncated", "truncated"),
    ("truncated_tiny", "truncated"),
    ("bitflip", "corrupted: its sha256"),
    ("magic", "wrong magic"),
    ("version", "format version 2"),
    ("trailing", "after its end"),
])
def test_damaged_snapshots_raise_naming_file(snap_bytes, tmp_path, case, pattern):
    data = bytearray(snap_bytes)
    if case == "truncated":
        data = data[:len(data) // 2]
    elif case == "truncated_tiny":
        data = data[:20]
    elif case == "bitflip":
        data[len(data) // 2] ^= 0x10
    elif case == "magic":
        data[:8] = b"NOTSNAP!"
    elif case == "version":
        struct.pack_into("<I", data, 8, FORMAT_VERSION + 1)
    elif case == "trailing":
        data += b"\0"
    with pytest.raises(SnapshotError, match=pattern) as ei:
        _load(tmp_path, bytes(data))
    assert "bad.snap" in str(ei.value)
    assert isinstance(ei.value, XrtError) and isinstance(ei.value, ValueError)


def test_missing_file_raises(tmp_path):
    with pytest.raises(SnapshotError, match="cannot read snapshot"):
        Session.CreateWithSnapshot(tmp_path / "nope.snap", [HostBackend], [HostDevice.Default()])


def test_mismatched_backends_and_devices_raise(snap_bytes, tmp_path):
    p = tmp_path / "m.snap"
    p.write_bytes(snap_bytes)
    with pytest.raises(SnapshotError, match="'Host' at dump time"):
        Session.CreateWithSnapshot(p, [StatefulHost], [HostDevice.Default()])
    with pytest.raises(SnapshotError, match="holds 1 backends"):
        Session.CreateWithSnapshot(p, [HostBackend, HostBackend],
                                   [HostDevice.Default(), HostDevice.Default()])
    with pytest.raises(SnapshotError, match="2 devices"):
        Session.CreateWithSnapshot(p, [HostBackend],
                                   [HostDevice.Default(), HostDevice.Default()])


def test_parse_rejects_overlapping_sections(snap_bytes):
    import hashlib
    import json

    data = bytearray(snap_bytes)
    hlen = struct.unpack_from("<I", data, 12)[0]
    hdr = json.loads(bytes(data[24:24 + hlen]))
    hdr["sections"][1]["offset"] = hdr["sections"][0]["offset"]
    blob = json.dumps(hdr, separators=(",", ":"), sort_keys=True).encode()
    blob = blob.ljust(hlen)[:hlen] if len(blob) <= hlen else None
    if blob is None:
        pytest.skip("header grew")
    data[24:24 + hlen] = blob
    data[-32:] = hashlib.sha256(bytes(data[:-32])).digest()
    with pytest.raises(SnapshotError, match="overlaps"):
        parse_snapshot(bytes(data), "x.snap")

"""Re-sealed snapshots: a file whose checksum was recomputed after a mutation either restores
or raises SnapshotError (an XrtError) -- never a KeyError or TypeError from inside a backend.

The sha256 of a snapshot only proves the file is what its writer wrote; these mutants are
written by a hostile or buggy writer, with a valid checksum. Four kinds: the header (network,
bindings, backends and their state objects) rewritten through `write_snapshot`; the sections
table rewritten in place (offsets, sizes, names); the network.json section mutated; a blob
section (weight or instruction image, network.raw) flipped, cut or grown. Each mutant goes
through `Session.CreateWithSnapshot` and one forward, on the ZG330 and Buyi simulators. The
default run takes a share; the full count (2,400 files) is marked slow.
"""

from __future__ import annotations

import hashlib
import json
import random
import struct

import numpy as np
import pytest
from mutation import Outcomes, flip_bytes, mutate, paths

pytest.importorskip("zg330backend")
pytest.importorskip("buyibackend")

FAST_CASES = 150
FULL_CASES = 1200  # per chip: 2,400 files
_FIXED = 24  # magic, version, header length, file size


def _snapshot(chip: str, tmp, devices) -> tuple[bytes, object]:
    from buyibackend import BuyiBackend
    from buyibackend.lowering import adapt as badapt
    from buyibackend.lowering import lower as blower
    from host_backend import HostBackend
    from xcompile import zoo
    from xcompile.quant.quantize import quantize_network
    from xrt import Session
    from zg330backend import ZG330Backend
    from zg330backend.lowering import adapt, lower

    q = quantize_network(zoo.build("tiny_cnn"), zoo.calibration_set("tiny_cnn", count=2),
                         bits=8, method="minmax", weight_rounding="nearest")
    net = lower(adapt(q)) if chip == "zg330" else blower(badapt(q))
    backend = ZG330Backend if chip == "zg330" else BuyiBackend
    with Session.Create([backend, HostBackend], net.view(0),
                        [devices[chip], devices["host"]]) as s:
        s.apply()
        s.dumpSnapshot(tmp / "a.snap")
    return (tmp / "a.snap").read_bytes(), (backend, HostBackend)


def _reseal_table(data: bytes, header: dict) -> bytes | None:
    """`data` with its header JSON replaced in place (padded with spaces) and the checksum
    recomputed; None when the new header does not fit before the first section."""
    blob = json.dumps(header, separators=(",", ":")).encode()
    first = min((e["offset"] for e in json.loads(_header_bytes(data))["sections"]),
                default=len(data) - 32)
    if _FIXED + len(blob) > first:
        return None
    body = bytearray(data[:-32])
    body[_FIXED:first] = blob + b" " * (first - _FIXED - len(blob))
    struct.pack_into("<I", body, 12, first - _FIXED)
    return bytes(body) + hashlib.sha256(body).digest()


def _header_bytes(data: bytes) -> bytes:
    (hlen,) = struct.unpack_from("<I", data, 12)
    return data[_FIXED:_FIXED + hlen]


def _fuzz(chip: str, cases: int, seed: int, devices, tmp) -> Outcomes:
    from xrt import Session
    from xrt.snapshot import parse_snapshot, write_snapshot

    data, types = _snapshot(chip, tmp, devices)
    snap = parse_snapshot(data)
    header = {k: v for k, v in snap.header.items() if k != "sections"}
    sections = {k: bytes(v) for k, v in snap.sections.items()}
    head_paths = paths(header)
    table_paths = [("sections",) + p for p in paths(snap.header["sections"])]
    net_json = json.loads(sections["network.json"])
    net_paths = paths(net_json)
    x = [np.zeros((1, 32, 32, 3), np.float32)]
    rng = random.Random(seed)
    out = Outcomes()

    def sealed(hdr: dict, secs: dict) -> bytes:
        write_snapshot(tmp / "m.snap", hdr, secs)
        return (tmp / "m.snap").read_bytes()

    def case(blob: bytes) -> None:
        (tmp / "x.snap").write_bytes(blob)
        with Session.CreateWithSnapshot(tmp / "x.snap", list(types),
                                        [devices[chip], devices["host"]]) as s:
            s.forward(x)

    while out.total < cases:
        kind = rng.choice(["header", "header", "table", "network", "blob"])
        if kind == "header":
            hdr = mutate(json.loads(json.dumps(header)), rng, head_paths)
            if not isinstance(hdr, dict):
                continue
            blob = sealed({k: v for k, v in hdr.items() if k != "sections"}, sections)
        elif kind == "table":
            hdr = mutate(json.loads(json.dumps(snap.header)), rng, table_paths)
            blob = _reseal_table(data, hdr) if hdr is not None else None
        elif kind == "network":
            obj = mutate(json.loads(json.dumps(net_json)), rng, net_paths)
            blob = None if obj is None else sealed(
                header, {**sections, "network.json": json.dumps(obj).encode()})
        else:
            name = rng.choice(sorted(k for k in sections if k != "network.json"))
            blob = sealed(header, {**sections, name: flip_bytes(sections[name], rng)})
        if blob is None or blob == data:
            continue
        out.run(lambda blob=blob: case(blob), kind)
    return out


@pytest.mark.parametrize("chip", ["zg330", "buyi"])
def test_resealed_snapshots_restore_or_raise_snapshot_errors(chip, devices, tmp_path):
    out = _fuzz(chip, FAST_CASES, 5, devices, tmp_path)
    assert not out.escapes, out.report()
    assert out.accepted and out.refused


@pytest.mark.slow
@pytest.mark.parametrize("chip", ["zg330", "buyi"])
def test_resealed_snapshots_full_count(chip, devices, tmp_path):
    out = _fuzz(chip, FULL_CASES, 500 + (chip == "buyi"), devices, tmp_path)
    print(f"\n{chip}: {out.report()}")
    assert not out.escapes, out.report()

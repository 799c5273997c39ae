"""The snapshot container: a deployed session as one file (docs/snapshot-format.md).

Layout (little endian):

    0   8 bytes   magic  89 'ICSNAP' 0A
    8   u32       format version (FORMAT_VERSION)
    12  u32       header length H
    16  u64       file size, checksum included
    24  H bytes   header: UTF-8 JSON (sections table, bindings, per-backend state)
    ..  sections, each at a 64-byte aligned offset, zero padding between them
    end 32 bytes  sha256 of every byte before it

The container knows nothing of any backend: a backend's state is the JSON object and the named
byte blobs its `snapshotState()` returns, stored as they are and handed back to its
`restoreSnapshot()`. Reading checks in layers: size, magic, version and recorded file size
first; then the checksum; then the header's structure (every section inside the file, no
overlaps, required keys). What the sections mean is checked at session creation.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from xir.serialize.atomic import temp_beside

from .args import path_arg
from .errors import SnapshotError

MAGIC = b"\x89ICSNAP\n"
FORMAT_VERSION = 1
ALIGN = 64
_FIXED = struct.Struct("<8sIIQ")
_SUM = 32


@dataclass
class SnapshotFile:
    """A parsed snapshot: the header object and the sections (name -> bytes view)."""

    path: str
    header: dict[str, Any]
    sections: dict[str, memoryview] = field(default_factory=dict)

    def section(self, name: str) -> memoryview:
        if name not in self.sections:
            raise SnapshotError(f"snapshot '{self.path}': section '{name}' is missing; the file "
                                f"was not written by this xrt (dump it again)")
        return self.sections[name]


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _plan(header: dict[str, Any], sections: dict[str, Any]) -> tuple[bytes, list[dict], int]:
    """(header json bytes with the sections table, the table, the total size)."""
    header = dict(header)
    names = list(sections)
    # The header's length depends on the offsets in it: place sections after a fixed-point.
    start = _align(_FIXED.size + 1)
    while True:
        pos, table = start, []
        for n in names:
            size = memoryview(sections[n]).nbytes
            table.append({"name": n, "offset": pos, "size": size})
            pos = _align(pos + size)
        header["sections"] = table
        blob = json.dumps(header, separators=(",", ":"), sort_keys=True).encode("utf-8")
        need = _align(_FIXED.size + len(blob))
        if need <= start:
            break
        start = need
    end = table[-1]["offset"] + table[-1]["size"] if table else _FIXED.size + len(blob)
    return blob, table, end + _SUM


def _emit(put: Callable[[Any], Any], blob: bytes, table: list[dict],
          sections: dict[str, Any], total: int) -> bytes:
    """Write the container through `put` (everything but the checksum); returns the sha256."""
    h = hashlib.sha256()

    def out(b: Any) -> None:
        put(b)
        h.update(b)

    out(_FIXED.pack(MAGIC, FORMAT_VERSION, len(blob), total))
    out(blob)
    at = _FIXED.size + len(blob)
    for entry in table:
        if entry["offset"] > at:
            out(bytes(entry["offset"] - at))
        out(memoryview(sections[entry["name"]]).cast("B"))
        at = entry["offset"] + entry["size"]
    assert at + _SUM == total
    return h.digest()


def snapshot_bytes(header: dict[str, Any],
                   sections: dict[str, bytes | bytearray | memoryview]) -> bytes:
    """The snapshot container as bytes, exactly what `write_snapshot` puts in a file."""
    blob, table, total = _plan(header, sections)
    out = bytearray()
    out += _emit(out.extend, blob, table, sections, total)
    assert len(out) == total
    return bytes(out)


def write_snapshot(path: str | os.PathLike, header: dict[str, Any],
                   sections: dict[str, bytes | bytearray | memoryview]) -> int:
    """Write a snapshot atomically (temporary file next to `path`, fsync, rename).

    `header` gets a "sections" table added; returns the file size."""
    path = path_arg(path, "snapshot path")
    blob, table, total = _plan(header, sections)
    try:
        fd, tmp = temp_beside(path)
    except OSError as exc:
        raise SnapshotError(f"cannot write snapshot '{path}': {exc.strerror or exc} (in "
                            f"folder '{os.path.dirname(os.path.abspath(path))}')") from exc
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(_emit(fh.write, blob, table, sections, total))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise SnapshotError(f"cannot write snapshot '{path}': {exc.strerror or exc}; the "
                                f"file there is as it was") from exc
        raise
    return total


def read_snapshot(path: str | os.PathLike) -> SnapshotFile:
    """Read and check a snapshot file; raises SnapshotError naming the file and the fault."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise SnapshotError(f"cannot read snapshot '{path}': {exc.strerror or exc}") from exc
    return parse_snapshot(data, path)


BUFFER_LABEL = "<buffer>"
"""What errors name in place of a file name for a snapshot held in memory."""


def as_snapshot_buffer(data: Any, path: str = BUFFER_LABEL) -> memoryview:
    """`data` (bytes, bytearray, memoryview, numpy array, mmap: any buffer) as a flat byte
    memoryview without a copy when it is C-contiguous; SnapshotError for anything else."""
    try:
        mv = memoryview(data)
    except TypeError:
        raise SnapshotError(f"snapshot {path}: expected the snapshot's bytes (bytes, bytearray, "
                            f"memoryview, numpy uint8 array) or a path, not "
                            f"{type(data).__name__}") from None
    return mv.cast("B") if mv.c_contiguous else memoryview(mv.tobytes())


def read_snapshot_buffer(data: Any) -> SnapshotFile:
    """Check a snapshot held in memory (what `Session.dumpSnapshotToMemory` returns, or any
    buffer holding a snapshot file's bytes); errors name "<buffer>". The sections are views into
    an immutable private copy (none is made for `bytes`), so the caller may reuse or free its
    buffer at once, as after reading a file: restored instruction words view those bytes."""
    if not isinstance(data, bytes):
        data = bytes(as_snapshot_buffer(data, BUFFER_LABEL))
    return parse_snapshot(data, BUFFER_LABEL)


def parse_snapshot(data: Any, path: str = "<memory>") -> SnapshotFile:
    """Check `data` (any buffer) in layers and split it into header and sections; the
    sections are views into `data`, no copy."""
    data = as_snapshot_buffer(data, path)
    size = len(data)
    # 1. cheap: size, magic, version, recorded size
    if size >= len(MAGIC) and data[:len(MAGIC)] != MAGIC:
        raise SnapshotError(f"'{path}' is not an xrt snapshot: wrong magic "
                            f"{bytes(data[:len(MAGIC)])!r} (expected {MAGIC!r}); pass a file "
                            f"written by Session.dumpSnapshot")
    if size < _FIXED.size + _SUM:
        raise SnapshotError(f"snapshot '{path}' is truncated: {size} bytes, smaller than the "
                            f"fixed header and checksum ({_FIXED.size + _SUM} bytes); copy "
                            f"it again or dump it again")
    _, version, hlen, recorded = _FIXED.unpack_from(data, 0)
    if version != FORMAT_VERSION:
        raise SnapshotError(f"snapshot '{path}' has format version {version}; this xrt reads "
                            f"version {FORMAT_VERSION} only: dump the snapshot again with "
                            f"this xrt")
    if size < recorded:
        raise SnapshotError(f"snapshot '{path}' is truncated: {size} bytes of the {recorded} "
                            f"its header records; copy it again or dump it again")
    if size > recorded:
        raise SnapshotError(f"snapshot '{path}' has {size - recorded} bytes after its end "
                            f"({recorded} bytes recorded); the file is damaged")
    # 2. checksum
    want = bytes(data[size - _SUM:])
    got = hashlib.sha256(memoryview(data)[:size - _SUM]).digest()
    if got != want:
        raise SnapshotError(f"snapshot '{path}' is corrupted: its sha256 checksum does not "
                            f"match the contents ({got.hex()[:16]}... vs recorded "
                            f"{want.hex()[:16]}...); dump it again")
    # 3. structure
    if _FIXED.size + hlen > size - _SUM:
        raise SnapshotError(f"snapshot '{path}': header length {hlen} runs past the end")
    try:
        header = json.loads(bytes(data[_FIXED.size:_FIXED.size + hlen]).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise SnapshotError(f"snapshot '{path}': the header is not valid JSON ({exc})") from exc
    if not isinstance(header, dict) or not isinstance(header.get("sections"), list):
        raise SnapshotError(f"snapshot '{path}': the header has no sections table")
    mv = memoryview(data)
    sections: dict[str, memoryview] = {}
    prev_end = _FIXED.size + hlen
    for k, entry in enumerate(header["sections"]):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or \
                not _is_int(entry.get("offset")) or not _is_int(entry.get("size")):
            raise SnapshotError(f"snapshot '{path}': section entry {k} is malformed "
                                f"({entry!r:.200})")
        name, off, n = entry["name"], entry["offset"], entry["size"]
        if off % ALIGN or off < prev_end or n < 0 or off + n > size - _SUM:
            raise SnapshotError(f"snapshot '{path}': section '{name}' at {off} (+{n} bytes) is "
                                f"misaligned, overlaps another or runs past the end")
        if name in sections:
            raise SnapshotError(f"snapshot '{path}': section '{name}' appears twice")
        sections[name] = mv[off:off + n]
        prev_end = off + n
    _check_header(header, path)
    return SnapshotFile(path, header, sections)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _check_header(header: dict[str, Any], path: str) -> None:
    """The header's fields the session reads: the view's op ids, the op -> backend bindings
    and per backend its name, state object and blob -> section names."""
    def bad(what: str) -> SnapshotError:
        return SnapshotError(f"snapshot '{path}': the header's {what}; the file was not "
                             f"written by this xrt (dump it again)")

    for key in ("network", "backends", "bindings"):
        if key not in header:
            raise bad(f"'{key}' is missing")
    net = header["network"]
    if not isinstance(net, dict) or not isinstance(net.get("view_op_ids"), list) or \
            not all(_is_int(i) for i in net["view_op_ids"]):
        raise bad("network.view_op_ids is not a list of op ids")
    binds = header["bindings"]
    if not isinstance(binds, list) or not all(
            isinstance(b, list) and len(b) == 2 and all(_is_int(x) for x in b) for b in binds):
        raise bad("bindings are not [op id, backend index] pairs")
    backends = header["backends"]
    if not isinstance(backends, list):
        raise bad("backends are not a list")
    for k, entry in enumerate(backends):
        if not isinstance(entry, dict) or not isinstance(entry.get("name", ""), str) or \
                not isinstance(entry.get("state", {}), dict):
            raise bad(f"backend {k} is not an object with a name and a state")
        blobs = entry.get("blobs", {})
        if not isinstance(blobs, dict) or not all(
                isinstance(n, str) and isinstance(sec, str) for n, sec in blobs.items()):
            raise bad(f"backend {k}'s blobs are not names of sections")

"""The .raw parameter file: magic, a header of (v_id, offset) entries, then 64-byte aligned blobs.

Layout (all little endian, offsets from the start of the file; see docs/xir-format.md):

    0   12 bytes  magic  A5 'ICRAFT_RAW' A5
    12  u32       count: number of parameter blobs
    16  count x { i32 v_id, u64 offset }   (12 bytes each, packed)
    ..  zero padding up to the next multiple of 64
    ..  blob 0, zero padding to a multiple of 64, blob 1, ..., blob count-1 (no padding after it)

Blobs follow the header order, each starting at the first 64-byte boundary after the previous one
ends; the file ends exactly where the last blob ends. A blob is the Params' data in C order, its
size the Params' `storageBytes()`. The json's `params_bytes` is the file size and `params_md5`
the md5 of the whole file.
"""

from __future__ import annotations

import hashlib
import os
import re
import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING, BinaryIO

import numpy as np

from ..errors import (
    FieldTypeError,
    RawChecksumError,
    RawFileError,
    RawMagicError,
    RawSizeError,
    RawTruncatedError,
    XirError,
)
from .atomic import temp_beside, unlink_quietly

if TYPE_CHECKING:
    from ..network import Network
    from ..values import Params

RAW_MAGIC = b"\xA5ICRAFT_RAW\xA5"
"""The 12 bytes every .raw file starts with."""

RAW_ALIGN = 64
"""Alignment of every blob's offset (the compiler's ETM alignment)."""

_HEAD = struct.Struct("<12sI")
_ENTRY = struct.Struct("<iQ")
_ENTRY_DTYPE = np.dtype([("v_id", "<i4"), ("offset", "<u8")])
I32_MAX = 2**31 - 1


def align_up(n: int, unit: int = RAW_ALIGN) -> int:
    return -(-n // unit) * unit


def raw_layout(sizes: Sequence[int]) -> tuple[int, list[int], int]:
    """(header end, blob offsets, file size) for blobs of these sizes."""
    header_end = _HEAD.size + _ENTRY.size * len(sizes)
    offsets: list[int] = []
    pos = align_up(header_end)
    end = header_end
    for size in sizes:
        offsets.append(pos)
        end = pos + size
        pos = align_up(end)
    return header_end, offsets, end if sizes else header_end


def _md5():
    try:
        return hashlib.md5(usedforsecurity=False)
    except TypeError:  # pragma: no cover - Pythons without the keyword
        return hashlib.md5()


# --- writing ------------------------------------------------------------------------------

def _blob(p: Params) -> np.ndarray:
    data = p.data
    if data is None:
        raise FieldTypeError(f"params {p.v_id} ('{p.name}') has no data to write", field="data")
    want = p.dtype.numpy_dtype
    if data.dtype != want or tuple(data.shape) != p.dtype.shape:
        raise FieldTypeError(
            f"params {p.v_id} ('{p.name}'): data {data.dtype}{list(data.shape)} does not match "
            f"its type {want}{list(p.dtype.shape)}", field="data")
    if not 0 <= p.v_id <= I32_MAX:
        raise FieldTypeError(f"params v_id {p.v_id} does not fit the raw header's i32",
                             field="v_id")
    return np.ascontiguousarray(data, dtype=want.newbyteorder("<"))


def write_raw_stream(f: BinaryIO, params: Sequence[Params]) -> tuple[int, str]:
    """Write the raw file of `params` to the binary stream `f` (a file, a BytesIO, a snapshot
    section); returns (bytes written, md5 hex)."""
    blobs = [_blob(p) for p in params]
    header_end, offsets, total = raw_layout([b.nbytes for b in blobs])
    md5 = _md5()

    def put(chunk: bytes | memoryview) -> None:
        f.write(chunk)
        md5.update(chunk)

    head = bytearray(_HEAD.pack(RAW_MAGIC, len(blobs)))
    for p, off in zip(params, offsets):
        head += _ENTRY.pack(p.v_id, off)
    put(bytes(head))
    pos = header_end
    for blob, off in zip(blobs, offsets):
        if off > pos:
            put(bytes(off - pos))
        put(memoryview(blob.reshape(-1).view(np.uint8)))  # the array's bytes, not a copy
        pos = off + blob.nbytes
    assert pos == total
    return total, md5.hexdigest()


def write_raw_tmp(params: Sequence[Params], path: str | os.PathLike) -> tuple[str, int, str]:
    """Write the raw file to a temporary file next to `path`; returns (tmp path, size, md5).

    The caller moves it into place with os.replace (or removes it on failure)."""
    fd, tmp = temp_beside(path)
    try:
        with os.fdopen(fd, "wb") as f:
            size, digest = write_raw_stream(f, params)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        unlink_quietly(tmp)
        raise
    return tmp, size, digest


def write_raw(net: Network, path: str | os.PathLike) -> tuple[int, str]:
    """Write every Params of `net` (in `net.params()` order) atomically; returns (size, md5).

    Also records the size and md5 in `net.params_bytes` / `net.params_md5`."""
    tmp, size, digest = write_raw_tmp(net.params(), path)
    try:
        os.replace(tmp, path)
    except BaseException:
        unlink_quietly(tmp)
        raise
    net.params_bytes, net.params_md5 = size, digest
    return size, digest


def staged_raw_path(path: str | os.PathLike, md5: str) -> str:
    """Where `save_network` puts a raw of this md5 until its json is in place."""
    return f"{os.fspath(path)}.{md5}"


_STAGED = re.compile(r"\.[0-9a-f]{32}$")


def remove_stale_staged(path: str | os.PathLike) -> None:
    """Remove content-addressed raws a killed save left beside `path`."""
    path = os.fspath(path)
    folder, base = os.path.split(os.path.abspath(path))
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        if name.startswith(base) and _STAGED.fullmatch(name[len(base):]):
            unlink_quietly(os.path.join(folder, name))


# --- reading ------------------------------------------------------------------------------

def _read_file(net: Network, path: str) -> Network:
    try:
        buf = np.fromfile(path, dtype=np.uint8)
    except OSError as exc:
        from ..errors import NetworkFileNotFoundError

        raise NetworkFileNotFoundError(f"cannot read raw params: {exc.strerror or exc}",
                                       file=path) from exc
    return read_raw_bytes(net, buf, file=path)


def read_raw(net: Network, path: str | os.PathLike) -> Network:
    """Fill every Params of `net` from the .raw file at `path` (see `read_raw_bytes`); when
    that is not the raw the json records, from the content-addressed raw of an interrupted
    `save_network` if one is there."""
    path = os.fspath(path)
    try:
        return _read_file(net, path)
    except XirError:
        staged = staged_raw_path(path, net.params_md5) if net.params_md5 else ""
        if not staged or not os.path.isfile(staged):
            raise
    return _read_file(net, staged)


BUFFER_LABEL = "<buffer>"
"""What errors name in place of a file name when the raw comes from memory."""

_VIEW_ALIGN = 16
"""A buffer is viewed in place only when its start is this aligned: every blob then starts at
an address aligned for its element type (blobs sit at multiples of 64 from the start)."""


def read_raw_bytes(net: Network, data: bytes | bytearray | memoryview | np.ndarray,
                   file: str | None = None, *, zero_copy: bool = False) -> Network:
    """Fill every Params of `net` from raw file contents, checking in layers.

    1. size against the json's params_bytes, magic, header truncation;
    2. md5 against params_md5;
    3. the header: every Params of the network exactly once, no unknown v_id, each blob where
       the layout puts it and exactly as large as the Params' storageBytes.
    Nothing is changed in `net` unless every check passes. The size and md5 checks are skipped
    when the network carries no params_md5 (a network built in memory, not loaded from json).

    `data` is any object with the buffer protocol (bytes, bytearray, memoryview, a numpy array,
    mmap). By default the arrays are views over one writable copy of it (a writable, C-contiguous
    uint8 array is used as it is). With `zero_copy` the arrays are views over `data` itself
    wherever it is C-contiguous and 16-byte aligned (else over one copy): a read-only buffer
    (bytes, a read-only memoryview or mmap) gives read-only arrays, a writable one arrays that
    see the caller's later writes. The arrays hold a reference to the buffer, so it lives as
    long as any Params still uses it (a bytearray cannot be resized meanwhile).
    """
    try:
        _read(net, _byte_array(data, zero_copy), file)
    except XirError as err:
        raise err.located(file=file) from err.__cause__
    return net


def _byte_array(data: object, zero_copy: bool) -> np.ndarray:
    """`data` as a 1-D uint8 array: a view when allowed and possible, else a writable copy."""
    if isinstance(data, np.ndarray):
        arr = data
    else:
        try:
            mv = memoryview(data)  # type: ignore[arg-type]
        except TypeError as exc:
            hint = " (a file name? use loadParamsFromFile)" if isinstance(data, str) else ""
            raise RawFileError(f"the raw params must be bytes, bytearray, memoryview or a "
                               f"numpy uint8 array (any buffer), not {type(data).__name__}"
                               f"{hint}", field="buffer") from exc
        flat = mv.cast("B") if mv.c_contiguous else bytearray(mv.tobytes())
        arr = np.frombuffer(flat, dtype=np.uint8)
    if arr.dtype.hasobject:
        raise RawFileError(f"the raw params cannot come from a numpy array of {arr.dtype}",
                           field="buffer")
    if arr.flags.c_contiguous and (arr.dtype != np.uint8 or arr.ndim != 1):
        arr = arr.reshape(-1).view(np.uint8)
    viewable = arr.flags.c_contiguous and arr.ndim == 1 and arr.dtype == np.uint8
    if zero_copy and viewable and arr.ctypes.data % _VIEW_ALIGN == 0:
        return arr
    if not zero_copy and viewable and arr.flags.writeable:
        return arr
    return np.frombuffer(bytearray(np.ascontiguousarray(arr).reshape(-1).view(np.uint8)),
                         dtype=np.uint8)


def _read(net: Network, buf: np.ndarray, file: str | None) -> None:
    size = int(buf.size)
    checked = bool(net.params_md5)

    # 1. cheap: size, magic, header
    if checked:
        want = int(net.params_bytes)
        if size < want:
            raise RawTruncatedError(
                f"raw file has {size} bytes but the json's params_bytes says {want}: the file "
                f"is truncated (copy it again)", field="params_bytes")
        if size > want:
            raise RawSizeError(
                f"raw file has {size} bytes but the json's params_bytes says {want}: extra "
                f"bytes at the end, or the json and raw files do not belong together",
                field="params_bytes")
    if size < len(RAW_MAGIC):
        raise RawTruncatedError(f"raw file has only {size} bytes, not even the 12-byte magic")
    magic = buf[:len(RAW_MAGIC)].tobytes()
    if magic != RAW_MAGIC:
        raise RawMagicError(f"raw file starts with {magic!r}, not the Icraft magic "
                            f"{RAW_MAGIC!r}: this is not an Icraft .raw file")
    if size < _HEAD.size:
        raise RawTruncatedError(f"raw file has {size} bytes, ends inside the parameter count")
    count = _HEAD.unpack_from(buf, 0)[1]
    header_end = _HEAD.size + _ENTRY.size * count
    if header_end > size:
        raise RawTruncatedError(f"raw header announces {count} parameters ({header_end} header "
                                f"bytes) but the file has only {size} bytes")

    # 2. integrity
    if checked:
        digest = _md5()
        digest.update(buf)
        got = digest.hexdigest()
        if got != net.params_md5:
            raise RawChecksumError(f"raw file md5 is {got} but the json's params_md5 says "
                                   f"{net.params_md5}: the file is corrupt or belongs to "
                                   f"another network", field="params_md5")

    # 3. structure
    entries = np.frombuffer(buf[_HEAD.size:header_end], dtype=_ENTRY_DTYPE) if count else []
    wanted = {p.v_id: p for p in net.params()}
    seen: set[int] = set()
    placed: list[tuple[Params, int, int]] = []
    pos = align_up(header_end)
    end = header_end
    for i, entry in enumerate(entries):
        v_id, off = int(entry["v_id"]), int(entry["offset"])
        field = f"header[{i}]"
        p = wanted.get(v_id)
        if p is None:
            raise RawFileError(f"raw header entry {i} names v_id {v_id}, which is no Params of "
                               f"the network", field=field)
        if v_id in seen:
            raise RawFileError(f"raw header lists v_id {v_id} twice", field=field)
        seen.add(v_id)
        need = p.storageBytes()
        if off != pos:
            raise RawSizeError(
                f"blob of params v_id {v_id} starts at offset {off}, but the layout puts it at "
                f"{pos} (the previous blob's size disagrees with its type, or the header is "
                f"damaged)", field=field)
        if off + need > size:
            raise RawTruncatedError(
                f"blob of params v_id {v_id} needs bytes {off}..{off + need} but the file ends "
                f"at {size}", field=field)
        placed.append((p, off, need))
        end = off + need
        pos = align_up(end)
    missing = sorted(set(wanted) - seen)
    if missing:
        raise RawFileError(f"raw file holds no data for params v_id {missing}", field="v_id")
    if end != size:
        last = f"the last blob (v_id {placed[-1][0].v_id}) ends" if placed else "the header ends"
        raise RawSizeError(f"{last} at byte {end} but the file has {size} bytes: a blob is "
                           f"smaller than the raw says, or there is trailing garbage")

    arrays = []
    for p, off, need in placed:
        dt = p.dtype.numpy_dtype
        raw = buf[off:off + need]
        if dt == np.bool_ and raw.size and int(raw.max()) > 1:
            raise RawFileError(f"bool params v_id {p.v_id} holds bytes other than 0 and 1",
                               field="data")
        arr = raw.view(dt.newbyteorder("<")).reshape(p.dtype.shape)
        if arr.dtype != dt:  # big-endian host
            arr = arr.astype(dt)
        arrays.append((p, arr))
    for p, arr in arrays:
        p.setData(arr)

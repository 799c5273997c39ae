"""Json -> Network: the version rules, the guards that turn any stray Python exception into a
NetworkFormatError naming the op, then `Network.validate()`; from an object, text or a file."""

from __future__ import annotations

import json as _json
import logging
import os
from typing import Any

from ...errors import (
    FieldTypeError,
    JsonSyntaxError,
    NetworkFileNotFoundError,
    NetworkFormatError,
    XirError,
)
from ...network import FORMAT_TAG, FORMAT_VERSION, Network
from ...ops.base import Operation
from .. import raw as _raw
from .fields import expect, get_int, get_list, get_str, get_tags, prefixed, short
from .reader import Reader
from .schema import (
    MD5_RE,
    NETWORK_FIELDS,
    NETWORK_KEY,
    OWN_VERSION_RE,
    VENDOR_MAJOR,
    VENDOR_VERSION_RE,
)

log = logging.getLogger(__name__)


def _check_version(obj: dict) -> tuple[str, bool, bool]:
    """(the file's icraft_xir_version, strict?, vendor?) under the rules of docs/xir-format.md
    (Versions): this project's files carry their format revision in the `xir_format` tag (or,
    revision 1.0, in icraft_xir_version as MAJOR.MINOR); a version of three or four fields and
    no tag is a file of the vendor's toolchain, read under the vendor's rules."""
    text = get_str(obj, "icraft_xir_version", "network")
    tags = obj.get("tags")
    own = tags.get(FORMAT_TAG) if isinstance(tags, dict) else None
    own_tagged = own is not None
    vendor = VENDOR_VERSION_RE.fullmatch(text)
    if not vendor and not OWN_VERSION_RE.fullmatch(text):
        raise FieldTypeError(f"icraft_xir_version {text!r} is not a version (the vendor's "
                             f"'3.6.2' or '3.6.2.82', or 'MAJOR.MINOR')",
                             field="icraft_xir_version")
    if own is None and not vendor:
        own = text  # revision 1.0 files: our own MAJOR.MINOR in icraft_xir_version
    if own is not None:
        field = f"tags.{FORMAT_TAG}" if own_tagged else "icraft_xir_version"
        return text, _check_own_revision(own, field), False
    assert vendor is not None
    major = int(vendor.group(1))
    if major > VENDOR_MAJOR:
        raise FieldTypeError(
            f"vendor format version {text} is newer than this reader (vendor format "
            f"{VENDOR_MAJOR}.x, xir format {FORMAT_VERSION}); upgrade xir to read this file",
            field="icraft_xir_version")
    if major < VENDOR_MAJOR:
        raise FieldTypeError(
            f"vendor format version {text} is older than this reader (vendor format "
            f"{VENDOR_MAJOR}.x) supports; regenerate the file with the vendor's v3 toolchain",
            field="icraft_xir_version")
    return text, False, True


def _check_own_revision(own: Any, field: str) -> bool:
    """strict? for this project's format revision `own`; refuses other majors."""
    m = OWN_VERSION_RE.fullmatch(own) if isinstance(own, str) else None
    if not m:
        raise FieldTypeError(f"xir format revision {short(own)} is not a 'MAJOR.MINOR' "
                             f"version", field=field)
    mine = OWN_VERSION_RE.fullmatch(FORMAT_VERSION)
    assert mine is not None
    major, minor = int(m.group(1)), int(m.group(2))
    my_major, my_minor = int(mine.group(1)), int(mine.group(2))
    if major > my_major:
        raise FieldTypeError(
            f"format version {own} is newer than this reader (xir format {FORMAT_VERSION}); "
            f"upgrade xir to read this file", field=field)
    if major < my_major:
        raise FieldTypeError(
            f"format version {own} is older than this reader (xir format {FORMAT_VERSION}) "
            f"supports; convert the file with the tool that wrote it", field=field)
    return minor <= my_minor


def network_from_dict(obj: Any, file: str | None = None) -> Network:
    """Build and validate a Network from its json object (params stay empty)."""
    file = None if file is None else os.fspath(file)
    try:
        return _network_from_dict(obj, file)
    except XirError as err:
        raise err.located(file=file) from err.__cause__
    except Exception as exc:  # the guard: nothing but XirError leaves the loader
        raise NetworkFormatError(f"malformed network: {type(exc).__name__}: {exc}",
                                 file=file) from exc


def _network_from_dict(obj: Any, file: str | None) -> Network:
    # header: type key and version first (cheap), then the rest
    expect(obj, NETWORK_KEY, "the top-level object")
    version, strict, vendor = _check_version(obj)
    reader = Reader(file, strict, vendor)
    reader.check_keys(obj, NETWORK_FIELDS, "Network")
    params_bytes = get_int(obj, "params_bytes", "network", lo=0)
    md5 = get_str(obj, "params_md5", "network")
    if vendor:
        md5 = md5.lower()  # the vendor's md5 text may be upper case
    if md5 and not MD5_RE.fullmatch(md5):
        raise FieldTypeError(f"params_md5 must be 32 lowercase hex digits (or empty: not "
                             f"recorded), not {short(md5)}", field="params_md5")
    net = Network(
        get_str(obj, "name", "network", "network"),
        framework_kind=get_str(obj, "framework_kind", "network", "xir"),
        framework_version=get_str(obj, "framework_version", "network", ""),
        icraft_version=get_str(obj, "icraft_version", "network", ""),
        icraft_xir_version=version,
        tags={k: v for k, v in get_tags(obj, "network").items() if k != FORMAT_TAG},
    )
    net.params_bytes, net.params_md5 = params_bytes, md5
    net.source_file = file
    items = get_list(obj, "ops", "network")
    for i, item in enumerate(items):
        net.ops.append(_guarded_op(reader, item, i))
    net.relink()
    net.reserveIds(reader.max_op_id, max(reader.values, default=-1))
    _guarded_validate(net)
    if reader.ignored:
        rules = f"vendor format {version}" if vendor else "a newer xir format revision"
        log.info("%s: read under the rules of %s; ignored fields this reader does not know: %s",
                 file or "network", rules,
                 "; ".join(f"{what}: {', '.join(sorted(keys))}"
                           for what, keys in sorted(reader.ignored.items())))
    return net


def _guarded_op(reader: Reader, item: Any, index: int) -> Operation:
    """Decode one op; any stray Python exception becomes a NetworkFormatError naming it."""
    op_id = item.get("op_id") if isinstance(item, dict) else None
    op_id = op_id if isinstance(op_id, int) and not isinstance(op_id, bool) else None
    try:
        return reader.op(item)
    except XirError as err:
        located = err.located(file=reader.file, op_id=op_id)
        if located.op_id is None:
            located = prefixed(located, f"ops[{index}]")
        raise located from err.__cause__
    except Exception as exc:
        raise NetworkFormatError(f"malformed op (ops[{index}]): {type(exc).__name__}: {exc}",
                                 file=reader.file, op_id=op_id) from exc


def _guarded_validate(net: Network) -> None:
    try:
        net.validate()
    except XirError:
        raise
    except Exception as exc:
        culprit = None
        for op in net.ops:
            try:
                op.check_types()
            except XirError:
                continue
            except Exception:
                culprit = op.op_id
                break
        raise NetworkFormatError(f"network check failed: {type(exc).__name__}: {exc}",
                                 file=net.source_file, op_id=culprit) from exc


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid json (non-finite floats are written as \"inf\")")


def loads(text: str | bytes | bytearray, file: str | None = None) -> Network:
    """Parse json text (or utf-8 bytes) into a validated Network (params stay empty)."""
    file = None if file is None else os.fspath(file)
    if isinstance(text, (bytes, bytearray, memoryview)):
        data = bytes(text)
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            line = data.count(b"\n", 0, exc.start) + 1
            col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
            err = JsonSyntaxError(f"not utf-8 text: bad byte at line {line} column {col} "
                                  f"(byte {exc.start})", file=file)
            err.line, err.column, err.position = line, col, exc.start
            raise err from None
    elif not isinstance(text, str):
        raise FieldTypeError(f"loads() takes str or bytes, not {type(text).__name__}", file=file)
    text = text[1:] if text.startswith("\ufeff") else text
    try:
        obj = _json.loads(text, parse_constant=_reject_constant)
    except _json.JSONDecodeError as exc:
        err = JsonSyntaxError(f"invalid json at line {exc.lineno} column {exc.colno} "
                              f"(char {exc.pos}): {exc.msg}", file=file)
        err.line, err.column, err.position = exc.lineno, exc.colno, exc.pos
        raise err from None
    except ValueError as exc:  # rejected constant (NaN, Infinity)
        err = JsonSyntaxError(f"invalid json: {exc}", file=file)
        err.line = err.column = err.position = None
        raise err from None
    except RecursionError:
        err = JsonSyntaxError("invalid json: nested too deeply", file=file)
        err.line = err.column = err.position = None
        raise err from None
    return network_from_dict(obj, file)


def load_json(path: str | os.PathLike) -> Network:
    """Load a network from its json file (params stay empty until `read_raw`)."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise NetworkFileNotFoundError(f"cannot read network json: {exc.strerror or exc}",
                                       file=path) from exc
    return loads(data, file=path)


def load_network(json_path: str | os.PathLike, raw_path: str | os.PathLike | None = None
                 ) -> Network:
    """Load json + raw (raw next to the json with the same stem unless given)."""
    json_path = os.fspath(json_path)
    net = load_json(json_path)
    if raw_path is None:
        raw_path = os.path.splitext(json_path)[0] + ".raw"
    _raw.read_raw(net, raw_path)
    return net

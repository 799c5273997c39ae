"""The vendor-style network json: `_type_key`-typed objects, ops in execution order.

Reading checks in layers: bytes and syntax, then the header (type key, format version), then each
op's structure (inside a guard that turns any stray Python exception into a NetworkFormatError
naming the op), then the network's semantics with `Network.validate()`. See docs/xir-format.md.
"""

from __future__ import annotations

import json as _json
import logging
import math
import os
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import (
    DuplicateIdError,
    FieldTypeError,
    JsonSyntaxError,
    MissingFieldError,
    NetworkFileNotFoundError,
    NetworkFormatError,
    NetworkWriteError,
    UnknownTypeKeyError,
    XirError,
)
from ..network import FORMAT_TAG, FORMAT_VERSION, VENDOR_XIR_VERSION, Network
from ..ops.base import HOST_TARGET, OP_REGISTRY, REQUIRED, Operation, check_target
from ..types import Layout, QuantizedType, ScalarType, TensorType
from ..values import HOSTM, MemType, Params, Value
from . import raw as _raw
from .atomic import temp_beside, unlink_quietly

log = logging.getLogger(__name__)

PREFIX = "icraft::xir::"
NETWORK_KEY = PREFIX + "Network"
VALUE_KEY = PREFIX + "Value"
PARAMS_KEY = PREFIX + "Params"
TENSOR_KEY = PREFIX + "TensorType"
QUANT_KEY = PREFIX + "QuantizedType"
_NON_OP_KEYS = {NETWORK_KEY, VALUE_KEY, PARAMS_KEY, TENSOR_KEY, QUANT_KEY}

ID_MAX = 2**31 - 1
"""op_id and v_id are non-negative and fit an i32 (the raw header's v_id field)."""

_OP_FIELDS = ("_type_key", "op_id", "name", "inputs", "outputs", "compile_target", "tags")
_HARDOP_FIELDS = ("instr", "params")
_NETWORK_FIELDS = ("_type_key", "name", "framework_kind", "framework_version", "icraft_version",
                   "icraft_xir_version", "params_bytes", "params_md5", "ops", "tags")
_VALUE_FIELDS = ("_type_key", "v_id", "name", "dtype", "mtype", "tags")
_TENSOR_FIELDS = ("_type_key", "element_dtype", "shape", "layout")
_QUANT_FIELDS = ("_type_key", "storage", "scale", "zero_point", "axis")

FREE_LIST_ATTRS = frozenset({"sub_hard_ops"})
"""List attributes whose items are free json (or ops); every other list attribute holds ints
unless the op class declares `LIST_ITEMS = {"attr": float}` (item type per attribute)."""

_OWN_VERSION_RE = re.compile(r"([0-9]+)\.([0-9]+)")
_VENDOR_VERSION_RE = re.compile(r"([0-9]+)\.([0-9]+)\.([0-9]+)(?:\.([0-9]+))?")
VENDOR_MAJOR = 3
"""The vendor format major version this reader reads (the v3.3x toolchain writes 3.x.y[.z])."""
_MD5_RE = re.compile(r"[0-9a-f]{32}")
_MAX_SUB_DEPTH = 8


# =========================================================================================
# encoding
# =========================================================================================

def _encode_float(x: float) -> float | str:
    x = float(x)
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if math.isnan(x):
        return "nan"
    return x


def _encode_value(v: Value) -> dict:
    return {
        "_type_key": PARAMS_KEY if v.is_params else VALUE_KEY,
        "v_id": int(v.v_id),
        "name": v.name,
        "dtype": v.dtype.encode(),
        "mtype": v.mtype.encode(),
        "tags": dict(v.tags),
    }


def _encode_attr(op: Operation, key: str, value: Any, depth: int) -> Any:
    kind = op.ATTRS[key][0]
    if kind is float:
        return _encode_float(value)
    if key in FREE_LIST_ATTRS and isinstance(value, (list, tuple)):
        return [_encode_op(x, depth + 1) if isinstance(x, Operation) else x for x in value]
    if isinstance(value, tuple):
        return list(value)
    return value


def _encode_op(op: Operation, depth: int = 0) -> dict:
    if depth > _MAX_SUB_DEPTH:
        raise FieldTypeError(f"sub_hard_ops nested deeper than {_MAX_SUB_DEPTH}",
                             op_id=op.op_id, field="sub_hard_ops")
    obj: dict[str, Any] = {
        "_type_key": op.type_key,
        "op_id": int(op.op_id),
        "name": op.name,
        "inputs": [_encode_value(v) for v in op.inputs],
        "outputs": [_encode_value(v) for v in op.outputs],
        "compile_target": op.compile_target,
        "tags": dict(op.tags),
    }
    if op.op_type == "HardOp":
        instr = getattr(op, "instr", None)
        obj["instr"] = None if instr is None else _encode_value(instr)
        obj["params"] = [_encode_value(p) for p in getattr(op, "params", [])]
    for key in op.ATTRS:
        obj[key] = _encode_attr(op, key, op.attrs[key], depth)
    return obj


def network_to_dict(net: Network) -> dict:
    """The json object of `net` (params_bytes/params_md5 as recorded on the network)."""
    return {
        "_type_key": NETWORK_KEY,
        "name": net.name,
        "framework_kind": net.framework_kind,
        "framework_version": net.framework_version,
        "icraft_version": net.icraft_version,
        "icraft_xir_version": VENDOR_XIR_VERSION,
        "params_bytes": int(net.params_bytes),
        "params_md5": net.params_md5,
        "ops": [_encode_op(op) for op in net.ops],
        "tags": {FORMAT_TAG: FORMAT_VERSION,
                 **{k: v for k, v in net.tags.items() if k != FORMAT_TAG}},
    }


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    raise TypeError(f"{type(obj).__name__} is not json serializable")


def _compact(obj: Any, ascii_only: bool = False) -> str:
    return _json.dumps(obj, ensure_ascii=ascii_only, allow_nan=False, default=_json_default,
                       separators=(", ", ": "))


def _pretty(obj: Any, indent: int = 0, ascii_only: bool = False, width: int = 100) -> str:
    """Indented json, with any object or list that fits on one line kept on one line."""
    flat = _compact(obj, ascii_only)
    if len(flat) + indent <= width or not isinstance(obj, (dict, list)) or not obj:
        return flat
    pad = " " * (indent + 2)
    if isinstance(obj, list):
        items = [pad + _pretty(x, indent + 2, ascii_only, width) for x in obj]
        return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"
    items = [f"{pad}{_compact(str(k), ascii_only)}: {_pretty(v, indent + 2, ascii_only, width)}"
             for k, v in obj.items()]
    return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"


def dumps(net_or_dict: Network | dict, ascii_only: bool = False) -> str:
    """Json text of a network (or of its dict), as the writer puts it on disk."""
    obj = net_or_dict if isinstance(net_or_dict, dict) else network_to_dict(net_or_dict)
    try:
        return _pretty(obj, 0, ascii_only) + "\n"
    except (TypeError, ValueError, RecursionError) as exc:
        raise FieldTypeError(f"network cannot be written as json: {exc} (tags and attributes "
                             f"must be json values; floats in tags must be finite)") from exc


def save_network(net: Network, json_path: str | os.PathLike,
                 raw_path: str | os.PathLike | None = None, *, validate: bool = True) -> None:
    """Write `net` as json + raw (raw next to the json, same stem, `.raw`).

    A failure (or a kill) at any step leaves the old pair or the new pair, never a mix. The
    raw is written first, under a content-addressed name beside the raw (``net.raw.<md5>``);
    the json, which records that md5, is then moved into place: that rename is the commit.
    Last the raw takes its own name. Between the two renames the new json's raw is the
    content-addressed file, which `read_raw` falls back to when the raw beside the json is
    not the one the json records. The network is validated first, since the loader would
    refuse an invalid one.
    """
    json_path = os.fspath(json_path)
    if raw_path is None:
        raw_path = os.path.splitext(json_path)[0] + ".raw"
    raw_path = os.fspath(raw_path)
    if validate:
        net.validate()
    obj = network_to_dict(net)
    dumps(obj)  # fail on unencodable tags before writing anything
    try:
        _write_pair(obj, net, json_path, raw_path)
    except OSError as exc:
        if isinstance(exc, XirError):
            raise
        folder = os.path.dirname(os.path.abspath(json_path))
        raise NetworkWriteError(f"cannot save the network: {exc.strerror or exc} (in folder "
                                f"'{folder}'); the files there are as they were",
                                file=json_path) from exc


def dump_pair(net: Network, *, json_too: bool = True) -> tuple[str, bytes]:
    """(json text, raw bytes) of `net` held in memory: what `save_network` writes, with the
    json's params_bytes/params_md5 those of these raw bytes (also recorded on `net`). With
    `json_too=False` the text is "" (only the raw is made). Validates the network first."""
    import io

    net.validate()
    buf = io.BytesIO()
    size, digest = _raw.write_raw_stream(buf, net.params())
    text = ""
    if json_too:
        obj = network_to_dict(net)
        obj["params_bytes"], obj["params_md5"] = size, digest
        text = dumps(obj)
    net.params_bytes, net.params_md5 = size, digest
    return text, buf.getvalue()


def _write_pair(obj: dict[str, Any], net: Network, json_path: str, raw_path: str) -> None:
    raw_tmp, size, digest = _raw.write_raw_tmp(net.params(), raw_path)
    staged = _raw.staged_raw_path(raw_path, digest)
    json_tmp = None
    committed = False
    try:
        obj["params_bytes"], obj["params_md5"] = size, digest
        try:
            text = dumps(obj).encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates in a name: escape them
            text = dumps(obj, ascii_only=True).encode("ascii")
        os.replace(raw_tmp, staged)
        raw_tmp = None
        fd, json_tmp = temp_beside(json_path)
        with os.fdopen(fd, "wb") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(json_tmp, json_path)
        json_tmp, committed = None, True
        os.replace(staged, raw_path)
    finally:
        for tmp in (raw_tmp, json_tmp):
            if tmp is not None:
                unlink_quietly(tmp)
        if not committed:
            unlink_quietly(staged)
    _raw.remove_stale_staged(raw_path)
    net.params_bytes, net.params_md5 = size, digest


# =========================================================================================
# decoding: small typed accessors
# =========================================================================================

def _prefixed(err: XirError, prefix: str) -> XirError:
    """A copy of `err` whose field path is prefixed by `prefix` (e.g. inputs[1].dtype)."""
    field = prefix if err.field is None else f"{prefix}.{err.field}"
    new = type(err).__new__(type(err))
    XirError.__init__(new, err.message, file=err.file, op_id=err.op_id, field=field)
    for key, val in err.__dict__.items():
        if key not in ("message", "file", "op_id", "field"):
            setattr(new, key, val)
    new.__cause__ = err.__cause__
    return new


def _sub(prefix: str, fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except XirError as err:
        raise _prefixed(err, prefix) from err.__cause__


def _tname(x: Any) -> str:
    if x is None:
        return "null"
    if isinstance(x, bool):
        return "boolean"
    if isinstance(x, (int, float)):
        return "number"
    if isinstance(x, str):
        return "string"
    if isinstance(x, list):
        return "array"
    if isinstance(x, dict):
        return "object"
    return type(x).__name__


def _need(obj: dict, key: str, what: str) -> Any:
    if key not in obj:
        raise MissingFieldError(f"{what} lacks the required field '{key}'", field=key)
    return obj[key]


def _get_int(obj: dict, key: str, what: str, *, default: Any = REQUIRED, lo: int | None = None,
             hi: int | None = None) -> int:
    if key not in obj and default is not REQUIRED:
        return default
    x = _need(obj, key, what)
    if not isinstance(x, int) or isinstance(x, bool):
        raise FieldTypeError(f"{what} field '{key}' must be an integer, not {_tname(x)} "
                             f"({_short(x)})", field=key)
    if (lo is not None and x < lo) or (hi is not None and x > hi):
        raise FieldTypeError(f"{what} field '{key}' = {x} is outside {lo}..{hi}", field=key)
    return x


def _get_str(obj: dict, key: str, what: str, default: Any = REQUIRED) -> str:
    if key not in obj and default is not REQUIRED:
        return default
    x = _need(obj, key, what)
    if not isinstance(x, str):
        raise FieldTypeError(f"{what} field '{key}' must be a string, not {_tname(x)} "
                             f"({_short(x)})", field=key)
    return x


def _get_list(obj: dict, key: str, what: str, default: Any = REQUIRED) -> list:
    if key not in obj and default is not REQUIRED:
        return default
    x = _need(obj, key, what)
    if not isinstance(x, list):
        raise FieldTypeError(f"{what} field '{key}' must be an array, not {_tname(x)}", field=key)
    return x


def _get_tags(obj: dict, what: str) -> dict:
    x = obj.get("tags", {})
    if not isinstance(x, dict):
        raise FieldTypeError(f"{what} field 'tags' must be an object, not {_tname(x)}",
                             field="tags")
    return x


def _short(x: Any) -> str:
    text = repr(x)
    return text if len(text) <= 60 else text[:57] + "..."


def _type_key(obj: Any, what: str) -> str:
    if not isinstance(obj, dict):
        raise FieldTypeError(f"{what} must be an object, not {_tname(obj)} ({_short(obj)})")
    key = _need(obj, "_type_key", what)
    if not isinstance(key, str):
        raise FieldTypeError(f"{what} field '_type_key' must be a string, not {_tname(key)}",
                             field="_type_key")
    return key


def _expect(obj: Any, want: str | tuple[str, ...], what: str) -> str:
    """Check an object's `_type_key` against the expected one(s)."""
    key = _type_key(obj, what)
    wants = (want,) if isinstance(want, str) else want
    if key not in wants:
        if not _is_known(key):
            raise UnknownTypeKeyError(f"unknown _type_key {key!r} ({what} expected: "
                                      f"{' or '.join(wants)})", field="_type_key")
        raise FieldTypeError(f"{what} must be {' or '.join(wants)}, not {key}",
                             field="_type_key")
    return key


def _is_known(key: str) -> bool:
    return key in _NON_OP_KEYS or (key.startswith(PREFIX) and key[len(PREFIX):] in OP_REGISTRY)


class _Reader:
    """Per-file decoding state: the v_id table and the version's strictness."""

    def __init__(self, file: str | None, strict: bool, vendor: bool = False) -> None:
        self.file = file
        self.strict = strict  # unknown keys are errors (file is not newer than this reader)
        self.vendor = vendor  # a file of the vendor's toolchain: its rules (docs/xir-format.md)
        self.values: dict[int, Value] = {}
        self.max_op_id = -1
        self.ignored: dict[str, set[str]] = {}  # what -> unknown keys skipped (lenient mode)

    def check_keys(self, obj: dict, allowed: Any, what: str) -> None:
        extra = [k for k in obj if k not in allowed]
        if not extra:
            return
        if self.strict:
            raise FieldTypeError(f"{what} has unknown field '{extra[0]}'", field=str(extra[0]))
        self.ignored.setdefault(what, set()).update(str(k) for k in extra)

    # --- types -----------------------------------------------------------------------------
    def element(self, obj: Any) -> ScalarType | QuantizedType:
        if isinstance(obj, str):
            return ScalarType.parse(obj)
        if not isinstance(obj, dict):
            raise FieldTypeError(f"element_dtype must be a string like '@fp(32)' or a "
                                 f"QuantizedType object, not {_tname(obj)}")
        _expect(obj, QUANT_KEY, "quantized element type")
        self.check_keys(obj, _QUANT_FIELDS, "QuantizedType")
        storage = ScalarType.parse(_get_str(obj, "storage", "QuantizedType"))
        if not storage.is_int():
            raise FieldTypeError(f"quantized storage must be an integer type, not "
                                 f"{storage.encode()}", field="storage")
        scale = _get_list(obj, "scale", "QuantizedType")
        if not scale or not all(isinstance(s, (int, float)) and not isinstance(s, bool)
                                for s in scale):
            raise FieldTypeError("scale must be a non-empty array of numbers", field="scale")
        zp = obj.get("zero_point", [0])
        if isinstance(zp, int) and not isinstance(zp, bool):
            zp = [zp]
        if not isinstance(zp, list) or not all(
                isinstance(z, int) and not isinstance(z, bool) for z in zp):
            raise FieldTypeError("zero_point must be an array of integers", field="zero_point")
        if storage.kind != "sint":
            # the integer kernels and both chips compute signed fixed point only
            # (docs/quantization.md): an unsigned storage would reach them at forward time
            raise FieldTypeError(f"quantized storage must be a signed integer type "
                                 f"(@sint(8|16|32|64)), not {storage.encode()}", field="storage")
        info = np.iinfo(storage.numpy_dtype)
        if any(not info.min <= z <= info.max for z in zp):
            raise FieldTypeError(f"zero_point {_short(zp)} outside the range of "
                                 f"{storage.encode()}", field="zero_point")
        axis = obj.get("axis")
        if axis is not None and (not isinstance(axis, int) or isinstance(axis, bool)):
            raise FieldTypeError(f"axis must be an integer or null, not {_tname(axis)}",
                                 field="axis")
        if axis is not None and len(zp) not in (1, len(scale)):
            raise FieldTypeError(f"{len(zp)} zero points for {len(scale)} scales",
                                 field="zero_point")
        return QuantizedType(storage, [_to_float(s, "scale") for s in scale], zp, axis)

    def tensor_type(self, obj: Any) -> TensorType:
        _expect(obj, TENSOR_KEY, "dtype")
        self.check_keys(obj, _TENSOR_FIELDS, "TensorType")
        element = _sub("element_dtype", self.element, _need(obj, "element_dtype", "TensorType"))
        shape = _get_list(obj, "shape", "TensorType")
        if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise FieldTypeError(f"shape must be an array of non-negative integers, not "
                                 f"{_short(shape)}", field="shape")
        layout = None
        if obj.get("layout") is not None:
            layout = Layout.parse(obj["layout"])
        return TensorType(element, shape, layout)

    # --- values ----------------------------------------------------------------------------
    def value(self, obj: Any, want: str | tuple[str, ...] = (VALUE_KEY, PARAMS_KEY)) -> Value:
        key = _expect(obj, want, "value")
        self.check_keys(obj, _VALUE_FIELDS, "Value")
        v_id = _get_int(obj, "v_id", "value", lo=0, hi=ID_MAX)
        dtype = _sub("dtype", self.tensor_type, _need(obj, "dtype", f"value {v_id}"))
        name = _get_str(obj, "name", f"value {v_id}", "")
        mtype = MemType.parse(obj["mtype"]) if "mtype" in obj else HOSTM
        tags = _get_tags(obj, f"value {v_id}")
        cls = Params if key == PARAMS_KEY else Value
        old = self.values.get(v_id)
        if old is not None:
            diff = [what for what, same in (
                ("kind (Value/Params)", type(old) is cls), ("dtype", old.dtype == dtype),
                ("name", old.name == (name or f"v{v_id}")), ("mtype", old.mtype == mtype),
                ("tags", old.tags == tags)) if not same]
            if diff:
                raise DuplicateIdError(
                    f"v_id {v_id} is defined again with a different {', '.join(diff)}: two "
                    f"different values share a v_id", field="v_id")
            return old
        v = cls(v_id, dtype, name=name, mtype=mtype, tags=tags)
        self.values[v_id] = v
        return v

    def value_list(self, obj: dict, key: str, want: Any = (VALUE_KEY, PARAMS_KEY)) -> list:
        items = _get_list(obj, key, "op")
        return [_sub(f"{key}[{i}]", self.value, x, want) for i, x in enumerate(items)]

    # --- ops -------------------------------------------------------------------------------
    def op(self, obj: Any, depth: int = 0) -> Operation:
        key = _type_key(obj, "op")
        name = key[len(PREFIX):] if key.startswith(PREFIX) else None
        cls = OP_REGISTRY.get(name) if name is not None else None
        if cls is None:
            if _is_known(key):
                raise FieldTypeError(f"expected an op, found a {key}", field="_type_key")
            vendor = " (an op of the vendor's toolchain this reader does not implement)" \
                if self.vendor else ""
            raise UnknownTypeKeyError(f"unknown op _type_key {key!r}{vendor}: this reader "
                                      f"knows {len(OP_REGISTRY)} op types (see docs/ops.md)",
                                      field="_type_key")
        extra = _HARDOP_FIELDS if cls.op_type == "HardOp" else ()
        self.check_keys(obj, set(_OP_FIELDS) | set(extra) | set(cls.ATTRS), cls.op_type)
        op_id = _get_int(obj, "op_id", "op", lo=0, hi=ID_MAX)
        self.max_op_id = max(self.max_op_id, op_id)
        try:
            return self._op_body(cls, obj, op_id, depth)
        except XirError as err:
            raise err.located(file=self.file, op_id=op_id) from err.__cause__

    def _op_body(self, cls: type[Operation], obj: dict, op_id: int, depth: int) -> Operation:
        name = _get_str(obj, "name", "op", "")
        target = check_target(obj.get("compile_target", HOST_TARGET))
        tags = _get_tags(obj, "op")
        inputs = self.value_list(obj, "inputs")
        outputs = self.value_list(obj, "outputs")
        attrs = {k: self.attr(cls, k, obj[k], depth) for k in cls.ATTRS if k in obj}
        kw: dict[str, Any] = {}
        if cls.op_type == "HardOp":
            instr = obj.get("instr")
            kw["instr"] = None if instr is None else _sub("instr", self.value, instr,
                                                          PARAMS_KEY)
            kw["params"] = self.value_list(obj, "params", PARAMS_KEY) if "params" in obj \
                else []
        op = cls(inputs, outputs, op_id=op_id, name=name, compile_target=target, tags=tags,
                 **kw, **attrs)
        return op

    def attr(self, cls: type[Operation], key: str, x: Any, depth: int) -> Any:
        kind, default = cls.ATTRS[key]
        if kind is float:
            if isinstance(x, str) and x in ("inf", "-inf", "nan"):
                return float(x)
            if isinstance(x, (int, float)) and not isinstance(x, bool):
                return _to_float(x, key)
            raise FieldTypeError(f"{cls.op_type} attribute '{key}' must be a number (or "
                                 f"\"inf\"/\"-inf\"), not {_tname(x)} ({_short(x)})", field=key)
        if kind is int:
            if isinstance(x, int) and not isinstance(x, bool):
                return x
        elif kind is bool:
            if isinstance(x, bool):
                return x
        elif kind is str:
            if isinstance(x, str):
                return x
        elif kind is dict:
            if isinstance(x, dict):
                return x
        elif kind is list:
            if isinstance(x, list):
                return self.list_attr(cls, key, x, depth)
        else:  # Any or an unknown kind: pass through, the op checks it
            return x
        raise FieldTypeError(f"{cls.op_type} attribute '{key}' must be "
                             f"{_KIND_NAMES.get(kind, kind.__name__)}, not {_tname(x)} "
                             f"({_short(x)})", field=key)

    def list_attr(self, cls: type[Operation], key: str, x: list, depth: int) -> list:
        if key in FREE_LIST_ATTRS:
            if depth >= _MAX_SUB_DEPTH:
                raise FieldTypeError(f"{key} nested deeper than {_MAX_SUB_DEPTH}", field=key)
            out = []
            for i, item in enumerate(x):
                if isinstance(item, dict) and "_type_key" in item:
                    out.append(_sub(f"{key}[{i}]", self.op, item, depth + 1))
                else:
                    out.append(item)
            return out
        item_type = getattr(cls, "LIST_ITEMS", {}).get(key, int)
        for i, item in enumerate(x):
            ok = not isinstance(item, bool) and (
                isinstance(item, int) if item_type is int else
                isinstance(item, (int, float)) if item_type is float else
                isinstance(item, item_type))
            if not ok:
                raise FieldTypeError(f"{cls.op_type} attribute '{key}' must be an array of "
                                     f"{_KIND_NAMES.get(item_type, item_type.__name__)}s; item "
                                     f"{i} is {_tname(item)} ({_short(item)})", field=key)
        return [_to_float(i, key) for i in x] if item_type is float else list(x)


def _to_float(x: int | float, field: str) -> float:
    try:
        return float(x)
    except OverflowError:
        raise FieldTypeError(f"number {_short(x)} is too large for a float", field=field) \
            from None


_KIND_NAMES = {int: "an integer", float: "a number", bool: "a boolean", str: "a string",
               list: "an array", dict: "an object"}


# =========================================================================================
# decoding: the network
# =========================================================================================

def _check_version(obj: dict) -> tuple[str, bool, bool]:
    """(the file's icraft_xir_version, strict?, vendor?) under the rules of docs/xir-format.md
    (Versions): this project's files carry their format revision in the `xir_format` tag (or,
    revision 1.0, in icraft_xir_version as MAJOR.MINOR); a version of three or four fields and
    no tag is a file of the vendor's toolchain, read under the vendor's rules."""
    text = _get_str(obj, "icraft_xir_version", "network")
    tags = obj.get("tags")
    own = tags.get(FORMAT_TAG) if isinstance(tags, dict) else None
    own_tagged = own is not None
    vendor = _VENDOR_VERSION_RE.fullmatch(text)
    if not vendor and not _OWN_VERSION_RE.fullmatch(text):
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
    m = _OWN_VERSION_RE.fullmatch(own) if isinstance(own, str) else None
    if not m:
        raise FieldTypeError(f"xir format revision {_short(own)} is not a 'MAJOR.MINOR' "
                             f"version", field=field)
    mine = _OWN_VERSION_RE.fullmatch(FORMAT_VERSION)
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
    _expect(obj, NETWORK_KEY, "the top-level object")
    version, strict, vendor = _check_version(obj)
    reader = _Reader(file, strict, vendor)
    reader.check_keys(obj, _NETWORK_FIELDS, "Network")
    params_bytes = _get_int(obj, "params_bytes", "network", lo=0)
    md5 = _get_str(obj, "params_md5", "network")
    if vendor:
        md5 = md5.lower()  # the vendor's md5 text may be upper case
    if md5 and not _MD5_RE.fullmatch(md5):
        raise FieldTypeError(f"params_md5 must be 32 lowercase hex digits (or empty: not "
                             f"recorded), not {_short(md5)}", field="params_md5")
    net = Network(
        _get_str(obj, "name", "network", "network"),
        framework_kind=_get_str(obj, "framework_kind", "network", "xir"),
        framework_version=_get_str(obj, "framework_version", "network", ""),
        icraft_version=_get_str(obj, "icraft_version", "network", ""),
        icraft_xir_version=version,
        tags={k: v for k, v in _get_tags(obj, "network").items() if k != FORMAT_TAG},
    )
    net.params_bytes, net.params_md5 = params_bytes, md5
    net.source_file = file
    items = _get_list(obj, "ops", "network")
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


def _guarded_op(reader: _Reader, item: Any, index: int) -> Operation:
    """Decode one op; any stray Python exception becomes a NetworkFormatError naming it."""
    op_id = item.get("op_id") if isinstance(item, dict) else None
    op_id = op_id if isinstance(op_id, int) and not isinstance(op_id, bool) else None
    try:
        return reader.op(item)
    except XirError as err:
        located = err.located(file=reader.file, op_id=op_id)
        if located.op_id is None:
            located = _prefixed(located, f"ops[{index}]")
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

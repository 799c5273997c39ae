"""Network -> json: the object of every op and value, and the text the writer puts on disk
(indented, any object that fits on one line kept on one line; non-finite floats as strings)."""

from __future__ import annotations

import json as _json
import math
from typing import Any

import numpy as np

from ...errors import FieldTypeError
from ...network import FORMAT_TAG, FORMAT_VERSION, VENDOR_XIR_VERSION, Network
from ...ops.base import Operation
from ...values import Value
from .schema import FREE_LIST_ATTRS, MAX_SUB_DEPTH, NETWORK_KEY, PARAMS_KEY, VALUE_KEY


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
    if depth > MAX_SUB_DEPTH:
        raise FieldTypeError(f"sub_hard_ops nested deeper than {MAX_SUB_DEPTH}",
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


_ENCODERS = {ascii_only: _json.JSONEncoder(ensure_ascii=ascii_only, allow_nan=False,
                                           default=_json_default, separators=(", ", ": "))
             for ascii_only in (False, True)}
"""One encoder per `ascii_only`, made once: `json.dumps` with these arguments builds the same
encoder on every call, which was a third of the writer's time (one call per json node)."""

_KEY_TEXT = {False: _json.encoder.encode_basestring, True: _json.encoder.encode_basestring_ascii}


def _compact(obj: Any, ascii_only: bool = False) -> str:
    kind = type(obj)
    # the scalars, as json's encoder writes them, without building an encoder per number
    if kind is int:
        return int.__repr__(obj)
    if kind is float and math.isfinite(obj):
        return float.__repr__(obj)
    if kind is bool:
        return "true" if obj else "false"
    if obj is None:
        return "null"
    return _ENCODERS[ascii_only].encode(obj)


def _min_flat_len(obj: dict | list) -> int:
    """A lower bound of the length of `obj`'s one-line text: its brackets, separators, keys
    (with their quotes) and at least one character per value. 0 for an object with a key
    that is not a string, so that it is encoded whole (which checks its keys)."""
    n = len(obj)
    seps = 2 + 2 * (n - 1) + n
    if isinstance(obj, dict):
        keys = 0
        for k in obj:
            if not isinstance(k, str):
                return 0
            keys += len(k) + 4
        return seps + keys
    return seps


def _pretty(obj: Any, indent: int = 0, ascii_only: bool = False, width: int = 100) -> str:
    """Indented json, with any object or list that fits on one line kept on one line.

    An object or list whose one-line text cannot fit (`_min_flat_len`) is not encoded on one
    line first only to be split: each node is encoded once on one line, not once per level
    above it (the text is the same)."""
    container = isinstance(obj, (dict, list))
    if not container or not obj or _min_flat_len(obj) + indent <= width:
        flat = _compact(obj, ascii_only)
        if len(flat) + indent <= width or not container or not obj:
            return flat
    pad = " " * (indent + 2)
    if isinstance(obj, list):
        items = [pad + _pretty(x, indent + 2, ascii_only, width) for x in obj]
        return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"
    key_text = _KEY_TEXT[ascii_only]
    items = [f"{pad}{key_text(str(k))}: {_pretty(v, indent + 2, ascii_only, width)}"
             for k, v in obj.items()]
    return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"


def check_json(obj: dict) -> None:
    """Raise the `FieldTypeError` that `dumps` would for `obj` (an unencodable tag, a
    non-finite float), at the cost of one one-line encoding rather than the indented text."""
    try:
        _compact(obj)
    except (TypeError, ValueError, RecursionError) as exc:
        raise _unwritable(exc) from exc


def _unwritable(exc: Exception) -> FieldTypeError:
    return FieldTypeError(f"network cannot be written as json: {exc} (tags and attributes "
                          f"must be json values; floats in tags must be finite)")


def dumps(net_or_dict: Network | dict, ascii_only: bool = False) -> str:
    """Json text of a network (or of its dict), as the writer puts it on disk."""
    obj = net_or_dict if isinstance(net_or_dict, dict) else network_to_dict(net_or_dict)
    try:
        return _pretty(obj, 0, ascii_only) + "\n"
    except (TypeError, ValueError, RecursionError) as exc:
        raise _unwritable(exc) from exc

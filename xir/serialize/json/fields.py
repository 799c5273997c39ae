"""Small typed accessors of the reader: a json object's fields checked for kind and range, each
failure a `FieldTypeError`/`MissingFieldError` naming the field (prefixed with its path)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...errors import FieldTypeError, MissingFieldError, UnknownTypeKeyError, XirError
from ...ops.base import REQUIRED
from .schema import is_known


def prefixed(err: XirError, prefix: str) -> XirError:
    """A copy of `err` whose field path is prefixed by `prefix` (e.g. inputs[1].dtype)."""
    field = prefix if err.field is None else f"{prefix}.{err.field}"
    new = type(err).__new__(type(err))
    XirError.__init__(new, err.message, file=err.file, op_id=err.op_id, field=field)
    for key, val in err.__dict__.items():
        if key not in ("message", "file", "op_id", "field"):
            setattr(new, key, val)
    new.__cause__ = err.__cause__
    return new


def sub(prefix: str, fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except XirError as err:
        raise prefixed(err, prefix) from err.__cause__


def tname(x: Any) -> str:
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


def need(obj: dict, key: str, what: str) -> Any:
    if key not in obj:
        raise MissingFieldError(f"{what} lacks the required field '{key}'", field=key)
    return obj[key]


def get_int(obj: dict, key: str, what: str, *, default: Any = REQUIRED, lo: int | None = None,
             hi: int | None = None) -> int:
    if key not in obj and default is not REQUIRED:
        return default
    x = need(obj, key, what)
    if not isinstance(x, int) or isinstance(x, bool):
        raise FieldTypeError(f"{what} field '{key}' must be an integer, not {tname(x)} "
                             f"({short(x)})", field=key)
    if (lo is not None and x < lo) or (hi is not None and x > hi):
        raise FieldTypeError(f"{what} field '{key}' = {x} is outside {lo}..{hi}", field=key)
    return x


def get_str(obj: dict, key: str, what: str, default: Any = REQUIRED) -> str:
    if key not in obj and default is not REQUIRED:
        return default
    x = need(obj, key, what)
    if not isinstance(x, str):
        raise FieldTypeError(f"{what} field '{key}' must be a string, not {tname(x)} "
                             f"({short(x)})", field=key)
    return x


def get_list(obj: dict, key: str, what: str, default: Any = REQUIRED) -> list:
    if key not in obj and default is not REQUIRED:
        return default
    x = need(obj, key, what)
    if not isinstance(x, list):
        raise FieldTypeError(f"{what} field '{key}' must be an array, not {tname(x)}", field=key)
    return x


def get_tags(obj: dict, what: str) -> dict:
    x = obj.get("tags", {})
    if not isinstance(x, dict):
        raise FieldTypeError(f"{what} field 'tags' must be an object, not {tname(x)}",
                             field="tags")
    return x


def short(x: Any) -> str:
    text = repr(x)
    return text if len(text) <= 60 else text[:57] + "..."


def type_key(obj: Any, what: str) -> str:
    if not isinstance(obj, dict):
        raise FieldTypeError(f"{what} must be an object, not {tname(obj)} ({short(obj)})")
    key = need(obj, "_type_key", what)
    if not isinstance(key, str):
        raise FieldTypeError(f"{what} field '_type_key' must be a string, not {tname(key)}",
                             field="_type_key")
    return key


def expect(obj: Any, want: str | tuple[str, ...], what: str) -> str:
    """Check an object's `_type_key` against the expected one(s)."""
    key = type_key(obj, what)
    wants = (want,) if isinstance(want, str) else want
    if key not in wants:
        if not is_known(key):
            raise UnknownTypeKeyError(f"unknown _type_key {key!r} ({what} expected: "
                                      f"{' or '.join(wants)})", field="_type_key")
        raise FieldTypeError(f"{what} must be {' or '.join(wants)}, not {key}",
                             field="_type_key")
    return key


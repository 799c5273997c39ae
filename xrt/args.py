"""Checks of the arguments users pass to the public API, each failure an InvalidArgumentError
naming the argument (never a TypeError, OverflowError or a silent truncation)."""

from __future__ import annotations

import numbers
import os
from typing import Any

import numpy as np

from .errors import InvalidArgumentError


def int_arg(value: Any, what: str, lo: int | None = None, hi: int | None = None) -> int:
    """`value` as an int if it is an integer (numpy's too) in [lo, hi]; bools, floats, None and
    strings are refused rather than converted."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidArgumentError(f"{what} must be an integer, not {type(value).__name__} "
                                   f"({value!r:.60})")
    value = int(value)
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        span = f"{lo if lo is not None else '-inf'}..{hi if hi is not None else 'inf'}"
        raise InvalidArgumentError(f"{what} is {value}, outside {span}")
    return value


def bool_arg(value: Any, what: str) -> bool:
    """`value` as a bool: Python's and numpy's bools and the integers 0 and 1."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, numbers.Integral) and int(value) in (0, 1):
        return bool(value)
    raise InvalidArgumentError(f"{what} must be true or false, not {type(value).__name__} "
                               f"({value!r:.60})")


def seq_arg(value: Any, what: str) -> list[Any]:
    """`value` as a list if it is a list or tuple (a single object or a string is refused)."""
    if not isinstance(value, (list, tuple)):
        raise InvalidArgumentError(f"{what} must be a list, not {type(value).__name__} "
                                   f"({value!r:.60})")
    return list(value)


def str_arg(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{what} must be a string, not {type(value).__name__} "
                                   f"({value!r:.60})")
    return value


def path_arg(value: Any, what: str) -> str:
    """A file path given as a str or os.PathLike of str, not empty."""
    try:
        path = os.fspath(value)
    except TypeError:
        path = None
    if not isinstance(path, str) or not path:
        raise InvalidArgumentError(f"{what} must be a file path, not {type(value).__name__} "
                                   f"({value!r:.60})")
    return path

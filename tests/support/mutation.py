"""Seeded mutations of JSON documents and byte strings, for the robustness fuzzers.

A mutation is one of: replace a node by a value of another JSON type (or a hostile value of
the same type), delete an object key, duplicate / remove / move a list element. Each fuzzer
runs the mutant through the real loaders and a session and sorts the outcome: accepted, refused
with a project error, or escaped (anything else, which the tests count and show).
"""

from __future__ import annotations

import collections
import json
import os
import random
import traceback
from collections.abc import Callable
from typing import Any

import xir
import xrt

REPLACEMENTS: list[Any] = [
    None, True, False, 0, -1, 1, 7, 2**31, -(2**31) - 1, 2**64, 0.5, -0.0, 1e308,
    float("nan"), float("inf"), "", "x", "nan", "inf", "@fp(32)", "@uint(16)", "@sint(8)",
    "@sint(16)", "@uint(8)", "@layout(NHWC)", "@etm(0x40)", [], [0], [1, 2], [-1], ["a"],
    [None], [[]], {}, {"a": 1},
]


def paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every node's path in a JSON tree (keys and list indices)."""
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += paths(v, prefix + (i,))
    return out


def at(obj: Any, path: tuple) -> Any:
    for key in path:
        obj = obj[key]
    return obj


def mutate(obj: Any, rng: random.Random, where: list[tuple]) -> Any | None:
    """`obj` (a fresh copy, changed in place) with one mutation at a path of `where`, or None
    when the drawn mutation does not apply there."""
    p = rng.choice(where)
    kind = rng.choice(["swap", "swap", "delete", "list"])
    if kind == "swap":
        if not p:
            return rng.choice(REPLACEMENTS)
        at(obj, p[:-1])[p[-1]] = rng.choice(REPLACEMENTS)
    elif kind == "delete":
        if not p or not isinstance(p[-1], str):
            return None
        del at(obj, p[:-1])[p[-1]]
    else:
        items = at(obj, p)
        if not isinstance(items, list) or not items:
            return None
        i = rng.randrange(len(items))
        how = rng.choice(["dup", "remove", "move"])
        if how == "dup":
            items.insert(rng.randrange(len(items) + 1), json.loads(json.dumps(items[i])))
        elif how == "remove":
            del items[i]
        else:
            items.insert(rng.randrange(len(items)), items.pop(i))
    return obj


def flip_bytes(data: bytes, rng: random.Random) -> bytes:
    """`data` with 1-4 bits flipped, cut short or grown by zero bytes."""
    b = bytearray(data)
    how = rng.choice(["flip", "cut", "grow"])
    if how == "flip" and b:
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    elif how == "cut":
        del b[rng.randrange(len(b) + 1):]
    else:
        b += bytes(rng.randrange(1, 200))
    return bytes(b)


class Outcomes:
    """Tally of fuzz cases: accepted, refused with a project error, escaped (by cause)."""

    def __init__(self) -> None:
        self.accepted = 0
        self.refused = 0
        self.escapes: collections.Counter = collections.Counter()
        self.examples: dict[tuple, str] = {}

    def run(self, case: Callable[[], Any], label: str) -> None:
        try:
            case()
            self.accepted += 1
        except (xir.XirError, xrt.XrtError):
            self.refused += 1
        except Exception as exc:  # what the fuzzers are looking for
            tb = traceback.extract_tb(exc.__traceback__)[-1]
            key = (type(exc).__name__, os.path.basename(tb.filename), tb.lineno)
            self.escapes[key] += 1
            self.examples.setdefault(key, f"{label}: {str(exc)[:160]}")

    @property
    def total(self) -> int:
        return self.accepted + self.refused + sum(self.escapes.values())

    def report(self) -> str:
        lines = [f"{self.total} cases: {self.accepted} accepted, {self.refused} refused with a "
                 f"project error, {sum(self.escapes.values())} escaped"]
        lines += [f"  {n} x {k}: {self.examples[k]}" for k, n in self.escapes.most_common()]
        return "\n".join(lines)

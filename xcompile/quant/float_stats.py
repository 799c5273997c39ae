"""Statistics of the float network alone (calibration, GPTQ's Hessians), kept across the
quantizations of one float network and samples object within `reuse_float_statistics`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

#: the float statistics `reuse_float_statistics` keeps: {(id(net), id(samples), op ids):
#: (net, samples, Hessians)} (the network and samples held, so their ids stay theirs)
_FLOAT_STATS: dict | None = None


@contextmanager
def reuse_float_statistics() -> Iterator[None]:
    """Within it, `quantize_network` calls on the same float network and samples object (the
    same objects, not equal ones) share GPTQ's input second moments: they are statistics of
    the float network alone, whatever the bits, op_bits or thresholds, so a mixed-precision
    search's quantizations need not collect them again (yolov5s-640: 6 s of each of its
    three). Outside it nothing is kept."""
    global _FLOAT_STATS
    before, _FLOAT_STATS = _FLOAT_STATS, {}
    try:
        yield
    finally:
        _FLOAT_STATS = before


def float_stats(kind: str, source: tuple) -> Any:
    """What `reuse_float_statistics` keeps of `kind` for `source` (the float network and
    samples objects), created empty on first use; None outside it. The value is the last item
    of the entry (the network and samples before it keep their ids theirs)."""
    if _FLOAT_STATS is None:
        return None
    key = (kind,) + tuple(id(x) for x in source)
    if key not in _FLOAT_STATS:
        _FLOAT_STATS[key] = (*source, {})
    return _FLOAT_STATS[key][-1]


def kept_or_made(key: tuple, source: tuple, make: Callable[[], Any]) -> Any:
    """What `reuse_float_statistics` keeps under `key` for `source` (the float network and
    samples objects), else `make()`, kept there when inside it and `source` is given."""
    kept = _FLOAT_STATS.get(key) if _FLOAT_STATS is not None and source else None
    if kept is not None:
        return kept[-1]
    made = make()
    if _FLOAT_STATS is not None and source:
        _FLOAT_STATS[key] = (*source, made)
    return made

"""The checked planner input: layered input checks and the alias groups.

Inputs are checked in layers (shapes and types, then sizes and lifetimes, then the alias
structure); every failure names the buffer at fault. The checked `_Instance` carries each
buffer's alias root and offset in it, and each group's aligned size and union lifetime, which is
what the bound, the planners and `verify_plan` work on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import AliasError, BufferSpecError

DEFAULT_ALIGNMENT = 64
_MAX_POSITION = 1 << 62


def _resolve_roots(owner, offset):
    """Root of every buffer and its offset inside the root; third result: a buffer on an alias
    cycle, or -1. Plain numpy (runs once per plan): pointer jumping, each round doubling the
    distance walked up the owner chains."""
    n = owner.shape[0]
    idx = np.arange(n)
    par = np.where(owner >= 0, owner, idx)
    roff = np.where(owner >= 0, offset, 0).astype(np.int64)
    for _ in range(n.bit_length() + 1):
        up = par[par]
        if np.array_equal(up, par):
            break
        roff = roff + roff[par]
        par = up
    stuck = np.flatnonzero(owner[par] >= 0) if n else idx
    if stuck.size:  # the first buffer whose owner chain loops: report where the walk repeats
        seen = set()
        j = int(stuck[0])
        while j not in seen:
            seen.add(j)
            j = int(owner[j])
        return par, roff, j
    return par, roff, -1


def _group_lifetimes(sizes, starts, ends, root, alignment):
    """Aligned size (0 for members) and union lifetime of every alias group, at its root."""
    n = sizes.shape[0]
    gsize = np.where(root == np.arange(n), (sizes + alignment - 1) // alignment * alignment, 0)
    gstart = starts.copy()
    gend = ends.copy()
    np.minimum.at(gstart, root, starts)
    np.maximum.at(gend, root, ends)
    return gsize.astype(np.int64), gstart, gend


def _name(i: int, v_ids: np.ndarray | None) -> str:
    """How messages name buffer `i`: its index, and its v_id when known."""
    return f"buffer {i}" + (f" (v_id {int(v_ids[i])})" if v_ids is not None else "")


def _int_array(x: Any, what: str, n: int | None) -> np.ndarray:
    """`x` as a contiguous 1-D int64 array of `n` entries (integral floats accepted), or a
    `BufferSpecError` naming `what`."""
    arr = np.asarray(x)
    if arr.ndim != 1:
        raise BufferSpecError(f"{what} must be a 1-D array, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        if np.issubdtype(arr.dtype, np.floating) and np.all(np.isfinite(arr)) and np.all(
                arr == np.round(arr)):
            arr = arr.astype(np.int64)
        else:
            raise BufferSpecError(f"{what} must hold integers, got dtype {arr.dtype}")
    if n is not None and arr.shape[0] != n:
        raise BufferSpecError(f"{what} has {arr.shape[0]} entries, sizes has {n}")
    if arr.dtype == np.uint64 and arr.size and arr.max() > np.iinfo(np.int64).max:
        raise BufferSpecError(f"{what} holds values beyond int64")
    return np.ascontiguousarray(arr, dtype=np.int64)


@dataclass(frozen=True)
class _Instance:
    sizes: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    owner: np.ndarray
    offset: np.ndarray
    alignment: int
    root: np.ndarray
    root_offset: np.ndarray
    gsize: np.ndarray
    gstart: np.ndarray
    gend: np.ndarray
    v_ids: np.ndarray | None


def _check(sizes: Any, starts: Any, ends: Any, alias_owner: Any, alias_offset: Any,
           alignment: int, v_ids: Any) -> _Instance:
    """Layered checks: arrays and types, then sizes and lifetimes, then the alias structure."""
    if isinstance(alignment, bool) or not isinstance(alignment, (int, np.integer)) or \
            alignment < 1:
        raise BufferSpecError(f"alignment must be a positive integer, not {alignment!r}")
    alignment = int(alignment)
    sz = _int_array(sizes, "sizes", None)
    n = sz.shape[0]
    st = _int_array(starts, "starts", n)
    en = _int_array(ends, "ends", n)
    ids = None if v_ids is None else np.asarray(v_ids)
    if ids is not None and ids.shape != (n,):
        raise BufferSpecError(f"v_ids has shape {ids.shape}, sizes has {n} entries")
    owner = (np.full(n, -1, dtype=np.int64) if alias_owner is None
             else _int_array(alias_owner, "alias_owner", n))
    offset = (np.zeros(n, dtype=np.int64) if alias_offset is None
              else _int_array(alias_offset, "alias_offset", n))

    bad = np.flatnonzero(sz < 0)
    if bad.size:
        i = int(bad[0])
        raise BufferSpecError(f"{_name(i, ids)} has a negative size {int(sz[i])}")
    bad = np.flatnonzero(en < st)
    if bad.size:
        i = int(bad[0])
        raise BufferSpecError(f"{_name(i, ids)} ends at position {int(en[i])} before it starts "
                              f"at {int(st[i])}: lifetimes are [start, end], inclusive")
    bad = np.flatnonzero((np.abs(st) >= _MAX_POSITION) | (np.abs(en) >= _MAX_POSITION))
    if bad.size:
        raise BufferSpecError(f"{_name(int(bad[0]), ids)} has a position beyond +-2**62")
    if n and int(sz.max()) >= _MAX_POSITION // max(n, 1):
        raise BufferSpecError(f"sizes up to {int(sz.max())} bytes overflow the segment arithmetic")

    bad = np.flatnonzero((owner < -1) | (owner >= n))
    if bad.size:
        i = int(bad[0])
        raise AliasError(f"{_name(i, ids)} names alias owner {int(owner[i])}, not a buffer "
                         f"index in 0..{n - 1} (use -1 for no owner)")
    bad = np.flatnonzero(owner == np.arange(n))
    if bad.size:
        raise AliasError(f"{_name(int(bad[0]), ids)} is its own alias owner")
    member = owner >= 0
    bad = np.flatnonzero(member & (offset < 0))
    if bad.size:
        i = int(bad[0])
        raise AliasError(f"{_name(i, ids)} has a negative offset {int(offset[i])} in its owner")
    bad = np.flatnonzero(member & (offset % alignment != 0))
    if bad.size:
        i = int(bad[0])
        raise AliasError(f"{_name(i, ids)} sits at offset {int(offset[i])} in its owner, not a "
                         f"multiple of the {alignment}-byte alignment")
    safe_owner = np.where(member, owner, 0)
    bad = np.flatnonzero(member & (offset + sz > sz[safe_owner]))
    if bad.size:
        i = int(bad[0])
        o = int(owner[i])
        raise AliasError(f"{_name(i, ids)} ({int(sz[i])} bytes at offset {int(offset[i])}) does "
                         f"not fit in its owner {_name(o, ids)} of {int(sz[o])} bytes")
    root, roff, cyc = _resolve_roots(owner, np.where(member, offset, 0))
    if cyc >= 0:
        raise AliasError(f"{_name(int(cyc), ids)} is on an alias cycle (owner of its own owner)")
    gsize, gstart, gend = _group_lifetimes(sz, st, en, root, alignment)
    return _Instance(sz, st, en, owner, offset, alignment, root, roff, gsize, gstart, gend, ids)


def _roots(inst: _Instance) -> np.ndarray:
    """Indices of the groups that take space (roots of positive aligned size)."""
    return np.flatnonzero((inst.root == np.arange(inst.sizes.shape[0])) & (inst.gsize > 0))


def _expand(inst: _Instance, root_offsets: np.ndarray) -> np.ndarray:
    """Offsets of every buffer from the offsets of the roots (members: root + offset)."""
    return root_offsets[inst.root] + inst.root_offset

"""Relocation of instruction address words, shared by every NPU runtime.

The ZG330 deployment moves feature-map slots to new logical addresses; the Buyi runtime with the
MMU off moves every segment to its physical address. Both rewrite the operand address words of
the instruction stream the same way, here.
"""

from __future__ import annotations

import numpy as np

from ..isa import PAYLOAD_MASK, F, Op, decode_arrays

_ADDR_FIELDS = np.array([int(f) for f in (F.IN_ADDR, F.IN1_ADDR, F.OUT_ADDR, F.WGT_ADDR,
                                          F.PRM_ADDR)], np.int64)


class RelocationError(ValueError):
    """A relocated address does not fit the instruction payload."""


def relocate(words: np.ndarray, moves: list[tuple[int, int, int]]) -> np.ndarray:
    """Every operand address word (SET of IN/IN1/OUT/WGT/PRM_ADDR) inside some
    ``[old, old + size)`` of ``moves = [(old, new, size), ...]`` becomes ``new + (addr - old)``.
    The `old` ranges must not overlap. Returns a new array."""
    out = np.array(words, dtype=np.uint64, copy=True).ravel()
    if not moves or out.size == 0:
        return out
    mv = np.array(sorted(moves), dtype=np.int64).reshape(-1, 3)
    ops, fids, payloads = decode_arrays(out)
    sel = np.nonzero((ops == int(Op.SET)) & np.isin(fids, _ADDR_FIELDS))[0]
    if sel.size == 0:
        return out
    a = payloads[sel]
    k = np.searchsorted(mv[:, 0], a, side="right") - 1
    ok = (k >= 0) & (a < mv[np.maximum(k, 0), 0] + mv[np.maximum(k, 0), 2])
    idx, k = sel[ok], k[ok]
    new = mv[k, 1] + (payloads[idx] - mv[k, 0])
    if (new < 0).any() or (new > PAYLOAD_MASK).any():
        raise RelocationError("relocated address does not fit the 48-bit payload")
    out[idx] = (out[idx] & np.uint64(~PAYLOAD_MASK & (2 ** 64 - 1))) | new.astype(np.uint64)
    return out

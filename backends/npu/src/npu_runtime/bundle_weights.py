"""Members of an `xir.Bundle` on an NPU: one WEIGHT image for all of them.

A bundle (xir/bundle.py) lays the distinct weight blocks of its members out once, as a union
from `weight_base`, above every logical address any member uses, and gives each member's
HardOps the shared block at its union address (`params[0].mtype.addr`). The instruction words
still name the address the lowering gave the block, which the HardOp keeps in
`device_info["weights_lowered_at"]`. Two things make such a member deploy as any network does:

- `weight_moves`: at apply, the weight address words of the instructions move from the
  lowered address to the union address (`deploy.relocate`, with the feature-map moves), so the
  WEIGHT segment `build_layout` makes from the union addresses is what the instructions read.
  Checked first: the union must not overlap anything else of the member.
- `block_map`: what a deployment writes into its WEIGHT segment, as (offset, bytes, md5) per
  block; `deploy.claim` lets backends of different networks share one WEIGHT chunk when these
  agree wherever they meet (the members of one bundle), and refuses it otherwise.
"""

from __future__ import annotations

from typing import Any

from xir.errors import FieldTypeError, NetworkFormatError

from . import deploy
from .layout import Layout, hardops
from .structs import SegmentType

#: the HardOp `device_info` key (xir.bundle.LOWERED_AT)
LOWERED_AT = "weights_lowered_at"


def weight_moves(view: Any, layout: Layout) -> list[tuple[int, int, int]]:
    """(lowered address, union address, bytes) of every HardOp of `view` whose weight block a
    bundle moved; [] for a network that is no bundle member. A move whose union range meets a
    feature-map buffer, an instruction stream or another block of the member is refused
    (`NetworkFormatError` naming the HardOp): relocating into it would corrupt the run."""
    moves: list[tuple[int, int, int]] = []
    file = getattr(getattr(view, "network", view), "source_file", None)
    for op in hardops(view):
        lowered = op.device_info.get(LOWERED_AT)
        if lowered is None or not op.params:
            continue
        if isinstance(lowered, bool) or not isinstance(lowered, int) or lowered < 0:
            raise FieldTypeError(f"device_info.{LOWERED_AT} must be a non-negative integer, "
                                 f"not {lowered!r}", file=file, op_id=op.op_id,
                                 field=f"device_info.{LOWERED_AT}")
        p = op.params[0]
        if p.mtype.addr != lowered:
            moves.append((int(lowered), int(p.mtype.addr), int(p.storageBytes())))
    if not moves:
        return moves
    taken = [(b.logic_addr, b.byte_size) for b in layout.buffers.values()]
    taken += [(s.old, s.size) for s in layout.slots]
    for hi in layout.hardop_info.values():
        if hi.instr_size:
            taken.append((hi.instr_logic_addr, hi.instr_size))
    by_addr = {new: (old, n) for old, new, n in moves}
    for op in hardops(view):
        if not op.params or op.params[0].mtype.addr not in by_addr:
            continue
        new, n = op.params[0].mtype.addr, op.params[0].storageBytes()
        for lo, size in taken:
            if size and lo < new + n and new < lo + size:
                raise NetworkFormatError(
                    f"the weight block of HardOp '{op.name}' was moved by a bundle to "
                    f"[{new:#x}, {new + n:#x}), which overlaps [{lo:#x}, {lo + size:#x}) of the "
                    f"network's own layout", file=file, op_id=op.op_id, field="params")
    olds = sorted({(old, n) for old, _, n in moves})
    for (a, n), (b, _) in zip(olds, olds[1:]):
        if a + n > b:
            raise NetworkFormatError(f"two weight blocks were lowered at overlapping addresses "
                                     f"{a:#x} and {b:#x}", file=file, field=LOWERED_AT)
    return sorted(set(moves))


def block_map(layout: Layout) -> dict[int, tuple[int, str]]:
    """offset in the WEIGHT segment -> (bytes, md5) of every weight block the deployment of
    `layout` writes there (what a WEIGHT chunk shared with it must hold at those offsets)."""
    lw = layout.segments[SegmentType.WEIGHT]
    out: dict[int, tuple[int, str]] = {}
    for hi in layout.hardop_info.values():
        op = hi.net_hardop
        if not op.params or op.params[0].data is None:
            continue
        off = int(hi.weights_logic_addr - lw.logic_addr)
        out[off] = (int(hi.weights_size), deploy.digest(op.params[0].data))
    return out

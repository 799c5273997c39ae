"""Where the ops of a compiled network run: on the chip (inside HardOps) or on the host, the
host ones grouped by the reason the lowering recorded (``tags[target]["host_ops"]``)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Placement:
    """Ops on the chip and on the host of one compiled network."""

    target: str
    hardops: int = 0
    npu_ops: int = 0
    #: reason -> {op type: count}
    host: dict[str, Counter] = field(default_factory=dict)

    @property
    def host_ops(self) -> int:
        return sum(sum(c.values()) for c in self.host.values())

    def lines(self) -> list[str]:
        out = [f"placement on {self.target}: {self.npu_ops} ops on the chip in {self.hardops} "
               f"HardOps, {self.host_ops} on the host"]
        for reason, types in sorted(self.host.items(), key=lambda kv: -sum(kv[1].values())):
            ops = ", ".join(f"{t} x{n}" for t, n in types.most_common())
            out.append(f"  host: {ops} -- {reason}")
        return out


def placement(net: Any, tag: str) -> Placement:
    """The placement of `net`, a generated stage of the target whose annotations are
    ``tags[tag]``."""
    info = (net.tags or {}).get(tag) or {}
    p = Placement(tag, hardops=int(info.get("hardops", 0)), npu_ops=int(info.get("npu_ops", 0)))
    reasons = info.get("host_ops") or {}
    for op in net.ops:
        why = reasons.get(str(op.op_id))
        if why is not None:
            p.host.setdefault(why, Counter())[op.label] += 1
    return p

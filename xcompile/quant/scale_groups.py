"""Scale-sharing groups: a union-find of the values that must share one scale (and so one
dtype), and per-value scales with each group at its largest amax."""

from __future__ import annotations

from typing import Any

from xcompile.quant.capability import shares_scale
from xcompile.quant.observers import scale_from_amax
from xir.network import Network


class UnionFind:
    """Disjoint sets of v_ids (path halving; a set's root is its smallest id)."""

    def __init__(self) -> None:
        self.parent: dict[int, int] = {}

    def find(self, a: int) -> int:
        self.parent.setdefault(a, a)
        while self.parent[a] != a:
            self.parent[a] = self.parent[self.parent[a]]
            a = self.parent[a]
        return a

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def scale_groups(net: Network, int_ops: set[int], concat: bool = True) -> UnionFind:
    """Union-find of the values that must share one scale (and so one dtype); `concat=False`
    leaves Concat out (`concat_plan` decides its unions)."""
    uf = UnionFind()
    for op in net.ops:
        if op.op_id in int_ops and shares_scale(op) and (concat or op.op_type != "Concat"):
            vals = [v.v_id for v in op.feature_inputs()] + [v.v_id for v in op.outputs]
            for v in vals[1:]:
                uf.union(vals[0], v)
    return uf


def assign_scales(amax: dict[int, float], uf: UnionFind, dtype_of: Any
                   ) -> tuple[dict[int, float], dict[int, int]]:
    """Per-value scales with the sharing groups resolved (largest amax of the group)."""
    group_amax: dict[int, float] = {}
    for vid, a in amax.items():
        r = uf.find(vid)
        group_amax[r] = max(group_amax.get(r, 0.0), a)
    scales = {vid: float(scale_from_amax(group_amax[uf.find(vid)], dtype_of(vid)))
              for vid in amax}
    groups = {vid: uf.find(vid) for vid in amax}
    return scales, groups

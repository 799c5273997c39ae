"""The report a refit returns: per layer, the initializers it used, its bits, how many weight and
bias values saturated, the weight error (dequantized against float) and whether a BatchNorm was
re-folded; the device's side (HardOps rewritten, bytes written) once the backends committed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["RefitRow", "RefitReport"]


@dataclass
class RefitRow:
    """One refitted layer."""

    op_id: int
    name: str
    initializers: list[str]
    bits: int | None  # weight bits, None for a layer that stayed float
    weight_saturated: int  # weight values beyond +-qmax at their scale (clipped)
    bias_saturated: int  # bias values beyond the accumulator's range (refused: always 0)
    weight_err_max: float  # max |dequantized - float| over the weight
    weight_err_mean: float
    bn_refolded: bool  # a BatchNorm folded into the layer was folded again


@dataclass
class RefitReport:
    """What `Session.refitWeights` did (`rows`: one per refitted layer)."""

    source: str
    rows: list[RefitRow] = field(default_factory=list)
    #: layers with provenance whose initializers the source left unchanged
    unchanged: int = 0
    #: filled by the backends: HardOps whose weight block was rewritten, bytes written
    hardops: list[int] = field(default_factory=list)
    bytes: int = 0
    #: host ops whose Params were replaced (the HostBackend's part)
    host_ops: list[int] = field(default_factory=list)

    @property
    def initializers(self) -> list[str]:
        """Every initializer the refit used, in layer order."""
        out: list[str] = []
        for r in self.rows:
            out += [n for n in r.initializers if n not in out]
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "unchanged": self.unchanged, "hardops": self.hardops,
                "bytes": self.bytes, "host_ops": self.host_ops,
                "layers": [vars(r) for r in self.rows]}

    def __getitem__(self, key: str) -> Any:  # the dict view `refreshWeights` returned
        return self.to_dict()[key]

    def table(self) -> Any:
        """A rich Table of the rows."""
        from rich.table import Table

        t = Table(title=f"refit from {self.source}: {len(self.rows)} layers, "
                        f"{len(self.hardops)} HardOps, {self.bytes} bytes")
        for col in ("op", "layer", "bits", "initializers", "w sat", "b sat", "w err max",
                    "w err mean", "BN"):
            t.add_column(col, justify="right" if col not in ("layer", "initializers") else
                         "left")
        for r in self.rows:
            t.add_row(str(r.op_id), r.name, "float" if r.bits is None else str(r.bits),
                      ", ".join(r.initializers), str(r.weight_saturated),
                      str(r.bias_saturated), f"{r.weight_err_max:.3g}",
                      f"{r.weight_err_mean:.3g}", "re-folded" if r.bn_refolded else "")
        return t

    def print(self) -> None:
        from xrt.console import report_console

        report_console().print(self.table())

    def __str__(self) -> str:
        lines = [f"refit from {self.source}: {len(self.rows)} layers ({self.unchanged} "
                 f"unchanged), {len(self.hardops)} HardOps, {self.bytes} bytes written"]
        for r in self.rows:
            bits = "float" if r.bits is None else f"int{r.bits}"
            lines.append(f"  {r.op_id:>5} {r.name:<32} {bits:<6} sat w {r.weight_saturated} "
                         f"b {r.bias_saturated}  err max {r.weight_err_max:.3g} mean "
                         f"{r.weight_err_mean:.3g}{'  BN re-folded' if r.bn_refolded else ''}"
                         f"  <- {', '.join(r.initializers)}")
        return "\n".join(lines)

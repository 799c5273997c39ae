"""What a person reads after a run: the summary table of an evaluation, its PNG (cosine
histogram, chip time per sample) and a sweep's table and Pareto plot."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .grid import HARDWARE


def eval_summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Counts and statistics over the rows that ran."""
    ok = [r for r in rows if "error" not in r]
    s: dict[str, Any] = {"samples": len(rows), "ok": len(ok), "failed": len(rows) - len(ok)}
    cos = np.array([r["cosine"] for r in ok if r.get("cosine") is not None], float)
    if cos.size:
        s.update(cosine_mean=float(cos.mean()), cosine_min=float(cos.min()),
                 cosine_p5=float(np.percentile(cos, 5)))
        s["max_error"] = max(float(r["max_error"]) for r in ok if "max_error" in r)
    top = [r["top1"] for r in ok if r.get("top1") is not None]
    if top:
        s["top1_agreement"] = sum(top) / len(top)
    _part_summary(ok, s)
    for key in ("cycles", "chip_ms", "wall_ms"):
        vals = [float(r[key]) for r in ok if key in r]
        if vals:
            s[f"{key}_mean"] = sum(vals) / len(vals)
    items = {int(r["batch_items"]) for r in ok if "batch_items" in r}
    if items:  # a batch-N network: the per-sample cycles and times are 1/N of a forward's
        s["batch_items"] = max(items)
    return s


def _part_summary(ok: Sequence[dict[str, Any]], s: dict[str, Any]) -> None:
    """Per output part (`xcompile.quant.parts`, the rows' "parts"): mean and lowest cosine,
    mean top-5 agreement and share of the reference's kept entries (score parts), and in how
    many samples it collapsed; `collapsed_samples`: samples with any collapsed part."""
    names: list[str] = []
    for r in ok:
        for n in r.get("parts") or {}:
            if n not in names:
                names.append(n)
    if not names:
        return
    s["collapsed_samples"] = sum(1 for r in ok if r.get("collapsed"))
    for n in names:
        ps = [r["parts"][n] for r in ok if n in (r.get("parts") or {})]
        cos = [p["cosine"] for p in ps if p.get("cosine") is not None]
        if cos:
            s[f"part {n} cosine_mean"] = float(np.mean(cos))
            s[f"part {n} cosine_min"] = float(np.min(cos))
        sc = [p["score_cosine"] for p in ps if p.get("score_cosine") is not None]
        if sc:
            s[f"part {n} score_cosine_min"] = float(np.min(sc))
        topk = [p["topk"] for p in ps if p.get("topk") is not None]
        if topk:
            s[f"part {n} top5_agreement"] = float(np.mean(topk))
        kept = [(p["kept_both"], p["kept_ref"]) for p in ps if p.get("kept_ref")]
        if kept:
            s[f"part {n} kept_recall"] = sum(b for b, _ in kept) / sum(r for _, r in kept)
        s[f"part {n} collapsed"] = sum(1 for p in ps if p.get("collapsed"))


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def print_eval(rows: Sequence[dict[str, Any]], title: str, console: Any = None) -> dict:
    """The summary as a rich table, then up to 5 failed samples with their errors."""
    from rich.table import Table

    from xrt.console import report_console

    console = console or report_console()
    s = eval_summary(rows)
    console.print(title, markup=False, highlight=False)
    table = Table()
    table.add_column("figure")
    table.add_column("value", justify="right")
    for k, v in s.items():
        table.add_row(k, _fmt(v))
    console.print(table)
    for k, v in s.items():
        if k.startswith("part ") and k.endswith(" collapsed") and v:
            console.print(f"COLLAPSED: output part {k[5:-10]} in {v} of {s['ok']} samples "
                          f"(its values are all one, or far from the reference's, or it "
                          f"keeps under half of the reference's scores above 0.25)",
                          style="bold red", markup=False, highlight=False)
    for r in [r for r in rows if "error" in r][:5]:
        console.print(f"failed: {r['sample']}: {r['error']}", markup=False, highlight=False)
    return s


def plot_eval(rows: Sequence[dict[str, Any]], path: str, metric: str = "cosine",
              title: str = "") -> None:
    """Histogram of `metric` over the samples and the chip time of each sample."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in rows if "error" not in r]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    vals = [float(r[metric]) for r in ok if r.get(metric) is not None]
    a.hist(vals or [0.0], bins=min(max(len(vals) // 4, 5), 50))
    a.set_xlabel(metric)
    a.set_ylabel("samples")
    a.set_title(f"{metric} per sample ({len(vals)} of {len(rows)})")
    b.plot([float(r.get("chip_ms", math.nan)) for r in ok], ".")
    b.set_xlabel("sample")
    b.set_ylabel("simulated chip time (ms)")
    b.set_title("chip time per sample")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def pareto(rows: Sequence[dict[str, Any]], keys: Sequence[str]) -> list[int]:
    """Indices of the rows that no other row beats on every one of `keys` (lower is better:
    cycles and area proxies); of identical points only the first counts."""
    ok = [(k, tuple(float(r[c]) for c in keys)) for k, r in enumerate(rows) if "error" not in r]
    front, seen = [], set()
    for k, v in ok:
        if v in seen:
            continue
        if not any(all(x <= y for x, y in zip(w, v)) and w != v for _, w in ok):
            front.append(k)
            seen.add(v)
    return front


def print_sweep(rows: Sequence[dict[str, Any]], params: list[str], title: str,
                console: Any = None) -> None:
    from rich.table import Table

    from xrt.console import report_console

    console = console or report_console()
    console.print(title, markup=False, highlight=False)
    table = Table()
    cols = params + ["cycles", "chip_ms", "utilisation", "etm_bytes", "ocm_bytes", "ftmp_bytes"]
    for c in cols:
        table.add_column(c, justify="right")
    for r in rows:
        if "error" in r:
            table.add_row(*[_fmt(r.get(p, "")) for p in params],
                          f"error: {r['error']}", *[""] * (len(cols) - len(params) - 1))
        else:
            table.add_row(*[_fmt(r.get(c, "")) for c in cols])
    console.print(table)


def _area_columns(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    ok = [dict(r) for r in rows if "error" not in r]
    for r in ok:  # the OCM size the point had; without the key, what the plan used
        r["ocm_kib_area"] = float(r["ocm_kib"]) if "ocm_kib" in r else \
            r.get("ocm_footprint", 0) / 1024
    return ok


def plot_sweep(rows: Sequence[dict[str, Any]], path: str, title: str = "") -> None:
    """Cycles against the two chip-area proxies (peak MACs per cycle, OCM KiB); the Pareto
    front over all three (fewest cycles for the least area) marked and labelled."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = _area_columns(rows)
    front = set(pareto(ok, ("cycles", "peak_macs_per_cycle", "ocm_kib_area")))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, area, label in ((axes[0], "peak_macs_per_cycle", "peak int8 MACs per cycle"),
                            (axes[1], "ocm_kib_area", "OCM (KiB)")):
        xs = [float(r[area]) for r in ok]
        ys = [float(r["cycles"]) for r in ok]
        ax.scatter(xs, ys, s=18, color="tab:blue", label="grid points")
        ax.scatter([xs[k] for k in front], [ys[k] for k in front], s=40, facecolors="none",
                   edgecolors="tab:red", linewidths=1.5, label="Pareto front")
        for k in front:
            ax.annotate(" ".join(f"{p}={ok[k][p]}" for p in HARDWARE if p in ok[k]),
                        (xs[k], ys[k]), fontsize=7, xytext=(3, 3), textcoords="offset points")
        ax.set_xlabel(label)
        ax.set_ylabel("simulated cycles")
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)

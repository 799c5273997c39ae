"""Per-op time profiles of a session: rows, a rich table, a Chrome/Perfetto trace."""

from __future__ import annotations

import json
from typing import Any

from xir.ops import conv_macs


def profile_rows(session: Any) -> list[dict[str, Any]]:
    """One row per profiled op of the session's last forward, in execution order."""
    results = session.timeProfileResults()
    bindings = session.backendBindings()
    hw: dict[int, dict[str, Any]] = {}
    for backend in session.backends:  # hardware counters of simulated devices, where offered
        info = getattr(backend, "profileInfo", None)
        if callable(info):
            hw.update(info())
    rows = []
    for op in session.network_view.ops:
        if op.op_id not in results:
            continue
        wall, memcpy, hard, other = results[op.op_id]
        backend = bindings.get(op.op_id)
        rows.append({
            "op_id": op.op_id, "op_type": op.op_type, "name": op.name,
            "backend": getattr(backend, "name", "") or type(backend).__name__,
            "macs": conv_macs(op), "wall_ms": wall, "memcpy_ms": memcpy, "hard_ms": hard,
            "other_ms": other,
        })
        rows[-1].update(hw.get(op.op_id, {}))
    known = {r["op_id"] for r in rows}
    for op_id, (wall, memcpy, hard, other) in sorted(results.items()):
        if op_id not in known:  # synthetic ids (merged HardOps)
            rows.append({"op_id": op_id, "op_type": "HardOp(merged)", "name": "",
                         "backend": "", "macs": 0, "wall_ms": wall, "memcpy_ms": memcpy,
                         "hard_ms": hard, "other_ms": other, **hw.get(op_id, {})})
    return rows


def print_profile(rows: list[dict[str, Any]], title: str = "per-op time profile",
                  console: Any = None) -> None:
    """Print the rows as a rich table with a total line."""
    from rich.table import Table

    from .console import report_console

    if console is None:
        console = report_console()
    table = Table(title=title, show_lines=False)
    hw = any("cycles" in r for r in rows)
    cols = [("op", "right"), ("type", "left"), ("backend", "left"), ("MMACs", "right")]
    if hw:
        cols += [("kcycles", "right"), ("ETM KiB", "right"), ("OCM KiB", "right"),
                 ("util", "right")]
    cols += [("wall ms", "right"), ("memcpy ms", "right"), ("hard ms", "right"),
             ("other ms", "right")]
    for col, just in cols:
        table.add_column(col, justify=just)
    keys = ("macs", "cycles", "etm_bytes", "ocm_bytes", "wall_ms", "memcpy_ms", "hard_ms",
            "other_ms")
    tot = {k: 0.0 for k in keys}
    for r in rows:
        for k in tot:
            tot[k] += r.get(k, 0) or 0
        cells = [str(r["op_id"]), r["op_type"], r["backend"],
                 f"{r['macs'] / 1e6:.1f}" if r["macs"] else ""]
        if hw:
            cells += _hw_cells(r)
        cells += [f"{r['wall_ms']:.3f}", f"{r['memcpy_ms']:.3f}", f"{r['hard_ms']:.3f}",
                  f"{r['other_ms']:.3f}"]
        table.add_row(*cells)
    table.add_section()
    cells = ["", "total", "", f"{tot['macs'] / 1e6:.1f}"]
    if hw:
        cells += [f"{tot['cycles'] / 1e3:.1f}", f"{tot['etm_bytes'] / 1024:.0f}",
                  f"{tot['ocm_bytes'] / 1024:.0f}", ""]
    cells += [f"{tot['wall_ms']:.3f}", f"{tot['memcpy_ms']:.3f}", f"{tot['hard_ms']:.3f}",
              f"{tot['other_ms']:.3f}"]
    table.add_row(*cells)
    console.print(table)


def _hw_cells(r: dict[str, Any]) -> list[str]:
    if "cycles" not in r:
        return ["", "", "", ""]
    util = r.get("utilisation")
    return [f"{r['cycles'] / 1e3:.1f}", f"{r.get('etm_bytes', 0) / 1024:.0f}",
            f"{r.get('ocm_bytes', 0) / 1024:.0f}",
            f"{util * 100:.0f}%" if util is not None else ""]


def chrome_trace(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The rows as Chrome/Perfetto trace events (one track per backend, µs timestamps)."""
    events, clock = [], 0.0
    for r in rows:
        dur = r["wall_ms"] * 1e3
        events.append({"name": f"{r['op_type']} #{r['op_id']}", "ph": "X", "ts": clock,
                       "dur": dur, "pid": 1, "tid": r["backend"] or "session",
                       "args": {k: r[k] for k in ("macs", "memcpy_ms", "hard_ms", "other_ms")}})
        clock += dur
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_chrome_trace(rows: list[dict[str, Any]], path: str) -> None:
    with open(path, "w") as fh:
        json.dump(chrome_trace(rows), fh)


def plot_profile(rows: list[dict[str, Any]], path: str, title: str = "per-layer time") -> None:
    """A PNG of the per-layer profile (matplotlib).

    With hardware counters (a simulated NPU) the top panel shows each layer's simulated cycles
    and the bottom one the host wall time split into memcpy / hard / other; otherwise only the
    wall-time panel is drawn.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hw_rows = [r for r in rows if r.get("cycles")]
    panels = 2 if hw_rows else 1
    fig, axes = plt.subplots(panels, 1, figsize=(max(6.0, 0.18 * len(rows)), 3.6 * panels),
                             squeeze=False)
    if hw_rows:
        ax = axes[0][0]
        ax.bar(range(len(hw_rows)), [r["cycles"] / 1e3 for r in hw_rows], width=0.8,
               color="tab:orange")
        ax.set_xticks(list(range(len(hw_rows))))
        ax.set_xticklabels([f"{r['op_type']}#{r['op_id']}" for r in hw_rows], rotation=90,
                           fontsize=6)
        ax.set_ylabel("simulated kcycles")
        ax.set_title(f"{title}: simulated cycles per layer")
    ax = axes[-1][0]
    x = range(len(rows))
    bottom = [0.0] * len(rows)
    for key, label in (("memcpy_ms", "memcpy"), ("hard_ms", "hard"), ("other_ms", "other")):
        vals = [r[key] for r in rows]
        ax.bar(x, vals, bottom=bottom, label=label, width=0.8)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xticks(list(x))
    ax.set_xticklabels([f"{r['op_type']}#{r['op_id']}" for r in rows], rotation=90, fontsize=6)
    ax.set_ylabel("ms")
    ax.set_title(f"{title}: host wall time per op")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

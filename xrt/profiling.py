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
            "op_id": op.op_id, "op_type": op.label, "name": op.name,
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


#: the per-layer hardware figures a simulated NPU adds to a row (`profileInfo`)
HW_KEYS = ("cycles", "macs", "etm_bytes", "ocm_bytes", "utilisation")


def chrome_trace(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The rows as Chrome/Perfetto trace events (µs timestamps).

    Process 1 is the host: one track per backend, each op's wall time laid end to end. Process
    2 is simulated time: one track per backend with simulated hardware time, each event as long
    as the op's simulated time (`hard_ms`), with its cycles, MACs, ETM/OCM bytes and
    utilisation in the args.
    """
    events, clock = [], 0.0
    for r in rows:
        dur = r["wall_ms"] * 1e3
        events.append({"name": f"{r['op_type']} #{r['op_id']}", "ph": "X", "ts": clock,
                       "dur": dur, "pid": 1, "tid": r["backend"] or "session",
                       "args": {k: r[k] for k in ("macs", "memcpy_ms", "hard_ms", "other_ms")}})
        clock += dur
    sim = [r for r in rows if r.get("hard_ms", 0) > 0]
    if sim:
        events += [{"name": "process_name", "ph": "M", "pid": 1,
                    "args": {"name": "host (wall time)"}},
                   {"name": "process_name", "ph": "M", "pid": 2,
                    "args": {"name": "simulated chip time"}}]
        chip_clock: dict[str, float] = {}
        for r in sim:
            track = r["backend"] or "chip"
            ts = chip_clock.get(track, 0.0)
            dur = r["hard_ms"] * 1e3
            events.append({"name": f"{r['op_type']} #{r['op_id']}", "ph": "X", "ts": ts,
                           "dur": dur, "pid": 2, "tid": track,
                           "args": {"hard_ms": r["hard_ms"],
                                    **{k: r[k] for k in HW_KEYS if k in r}}})
            chip_clock[track] = ts + dur
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_chrome_trace(rows: list[dict[str, Any]], path: str) -> None:
    with open(path, "w") as fh:
        json.dump(chrome_trace(rows), fh)


def write_profile_csv(rows: list[dict[str, Any]], path: str) -> None:
    """The per-layer table as CSV: one line per row, the hardware columns empty for host ops."""
    import csv

    cols = ["op_id", "op_type", "name", "backend", "macs", "wall_ms", "memcpy_ms", "hard_ms",
            "other_ms", *[k for k in HW_KEYS if k != "macs"]]
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in cols})


def plot_profile(rows: list[dict[str, Any]], path: str, title: str = "per-layer time") -> None:
    """A PNG of the per-layer profile (matplotlib).

    With a simulated NPU the top panel shows each layer's simulated time (its cycles at the
    chip's clock; a merged run's launch overhead on its own bar) and the bottom one the real
    host wall time per op, split into memcpy and the rest (a merged run's simulation shows as
    one bar, the run's); otherwise only the host panel is drawn.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sim_rows = [r for r in rows if r.get("hard_ms", 0) > 0]
    panels = 2 if sim_rows else 1
    fig, axes = plt.subplots(panels, 1, figsize=(max(6.0, 0.18 * len(rows)), 3.6 * panels),
                             squeeze=False)

    def labels(ax: Any, rs: list[dict[str, Any]]) -> None:
        ax.set_xticks(list(range(len(rs))))
        ax.set_xticklabels([f"{r['op_type']}#{r['op_id']}" for r in rs], rotation=90,
                           fontsize=6)

    if sim_rows:
        ax = axes[0][0]
        ax.bar(range(len(sim_rows)), [r["hard_ms"] for r in sim_rows], width=0.8,
               color="tab:orange")
        labels(ax, sim_rows)
        ax.set_ylabel("simulated ms")
        total = sum(r["hard_ms"] for r in sim_rows)
        ax.set_title(f"{title}: simulated chip time per layer (total {total:.3f} ms)")
    ax = axes[-1][0]
    x = range(len(rows))
    memcpy = [r["memcpy_ms"] for r in rows]
    rest = [max(0.0, r["wall_ms"] - r["memcpy_ms"]) for r in rows]
    ax.bar(x, memcpy, label="memcpy", width=0.8)
    ax.bar(x, rest, bottom=memcpy, label="compute / simulation", width=0.8)
    labels(ax, rows)
    ax.set_ylabel("ms")
    wall = sum(r["wall_ms"] for r in rows)
    ax.set_title(f"{title}: host wall time per op (total {wall:.3f} ms)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

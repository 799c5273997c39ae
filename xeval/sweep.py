"""`sweep`: one compiled network deployed on every point of a hardware / deployment grid, in
cycles-only mode, one row per point (parameters, cycles, chip time, memory, utilisation)."""

from __future__ import annotations

import contextlib
import csv
import hashlib
import os
import time
from typing import Any

from xrt.cli.run_cmd import backend_urls, load_model
from xrt.errors import XrtError

from .cluster import executor
from .evaluate import Rows
from .grid import FIGURES, check_grid, load_grid, points
from .worker import sweep_point


def _model_bytes(model: str) -> tuple[str, bytes, bytes]:
    raw = os.path.splitext(model)[0] + ".raw"
    try:
        with open(model, "rb") as fh:
            js = fh.read()
        with open(raw, "rb") as fh:
            rw = fh.read()
    except OSError as exc:
        raise XrtError(f"{exc.filename}: {exc.strerror or exc}") from None
    return hashlib.sha256(js + rw).hexdigest(), js, rw


def sweep(model: str, grid: str | os.PathLike | dict[str, Any], *,
          backends: str = "ZG330,sim://zg330;Host", workers: int | None = None,
          cluster: str | None = None, out: str | None = None, progress: bool = True) -> Rows:
    """Deploy `model` (a compiled json + raw) on every point of `grid` (a TOML file with a
    `[grid]` table, or the table as a dict; `xeval.grid`) with the first of `backends` on the
    point's hardware variant; one row per point in grid order, written to the CSV `out`."""
    from xrt.console import progress_bar

    table = check_grid(grid) if isinstance(grid, dict) else load_grid(grid)
    todo = points(table)
    pairs = backend_urls(backends)
    load_model(model, None)  # a broken model fails here once, not at every point
    shipped = _model_bytes(model)
    results: dict[int, dict[str, Any]] = {}
    indexed = list(enumerate(todo))
    t0 = time.perf_counter()
    first = None
    with executor(workers, cluster) as ex, \
            progress_bar(len(todo), f"sweep on {ex.workers} worker(s)") if progress \
            else contextlib.nullcontext(lambda k=1: None) as advance:
        for (k, point), row in ex.map(_point, (shipped, pairs), indexed):
            if isinstance(row, Exception):
                row = {**point, "error": f"{type(row).__name__}: {row}"}
            results[k] = row
            first = first if first is not None else time.perf_counter() - t0
            advance()
    rows = [results[k] for k in range(len(todo))]
    if out:
        write_csv(rows, list(table), out)
    return Rows(rows, seconds=time.perf_counter() - t0, first_result_s=first, ran=len(todo))


def _point(model: tuple[str, bytes, bytes], backends: list[tuple[str, str]],
           item: tuple[int, dict[str, Any]]) -> dict[str, Any]:
    return sweep_point(model, backends, item[1])


def write_csv(rows: list[dict[str, Any]], params: list[str], path: str) -> None:
    """The rows as CSV: the grid's parameters, then `FIGURES`, then `error`."""
    if os.path.dirname(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=params + list(FIGURES) + ["error"],
                           extrasaction="ignore")
        w.writeheader()
        for row in rows:
            w.writerow(row)

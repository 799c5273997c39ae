"""`evaluate`: a compiled network over a dataset on the simulated chip, against a float
reference, one result row per sample, on one process, a local Dask cluster or a remote one.

The data path, top to bottom: the model becomes snapshot bytes (a json + raw is applied here
once and dumped), hashed; the reference becomes file bytes, hashed; samples are listed by name
and loaded batch by batch; batches go to workers (`xeval.worker.eval_batch`), rows come back in
completion order and are appended to the JSONL file as they arrive (flushed), so an interrupted
run keeps everything finished and `resume` picks up the rest.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from xrt.cli.run_cmd import backend_urls
from xrt.errors import XrtError

from .cluster import executor
from .worker import ItemInputs, batch_items, eval_batch, release

#: samples per batch sent to a worker (8-32: enough to amortise a round trip)
BATCH = 16


class Rows(list):
    """Result rows, with how the run went: `seconds` (wall time), `first_result_s` (time to
    the first finished batch), `ran` (samples run now; the rest came from a resumed file)."""

    def __init__(self, rows: list, *, seconds: float = 0.0, first_result_s: float | None = None,
                 ran: int = 0) -> None:
        super().__init__(rows)
        self.seconds, self.first_result_s, self.ran = seconds, first_result_s, ran


def _is_snapshot(path: str) -> bool:
    from xrt.snapshot import MAGIC

    try:
        with open(path, "rb") as fh:
            return fh.read(len(MAGIC)) == MAGIC
    except OSError as exc:
        raise XrtError(f"{path}: {exc.strerror or exc}") from None


def prepare_model(model: str, backends: str | None) -> tuple[tuple[str, bytes], Any,
                                                             list[tuple[str, str]]]:
    """((digest, snapshot bytes), network, backends) of a compiled json (applied here once and
    dumped) or a snapshot (its backends by default)."""
    from xrt import Session
    from xrt.cli.run_cmd import load_model, open_backends
    from xrt.snapshot import parse_snapshot

    if _is_snapshot(model):
        with open(model, "rb") as fh:
            data = fh.read()
        if backends is None:
            header = parse_snapshot(data, model).header
            backends = ";".join(str(b.get("name", "")) for b in header["backends"])
        pairs = backend_urls(backends)
        classes, devices = open_backends(pairs)
        sess = Session.CreateWithSnapshot(model, classes, devices)  # checks it before shipping
        net = sess.network_view.network
        sess.close()
    else:
        pairs = backend_urls(backends or "ZG330,sim://zg330;Host")
        net = load_model(model, None)
        classes, devices = open_backends(pairs)
        sess = Session.Create(classes, net.view(0), devices)
        sess.apply()
        with tempfile.TemporaryDirectory(prefix="xeval-") as tmp:
            path = os.path.join(tmp, "model.snap")
            sess.dumpSnapshot(path)
            with open(path, "rb") as fh:
                data = fh.read()
        sess.close()
    for d in devices:
        d.close()
    return (hashlib.sha256(data).hexdigest(), data), net, pairs


def prepare_reference(reference: str | None) -> tuple[str, dict[str, bytes]] | None:
    """(digest, {file name: bytes}) of an ONNX file or a float json (+ its raw)."""
    if reference is None:
        return None
    files = {}
    names = [reference]
    if not reference.endswith(".onnx"):
        names.append(os.path.splitext(reference)[0] + ".raw")
    for path in names:
        try:
            with open(path, "rb") as fh:
                files[os.path.basename(path)] = fh.read()
        except OSError as exc:
            raise XrtError(f"reference {path}: {exc.strerror or exc}") from None
    digest = hashlib.sha256(b"".join(files[k] for k in sorted(files))).hexdigest()
    return digest, files


def read_rows(path: str) -> dict[str, dict[str, Any]]:
    """The rows of a results file, the last one per sample; a torn last line (a run killed
    mid-write) is ignored."""
    rows: dict[str, dict[str, Any]] = {}
    if not os.path.exists(path):
        return rows
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict) and "sample" in row:
                rows[str(row["sample"])] = row
    return rows


def _trim_torn(path: str) -> None:
    """Cut a last line left unfinished by a killed run, so appended rows start on their own
    line."""
    if not os.path.exists(path):
        return
    with open(path, "rb+") as fh:
        data = fh.read()
        if data and not data.endswith(b"\n"):
            fh.truncate(data.rfind(b"\n") + 1)


def _batches(todo: list[tuple[str, Any]], size: int) -> Iterator[list[tuple[str, Any]]]:
    for k in range(0, len(todo), size):
        yield todo[k:k + size]


def _load(batch: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    out = []
    for name, load in batch:
        try:
            out.append((name, load()))
        except Exception as exc:  # noqa: BLE001 - an unreadable sample is a row with its error
            out.append((name, f"{type(exc).__name__}: {exc}"))
    return out


def evaluate(model: str, data: str, *, reference: str | None = None,
             backends: str | None = None, workers: int | None = None,
             cluster: str | None = None, out: str | None = None, resume: bool = False,
             limit: int | None = None, batch: int = BATCH, progress: bool = True
             ) -> Rows:
    """Run `model` (a compiled json + raw, or a snapshot) on every sample of `data` and return
    one row per sample in sample order: sample, cosine / max_error / top1 vs `reference`
    (when given), cycles, chip_ms, wall_ms, outputs (shapes), or error. A network compiled
    for batch N runs N samples per forward (`batch` rounded up to whole groups of N); its rows
    carry `batch_items: N` and 1/N of that forward's cycles and times. With `out`, rows are
    appended to that JSONL file as they arrive; `resume` skips samples already there."""
    from xcompile.quant.calibrate import list_samples
    from xir import XirError

    shipped, net, pairs = prepare_model(model, backends)
    ref = prepare_reference(reference)
    n_items = batch_items(net)  # N samples per forward of a network compiled for batch N
    try:
        samples = list_samples(data, ItemInputs(net) if n_items > 1 else net)
    except XirError as exc:
        raise XrtError(f"--data {data}: {exc}") from exc
    if limit is not None:
        samples = samples[:max(limit, 0)]
    done = read_rows(out) if out and resume else {}
    todo = [(n, ld) for n, ld in samples if n not in done or "error" in done[n]]
    if out:
        if os.path.dirname(out):
            os.makedirs(os.path.dirname(out), exist_ok=True)
        if resume:
            _trim_torn(out)
        mode = "a" if resume else "w"
        fh = open(out, mode, encoding="utf-8")  # noqa: SIM115 - closed below
    else:
        fh = None
    rows = dict(done)
    t0 = time.perf_counter()
    first = None
    size = max(1, min(batch, 256))
    size = -(-size // n_items) * n_items  # whole groups of N per worker batch
    batches = (_load(b) for b in _batches(todo, size))
    from xrt.console import progress_bar

    try:
        with executor(workers, cluster) as ex, \
                progress_bar(len(todo), f"eval on {ex.workers} worker(s)") if progress \
                else contextlib.nullcontext(lambda k=1: None) as advance:
            for items, result in ex.map(eval_batch, (shipped, pairs, ref), batches):
                if isinstance(result, Exception):  # the batch failed past every retry
                    result = [{"sample": n, "error": f"{type(result).__name__}: {result}"}
                              for n, _ in items]
                for row in result:
                    rows[row["sample"]] = row
                    if fh is not None:
                        fh.write(json.dumps(row) + "\n")
                        fh.flush()
                first = first if first is not None else time.perf_counter() - t0
                advance(len(result))
    finally:
        if fh is not None:
            fh.close()
        if cluster is None and workers == 0:
            release()  # this process's sessions and devices
    order = [n for n, _ in samples]
    return Rows([rows[n] for n in order if n in rows], seconds=time.perf_counter() - t0,
                first_result_s=first, ran=len(todo))



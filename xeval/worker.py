"""What runs on a worker: sessions built once per process from shipped bytes, then batches.

Workers receive the deployed network as snapshot bytes and the reference as file bytes, each
with its content hash; the first batch on a worker writes them to a private temporary folder,
builds the session (no lowering, no planning: the snapshot holds the deployment) and keeps it
for every later batch with the same hash. Everything here is a pure function of its arguments
and that cache, so a batch retried on another worker gives the same rows.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
import time
from typing import Any

import numpy as np

from .metrics import compare

_CACHE: dict[tuple, Any] = {}
#: the output parts of each reference network (`xcompile.quant.parts`), by its digest
_PARTS: dict[str, Any] = {}
_LOCK = threading.Lock()
_DIR: str | None = None


def pin_threads() -> None:
    """One compute thread per worker process (a worker per core): Numba's pool, and every BLAS
    and OpenMP pool threadpoolctl finds. Run on each Dask worker when a run starts; an embedded
    cluster also starts its workers with the thread variables at 1."""
    import numba

    numba.set_num_threads(1)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # the pools then follow OMP_NUM_THREADS and friends
        return
    threadpool_limits(limits=1)


def _file(digest: str, suffix: str, data: bytes) -> str:
    global _DIR
    if _DIR is None:
        _DIR = tempfile.mkdtemp(prefix="xeval-")
        atexit.register(shutil.rmtree, _DIR, True)
    path = os.path.join(_DIR, digest + suffix)
    if not os.path.exists(path):
        with open(path + ".part", "wb") as fh:
            fh.write(data)
        os.replace(path + ".part", path)
    return path


def snapshot_session(digest: str, snapshot: bytes, backends: list[tuple[str, str]]) -> Any:
    """This process's session for the snapshot `digest` on `backends` ((name, url) pairs)."""
    key = ("snap", digest, tuple(backends))
    with _LOCK:
        if key not in _CACHE:
            from xrt import Session

            path = _file(digest, ".snap", snapshot)
            from xrt.cli.run_cmd import open_backends

            classes, devices = open_backends(backends)
            sess = Session.CreateWithSnapshot(path, classes, devices)
            sess.enableTimeProfile(True)
            _CACHE[key] = (sess, devices)
        return _CACHE[key][0]


def reference_session(digest: str, files: dict[str, bytes]) -> Any:
    """This process's float reference (an ONNX file, or a json + raw pair) on the host."""
    key = ("ref", digest)
    with _LOCK:
        if key not in _CACHE:
            _PARTS.pop(digest, None)
            from xrt import HostDevice, Session, plugins
            from xrt.cli.run_cmd import load_model

            paths = {name: _file(f"{digest}-{name}", "", data) for name, data in files.items()}
            main = next(p for n, p in paths.items() if not n.endswith(".raw"))
            raw = next((p for n, p in paths.items() if n.endswith(".raw")), None)
            net = load_model(main, raw)
            sess = Session.Create([plugins.backend_class("Host")], net.view(0),
                                  [HostDevice.Default()])
            sess.apply()
            _CACHE[key] = (sess, [])
        return _CACHE[key][0]


def reference_parts(digest: str, sess: Any, outputs: list[np.ndarray]) -> Any:
    """The output parts of the reference network of `digest` (its Concat branches; a branch
    whose values lie in [0, 1] on the first sample counts as scores), found once."""
    if digest not in _PARTS:
        from xcompile.quant.parts import output_parts

        _PARTS[digest] = output_parts(sess.network_view.network, reference=outputs)
    return _PARTS[digest]


def release() -> None:
    """Close every cached session and its devices (an in-process run calls it at its end;
    worker processes keep theirs for the next run)."""
    with _LOCK:
        for sess, devices in _CACHE.values():
            sess.close()
            for d in devices:
                d.close()
        _CACHE.clear()


def chip_figures(sess: Any) -> tuple[int, float]:
    """(simulated cycles, chip time in ms) of the session's last forward: the hardware
    counters of every backend that offers them, and the hard time of every op."""
    cycles = 0
    for backend in sess.backends:
        info = getattr(backend, "profileInfo", None)
        if callable(info):
            cycles += sum(int(r.get("cycles", 0)) for r in info().values())
    chip_ms = sum(float(t[2]) for t in sess.timeProfileResults().values())
    return cycles, chip_ms


def batch_items(net: Any) -> int:
    """N, the batch a network was compiled for: axis 0 of its inputs when every input has the
    same first dimension (1 when they differ, or an input is a scalar). Every output of a
    batch-N network must have N rows along axis 0 too: each row is one sample's result."""
    from xrt.errors import XrtError

    firsts = {int(v.shape[0]) if len(v.shape) else 1 for v in net.inputs()}
    n = firsts.pop() if len(firsts) == 1 else 1
    if n > 1:
        for v in net.outputs():
            if not len(v.shape) or int(v.shape[0]) != n:
                raise XrtError(f"output '{v.name}' (v_id {v.v_id}) has shape {list(v.shape)}: "
                               f"the network's inputs hold {n} batch items, but this output "
                               f"has no axis 0 of {n} rows to split back into samples")
    return n


class ItemInputs:
    """A network seen with its inputs' batch axis at 1: what one sample of a batch-N network
    holds (`xcompile.quant.calibrate.list_samples` checks samples against it)."""

    class _Input:
        def __init__(self, v: Any) -> None:
            self.name, self.v_id, self.dtype = v.name, v.v_id, v.dtype
            self.shape = (1, *tuple(v.shape)[1:]) if len(v.shape) else tuple(v.shape)

    def __init__(self, net: Any) -> None:
        self._inputs = [self._Input(v) for v in net.inputs()]

    def inputs(self) -> list[Any]:
        return list(self._inputs)


def _stack(samples: list[list[np.ndarray]], n: int) -> list[np.ndarray]:
    """The samples' arrays stacked along axis 0 per input, the last sample repeated up to `n`
    items (padding whose results are dropped)."""
    padded = samples + [samples[-1]] * (n - len(samples))
    if n == 1:
        return list(padded[0])
    return [np.concatenate([s[i] for s in padded], axis=0) for i in range(len(padded[0]))]


def _run(sess: Any, xs: list[np.ndarray]) -> list[np.ndarray]:
    from xrt import Tensor

    return [np.array(t) for t in sess.forward([Tensor(a) for a in xs])]


def _eval_group(sess: Any, n: int, reference: tuple[str, dict[str, bytes]] | None,
                group: list[tuple[str, list[np.ndarray]]]) -> list[dict[str, Any]]:
    """Rows of up to `n` samples run as one forward of the batch-`n` network (the last group
    padded by repeating its last sample); cycles, chip and wall time split evenly over the
    `n` items, each sample's outputs its rows along axis 0."""
    samples = [s for _, s in group]
    t0 = time.perf_counter()
    outs = _run(sess, _stack(samples, n))
    wall_ms = (time.perf_counter() - t0) * 1e3
    cycles, chip_ms = chip_figures(sess)
    want = None
    if reference is not None:
        ref = reference_session(*reference)
        m = batch_items(ref.network_view.network)
        if m == n:
            stacked = _run(ref, _stack(samples, n))
            reference_parts(reference[0], ref, stacked)
            want = [[o[k:k + 1] for o in stacked] if n > 1 else stacked
                    for k in range(len(samples))]
        elif m == 1:
            want = [_run(ref, s) for s in samples]
            reference_parts(reference[0], ref, want[0])
        else:
            from xrt.errors import XrtError

            raise XrtError(f"the reference network holds {m} batch items and the compiled "
                           f"one {n}: give a reference of batch 1 or {n}")
    rows = []
    for k, (name, _) in enumerate(group):
        got = [o[k:k + 1] for o in outs] if n > 1 else outs
        row: dict[str, Any] = {"sample": name, "wall_ms": wall_ms / n,
                               "cycles": cycles // n if n > 1 else cycles,
                               "chip_ms": chip_ms / n}
        if n > 1:
            row["batch_items"] = n
        if want is not None:
            row.update(compare(got, want[k], _PARTS[reference[0]]))
        row["outputs"] = [list(o.shape) for o in got]
        rows.append(row)
    return rows


def eval_batch(model: tuple[str, bytes], backends: list[tuple[str, str]],
               reference: tuple[str, dict[str, bytes]] | None,
               batch: list[tuple[str, list[np.ndarray] | str]]) -> list[dict[str, Any]]:
    """One row per sample of `batch` ((name, arrays) or (name, error text) when loading failed
    on the client), in `batch` order; a sample that fails here is a row with its error, never
    an exception. A network compiled for batch N (`batch_items`) gets N consecutive readable
    samples per forward, stacked along axis 0; its rows say `batch_items: N`."""
    rows: dict[str, dict[str, Any]] = {}
    good = []
    for name, sample in batch:
        if isinstance(sample, str):
            rows[name] = {"sample": name, "error": sample}
        else:
            good.append((name, sample))
    try:
        sess = snapshot_session(model[0], model[1], backends)
        n = batch_items(sess.network_view.network)
    except Exception as exc:  # noqa: BLE001 - recorded per sample
        sess, n = None, 1
        for name, _ in good:
            rows[name] = {"sample": name, "error": f"{type(exc).__name__}: {exc}"}
        good = []
    for k in range(0, len(good), n):
        group = good[k:k + n]
        try:
            for row in _eval_group(sess, n, reference, group):
                rows[row["sample"]] = row
        except Exception as exc:  # noqa: BLE001 - recorded per sample, the run goes on
            for name, _ in group:
                rows[name] = {"sample": name, "error": f"{type(exc).__name__}: {exc}"}
    return [rows[name] for name, _ in batch]


def sweep_point(model: tuple[str, bytes, bytes], backends: list[tuple[str, str]],
                point: dict[str, Any]) -> dict[str, Any]:
    """One grid point: the network deployed on the hardware variant `point` names, one forward
    in cycles-only mode, its cycles, time, memory and utilisation."""
    from .grid import run_point

    digest, json_bytes, raw_bytes = model
    paths = (_file(digest, ".json", json_bytes), _file(digest, ".raw", raw_bytes))
    try:
        return {**point, **run_point(paths, backends, point)}
    except Exception as exc:  # noqa: BLE001 - recorded per point, the sweep goes on
        return {**point, "error": f"{type(exc).__name__}: {exc}"}

"""Where batches run: an embedded Dask LocalCluster (processes, one thread each), a running
Dask scheduler, or this process (``workers=0``: no Dask at all, for debugging and small runs).

Dask is an optional extra (``pip install 'icraft-xrt-sim[dask]'``; the README's set-up installs
it); without it only ``workers=0`` runs.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from xrt.errors import XrtError

#: environment of every worker process of an embedded cluster: one compute thread each
PINNED = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
          "NUMBA_NUM_THREADS": "1"}


def _dask() -> Any:
    try:
        import dask
        import distributed
    except ImportError:
        raise XrtError("this needs Dask distributed: pip install 'icraft-xrt-sim[dask]' (or run "
                       "in this process with --workers 0)") from None
    return dask, distributed


class Executor:
    """Runs `fn(*shared, item)` over items, yielding results in completion order; `shared`
    values (model bytes) go to every worker once."""

    def __init__(self, client: Any = None) -> None:
        self.client = client

    @property
    def workers(self) -> int:
        if self.client is None:
            return 1
        return max(len(self.client.scheduler_info(n_workers=-1).get("workers", {})), 1)

    def map(self, fn: Callable, shared: tuple, items: Iterable[Any],
            window: int | None = None) -> Iterator[tuple[Any, Any]]:
        """(item, result) pairs as they complete, at most `window` items in flight."""
        if self.client is None:
            for item in items:
                yield item, fn(*shared, item)
            return
        from distributed import as_completed

        from .worker import pin_threads

        self.client.run(pin_threads)
        futures = self.client.scatter(list(shared), broadcast=True, hash=True)
        window = window or 2 * self.workers
        it = iter(items)
        done = as_completed()
        owner: dict[Any, Any] = {}

        def submit() -> bool:
            item = next(it, None)
            if item is None:
                return False
            fut = self.client.submit(fn, *futures, item, pure=False)
            owner[fut.key] = item
            done.add(fut)
            return True

        for _ in range(window):
            if not submit():
                break
        for fut in done:
            item = owner.pop(fut.key)
            try:
                result = fut.result()
            except Exception as exc:  # noqa: BLE001 - a task that failed past Dask's retries
                result = exc
            fut.release()
            submit()
            yield item, result


@contextlib.contextmanager
def executor(workers: int | None = None, cluster: str | None = None) -> Iterator[Executor]:
    """An Executor on `cluster` (a scheduler address, e.g. tcp://127.0.0.1:8786), on an
    embedded LocalCluster of `workers` processes (default: the cores), or in this process
    (`workers` 0)."""
    if cluster is None and workers == 0:
        yield Executor(None)
        return
    dask, distributed = _dask()
    if not logging.getLogger().isEnabledFor(logging.DEBUG):  # xrt -v shows Dask's own log
        logging.getLogger("distributed").setLevel(logging.ERROR)
    if cluster is not None:
        try:
            client = distributed.Client(cluster, timeout=30)
        except (OSError, TimeoutError) as exc:
            raise XrtError(f"cannot reach the Dask scheduler at {cluster}: {exc}") from exc
        try:
            yield Executor(client)
        finally:
            client.close()
        return
    n = workers or os.cpu_count() or 1
    if n < 0:
        raise XrtError(f"--workers {n}: give a count >= 0")
    with dask.config.set({"distributed.nanny.pre-spawn-environ": PINNED,
                          "distributed.worker.daemon": False}):
        lc = distributed.LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                      dashboard_address=None,
                                      worker_dashboard_address=None, silence_logs=logging.ERROR)
        client = distributed.Client(lc)
        try:
            yield Executor(client)
        finally:
            client.close()
            lc.close()

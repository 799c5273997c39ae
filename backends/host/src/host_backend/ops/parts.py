"""Element-wise host kernels over big arrays, shared out among threads.

The host's intra-op thread count follows onnxruntime's convention as `sgemm` does: one part
per Numba thread (``NUMBA_NUM_THREADS``; the benchmarks set it to the thread count of the
comparison). A Cast at a network's edge (the float input quantized, the result dequantized)
is one pass over the whole map: 196K floats of a 256 x 256 RGB input take ~0.15 ms, which a
second core halves. Each part writes its own slice of the output from its own slice of the
input with the same arithmetic, so the bytes are those of one pass whatever the count. A part
no worker has started when the caller finishes its own runs on the caller (a worker pre-empted
on a busy machine holds nothing up).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from numba import get_num_threads

#: elements a part holds at least (below this a hand-off costs more than the part)
PART_MIN = 1 << 16

_POOL: dict[int, ThreadPoolExecutor] = {}
_POOL_LOCK = threading.Lock()


def _pool(parts: int) -> ThreadPoolExecutor:
    """The worker threads for `parts` parts (one fewer: the caller runs a part itself)."""
    with _POOL_LOCK:
        pool = _POOL.get(parts)
        if pool is None:
            pool = _POOL[parts] = ThreadPoolExecutor(max_workers=parts - 1,
                                                     thread_name_prefix="host-parts")
        return pool


def count(n: int) -> int:
    """Parts `n` elements are cut into (1: run inline)."""
    return max(1, min(get_num_threads(), n // PART_MIN))


def run_parts(n: int, fn: Callable[[int, int], None]) -> None:
    """``fn(lo, hi)`` over ``[0, n)`` cut into `count` parts, the caller running the first (and
    any a worker has not started when it is done); the first error raised is raised here once
    every part has ended."""
    parts = count(n)
    if parts == 1:
        fn(0, n)
        return
    cuts = [n * p // parts for p in range(parts + 1)]
    pool = _pool(parts)
    pending = [(p, pool.submit(fn, cuts[p], cuts[p + 1])) for p in range(1, parts)]
    error: BaseException | None = None
    try:
        fn(cuts[0], cuts[1])
    except BaseException as exc:  # the workers' parts still end before it propagates
        error = exc
    for p, job in pending:
        try:
            if job.cancel():
                if error is None:
                    fn(cuts[p], cuts[p + 1])
            else:
                job.result()
        except BaseException as exc:
            error = error or exc
    if error is not None:
        raise error

"""Element-wise host kernels over big arrays, shared out among threads.

The host's intra-op thread count follows onnxruntime's convention as `sgemm` does: one part
per Numba thread (``NUMBA_NUM_THREADS``; the benchmarks set it to the thread count of the
comparison). A Cast at a network's edge (the float input quantized, the result dequantized)
is one pass over the whole map: 196K floats of a 256 x 256 RGB input take ~0.15 ms on one
core. Each part writes its own slice of the output from its own slice of the input with the
same arithmetic, so the bytes are those of one pass whatever the count (the parts are taken
as `npu_model.kernels.pool` takes its parts).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from numba import get_num_threads

#: elements a part holds at least (below this a hand-off costs more than the part)
PART_MIN = 1 << 15
#: parts per thread at most
PARTS_PER_THREAD = 4

_POOL: dict[int, ThreadPoolExecutor] = {}
_POOL_LOCK = threading.Lock()


def worker_pool(parts: int) -> ThreadPoolExecutor:
    """The worker threads for `parts` parts (one fewer: the caller runs a part itself), shared
    by every host kernel that splits its work (`sgemm` too)."""
    with _POOL_LOCK:
        pool = _POOL.get(parts)
        if pool is None:
            pool = _POOL[parts] = ThreadPoolExecutor(max_workers=parts - 1,
                                                     thread_name_prefix="host-parts")
        return pool


def count(n: int) -> int:
    """Threads `n` elements are shared out among (1: run inline)."""
    if n < 2 * PART_MIN:
        return 1  # (without asking Numba: most maps are small)
    return max(1, min(get_num_threads(), n // PART_MIN))


def run_parts(n: int, fn: Callable[[int, int], None]) -> None:
    """``fn(lo, hi)`` over ``[0, n)``, cut into up to `PARTS_PER_THREAD` parts per thread of
    `count` that the threads take in turn, the caller too: a worker scheduled late or
    pre-empted holds the call up by one small part at most, and one not started when the
    caller has run out of parts is cancelled. An error raised in a part is raised here once
    every started part has ended."""
    threads = count(n)
    if threads == 1:
        fn(0, n)
        return
    k = max(threads, min(threads * PARTS_PER_THREAD, n // PART_MIN))
    cuts = [n * p // k for p in range(k + 1)]
    ticket = itertools.count()  # next() is atomic: each part is taken exactly once

    def work() -> None:
        while (i := next(ticket)) < k:
            fn(cuts[i], cuts[i + 1])

    pool = worker_pool(threads)
    futures = [pool.submit(work) for _ in range(threads - 1)]
    try:
        work()
    finally:
        for f in futures:
            if not f.cancel():  # started: it may be running a part
                f.result()

"""What the benchmarks share: single-threaded pools (BLAS, Numba, onnxruntime and the
simulator's kernel pool, ``XRT_THREADS``, capped together,
set when this module is imported -- conftest imports it first; ``XRT_BENCH_THREADS=2 make
bench`` gives every pool two threads instead), best-of and interleaved timing, an onnxruntime
session, and the load average printed beside every figure."""

import os

#: threads of every pool on both sides of a comparison
THREADS = int(os.environ.get("XRT_BENCH_THREADS", "1"))
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS",
            "XRT_THREADS"):
    os.environ.setdefault(var, str(THREADS))

import time  # noqa: E402

import pytest  # noqa: E402
import scipy.linalg  # noqa: E402,F401 - loads scipy's BLAS (the one Numba's np.dot calls)
from threadpoolctl import threadpool_limits  # noqa: E402

# numpy may have started its BLAS pool before this file ran: cap every loaded pool now.
_LIMITS = threadpool_limits(limits=THREADS)


def load_average() -> str:
    """The 1-minute load average, to print beside a figure (targets hold below 1)."""
    try:
        return f"load {os.getloadavg()[0]:.2f}"
    except OSError:  # pragma: no cover - not on this platform
        return "load n/a"


def best_of(fn, rounds: int = 5, warmup: int = 2) -> float:
    """Best wall time (s) of `fn` over `rounds` after `warmup` calls."""
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def interleaved_best(fns, rounds: int = 7, warmup: int = 2) -> list[float]:
    """Best wall time (s) of each function, runs interleaved so machine load hits all alike."""
    for fn in fns:
        for _ in range(warmup):
            fn()
    best = [float("inf")] * len(fns)
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - t0)
    return best


def ort_session(model_bytes: bytes):
    ort = pytest.importorskip("onnxruntime")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = THREADS
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])


_PEAK = ("import sys\nfrom xrt.cli import main\ntry:\n    rc = main(sys.argv[1:])\nfinally:\n"
         "    hwm = [ln for ln in open('/proc/self/status') if ln.startswith('VmHWM')]\n"
         "    print('PEAK_RSS_KB', hwm[0].split()[1] if hwm else 0, file=sys.stderr)\n"
         "sys.exit(rc)\n")


def xrt_peak_rss(args: list[str]) -> tuple[float, int]:
    """Run ``xrt ARGS`` in a child process: (seconds, peak resident bytes of the child itself,
    its VmHWM, which a fork's shared pages of this process do not inflate)."""
    import subprocess
    import sys

    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", _PEAK, *args], capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if res.returncode:
        raise RuntimeError(f"xrt {' '.join(args)} failed: {res.stderr[-800:]}")
    kb = [ln.split()[1] for ln in res.stderr.splitlines() if ln.startswith("PEAK_RSS_KB")]
    return seconds, int(kb[-1]) * 1024 if kb else 0

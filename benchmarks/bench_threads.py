"""The simulator's kernel pool (issue 30, item 2): the same instruction streams at 1 thread and
at every core (``XRT_THREADS`` / the CPU count), interleaved in one process, byte-identical.

Streams as in `bench_int16`: the yolov5s-style backbone at 320x320 in int8 and in int16, and
the vgg19-style stack at 112x112 in int8. Each runs on one device whose kernel pool is switched
between 1 and N threads before every run (`npu_model.kernels.pool.set_threads`); the figure of
record is the speed-up (1-thread time / N-thread time) with the load average beside it.

    python -m pytest benchmarks/bench_threads.py --benchmark-only -s
"""

import os

import numpy as np
import pytest
from bench_int16 import NETS, _program
from helpers import load_average

from npu_model.kernels import pool

pytest.importorskip("zg330backend")

CASES = [("yolov5s-style-320", "int8"), ("yolov5s-style-320", "int16"),
         ("vgg19-style-112", "int8")]


@pytest.mark.parametrize("name,dtype", CASES, ids=[f"{n}-{d}" for n, d in CASES])
def test_threads_speedup(benchmark, name, dtype):
    import time

    from xrt import Device

    cores = len(os.sched_getaffinity(0))
    dev = Device.Open("sim://zg330")
    dev.sim.int_gemm = dev.sim.int_gemm16 = True
    run, macs = _program(dev, NETS[name], dtype, np.random.default_rng(0))
    best = {1: float("inf"), cores: float("inf")}
    try:
        for _ in range(4):
            for n in best:
                pool.set_threads(n)
                t0 = time.perf_counter()
                run()
                best[n] = min(best[n], time.perf_counter() - t0)
        benchmark.pedantic(run, rounds=1)
    finally:
        pool.set_threads(None)
        dev.close()
    t1, tn = best[1], best[cores]
    print(f"\n{name} {dtype}: 1 thread {t1 * 1e3:.0f} ms, {cores} threads {tn * 1e3:.0f} ms, "
          f"speed-up {t1 / tn:.2f}x ({macs / 1e9:.2f} GMAC, {load_average()})")
    benchmark.extra_info.update(one_ms=t1 * 1e3, all_ms=tn * 1e3, threads=cores,
                                speedup=t1 / tn, load=load_average())

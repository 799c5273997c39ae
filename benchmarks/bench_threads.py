"""The simulator's kernel pool (issue 30, item 2): the same instruction streams at 1 thread and
at every core (``XRT_THREADS`` / the CPU count), interleaved in one process, byte-identical.

Streams as in `bench_int16`: the yolov5s-style backbone at 320x320 in int8 and in int16, and
the vgg19-style stack at 112x112 in int8. Each runs on one device whose kernel pool is switched
between 1 and N threads before every run (`npu_model.kernels.pool.set_threads`); the figure of
record is the speed-up (1-thread time / N-thread time) with the load average beside it.

`test_small_networks_two_threads` is the other end: the spectrum's small networks
(`bench_spectrum`, compiled as there), whole simulated forwards at 1 thread, at 2 threads with
the pool as it is (kernels cut by measured time, `pool.Split`), and at 2 threads with parts
sized by multiply-add count alone, one part per thread (``INLINE_S = 0``: the pool before the
measured sizing), interleaved in one process with BLAS at the same count. Wall-time medians
and process CPU time; two threads must not cost more CPU than one by more than the pool's
bookkeeping (asserted on CPU time, which a busy machine does not inflate), and the outputs
are byte-identical. ``XRT_SPECTRUM`` picks the networks as in `bench_spectrum`.

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


SMALL = ("transformer_block_64x128", "shufflenet", "squeezenet", "mobilenetv3_small_224")


def test_small_networks_two_threads(benchmark, monkeypatch):
    import statistics
    import time

    from bench_spectrum import _cases
    from corpus import load_stage
    from threadpoolctl import threadpool_limits

    from host_backend import HostBackend
    from xrt import Device, HostDevice, Session, Tensor
    from zg330backend import ZG330Backend

    if not os.environ.get("XRT_SPECTRUM"):
        monkeypatch.setenv("XRT_SPECTRUM", ",".join(SMALL))
    measured, parts = pool.INLINE_S, pool.PARTS_PER_THREAD
    configs = {"1 thread": (1, measured, parts), "2 threads": (2, measured, parts),
               "2, by MACs": (2, 0.0, 1)}
    rows = []
    try:
        for name, json_path, _, x, _ in _cases():
            net = load_stage(json_path)
            dev = Device.Open("sim://zg330")
            sess = Session.Create([ZG330Backend, HostBackend], net.view(0),
                                  [dev, HostDevice.Default()])
            sess.apply()
            inp = [Tensor(x)]
            wall = {c: [] for c in configs}
            cpu = {c: [] for c in configs}
            outs = {}
            for r in range(32):
                for c, (n, inline_s, per_thread) in configs.items():
                    pool.set_threads(n)
                    pool.INLINE_S, pool.PARTS_PER_THREAD = inline_s, per_thread
                    with threadpool_limits(limits=n):
                        t0, c0 = time.perf_counter(), time.process_time()
                        out = sess.forward(inp)
                        t1, c1 = time.perf_counter(), time.process_time()
                    outs.setdefault(c, [np.asarray(o.numpy()).tobytes() for o in out])
                    if r >= 2:  # warm-up: Numba dispatch, the first timed call per shape
                        wall[c].append(t1 - t0)
                        cpu[c].append(c1 - c0)
            sess.close()
            dev.close()
            assert len({tuple(v) for v in outs.values()}) == 1, f"{name}: outputs differ"
            row = {c: (statistics.median(wall[c]) * 1e3, statistics.median(cpu[c]) * 1e3)
                   for c in configs}
            rows.append((name, row))
            print(f"\n{name}: " + ", ".join(f"{c} {w:.2f} ms (CPU {p:.2f})"
                                            for c, (w, p) in row.items())
                  + f" ({load_average()})")
        benchmark.pedantic(lambda: None, rounds=1)
    finally:
        pool.INLINE_S, pool.PARTS_PER_THREAD = measured, parts
        pool.set_threads(None)
    benchmark.extra_info.update(rows=rows, load=load_average())
    for name, row in rows:
        one, two = row["1 thread"][1], row["2 threads"][1]
        assert two <= 1.25 * one + 0.1, f"{name}: 2 threads {two:.2f} ms CPU, 1 thread {one:.2f}"

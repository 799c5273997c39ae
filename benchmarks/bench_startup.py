"""Start-up (issue 30, item 4): import, deploy and first forward with an empty Numba cache (a
fresh install: ``NUMBA_CACHE_DIR`` pointed at an empty folder) against the same with the cache
that run left behind, for tiny_cnn and yolov5s (zoo, compiled for zg330), each in a child
process. Wall time and the process's CPU time are both reported: on a shared, loaded machine
the wall ratio follows the load, the CPU-time ratio much less. The child also reports where
the cold start's compile time went, per module of the kernels compiled (exclusive CPU seconds
of the compiling thread, from Numba's compile events): the NPU model's kernels
(``mpe``, ``vector``, ``igemm``, ``cycles``...), the deploy planners (``planners``), and
Numba's own array implementations they pull in; then the project's slowest kernels to
compile, each with its number of compiles when above one (one per specialisation: a second
means a literal, dtype or layout variant).

What the start-up measures besides (`npu_model.kernels.jit.Tiered`, `kernels.compile_pool`,
`kernels.twins`: the slowest kernels' numpy forms, run while a worker compiles them):
the calls of the tiered kernels (deploy planners, cycle model) that ran as Python instead of
compiling, and the compile workers -- how many started, what they compiled and what the main
process took itself, and their CPU time (the main process's CPU time leaves it out; on a
machine with spare cores it is off the critical path, on a loaded one it is not).

Target: cold within 4x of warm.

    python -m pytest benchmarks/bench_startup.py --benchmark-only -s
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest
from helpers import load_average

pytest.importorskip("zg330backend")

CHILD = textwrap.dedent("""
    import json, sys, time
    t0, c0 = time.perf_counter(), time.process_time()
    from numba.core import event
    spent = {{}}
    per_kernel = {{}}

    class Compiles(event.Listener):
        def __init__(self):
            self.stack = []

        def on_start(self, e):
            self.stack.append([time.thread_time(), 0.0])

        def on_end(self, e):
            t, inner = self.stack.pop()
            dt = time.thread_time() - t
            if self.stack:
                self.stack[-1][1] += dt
            func = e.data["dispatcher"].py_func
            mod = func.__module__
            key = ("planners" if ".planners." in mod else
                   mod.split(".")[-1] if mod.startswith(("npu_model", "xir")) else "numba")
            spent[key] = spent.get(key, 0.0) + dt - inner
            if key != "numba":  # per kernel: CPU seconds and compiles (specialisations)
                k = per_kernel.setdefault(mod.removeprefix("npu_model.") + "." + func.__qualname__,
                                           [0.0, 0])
                k[0] += dt - inner
                k[1] += 1

    event.register("numba:compile", Compiles())
    import numpy as np
    from xrt import Device, HostDevice, Session
    from host_backend import HostBackend
    from zg330backend import ZG330Backend
    from xrt.cli.run_cmd import load_model
    net = load_model({path!r}, None)
    x = np.zeros(net.inputs()[0].shape, np.float32)
    sess = Session.Create([ZG330Backend, HostBackend], net.view(0),
                          [Device.Open("sim://zg330"), HostDevice.Default()])
    sess.apply()
    sess.forward([x])
    first, first_cpu = time.perf_counter() - t0, time.process_time() - c0
    t1 = time.perf_counter()
    sess.forward([x])
    second = time.perf_counter() - t1
    import resource
    from npu_model import cycles
    from npu_model.kernels import compile_pool
    from npu_model.planners.etm import planner
    from npu_model.planners.ocm import options
    for w in compile_pool._workers:
        w.proc.wait()
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    tiered = {{t.__name__: t.calls[0] for t in [cycles.layer_cycles, planner._place,
              planner._improve] + [getattr(options, n) for n in ("_refill", "_total",
              "_eject_search", "_repack_search", "_evict_walk", "_perturb_search", "_beam")]
              if t.calls[0]}}
    print(json.dumps(dict(first=first, first_cpu=first_cpu, second=second,
                          compiles=spent, kernels=per_kernel, python_calls=tiered,
                          pool=compile_pool.stats, workers_cpu=ch.ru_utime + ch.ru_stime)))
""")


def _start(path: str, cache_dir: str) -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
    out = subprocess.run([sys.executable, "-c", CHILD.format(path=os.path.abspath(path))],
                         env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("model", ["tiny_cnn", "yolov5s"])
def test_cold_and_warm_start(benchmark, model, tmp_path):
    from xcompile.cache import compiled_zoo

    path = compiled_zoo(model, "zg330")
    cold = _start(path, str(tmp_path))
    warm = _start(path, str(tmp_path))
    benchmark.pedantic(lambda: None, rounds=1)
    comp = sorted(cold["compiles"].items(), key=lambda kv: -kv[1])
    total = sum(v for _, v in comp)
    print(f"\n{model}: import + deploy + first forward cold {cold['first']:.1f} s, warm "
          f"{warm['first']:.2f} s ({cold['first'] / warm['first']:.1f}x; CPU time "
          f"{cold['first_cpu']:.1f} s / {warm['first_cpu']:.2f} s = "
          f"{cold['first_cpu'] / warm['first_cpu']:.1f}x; {load_average()}); "
          f"cold compiles {total:.1f} s CPU: "
          + ", ".join(f"{k} {v:.1f}" for k, v in comp[:8]))
    top = sorted(cold["kernels"].items(), key=lambda kv: -kv[1][0])[:12]
    print("  slowest kernels to compile (CPU s, compiles): "
          + ", ".join(f"{k} {s:.2f}" + (f" x{n}" if n > 1 else "") for k, (s, n) in top))
    pool = cold["pool"]
    print(f"  compile workers: {pool['workers']} started, {pool['compiled']} kernels compiled "
          f"there ({pool['failed']} failed), {pool['by_caller']} queued ones taken by the main "
          f"process, {pool.get('twinned', 0)} calls run by numpy twins meanwhile; workers' CPU "
          f"{cold['workers_cpu']:.1f} s (main + workers "
          f"{cold['first_cpu'] + cold['workers_cpu']:.1f} s)")
    print("  tiered kernels run as Python (calls), cold: "
          + (", ".join(f"{k} {n}" for k, n in cold["python_calls"].items()) or "none")
          + "; warm: " + (", ".join(f"{k} {n}" for k, n in warm["python_calls"].items())
                          or "none"))
    benchmark.extra_info.update(cold_s=cold["first"], warm_s=warm["first"],
                                ratio=cold["first"] / warm["first"], cold_cpu_s=cold["first_cpu"],
                                warm_cpu_s=warm["first_cpu"], compiles=cold["compiles"],
                                kernels=cold["kernels"], pool=pool,
                                workers_cpu_s=cold["workers_cpu"],
                                python_calls=cold["python_calls"])

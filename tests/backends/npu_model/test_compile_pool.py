"""Kernels compiled side by side in worker processes (`npu_model.kernels.compile_pool`, issue 30
item 4). Each case runs in a child process with an empty Numba cache of its own (a fresh
install): what the workers compiled, what the caller compiled itself, that each kernel was
compiled once, and that a worker that dies, a cache the workers cannot write, or no workers at
all leave the caller compiling as before, with the same results."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from numba import config

from npu_model.kernels import compile_pool

pytestmark = pytest.mark.skipif(config.DISABLE_JIT, reason="NUMBA_DISABLE_JIT: no dispatchers")

CHILD = textwrap.dedent("""
    import json, os, signal
    import numpy as np
    from numba.core import event
    from npu_model.kernels import compile_pool
    from npu_model.planners.ocm import kernels as k

    here = []  # kernels compiled in this process (not loaded from the cache)
    class Compiles(event.Listener):
        def on_start(self, e):
            pass
        def on_end(self, e):
            here.append(e.data["dispatcher"].py_func.__name__)
    event.register("numba:compile", Compiles())

    rng = np.random.default_rng(0)
    n = 30
    starts = rng.integers(0, 20, n).astype(np.int64)
    ends = starts + rng.integers(0, 6, n)
    sizes = rng.integers(1, 50, n).astype(np.int64) * 64
    scores = rng.random(n) * 10
    ptr, idx = k._conflicts(starts, ends)
    order = k._walk_order(starts, ends)
    eligible = np.ones(n, np.bool_)
    cap = 1024
    off = np.full(n, -1, np.int64)
    calls = [(k._evict_walk, (order, sizes, scores, eligible, off, ptr, idx, cap)),
             (k._refill, (order, sizes, eligible, off, ptr, idx, cap)),
             (k._total, (scores, off))]
    queued = compile_pool.prefetch(calls)
    if {kill} and compile_pool._workers:
        os.kill(compile_pool._workers[0].proc.pid, signal.SIGKILL)
    if {settle}:  # let the worker finish the job it takes first (the last needed) first
        last = [j for j in compile_pool._jobs.values() if j.disp is k._total]
        assert last and last[0].done.wait(300)
    for fn, args in calls:
        fn(*args)
    for w in compile_pool._workers:
        w.proc.wait()
    print(json.dumps(dict(queued=queued, stats=compile_pool.stats, here=here,
                          offsets=off.tolist(),
                          compiled=[fn.__name__ for fn, _ in calls if fn.signatures])))
""")


def _child(tmp_path, workers: str | None = "1", kill: bool = False, cache: str = "cache",
           settle: bool = False):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / cache))
    env.pop("XRT_COMPILE_WORKERS", None)
    if workers is not None:
        env["XRT_COMPILE_WORKERS"] = workers
    out = subprocess.run([sys.executable, "-c", CHILD.format(kill=kill, settle=settle)], env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_workers_compile_what_the_caller_has_not_reached(tmp_path):
    got = _child(tmp_path, settle=True)
    assert got["queued"] == 3 and got["stats"]["workers"] == 1
    s = got["stats"]
    assert s["compiled"] >= 1 and s["failed"] == 0
    assert s["compiled"] + s["by_caller"] == 3  # each kernel compiled once, by one side
    assert got["compiled"] == ["_evict_walk", "_refill", "_total"]
    # the worker took the last needed first; the caller loaded it from the cache
    assert "_total" not in got["here"]
    for name in ("_evict_walk", "_refill"):  # the rest: by one side or the other, once
        assert got["here"].count(name) <= 1, got["here"]
    # same plan as with no workers at all (a fresh cache again)
    alone = _child(tmp_path, workers="0", cache="alone")
    assert alone["queued"] == 0 and alone["stats"]["workers"] == 0
    assert alone["offsets"] == got["offsets"]


def test_a_dead_worker_leaves_the_caller_compiling(tmp_path):
    got = _child(tmp_path, kill=True)
    assert got["compiled"] == ["_evict_walk", "_refill", "_total"]
    assert got["offsets"] == _child(tmp_path, workers="0", cache="alone")["offsets"]


def test_no_workers_when_the_cache_cannot_be_written(tmp_path, monkeypatch):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        if not os.access(ro, os.W_OK):  # (root writes anywhere)
            assert not compile_pool._writable(str(ro / "sub" / "dir"))
        assert compile_pool._writable(str(tmp_path / "new" / "dir"))
    finally:
        ro.chmod(stat.S_IRWXU)
    # a kernel neither compiled nor cached, whose cache could not be written: no workers
    from npu_model.planners.ocm import kernels as k
    monkeypatch.setattr(compile_pool, "_writable", lambda path: False)
    monkeypatch.setattr(compile_pool, "_on_disk", lambda disp, sig: False)
    args = (np.zeros(3, np.float32), np.zeros(3, np.int16))  # types no one compiles
    assert compile_pool.prefetch([(k._total, args), (k._total, args[::-1])]) == 0
    assert not compile_pool._jobs and not compile_pool._workers


def test_a_bad_worker_count_is_refused(monkeypatch):
    monkeypatch.setenv("XRT_COMPILE_WORKERS", "many")
    with pytest.raises(compile_pool.CompileWorkersError, match="XRT_COMPILE_WORKERS='many'"):
        compile_pool._configured_workers()
    monkeypatch.setenv("XRT_COMPILE_WORKERS", "2")
    assert compile_pool._configured_workers() == 2


def test_kernel_calls_see_a_split_kernel_with_its_range():
    from npu_model.kernels import mpe
    split = mpe.CONV_DEPTHWISE
    calls = compile_pool.kernel_calls([(split, (1, 2)), (print, ("x",))])
    assert calls == [(split.kernel, (1, 2, 0, 1))]

"""Tiered kernels (`npu_model.kernels.jit.Tiered`, issue 30 item 4): the deploy planners and
the cycle model run as Python on small problems while they are not compiled, so a fresh
install's first deploy compiles none of them. Both tiers run the same code; these tests check
that they give the same plans and cycle counts, bit for bit, on the planners' real inputs
(tiny_cnn's deploy problem as the runtime poses it, at four OCM sizes) and on random ones, and
that the tier is chosen as documented."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from numba import config, njit

from npu_model import cycles
from npu_model.kernels import jit
from npu_model.planners import etm, ocm
from npu_model.planners.etm import planner as etm_planner
from npu_model.planners.ocm import options as ocm_options

pytestmark = pytest.mark.skipif(config.DISABLE_JIT, reason="NUMBA_DISABLE_JIT: no dispatchers")

TIERED = [getattr(ocm_options, n) for n in ("_refill", "_total", "_eject_search",
                                            "_repack_search", "_evict_walk", "_perturb_search",
                                            "_beam")]
TIERED += [etm_planner._place, etm_planner._improve, cycles.layer_cycles]


@pytest.fixture
def tier(monkeypatch):
    """tier("python"): every tiered kernel interpreted, whatever the size; tier("compiled"):
    every one compiled."""

    def force(which: str) -> None:
        if which == "python":  # (even where this process has compiled them already)
            monkeypatch.setattr(jit.Tiered, "__call__", lambda t, *args: t._interpret(args))
        else:
            monkeypatch.undo()
            monkeypatch.setattr(jit, "TIERING", False)
    return force


def _problem(n: int, seed: int, span: int, cap_blocks: int):
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, max(1, n * 3 // 4), n)
    ends = starts + rng.integers(0, span, n)
    sizes = rng.integers(1, 200, n) * 64
    scores = rng.random(n) * 100
    return sizes, starts, ends, scores, 4096 * cap_blocks


# tiny_cnn's deploy problem as npu_runtime.deploy poses it for zg330 (17 feature maps:
# bytes, first and last op, score; OCM 2 MiB), recorded from its deploy
TINY_CNN = (
    [32768, 8192, 8192, 8192, 8192, 2048, 2048, 32, 32, 32, 2048, 8192, 8192, 32, 2048, 32,
     8192],
    [1, 2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 14, 15, 16, 7, 12, 15],
    [2, 5, 4, 5, 15, 8, 13, 11, 12, 13, 14, 15, 16, 17, 7, 12, 15],
    [65536, 24576, 16384, 16384, 24576, 6144, 6144, 64, 64, 64, 4096, 16384, 16384, 64, 4096,
     64, 16384],
)


def _plans(capacity_cases):
    out = []
    for sizes, starts, ends, scores, cap in capacity_cases:
        p = ocm.plan_ocm(sizes, starts, ends, scores, cap, ocm.OcmOpt.BEST_SCORE, alignment=64)
        e = etm.plan_etm_detailed(sizes=sizes, starts=starts, ends=ends, alignment=64)
        out.append((p.offsets.tolist(), p.score, p.option_used,
                    {k: v for k, v in p.per_option_scores.items()}, e.offsets.tolist(),
                    e.total, e.strategy, e.iterations))
    return out


def test_planners_give_the_same_plans_interpreted_and_compiled(tier):
    cases = [(*TINY_CNN, cap) for cap in (2 << 20, 40960, 16384, 4096)]
    cases += [_problem(n, seed, span, cap) for n, seed, span, cap in
              [(12, 0, 3, 1), (17, 1, 8, 4), (24, 2, 8, 4), (30, 3, 20, 2), (40, 0, 8, 4)]]
    tier("python")
    py = _plans(cases)
    assert ocm_options._beam.calls[0] and etm_planner._improve.calls[0]  # really interpreted
    assert any(s.endswith("+climb") for *_, s, _ in py)  # the annealed search ran
    tier("compiled")
    assert _plans(cases) == py


def test_cycle_model_gives_the_same_counts_interpreted_and_compiled(tier):
    rng = np.random.default_rng(0)
    hw = np.array([4, 4, 16, 1024, 2048, 1 << 16, 1 << 16, 1 << 16, 64, 10, 5], np.int64)
    lvs = []
    for kind in range(11):
        for _ in range(20):
            lv = cycles.new_layer_vector()
            lv[:] = rng.integers(1, 70, cycles.L_SIZE)
            lv[cycles.L_KIND] = kind
            lv[[cycles.L_IN_MEM, cycles.L_OUT_MEM, cycles.L_IN1_MEM, cycles.L_WGT_MEM]] = \
                rng.integers(0, 2, 4)
            lv[cycles.L_TILE_ROWS] = rng.integers(0, 9)
            lv[cycles.L_WGT_BYTES] = rng.integers(0, 1 << 17)
            lvs.append(lv)
    tier("python")
    py = [cycles.layer_cycles(lv, hw, cycles.new_result_vector()).tolist() for lv in lvs]
    assert cycles.layer_cycles.calls[0] >= len(lvs)
    tier("compiled")
    assert [cycles.layer_cycles(lv, hw, cycles.new_result_vector()).tolist()
            for lv in lvs] == py


def _fresh_kernel():
    """A kernel no process has compiled, with no disk cache (its index cannot hold it)."""
    def add_one(x):
        for i in range(x.shape[0]):
            x[i] += 1
        return x.shape[0]
    return njit(no_cfunc_wrapper=True)(add_one)


def test_a_tiered_kernel_runs_python_while_small_and_cheap_then_compiles():
    k = _fresh_kernel()
    t = jit.tiered(k, small=lambda x: x.shape[0] <= 8, budget_s=10.0)
    x = np.zeros(4, np.int64)
    assert t(x) == 4 and x.tolist() == [1] * 4
    assert t.calls == [1, 0] and not k.signatures  # Python: nothing compiled
    assert t(np.zeros(9, np.int64)) == 9  # not small: compiled
    assert t.calls == [1, 1] and len(k.signatures) == 1
    t(x)  # compiled now: no more Python
    assert t.calls == [1, 2] and x.tolist() == [2] * 4


def test_a_tiered_kernel_compiles_once_python_has_cost_its_budget():
    k = _fresh_kernel()
    t = jit.tiered(k, budget_s=0.0)
    t(np.zeros(3, np.int64))
    assert t.calls == [0, 1] and len(k.signatures) == 1


def test_a_kernel_compiled_elsewhere_in_the_process_runs_compiled():
    k = _fresh_kernel()
    k(np.zeros(2, np.int64))
    t = jit.tiered(k, budget_s=10.0)
    t(np.zeros(2, np.int64))
    assert t.calls == [0, 1]
    assert jit.compiled_for(k, (np.zeros(2, np.int64),))
    assert not jit.compiled_for(k, (np.zeros(2, np.int32),))


def test_interpreted_runs_the_callees_as_python():
    # `_perturb_search` calls kernels and helpers (`_fit`, `_refill`, `_rand`...): all Python
    from npu_model.planners.ocm import kernels
    f = jit.interpreted(kernels._perturb_search)
    assert f.__code__ is kernels._perturb_search.py_func.__code__
    assert f.__globals__["_fit"].__code__ is kernels._fit.py_func.__code__
    assert f.__globals__["_refill"].__globals__ is f.__globals__
    assert jit.interpreted(len) is len


COLD = textwrap.dedent("""
    import json
    import numpy as np
    from npu_model import cycles
    from npu_model.planners import etm, ocm
    from npu_model.planners.etm import planner, search
    from npu_model.planners.ocm import kernels, options
    sizes, starts, ends, scores = {tiny!r}
    p = ocm.plan_ocm(sizes, starts, ends, scores, 2 << 20, ocm.OcmOpt.BEST_SCORE, alignment=64)
    e = etm.plan_etm_detailed(sizes=sizes, starts=starts, ends=ends, alignment=64)
    hw = np.array([4, 4, 16, 1024, 2048, 1 << 16, 1 << 16, 1 << 16, 64, 10, 5], np.int64)
    lv = cycles.new_layer_vector()
    lv[:] = 3
    cycles.layer_cycles(lv, hw, cycles.new_result_vector())
    compiled = [n for m in (kernels, search, cycles) for n, d in vars(m).items()
                if hasattr(d, "signatures") and d.signatures]
    print(json.dumps(dict(compiled=compiled, python=options._beam.calls[0]
                          + options._perturb_search.calls[0] + planner._place.calls[0])))
""")


def test_a_fresh_install_plans_tiny_cnn_without_compiling(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", COLD.format(tiny=TINY_CNN)], env=env,
                         capture_output=True, text=True, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["compiled"] == [] and got["python"] >= 3

"""The deploy planners' and the cycle model's Numba kernels keep the compile forms of
`npu_model.kernels.jit` (issue 30, item 4: a fresh install compiles them on its first deploy):
no C wrappers, no CPython wrappers on helpers, cached on disk, and one specialisation per
kernel after a deploy's worth of planning and cycle counting (no literal, omitted-argument or
non-C-layout variants)."""

from __future__ import annotations

import numpy as np
import pytest
from numba import config
from numba.core import types

from npu_model import cycles
from npu_model.kernels import jit
from npu_model.kernels.jit import HelperCallError
from npu_model.planners import etm, ocm
from npu_model.planners.etm import search, verify
from npu_model.planners.ocm import kernels as ocm_kernels

MODULES = (cycles, search, verify, ocm_kernels)

pytestmark = pytest.mark.skipif(config.DISABLE_JIT, reason="NUMBA_DISABLE_JIT: no dispatchers")


def _dispatchers():
    for mod in MODULES:
        for name, obj in vars(mod).items():
            if hasattr(obj, "py_func") and obj.py_func.__module__ == mod.__name__:
                yield f"{mod.__name__}.{name}", obj


def test_planner_and_cycle_kernels_compile_no_unused_wrappers():
    found = dict(_dispatchers())
    assert len(found) >= 20, sorted(found)
    helpers = {n for n, d in found.items() if isinstance(d, jit._HelperDispatcher)}
    # what only other kernels call is a helper
    assert {"npu_model.planners.ocm.kernels._fit", "npu_model.planners.ocm.kernels._argsort2",
            "npu_model.cycles._xfer", "npu_model.planners.etm.search._excess"} <= helpers
    for name, d in found.items():
        opts = d.targetoptions
        assert opts.get("no_cfunc_wrapper"), f"{name} compiles a C wrapper no one calls"
        assert type(d._cache).__name__ != "NullCache", f"{name} is not cached on disk"
        assert bool(opts.get("no_cpython_wrapper")) == (name in helpers), name


def test_a_planner_helper_is_not_callable_from_python():
    with pytest.raises(HelperCallError, match=r"planners\.ocm\.kernels\._fit is a kernel helper"):
        ocm_kernels._fit(0, np.zeros(1, np.int64), np.zeros(1, np.int64), np.zeros(2, np.int64),
                         np.zeros(0, np.int64), 64, np.int64(0))
    # its Python function runs (what NUMBA_DISABLE_JIT runs)
    assert search._excess.py_func(np.array([64, 64]), np.array([0, 64]), 96) == 32


def _deploy_like_run():
    """OCM BEST_SCORE (all three options), an ETM plan that needs the annealed climb, a plan
    check, and the cycles of a few layers: the kernels a deploy and a forward compile."""
    rng = np.random.default_rng(0)
    n = 40
    starts = rng.integers(0, 30, n)
    ends = starts + rng.integers(0, 8, n)
    sizes = rng.integers(1, 200, n) * 64
    scores = rng.random(n) * 100
    plan = ocm.plan_ocm(sizes, starts, ends, scores, 4096, ocm.OcmOpt.BEST_SCORE, alignment=64)
    assert set(plan.per_option_scores) == {ocm.OcmOpt.OPTION1, ocm.OcmOpt.OPTION2,
                                           ocm.OcmOpt.OPTION3}
    e = etm.plan_etm_detailed(sizes=sizes, starts=starts, ends=ends, alignment=64)
    assert e.strategy.endswith("+climb") and e.total >= e.lower_bound
    etm.verify_plan(e.offsets, sizes, starts, ends, alignment=64, total=e.total)
    hw = np.array([4, 4, 16, 1024, 2048, 1 << 16, 1 << 16, 1 << 16, 64, 10, 5], np.int64)
    for mem in (0, 1):  # the store goes to ETM, then to OCM (both _xfer call sites)
        lv = cycles.new_layer_vector()
        lv[[cycles.L_OUT_H, cycles.L_IN_H, cycles.L_OUT_W, cycles.L_IN_W]] = 8
        lv[[cycles.L_OUT_C, cycles.L_IN_C, cycles.L_OCB, cycles.L_ICB, cycles.L_OCB_EFF,
            cycles.L_KH, cycles.L_SH, cycles.L_DH, cycles.L_ESZ_IN, cycles.L_ESZ_OUT,
            cycles.L_GROUPS, cycles.L_CIN_G, cycles.L_COUT_G, cycles.L_TAPS]] = 1
        lv[cycles.L_OUT_MEM] = mem
        res = cycles.layer_cycles(lv, hw, cycles.new_result_vector())
        assert res[cycles.R_CYCLES] >= res[cycles.R_COMPUTE] > 0


def test_one_specialisation_per_planner_and_cycle_kernel(monkeypatch):
    monkeypatch.setattr(jit, "TIERING", False)  # compiled, however small the calls
    _deploy_like_run()
    # the kernels Python calls (helpers show signatures only where this process compiled
    # them, i.e. with a cold cache)
    used = {n: d.signatures for n, d in _dispatchers() if d.signatures}
    for name in ("ocm.kernels._beam", "ocm.kernels._perturb_search", "ocm.kernels._evict_walk",
                 "etm.search._place", "etm.search._improve", "cycles.layer_cycles_kernel"):
        assert any(n.endswith(name) for n in used), (name, sorted(used))
    for name, sigs in used.items():
        assert len(sigs) == 1, f"{name}: {len(sigs)} specialisations {sigs}"
        for t in sigs[0]:
            assert not isinstance(t, (types.Literal, types.Omitted)), (name, sigs[0])
            assert not isinstance(t, types.Array) or t.layout == "C", (name, sigs[0])

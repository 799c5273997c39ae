"""ETM feature-map reuse planner: plan time and total / lower bound per network.

Targets (issue 5): total == lower bound on every zoo network; within 1% of it on random
network-shaped instances with aliasing; a 500-op network planned in under 50 ms. Plan times
are best-of after warm-up (compiled code from the Numba cache); ratios go to `extra_info`.
"""

import numpy as np
import pytest
from etm_instances import random_network_instance
from etm_network import instance_from_network

from npu_model.planners.etm import (
    plan_etm_detailed,
    plan_no_reuse,
)
from xcompile import zoo


@pytest.fixture(scope="module", params=["tiny_cnn", "resnet18", "mobilenet_v2", "yolov5s"])
def zoo_case(request):
    return request.param, instance_from_network(zoo.build(request.param))


def _record(benchmark, inst, plan):
    _, no_reuse = plan_no_reuse(**inst)
    benchmark.extra_info.update({
        "buffers": int(len(inst["sizes"])),
        "aliased": int((np.asarray(inst["alias_owner"]) >= 0).sum()),
        "lower_bound": plan.lower_bound,
        "total": plan.total,
        "ratio": plan.ratio,
        "no_reuse": no_reuse,
        "saving_vs_no_reuse": 1.0 - plan.total / no_reuse if no_reuse else 0.0,
        "strategy": plan.strategy,
        "search_steps": plan.iterations,
    })


def test_plan_zoo(benchmark, zoo_case):
    name, inst = zoo_case
    plan = benchmark.pedantic(plan_etm_detailed, kwargs=inst, rounds=20, warmup_rounds=3)
    _record(benchmark, inst, plan)
    benchmark.extra_info["network"] = name
    assert plan.total == plan.lower_bound


@pytest.mark.parametrize("irregular", [False, True], ids=["cnn-like", "irregular"])
def test_plan_500_ops(benchmark, irregular):
    inst = random_network_instance(500, 3, irregular=irregular)
    plan = benchmark.pedantic(plan_etm_detailed, kwargs=inst, rounds=20, warmup_rounds=3)
    _record(benchmark, inst, plan)
    assert plan.ratio <= 1.01
    if benchmark.stats is not None:  # None under --benchmark-disable: no timing to check
        assert benchmark.stats.stats.min < 0.050


@pytest.mark.parametrize("irregular", [False, True], ids=["cnn-like", "irregular"])
def test_random_worst_ratio(benchmark, irregular):
    """Worst total / bound over 200 random networks of 10 to 500 ops (seeds 0..199)."""
    cases = [random_network_instance(10 + (s * 37) % 491, s, irregular=irregular)
             for s in range(200)]

    def run():
        return [plan_etm_detailed(**inst) for inst in cases]

    plans = benchmark.pedantic(run, rounds=1, warmup_rounds=1)
    ratios = np.array([p.ratio for p in plans])
    benchmark.extra_info.update({"instances": len(cases), "worst_ratio": float(ratios.max()),
                                 "mean_ratio": float(ratios.mean()),
                                 "at_bound": int((ratios == 1.0).sum())})
    assert ratios.max() <= 1.01

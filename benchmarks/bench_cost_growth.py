"""How the simulated forward's cost grows with the work: yolov5s at 160, 320, 640 and 960.

The simulator's time per forward against the network's MACs (the profiler's count, summed over
the HardOps) on a log-log fit: a fixed cost per layer or per run shows as an exponent below 1,
kernels that slow down on large maps (cache misses, quadratic work) as one above it. Target
(issue 11): exponent <= 1.05. Every size is compiled int8 throughout (no mixed-precision
promotion, which picks int16 layers at some sizes and would compare two precisions), once per
source stamp (.icraft/cache/costgrowth_*).

    python -m pytest benchmarks/bench_cost_growth.py --benchmark-only -s
"""

import math
import os

import numpy as np
import pytest
from helpers import best_of, load_average

zg330backend = pytest.importorskip("zg330backend")

from host_backend import HostBackend  # noqa: E402
from xcompile import zoo  # noqa: E402
from xcompile.cache import cache_dir  # noqa: E402
from xcompile.pipeline import DEFAULTS, compile_model  # noqa: E402
from xrt import Device, HostDevice, Session  # noqa: E402
from xrt.cli.run_cmd import load_model  # noqa: E402

MODEL = "yolov5s"
SIZES = (160, 320, 640, 960)


def _compiled(size: int) -> str:
    """yolov5s at `size` compiled int8 for the ZG330 (cached per source stamp)."""
    name = f"{MODEL}_{size}"
    out = cache_dir(f"costgrowth_{name}")
    path = os.path.join(out, f"{name}_ZG.json")
    if not os.path.exists(path):
        compile_model(dict(DEFAULTS, model=MODEL, target="zg330", output=out, name=name,
                           input_size=size, calib_count=4, min_cosine=0.0))
    return path


def _forward_and_macs(size: int) -> tuple[float, int]:
    """(best seconds per simulated forward, MACs per forward) of yolov5s at `size`."""
    net = load_model(_compiled(size), None)
    dev = Device.Open("sim://zg330")
    sess = Session.Create([zg330backend.ZG330Backend, HostBackend], net.view(0),
                          [dev, HostDevice.Default()])
    sess.apply()
    x = zoo.calibration_set(MODEL, count=1, seed=1, input_size=size)[0][0]
    try:
        seconds = best_of(lambda: sess.forward([x]), rounds=3, warmup=1)
        macs = sum(int(v["macs"]) for v in sess.backends[0].profileInfo().values())
    finally:
        sess.close()
        dev.close()
    return seconds, macs


def test_cost_grows_with_macs(benchmark):
    rows = [(size, *_forward_and_macs(size)) for size in SIZES]
    slope = float(np.polyfit([math.log(m) for _, _, m in rows],
                             [math.log(s) for _, s, _ in rows], 1)[0])
    benchmark.pedantic(lambda: None, rounds=1)
    benchmark.extra_info.update(exponent=slope, rows=[
        {"size": size, "ms": s * 1e3, "gmacs": m / 1e9} for size, s, m in rows])
    print()
    for size, s, m in rows:
        print(f"yolov5s-{size}: {s * 1e3:8.1f} ms for {m / 1e9:6.2f} GMAC "
              f"({m / s / 1e9:5.1f} GMAC/s)")
    print(f"cost exponent {slope:.3f} (target <= 1.05; {load_average()})")
    assert slope <= 1.05, f"simulated time grows as MACs^{slope:.3f} (target <= 1.05)"

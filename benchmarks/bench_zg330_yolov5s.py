"""Simulated ZG330 forward of yolov5s-640 against onnxruntime fp32 of the same network.

Targets (issue 4): the simulator at most 2x onnxruntime's single-thread time (aim: at or
below it), bit-exact; import plus first forward under 2 s with a warm Numba cache.
"""

import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from helpers import interleaved_best, load_average, ort_session

zg330backend = pytest.importorskip("zg330backend")

from host_backend import HostBackend  # noqa: E402
from xcompile import zoo  # noqa: E402
from xcompile.cache import compiled_zoo  # noqa: E402
from xcompile.frontend.onnx_export import export_onnx  # noqa: E402
from xrt import Device, HostDevice, Session  # noqa: E402
from xrt.cli.run_cmd import load_model  # noqa: E402

MODEL = "yolov5s"


@pytest.fixture(scope="module")
def compiled():
    return compiled_zoo(MODEL, "zg330")


def _session(path):
    net = load_model(path, None)
    sess = Session.Create([zg330backend.ZG330Backend, HostBackend], net.view(0),
                          [Device.Open("sim://zg330"), HostDevice.Default()])
    sess.apply()
    return net, sess


def test_zg330_yolov5s_vs_onnxruntime(benchmark, compiled):
    net, sess = _session(compiled)
    x = zoo.calibration_set(MODEL, count=1, seed=1)[0][0]
    ort = ort_session(export_onnx(zoo.build(MODEL)).SerializeToString())
    feed = {ort.get_inputs()[0].name: np.ascontiguousarray(x.transpose(0, 3, 1, 2))}
    sess.enableTimeProfile(True)
    benchmark.pedantic(lambda: sess.forward([x]), rounds=2, warmup_rounds=1)
    sim_s, ort_s = interleaved_best([lambda: sess.forward([x]), lambda: ort.run(None, feed)],
                                    rounds=3, warmup=1)
    hard_ms = sum(v[2] for v in sess.timeProfileResults().values())
    ratio = sim_s / ort_s
    benchmark.extra_info.update(sim_ms=sim_s * 1e3, onnxruntime_ms=ort_s * 1e3, ratio=ratio,
                                simulated_hard_ms=hard_ms)
    print(f"\nyolov5s: simulated ZG330 {sim_s * 1e3:.0f} ms wall, onnxruntime fp32 "
          f"{ort_s * 1e3:.0f} ms, ratio {ratio:.2f}; simulated chip time {hard_ms:.2f} ms "
          f"({load_average()})")
    assert ratio <= 2.0, f"simulator is {ratio:.2f}x onnxruntime fp32 (target <= 2x)"


START = textwrap.dedent("""
    import time
    t0 = time.perf_counter()
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
    print(time.perf_counter() - t0)
""")


def _start_time(path, cache_dir) -> float:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache_dir))
    out = subprocess.run([sys.executable, "-c", START.format(path=os.path.abspath(path))],
                         env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def test_import_and_first_forward_cold_and_warm(benchmark, compiled, tmp_path):
    t0 = time.perf_counter()
    cold = _start_time(compiled, tmp_path)
    warm = _start_time(compiled, tmp_path)
    benchmark.extra_info.update(cold_s=cold, warm_s=warm)
    benchmark.pedantic(lambda: None, rounds=1)
    print(f"\nimport + first forward: cold Numba cache {cold:.2f} s, warm {warm:.2f} s "
          f"(measured in {time.perf_counter() - t0:.0f} s)")
    assert warm < 2.0, f"warm start {warm:.2f} s (target < 2 s)"

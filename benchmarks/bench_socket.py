"""yolov5s-640 forward through `socket://zg330@127.0.0.1:PORT` against in-process `sim://zg330`.

The server is the real `xrt serve zg330 --port 0` in a subprocess (its own interpreter, as on a
board); both sessions run in the same benchmark, interleaved, so machine load hits both alike.
Target (issue 6): socket at most 1.3x the in-process time, outputs byte-identical.
"""

import os
import subprocess
import sys

import numpy as np
import pytest
from helpers import interleaved_best, load_average

zg330backend = pytest.importorskip("zg330backend")

from host_backend import HostBackend  # noqa: E402
from xcompile import zoo  # noqa: E402
from xcompile.cache import compiled_zoo  # noqa: E402
from xrt import Device, HostDevice, Session  # noqa: E402
from xrt.cli.run_cmd import load_model  # noqa: E402

MODEL = "yolov5s"
INPUT_SIZE = int(os.environ.get("BENCH_SOCKET_INPUT_SIZE", "640"))


@pytest.fixture(scope="module")
def compiled():
    return compiled_zoo(MODEL, "zg330", INPUT_SIZE if INPUT_SIZE != 640 else None)


@pytest.fixture(scope="module")
def server_port():
    proc = subprocess.Popen([sys.executable, "-m", "xrt", "serve", "zg330", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if "127.0.0.1:" not in line:
        proc.kill()
        raise RuntimeError(f"xrt serve did not start: {line}{proc.stderr.read()}")
    yield int(line.split("127.0.0.1:")[1].split()[0])
    proc.terminate()
    proc.communicate(timeout=30)


def _session(path, dev):
    net = load_model(path, None)
    sess = Session.Create([zg330backend.ZG330Backend, HostBackend], net.view(0),
                          [dev, HostDevice.Default()])
    sess.apply()
    return sess


def test_socket_vs_in_process(benchmark, compiled, server_port):
    kw = {"input_size": INPUT_SIZE} if INPUT_SIZE != 640 else {}
    x = zoo.calibration_set(MODEL, count=1, seed=1, **kw)[0][0]
    sock_dev = Device.Open(f"socket://zg330@127.0.0.1:{server_port}")
    sock_dev.setWaitTime(0)  # a loaded machine may take long for one icoreCalc
    local = _session(compiled, Device.Open("sim://zg330"))
    remote = _session(compiled, sock_dev)
    want = [np.asarray(t).copy() for t in local.forward([x])]
    got = [np.asarray(t).copy() for t in remote.forward([x])]
    assert all(a.tobytes() == b.tobytes() for a, b in zip(want, got)), "outputs differ"
    r0 = sock_dev.server_info()["requests"]
    benchmark.pedantic(lambda: remote.forward([x]), rounds=2, warmup_rounds=1)
    reqs = (sock_dev.server_info()["requests"] - r0 - 1) // 3
    local_s, sock_s = interleaved_best([lambda: local.forward([x]), lambda: remote.forward([x])],
                                       rounds=3, warmup=1)
    ratio = sock_s / local_s
    benchmark.extra_info.update(in_process_ms=local_s * 1e3, socket_ms=sock_s * 1e3,
                                ratio=ratio, requests_per_forward=reqs,
                                input_size=INPUT_SIZE)
    print(f"\n{MODEL}-{INPUT_SIZE}: in-process sim {local_s * 1e3:.0f} ms, socket "
          f"{sock_s * 1e3:.0f} ms ({reqs} requests per forward), ratio {ratio:.2f} "
          f"({load_average()})")
    local.close()
    remote.close()
    sock_dev.close()
    assert ratio <= 1.3, f"socket forward is {ratio:.2f}x in-process (target <= 1.3x)"

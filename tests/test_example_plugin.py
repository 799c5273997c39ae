"""The example plugin (examples/numpy_cpu) as a third party ships it: built and installed with
pip into a fresh virtual environment, found by `xrt plugins` through its entry point, bound by
`Session.Create([NumpyCpuBackend, HostBackend], ...)` (asserting where each op ran) and checked
by `xrt conformance` and by its own test suite (which uses the kit as a pytest plugin).

The environment is `python -m venv --system-site-packages` plus a .pth that adds this project's
virtual environment (so xrt, numpy and the shipped plugins are importable, as after
`pip install icraft-xrt-sim`); the example is installed with `pip install --no-deps
--no-build-isolation --no-index` when this environment can build it (setuptools with
bdist_wheel), else with pip's build isolation from its configured index.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "numpy_cpu"


def _run(cmd: list[str], cwd: Path | None = None, timeout: int = 300
         ) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "XRT_"))}
    env["XRT_PROGRESS"] = "0"
    env.pop("PYTHONPATH", None)
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=env)


def _can_build_offline() -> bool:
    """Whether setuptools here builds wheels without a download (bdist_wheel in setuptools
    >= 70.1, or the `wheel` package)."""
    probe = ("import importlib.util as u, sys; "
             "sys.exit(0 if u.find_spec('wheel') or "
             "u.find_spec('setuptools.command.bdist_wheel') else 1)")
    return _run([sys.executable, "-c", probe]).returncode == 0


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("plugin-venv") / "venv"
    made = _run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip",
                 str(home)])
    assert made.returncode == 0, made.stderr
    py = home / "bin" / "python"
    purelib = _run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
    lines = "".join(f"import site; site.addsitedir({p!r})\n" for p in site.getsitepackages())
    Path(purelib.stdout.strip(), "xrt_project_venv.pth").write_text(lines)
    # built from a copy: the build writes build/ and *.egg-info beside the sources
    src = home.parent / "xrt-numpy-cpu"
    shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns(
        "build", "*.egg-info", "__pycache__", ".pytest_cache"))
    pip = [sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "-q"]
    if _can_build_offline():
        done = _run([*pip, "--no-build-isolation", "--no-index", str(src)])
    else:
        done = _run([*pip, str(src)])
        if done.returncode != 0:
            pytest.skip(f"cannot build the example: this environment's setuptools has no "
                        f"bdist_wheel (install `wheel`) and pip's index is unreachable: "
                        f"{done.stderr.strip().splitlines()[-1:]}")
    assert done.returncode == 0, done.stderr
    return py


def test_installed_plugin_is_discovered_by_xrt_plugins(venv):
    out = _run([str(venv), "-m", "xrt", "plugins", "--json"])
    assert out.returncode == 0, out.stderr
    entries = json.loads(out.stdout)["entries"]
    mine = {(e["kind"], e["name"]) for e in entries if e["plugin"] == "numpy_cpu"}
    assert mine == {("backend", "NumpyCpu"), ("scheme", "npcpu://"),
                    ("command", "numpy-cpu-ops")}
    assert {e["distribution"] for e in entries if e["plugin"] == "numpy_cpu"} == \
        {"xrt-numpy-cpu 0.1.0"}


SESSION = """
import contextlib, io, json
import numpy as np
import xir
import xrt_numpy_cpu
from xrt import Device, Session, plugins
from xrt.cli import main
from xrt_numpy_cpu import NumpyCpuBackend

command = io.StringIO()
with contextlib.redirect_stdout(command):
    main(["numpy-cpu-ops"])

HostBackend = plugins.backend_class("Host")
rng = np.random.default_rng(0)
b = xir.NetworkBuilder("third_party")
x = b.input([1, 10, 10, 3], layout="NHWC")
y = b.relu(b.conv2d(x, rng.standard_normal((3, 3, 3, 4)).astype(np.float32),
                    pad_top=1, pad_bottom=1, pad_left=1, pad_right=1))
y = b.max_pool2d(b.add(y, y), pool_height=2, pool_width=2, stride_height=2, stride_width=2)
b.output(b.sigmoid(y))
net = b.build()
sess = Session.Create([NumpyCpuBackend, HostBackend], net.view(0),
                      [Device.Open("npcpu://"), Device.Open("host://")])
ref = Session.Create([HostBackend], net.view(0), [Device.Open("host://")])
sess.apply(); ref.apply()
sess.enableTimeProfile(True)
data = rng.standard_normal((1, 10, 10, 3)).astype(np.float32)
got, want = np.asarray(sess.forward([data])[0]), np.asarray(ref.forward([data])[0])
print(json.dumps({
    "module": xrt_numpy_cpu.__file__, "command": command.getvalue().strip(),
    "where": {op.op_type: type(sess.backendBindings()[op.op_id]).name for op in net.ops},
    "max_diff": float(np.abs(got - want).max()),
    "hard_ms": {str(k): v[2] for k, v in sess.timeProfileResults().items()},
}))
"""


def test_session_binds_the_plugins_ops_and_matches_the_host(venv):
    out = _run([str(venv), "-c", SESSION])
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    # installed, not imported from the source tree; its command registered
    assert "site-packages" in res["module"] and str(EXAMPLE) not in res["module"]
    assert res["command"] == "NumpyCpu runs: Add, Conv2d, MaxPool2d, Relu"
    assert res["where"] == {"Input": "Host", "Conv2d": "NumpyCpu", "Relu": "NumpyCpu",
                            "Add": "NumpyCpu", "MaxPool2d": "NumpyCpu", "Sigmoid": "Host",
                            "Output": "Host"}
    assert res["max_diff"] < 1e-5
    assert sum(1 for v in res["hard_ms"].values() if v > 0) >= 4  # its kernels' times


def test_xrt_conformance_on_the_installed_plugin(venv):
    out = _run([str(venv), "-m", "xrt", "conformance", "NumpyCpu", "--trials", "2"])
    assert out.returncode == 0, out.stdout + out.stderr
    assert "NumpyCpu: 12 passed, 0 failed, 9 skipped" in out.stdout
    for check in ("ops[Conv2d]", "ops[Relu]", "ops[Add]", "ops[MaxPool2d]", "lifecycle",
                  "snapshot"):
        assert check in out.stdout


@pytest.mark.slow
def test_the_examples_own_suite_passes_against_the_installed_plugin(venv):
    """The example's tests (the kit as a pytest plugin, kernels against onnxruntime) run
    from its folder against the installed distribution."""
    out = _run([str(venv), "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
               cwd=EXAMPLE)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert " failed" not in out.stdout and " passed" in out.stdout

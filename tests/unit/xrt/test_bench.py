"""`xrt bench`: host latency statistics, the simulated chip's figures, --compare variants, the
JSON summary, --time, socket:// devices and its refusals."""

from __future__ import annotations

import json

import pytest

from xrt.cli import main

pytest.importorskip("zg330backend")

CHIP = "ZG330,sim://zg330;Host"


def _bench(tmp_path, *args: str, target: str = "zg330") -> dict:
    out = tmp_path / "bench.json"
    code = main(["bench", "tiny_cnn", *(["--target", target] if target else []), "--warmup", "1",
                 "--json", str(out), *args])
    assert code == 0
    return json.loads(out.read_text())


def test_bench_compares_deployment_options_and_hardware_variants(tmp_path, capsys):
    summary = _bench(tmp_path, "--backends", CHIP, "--iterations", "4", "--compare",
                     "ocm=NONE,BEST_SCORE", "sim://zg330?mpe=2x4", "merge=off")
    table = capsys.readouterr().out
    assert "xrt bench" in table and "p99 ms" in table and "MAC util" in table
    res = {r["variant"]: r for r in summary["results"]}
    assert list(res) == ["as given", "ocm=NONE", "ocm=BEST_SCORE", "sim://zg330?mpe=2x4",
                         "merge=off"]
    for r in res.values():
        h, c = r["host"], r["chip"]
        assert h["count"] == 4
        assert h["min_ms"] <= h["median_ms"] <= h["p90_ms"] <= h["p99_ms"] <= h["max_ms"]
        assert h["min_ms"] <= h["mean_ms"] <= h["max_ms"] and h["throughput_fps"] > 0
        assert c["latency_ms"] > 0 and c["throughput_fps"] == pytest.approx(1e3 / c["latency_ms"])
        assert c["clock_mhz"] == pytest.approx(1000)
        assert c["cycles"] == pytest.approx(c["latency_ms"] * 1e-3 * 1e9, abs=1)
        assert 0 < c["utilisation"] < 1 and c["macs"] > 1e6
        assert r["placement"]["ZG330"] > 0 and r["placement"]["Host"] > 0
    base, none = res["as given"]["chip"], res["ocm=NONE"]["chip"]
    # without OCM every feature map goes through ETM: no OCM bytes, more ETM bytes, slower
    assert none["ocm_option"] == "NONE" and none["ocm_bytes"] == 0 and base["ocm_bytes"] > 0
    assert none["etm_bytes"] > base["etm_bytes"] and none["latency_ms"] > base["latency_ms"]
    assert res["ocm=BEST_SCORE"]["chip"]["cycles"] == base["cycles"]  # the default option
    # half the MPE array: half the peak MACs per cycle, the same MACs
    half = res["sim://zg330?mpe=2x4"]["chip"]
    assert half["peak_macs_per_cycle"] * 2 == base["peak_macs_per_cycle"]
    assert half["macs"] == base["macs"] and half["cycles"] > base["cycles"]
    # one icoreCalc per HardOp: each pays its launch overhead
    off = res["merge=off"]["chip"]
    assert off["merge"] is False and base["merge"] is True
    assert off["latency_ms"] > base["latency_ms"]


def test_bench_time_mode_and_host_only(tmp_path):
    summary = _bench(tmp_path, "--time", "0.3", target="")
    (r,) = summary["results"]
    assert summary["time_s"] == 0.3 and summary["iterations"] is None
    assert r["host"]["count"] >= 1 and r["chip"] is None  # the HostBackend simulates no chip
    assert r["placement"] == {"Host": r["placement"]["Host"]}


def test_bench_over_a_socket_device_gives_the_simulators_figures(tmp_path):
    from xrt import Device
    from xrt.remote.server import DeviceServer

    srv = DeviceServer(Device.Open("sim://zg330"), close_device=True).start()
    try:
        host, port = srv.address
        summary = _bench(tmp_path, "--backends", f"ZG330,socket://zg330@{host}:{port};Host",
                         "--iterations", "2", "--compare", "sim://zg330")
    finally:
        srv.shutdown()
    remote, local = (r["chip"] for r in summary["results"])
    assert remote["cycles"] == local["cycles"] and remote["macs"] == local["macs"]
    assert remote["etm_bytes"] == local["etm_bytes"] and remote["ocm_bytes"] > 0


@pytest.mark.parametrize("args, message", [
    (["--compare", "ocm"], "give KEY=V1,V2"),
    (["--compare", "ocm=NOPE"], "ocm=NOPE: not one of"),
    (["--compare", "merge=maybe"], "give one of ['off', 'on']"),
    (["--compare", "mpe=9x9"], "does not fit"),
    (["--iterations", "0"], "--iterations 0"),
    (["--warmup", "-1"], "--warmup -1"),
])
def test_bench_refusals_are_one_line(tmp_path, capsys, args, message):
    code = main(["bench", "tiny_cnn", "--target", "zg330", "--backends", CHIP, *args])
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_bench_ocm_option_on_a_host_only_session_is_refused(capsys):
    assert main(["bench", "tiny_cnn", "--compare", "ocm=NONE"]) == 2
    assert "ocmOptimize" in capsys.readouterr().err


@pytest.mark.slow
def test_readme_block_runs_as_written(tmp_path):
    """README's "Benchmarks, reports, plugin conformance" shell block, line by line, in a
    fresh folder."""
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path

    readme = Path(__file__).resolve().parents[3] / "README.md"
    block = re.search(r"## Benchmarks, reports, plugin conformance\n\n```sh\n(.*?)```",
                      readme.read_text(encoding="utf-8"), re.S).group(1)
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    for line in block.strip().splitlines():
        res = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=600)
        assert res.returncode == 0, f"{line}\n{res.stdout}\n{res.stderr}"
    assert json.loads((tmp_path / "out" / "bench.json").read_text())["iterations"] == 20
    assert "report-data" in (tmp_path / "out" / "tiny_cnn.html").read_text()


def test_bench_json_raw_model_with_given_inputs(tmp_path):
    import numpy as np

    from xcompile import zoo

    net = zoo.build("tiny_cnn")
    net.save(tmp_path / "tiny.json")
    x = zoo.calibration_set("tiny_cnn", count=1)[0][0]
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "b.json"
    assert main(["bench", str(tmp_path / "tiny.json"), "--inputs", str(tmp_path / "x.npy"),
                 "--warmup", "0", "--iterations", "3", "--json", str(out)]) == 0
    summary = json.loads(out.read_text())
    assert summary["network"] == "tiny_cnn" and summary["results"][0]["host"]["count"] == 3
    np.save(tmp_path / "bad.npy", np.zeros((1, 2), np.float32))
    assert main(["bench", str(tmp_path / "tiny.json"), "--inputs", str(tmp_path / "bad.npy")]
                ) == 2

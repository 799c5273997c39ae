"""`xeval.evaluate` / `xrt eval`: one row per sample against the float reference, identical in
this process, on 1 and 2 local Dask workers and on a scheduler with 2 workers started here; a
bad sample is a row with its error; a killed worker loses no sample; --resume runs only the
rest."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from xeval import evaluate
from xrt.errors import XrtError


def same(rows):
    """The rows without what depends on the host's timing."""
    return [{k: v for k, v in r.items() if k != "wall_ms"} for r in rows]


@pytest.fixture(scope="module")
def baseline(tiny, tmp_path_factory):
    out = tmp_path_factory.mktemp("base") / "r.jsonl"
    return evaluate(tiny["model"], tiny["data"], reference=tiny["float"], workers=0,
                    out=str(out), progress=False)


def test_rows_in_process(baseline, tiny):
    names = sorted(os.listdir(tiny["data"]))
    assert [r["sample"] for r in baseline] == names
    bad = [r for r in baseline if r["sample"] == "s05_bad.npy"]
    assert len(bad) == 1 and "CalibrationError" in bad[0]["error"] and "s05_bad.npy" in \
        bad[0]["error"]
    ok = [r for r in baseline if "error" not in r]
    assert len(ok) == 10
    for r in ok:  # int8 tiny_cnn against its float original: close, and the class agrees
        assert 0.98 < r["cosine"] <= 1.0 + 1e-9
        assert r["max_error"] > 0 and r["top1"] in (0, 1)
        assert r["cycles"] > 1000 and r["chip_ms"] > 0 and r["wall_ms"] > 0
        assert r["outputs"] == [[1, 10]]
    assert sum(r["top1"] for r in ok) >= 9


def test_rows_identical_on_local_workers(baseline, tiny, tmp_path):
    for n in (1, 2):
        rows = evaluate(tiny["model"], tiny["data"], reference=tiny["float"], workers=n,
                        out=str(tmp_path / f"w{n}.jsonl"), progress=False, batch=3)
        assert same(rows) == same(baseline), n


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def scheduler():
    """A Dask scheduler and two single-thread workers on 127.0.0.1, as a user starts them."""
    port = _free_port()
    addr = f"tcp://127.0.0.1:{port}"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    exe = os.path.dirname(sys.executable)
    procs = [subprocess.Popen([os.path.join(exe, "dask"), "scheduler", "--host", "127.0.0.1",
                               "--port", str(port), "--dashboard-address", ":0"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    for _ in range(2):
        procs.append(subprocess.Popen(
            [os.path.join(exe, "dask"), "worker", addr, "--nthreads", "1", "--nworkers", "1",
             "--dashboard-address", ":0"], env=env, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL))
    from distributed import Client

    client = Client(addr, timeout=60)
    client.wait_for_workers(2, timeout=60)
    yield addr, client
    client.close()
    for p in procs[::-1]:
        p.terminate()
    for p in procs:
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()


def test_rows_identical_on_a_scheduler_and_a_killed_worker_loses_nothing(baseline, tiny,
                                                                         tmp_path, scheduler):
    addr, client = scheduler
    rows = evaluate(tiny["model"], tiny["data"], reference=tiny["float"], cluster=addr,
                    out=str(tmp_path / "c.jsonl"), progress=False, batch=2)
    assert same(rows) == same(baseline)
    # many one-sample batches; one worker is SIGKILLed once results start to come back
    many = tmp_path / "many"
    many.mkdir()
    src = [f for f in sorted(os.listdir(tiny["data"])) if "bad" not in f]
    for k in range(120):
        os.link(os.path.join(tiny["data"], src[k % len(src)]), many / f"m{k:03d}.npy")
    out = tmp_path / "k.jsonl"
    result = {}
    th = threading.Thread(target=lambda: result.setdefault("rows", evaluate(
        tiny["model"], str(many), reference=tiny["float"], cluster=addr, out=str(out),
        progress=False, batch=1)))
    pids = list(client.run(os.getpid).values())
    th.start()
    deadline = time.time() + 60
    while time.time() < deadline and (not out.exists() or out.read_text().count("\n") < 3):
        time.sleep(0.005)
    alive = th.is_alive()
    os.kill(pids[0], signal.SIGKILL)
    th.join(120)
    assert alive, "the run ended before the worker was killed"
    rows = result["rows"]
    assert len(rows) == 120 and not [r for r in rows if "error" in r]
    written = {json.loads(line)["sample"] for line in out.read_text().splitlines()}
    assert written == {f"m{k:03d}.npy" for k in range(120)}
    by_src = {r["sample"]: r for r in baseline}
    for k, r in enumerate(rows):
        want = by_src[src[k % len(src)]]
        assert r["cosine"] == want["cosine"] and r["cycles"] == want["cycles"]


def test_resume_runs_only_the_rest(baseline, tiny, tmp_path):
    out = tmp_path / "r.jsonl"
    lines = [json.dumps(r) for r in baseline[:4]]
    out.write_text("\n".join(lines) + "\n" + '{"sample": "s07.npy", "cos')  # killed mid-write
    rows = evaluate(tiny["model"], tiny["data"], reference=tiny["float"], workers=0,
                    out=str(out), resume=True, progress=False)
    assert rows.ran == len(baseline) - 4
    assert same(rows) == same(baseline)
    again = evaluate(tiny["model"], tiny["data"], reference=tiny["float"], workers=0,
                     out=str(out), resume=True, progress=False)
    assert again.ran == 1  # only the unreadable sample is tried again
    assert same(again) == same(baseline)
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["sample"] for r in written].count("s07.npy") == 1  # the torn line is gone


def test_snapshot_model_and_limit(baseline, tiny, tmp_path):
    import xir
    from xrt import Device, Session, plugins

    net = xir.Network.CreateFromJsonFile(tiny["model"])
    net.loadParamsFromFile(tiny["model"][:-5] + ".raw")
    devs = [Device.Open("sim://zg330"), Device.Open("host://")]
    sess = Session.Create([plugins.backend_class("ZG330"), plugins.backend_class("Host")],
                          net.view(0), devs)
    sess.apply()
    snap = tmp_path / "tiny.snap"
    sess.dumpSnapshot(snap)
    sess.close()
    rows = evaluate(str(snap), tiny["data"], reference=tiny["float"], workers=0, limit=3,
                    progress=False)
    assert same(rows) == same(baseline[:3])


def test_errors_name_the_thing_at_fault(tiny, tmp_path):
    with pytest.raises(XrtError, match="nope.json"):
        evaluate(str(tmp_path / "nope.json"), tiny["data"], workers=0, progress=False)
    with pytest.raises(XrtError, match="--data"):
        evaluate(tiny["model"], str(tmp_path / "missing"), workers=0, progress=False)
    with pytest.raises(XrtError, match="reference"):
        evaluate(tiny["model"], tiny["data"], reference=str(tmp_path / "r.onnx"), workers=0,
                 progress=False)
    with pytest.raises(XrtError, match="Nope"):
        evaluate(tiny["model"], tiny["data"], backends="Nope,sim://zg330", workers=0,
                 progress=False)


def test_cli_eval_writes_results_and_plot(tiny, tmp_path, capsys):
    from xrt.cli import main

    out = tmp_path / "e.jsonl"
    rc = main(["eval", tiny["model"], "--data", tiny["data"], "--reference", tiny["float"],
               "--workers", "0", "--out", str(out), "--metric", "max_error"])
    text = capsys.readouterr().out
    assert rc == 0 and "cosine_mean" in text and "s05_bad.npy" in text
    assert len(out.read_text().splitlines()) == 11
    assert (tmp_path / "e.png").stat().st_size > 10_000
    rc = main(["eval", tiny["model"], "--data", tiny["data"], "--workers", "0", "--out",
               str(tmp_path / "no" / "where.jsonl")])
    err = capsys.readouterr().err
    assert rc == 2 and "does not exist" in err and err.count("\n") == 1

"""The command line: `xrt run` on a zoo network and on json+raw, with profile outputs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from xcompile import zoo
from xcompile.zoo import _reference
from xrt.cli import main


def test_run_zoo_network_with_profile_trace_and_plot(tmp_path, capsys):
    trace, plot, rows = tmp_path / "t.json", tmp_path / "p.png", tmp_path / "rows.json"
    code = main(["run", "tiny_cnn", "--profile", "--trace", str(trace), "--plot", str(plot),
                 "--profile-json", str(rows), "--save-outputs", str(tmp_path / "out")])
    assert code == 0
    out = capsys.readouterr().out
    assert "per-op time profile" in out and "Conv2d" in out
    events = json.loads(trace.read_text())["traceEvents"]
    net = zoo.build("tiny_cnn")
    assert len(events) == len(net.ops)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert {r["op_type"] for r in json.loads(rows.read_text())} >= {"Conv2d", "Matmul"}
    saved = list((tmp_path / "out").glob("*.npy"))
    assert len(saved) == 1 and np.load(saved[0]).shape == (1, 10)


def test_run_json_raw_with_given_inputs_and_dumps(tmp_path, capsys):
    net = zoo.build("tiny_cnn")
    net.save(tmp_path / "tiny.json")
    x = zoo.calibration_set("tiny_cnn", count=1)[0][0]
    np.save(tmp_path / "x.npy", x)
    code = main(["run", str(tmp_path / "tiny.json"), "--inputs", str(tmp_path / "x.npy"),
                 "--dump-outputs", str(tmp_path / "dump"), "--dump-format", "SFT"])
    assert code == 0
    assert len(list((tmp_path / "dump").iterdir())) == sum(len(op.outputs) for op in net.ops)


def test_run_reports_bad_input_cleanly(tmp_path, capsys):
    (tmp_path / "bad.json").write_text("{ not json")
    assert main(["run", str(tmp_path / "bad.json")]) == 2
    err = capsys.readouterr().err
    assert "bad.json" in err and "line 1" in err
    assert main(["run", "tiny_cnn", "--backends", "NoSuch"]) == 2
    assert "installed backends" in capsys.readouterr().err
    assert main(["run", "tiny_cnn", "--backends", "Host,nosuch://x"]) == 2
    assert "installed schemes" in capsys.readouterr().err


@pytest.mark.parametrize("opts, message", [
    (["--plot", "{tmp}/missing/p.png"], "--plot {tmp}/missing/p.png: the folder"),
    (["--trace", "{tmp}/missing/t.json"], "--trace {tmp}/missing/t.json: the folder"),
    (["--profile-json", "{tmp}"], "is a folder"),
    (["--save-outputs", "{tmp}/f.npy/out"], "is a file, not a folder"),
    (["--inputs", "{tmp}/nothere.npy"], "--inputs {tmp}/nothere.npy: no such file"),
    (["--inputs", "{tmp}/f.npy"], "not a readable .npy array"),
    (["--inputs", "{tmp}"], "is a folder"),
])
def test_run_checks_its_files_before_any_work(tmp_path, capsys, monkeypatch, opts, message):
    """Output paths and input files are checked first: one line, no traceback, and no model
    is loaded (the load would fail the test)."""
    (tmp_path / "f.npy").write_bytes(b"not an npy file")
    import xrt.cli.run_cmd as run_cmd

    monkeypatch.setattr(run_cmd, "load_model", lambda *a, **k: pytest.fail("model loaded"))
    args = [o.format(tmp=tmp_path) for o in opts]
    assert main(["run", "tiny_cnn", *args]) == 2
    err = capsys.readouterr().err
    assert message.format(tmp=tmp_path) in err and "Traceback" not in err
    assert err.count("\n") == 1


def test_run_onnx_in_float_and_refuse_target_without_calibration(tmp_path, capsys):
    pytest.importorskip("onnx")
    from xcompile.frontend.onnx_export import export_onnx

    net = zoo.build("tiny_cnn")
    export_onnx(net, str(tmp_path / "tiny.onnx"))
    x = zoo.calibration_set("tiny_cnn", count=1)[0][0]
    np.save(tmp_path / "x.npy", x.transpose(0, 3, 1, 2))  # ONNX: NCHW
    assert main(["run", str(tmp_path / "tiny.onnx"), "--inputs", str(tmp_path / "x.npy"),
                 "--save-outputs", str(tmp_path / "out")]) == 0
    (saved,) = sorted((tmp_path / "out").iterdir())
    ref = _reference.run(net, [x])[0]
    np.testing.assert_allclose(np.load(saved), ref, rtol=1e-4, atol=1e-5)
    assert main(["run", str(tmp_path / "tiny.onnx"), "--target", "zg330"]) == 2
    assert "xrt compile" in capsys.readouterr().err


def test_compile_cache_stamp_follows_project_sources(tmp_path, monkeypatch):
    """`xrt run --target` caches compiled zoo networks under a stamp of the project packages'
    sources: editing any of them gives a new cache folder; the stamp is the same from
    `python -m xrt` (repository root on sys.path) and from the `xrt` script."""
    import importlib
    import sys

    from xcompile.cache import source_stamp as _source_stamp

    pkg = tmp_path / "stamp_probe_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("stamp_probe_pkg")
    try:
        before = _source_stamp(("stamp_probe_pkg",))
        assert _source_stamp(("stamp_probe_pkg",)) == before
        (pkg / "__init__.py").write_text("X = 2\n")
        assert _source_stamp(("stamp_probe_pkg",)) != before
    finally:
        sys.modules.pop("stamp_probe_pkg", None)
    import subprocess
    from pathlib import Path

    code = "from xcompile.cache import source_stamp; print(source_stamp())"
    root = Path(__file__).resolve().parents[3]
    a = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    b = subprocess.run([sys.executable, "-c", "import host_backend, xrt; " + code],
                       cwd=tmp_path, capture_output=True, text=True)
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    assert a.stdout == b.stdout


def test_reports_keep_their_full_width_when_redirected(capsys):
    """Redirected to a file or pipe, a report's table is not cut to 80 columns."""
    from rich.table import Table

    from xrt.console import report_console

    table = Table(title="t")
    cols = [f"column_{k}_with_a_long_header" for k in range(6)]
    for c in cols:
        table.add_column(c)
    table.add_row(*[f"0.99999{k}" for k in range(6)])
    report_console().print(table)
    out = capsys.readouterr().out
    assert all(c in out for c in cols) and "0.999995" in out and "…" not in out


def test_progress_in_a_log_is_plain_lines(capsys, monkeypatch):
    """Off a terminal: a line when a stage starts and one with its time; a bar's lines every
    few seconds and at its end; XRT_PROGRESS=0 silences both."""
    from xrt.console import progress_bar, stage

    monkeypatch.delenv("XRT_PROGRESS", raising=False)
    with stage("parse model"):
        pass
    monkeypatch.setattr(progress_bar, "LOG_EVERY", 0.0)
    with progress_bar(3, "calibration") as advance:
        for _ in range(3):
            advance()
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "parse model ..." and err[1].startswith("parse model: ")
    assert err[2:] == ["calibration: 1/3 (0.0 s)", "calibration: 2/3 (0.0 s)"]
    monkeypatch.setenv("XRT_PROGRESS", "0")
    with stage("quiet"), progress_bar(2, "quiet bar") as advance:
        advance(2)
    assert capsys.readouterr().err == ""


def test_run_shows_what_it_does_from_the_start(capsys):
    """A cold `make run` once printed nothing for minutes: the load (and compile), the apply
    and the first forward each announce themselves as they start."""
    assert main(["run", "tiny_cnn", "--target", "zg330", "--backends",
                 "ZG330,sim://zg330;Host", "--repeat", "2"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "load tiny_cnn compiled for zg330 ..."
    starts = [line for line in err if line.endswith(" ...")]
    assert [s.split()[0] for s in starts][-2:] == ["apply:", "first"]

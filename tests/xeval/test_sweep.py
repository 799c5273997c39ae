"""`xeval.sweep` / `xrt sweep` and the device URL hardware variants it deploys on."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from xeval import sweep
from xrt import Device, Session, plugins
from xrt.errors import DeviceUrlError, XrtError


def _run(model: str, url: str):
    import xir

    net = xir.Network.CreateFromJsonFile(model)
    net.loadParamsFromFile(model[:-5] + ".raw")
    devs = [Device.Open(url), Device.Open("host://")]
    sess = Session.Create([plugins.backend_class("ZG330"), plugins.backend_class("Host")],
                          net.view(0), devs)
    sess.apply()
    x = np.random.default_rng(3).standard_normal(net.inputs()[0].shape).astype(np.float32)
    out = np.array(sess.forward([x])[0])
    cycles = sum(r["cycles"] for r in sess.backends[0].profileInfo().values())
    status = devs[0].status()
    sess.close()
    for d in devs:
        d.close()
    return out, cycles, status


def test_cycles_mode_counts_exactly_and_computes_nothing(tiny):
    full, cycles, _ = _run(tiny["model"], "sim://zg330")
    out, cyc, status = _run(tiny["model"], "sim://zg330?mode=cycles")
    assert cyc == cycles and "cycles only" in status
    assert np.abs(full).max() > 0 and not np.array_equal(out, full)


def test_url_variants_change_the_hardware(tiny):
    _, base, _ = _run(tiny["model"], "sim://zg330")
    _, small, status = _run(tiny["model"], "sim://zg330?mpe=1x1")
    assert small > base and "MPE 1x1 enabled of 4x4" in status
    _, no_ocm, _ = _run(tiny["model"], "sim://zg330?ocm_kib=0")
    assert no_ocm > base
    d = Device.Open("sim://zg330?mpe=2x3&icore_mhz=500&ocm_kib=256")
    try:
        d.reset(0)  # the variant is the power-on state
        assert d.getRowsCols() == (2, 3) and d.getMemRegion("ocm").size == 256 * 1024
        assert "icore 500 MHz" in d.status()
    finally:
        d.close()
    d = Device.Open("sim://zg330?ocm_kib=0")
    try:
        with pytest.raises(XrtError, match="ocm"):
            d.getMemRegion("ocm")
    finally:
        d.close()


@pytest.mark.parametrize("query, fault", [
    ("mpe=5x4", "mpe=5x4"), ("mpe=big", "mpe='big'"), ("ocm_kib=4096", "ocm_kib=4096"),
    ("ocm_kib=-1", "ocm_kib=-1"), ("icore_mhz=fast", "icore_mhz"), ("mode=fast", "mode"),
    ("mpes=2x2", "mpes"),
])
def test_bad_variants_are_refused_naming_the_key(query, fault):
    with pytest.raises(DeviceUrlError, match=fault.replace("(", r"\(")):
        Device.Open(f"sim://zg330?{query}")


def test_buyi_takes_the_same_variants():
    d = Device.Open("sim://buyi?mpe=1x1&mode=cycles")
    try:
        assert d.getRowsCols() == (1, 1) and "cycles only" in d.status()
    finally:
        d.close()


def test_sweep_rows_follow_the_grid(tiny, tmp_path):
    grid = {"mpe": ["4x4", "1x1"], "ocm_kib": [0, 1024], "ocm_opt": ["BEST_SCORE"]}
    out = tmp_path / "s.csv"
    rows = sweep(tiny["model"], grid, workers=0, out=str(out), progress=False)
    assert [(r["mpe"], r["ocm_kib"]) for r in rows] == [("4x4", 0), ("4x4", 1024), ("1x1", 0),
                                                      ("1x1", 1024)]
    assert not [r for r in rows if "error" in r]
    by = {(r["mpe"], r["ocm_kib"]): r for r in rows}
    _, full_cycles, _ = _run(tiny["model"], "sim://zg330?ocm_kib=1024")
    assert by["4x4", 1024]["cycles"] == full_cycles  # cycles-only counts what a full run does
    assert by["1x1", 1024]["cycles"] > by["4x4", 1024]["cycles"]
    assert by["4x4", 0]["ocm_bytes"] == 0 and by["4x4", 1024]["ocm_bytes"] > 0
    assert by["4x4", 0]["ftmp_bytes"] > by["4x4", 1024]["ftmp_bytes"]
    assert by["1x1", 0]["peak_macs_per_cycle"] * 16 == by["4x4", 0]["peak_macs_per_cycle"]
    for r in rows:
        assert 0 < r["utilisation"] <= 1 and r["macs"] == rows[0]["macs"]
    with open(out) as fh:
        table = list(csv.DictReader(fh))
    assert [t["cycles"] for t in table] == [str(r["cycles"]) for r in rows]
    assert list(table[0])[:3] == ["mpe", "ocm_kib", "ocm_opt"]


def test_sweep_on_two_workers_matches_and_reports_bad_points(tiny, tmp_path):
    grid = {"mpe": ["4x4", "2x2"], "merge": [True, False], "speed_mode": [True]}
    rows = sweep(tiny["model"], grid, workers=2, progress=False)
    # ZG330 has no speedMode: every point is a row with that error, none is dropped
    assert len(rows) == 4 and all("speedMode" in r["error"] for r in rows)
    del grid["speed_mode"]
    two = sweep(tiny["model"], grid, workers=2, progress=False)
    one = sweep(tiny["model"], grid, workers=0, progress=False)
    assert two == one and len(one) == 4


def test_grid_files_and_cli(tiny, tmp_path, capsys):
    from xrt.cli import main

    g = tmp_path / "grid.toml"
    g.write_text('[grid]\nmpe = ["4x4", "2x4"]\nocm_kib = [512]\n')
    rc = main(["sweep", tiny["model"], "--grid", str(g), "--workers", "0", "--out",
               str(tmp_path / "s.csv"), "--plot", str(tmp_path / "p.png")])
    assert rc == 0 and "2 grid points" in capsys.readouterr().out
    assert (tmp_path / "p.png").stat().st_size > 10_000
    for text, fault in (('[grid]\nmpe = []\n', "empty"), ('[grid]\nocm = [1]\n', "unknown"),
                        ('[grid]\nocm_kib = ["big"]\n', "int"), ('grid = 3', "no \\[grid\\]"),
                        ('[grid\n', "grid.toml")):
        g.write_text(text)
        rc = main(["sweep", tiny["model"], "--grid", str(g), "--workers", "0"])
        err = capsys.readouterr().err
        assert rc == 2 and err.count("\n") == 1, err
        assert __import__("re").search(fault, err), err


def test_zoo_files_command(tmp_path, capsys):
    from xcompile.zoo.__main__ import main

    assert main(["samples", "tiny_cnn", "--count", "3", "-o", str(tmp_path / "d")]) == 0
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == [
        "sample000.npy", "sample001.npy", "sample002.npy"]
    assert main(["save", "nonet", "-o", str(tmp_path / "x.json")]) == 2
    assert "no zoo network 'nonet'" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["ZG330", "Buyi"])
def test_ocm_option_is_given_by_name_in_the_backends_own_type(name):
    """xeval imports no plugin: the grid's `ocm_opt` name becomes a member of the option type
    of the backend the plugin made; a wrong name is refused naming the options, and a backend
    without the option (the Buyi decides OCM at compile time) names the method."""
    from xeval.grid import _configure

    backend = plugins.backend_class(name).Init()
    if name == "Buyi":
        with pytest.raises(XrtError, match="Buyi.*ocmOptimize|ocmOptimize.*Buyi"):
            _configure(backend, {"ocm_opt": "OPTION2"})
        return
    with pytest.raises(XrtError, match=r"'option9' is not one of \['NONE', 'OPTION1'"):
        _configure(backend, {"ocm_opt": "option9"})
    with pytest.raises(XrtError, match="before init"):  # the name was found: the call was made
        _configure(backend, {"ocm_opt": "option2"})

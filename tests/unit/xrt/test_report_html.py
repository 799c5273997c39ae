"""The one-page HTML report (`xrt run --report`, `xrt bench --report`): a self-contained file
whose data match the session's profile and deployment, rendered in headless Chromium (skipped
where Debian's `chromium` is not installed) and checked in the DOM the page's script built."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from xrt.cli import main
from xrt.report_html import host_reasons

CHIP = "ZG330,sim://zg330;Host"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not "
                                    "installed (Debian: apt-get install chromium)")


def _data(page: str) -> dict:
    m = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.S)
    assert m, "the page carries its data"
    return json.loads(m.group(1))


def _render(tmp_path, page_path, what: str = "--dump-dom") -> str:
    """The page after its scripts ran (`--dump-dom`) or the path of a screenshot."""
    shot = tmp_path / "page.png"
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
           "--disable-background-networking", "--disable-component-update", "--no-first-run",
           f"--user-data-dir={tmp_path / 'chromium-profile'}", "--window-size=1400,2400",
           what if what == "--dump-dom" else f"--screenshot={shot}", page_path.as_uri()]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout if what == "--dump-dom" else str(shot)


@pytest.fixture(scope="module")
def chip_report(tmp_path_factory):
    pytest.importorskip("zg330backend")
    path = tmp_path_factory.mktemp("report") / "tiny.html"
    rows = path.with_suffix(".json")
    assert main(["run", "tiny_cnn", "--target", "zg330", "--backends", CHIP, "--report",
                 str(path), "--profile-json", str(rows)]) == 0
    return path, json.loads(rows.read_text())


def test_report_is_self_contained_and_holds_the_profile(chip_report):
    path, rows = chip_report
    page = path.read_text()
    # nothing to fetch: no external script, style, image or link
    assert not re.search(r'(src|href)\s*=\s*["\']?(https?:)?//', page)
    assert "<link" not in page and "@import" not in page
    assert [u for u in re.findall(r"https?://[^\s\"'<>]+", page)
            if u != "http://www.w3.org/2000/svg"] == []
    data = _data(page)
    assert [r["op_id"] for r in data["layers"]] == [r["op_id"] for r in rows]
    hard = [x for x in data["layers"] if x["op_type"] == "HardOp"]
    assert hard and all(x["placement"] == "chip" and x["precision"].startswith("int")
                        and "@zhuget(330)" in x["reason"] for x in hard)
    edges = [x for x in data["layers"] if x["op_type"] in ("Cast", "AlignAxis", "PruneAxis")]
    assert edges and all(x["placement"] == "host" and "host/NPU edge" in x["reason"]
                         for x in edges)
    assert data["summary"]["chip_ms"] == pytest.approx(sum(r["hard_ms"] for r in rows))
    (mem,) = data["memory"]
    assert mem["backend"] == "ZG330Backend" and mem["ocm"]["option"] != ""
    ocm = [v for v in mem["values"] if v["memory"] == "OCM"]
    assert ocm and all(v["from"] <= v["to"] and v["offset"] + v["bytes"] <=
                       mem["ocm"]["footprint"] for v in ocm)


@needs_chromium
def test_report_renders_in_headless_chromium(chip_report, tmp_path):
    path, rows = chip_report
    data = _data(path.read_text())
    dom = _render(tmp_path, path)
    assert 'data-rendered="yes"' in dom, "the page's script ran to its end"
    assert dom.count('class="layer-row"') == len(rows)
    timed = [r for r in rows if r["hard_ms"] > 0]
    assert len(re.findall(r'<rect[^>]*class="layer"', dom)) == len(timed)
    values = sum(len(m["values"]) for m in data["memory"])
    assert len(re.findall(r'<rect[^>]*class="value"', dom)) == values
    assert 'data-memory="OCM FTMP"' in dom
    assert re.search(r'<table id="placement-table">.*host/NPU edge', dom, re.S)
    shot = _render(tmp_path, path, "--screenshot")
    from PIL import Image

    with Image.open(shot) as im:
        colours = im.convert("RGB").resize((140, 240)).getcolors(140 * 240)
    assert colours is not None and len(colours) > 20  # drawn, not a blank page


@needs_chromium
def test_bench_report_shows_the_variants(tmp_path):
    pytest.importorskip("zg330backend")
    path = tmp_path / "bench.html"
    assert main(["bench", "tiny_cnn", "--target", "zg330", "--backends", CHIP, "--warmup", "1",
                 "--iterations", "2", "--compare", "ocm=NONE", "--report", str(path)]) == 0
    assert _data(path.read_text())["bench"]["results"][1]["variant"] == "ocm=NONE"
    dom = _render(tmp_path, path)
    table = re.search(r'<table id="bench-table">(.*?)</table>', dom, re.S).group(1)
    assert table.count("<tr>") == 3 and "ocm=NONE" in table


@needs_chromium
def test_host_only_report_says_there_is_no_chip(tmp_path):
    path = tmp_path / "host.html"
    assert main(["run", "tiny_cnn", "--report", str(path)]) == 0
    dom = _render(tmp_path, path)
    assert "No simulated chip in this session." in dom
    assert "No chip deployment in this session." in dom
    assert dom.count('class="layer-row"') == len(_data(path.read_text())["layers"])


def test_host_reasons_read_the_compile_targets_tags():
    class Net:
        tags = {"zg330": {"host_ops": {"3": "float op", "x": "ignored"}},
                "quantization": {"bits": 8}}

    assert host_reasons(Net()) == {3: "float op"}


def test_report_to_an_unwritable_place_is_refused_before_work(tmp_path, capsys):
    assert main(["run", "tiny_cnn", "--report", str(tmp_path / "no" / "r.html")]) == 2
    assert "--report" in capsys.readouterr().err

"""The README's Python examples run as written (the front door must not rot)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def _block(marker: str) -> str:
    found = [b for b in _blocks() if marker in b]
    assert len(found) == 1, f"README has {len(found)} python blocks with {marker!r}"
    return found[0]


def test_builder_example(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ns: dict = {}
    exec(compile(_block("NetworkBuilder"), "README.md", "exec"), ns)
    import xir

    back = xir.Network.CreateFromJsonFile("tiny.json")
    back.loadParamsFromFile("tiny.raw")
    assert [op.op_type for op in back.ops] == [op.op_type for op in ns["net"].ops]


@pytest.mark.slow
def test_vendor_way_example(tmp_path, monkeypatch):
    """`xrt compile yolov5s --target zg330 -o out/`, then the README's app, unchanged."""
    from xrt.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["compile", "yolov5s", "--target", "zg330", "-o", "out"]) == 0
    ns: dict = {}
    exec(compile(_block("Session.Create"), "README.md", "exec"), ns)
    assert ns["scores"].shape == (1, 80, 80, 255)
    assert ns["sess"].timeProfileResults()


@pytest.mark.slow
def test_dataset_and_sweep_commands(tmp_path):
    """The README's `xrt eval` / `xrt sweep` shell block, line by line, in a fresh folder."""
    import os
    import subprocess
    import sys

    block = re.search(r"## Datasets and hardware sweeps\n\n```sh\n(.*?)```",
                      README.read_text(encoding="utf-8"), re.S).group(1)
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    for line in block.strip().splitlines():
        cmd = line.split("  #")[0].strip()
        res = subprocess.run(["bash", "-c", cmd], cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=600)
        assert res.returncode == 0, f"{cmd}\n{res.stdout}\n{res.stderr}"
    rows = (tmp_path / "out" / "eval.jsonl").read_text().splitlines()
    assert len(rows) == 64
    assert len((tmp_path / "out" / "sweep.csv").read_text().splitlines()) == 10
    assert (tmp_path / "out" / "pareto.png").exists()

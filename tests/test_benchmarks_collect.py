"""`make bench` must find the speed targets: every benchmarks/bench_*.py collects its tests."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_benchmark_file_collects():
    res = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                          "-p", "no:cacheprovider", "benchmarks"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    files = {line.split("::")[0] for line in res.stdout.splitlines() if "::" in line}
    expected = {f"benchmarks/{p.name}" for p in (ROOT / "benchmarks").glob("bench_*.py")}
    assert expected and files == expected
    assert int(re.search(r"(\d+) tests? collected", res.stdout).group(1)) >= len(expected)

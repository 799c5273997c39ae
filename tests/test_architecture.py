"""The allowed import directions (docs/architecture.md), checked on every shipped module.

    xir  <-  xrt  <-  xcompile  <-  xeval            (the core distribution)
              ^
    host_backend        npu_model  <-  npu_runtime  <-  zg330backend
                                                   <-  buyibackend

Every import statement is read with `ast`, function-level imports included, so a late import
cannot hide a wrong direction. Each distribution also declares every project distribution and
third-party package its modules import.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: package -> where its sources are
SOURCES = {
    "xir": ROOT / "xir",
    "xrt": ROOT / "xrt",
    "xcompile": ROOT / "xcompile",
    "xeval": ROOT / "xeval",
    "host_backend": ROOT / "backends/host/src/host_backend",
    "npu_model": ROOT / "backends/npu/src/npu_model",
    "npu_runtime": ROOT / "backends/npu/src/npu_runtime",
    "zg330backend": ROOT / "backends/zg330/src/zg330backend",
    "buyibackend": ROOT / "backends/buyi/src/buyibackend",
}

#: package -> the project packages it may import (besides itself)
ALLOWED = {
    "xir": set(),                                   # the IR knows no runtime or backend
    "xrt": {"xir"},                                 # the core knows no plugin
    "xcompile": {"xir", "xrt"},                     # the pipeline runs through a Runner
    "xeval": {"xir", "xrt", "xcompile"},            # backends and options come from plugins
    "host_backend": {"xir", "xrt"},                 # the host reference knows no NPU code
    "npu_model": {"xir"},                           # the hardware knows no runtime
    "npu_runtime": {"xir", "xrt", "npu_model"},     # shared NPU code knows no chip
    "zg330backend": {"xir", "xrt", "npu_model", "npu_runtime"},
    "buyibackend": {"xir", "xrt", "npu_model", "npu_runtime"},
}

#: distribution folder -> (pyproject, packages it ships)
DISTRIBUTIONS = {
    ROOT: ("xir", "xrt", "xcompile", "xeval"),
    ROOT / "backends/host": ("host_backend",),
    ROOT / "backends/npu": ("npu_model", "npu_runtime"),
    ROOT / "backends/zg330": ("zg330backend",),
    ROOT / "backends/buyi": ("buyibackend",),
}
DIST_NAME = {"xir": "icraft-xrt-sim", "xrt": "icraft-xrt-sim", "xcompile": "icraft-xrt-sim",
             "xeval": "icraft-xrt-sim",
             "host_backend": "icraft-xrt-sim-host", "npu_model": "icraft-xrt-sim-npu",
             "npu_runtime": "icraft-xrt-sim-npu", "zg330backend": "icraft-xrt-sim-zg330",
             "buyibackend": "icraft-xrt-sim-buyi"}
#: third-party imports -> the requirement that provides them (optional extras included)
THIRD_PARTY = {"numpy": "numpy", "numba": "numba", "pluggy": "pluggy", "rich": "rich",
               "PIL": "pillow", "onnx": "onnx", "onnxruntime": "onnxruntime",
               "matplotlib": "matplotlib", "scipy": "scipy"}


def imports(package: str) -> list[tuple[str, int, str]]:
    """(file, line, top-level module) of every absolute import in `package`'s sources."""
    out = []
    for path in sorted(SOURCES[package].rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                out.append((str(path.relative_to(ROOT)), node.lineno, name.split(".")[0]))
    return out


@pytest.mark.parametrize("package", sorted(SOURCES))
def test_imports_follow_the_allowed_directions(package):
    project = set(SOURCES)
    wrong = [f"{f}:{line} imports {mod}" for f, line, mod in imports(package)
             if mod in project and mod != package and mod not in ALLOWED[package]]
    assert not wrong, f"{package} may import only {sorted(ALLOWED[package])}:\n" + \
        "\n".join(wrong)


def test_the_chips_never_import_each_other():
    for a, b in (("zg330backend", "buyibackend"), ("buyibackend", "zg330backend")):
        assert b not in {mod for _, _, mod in imports(a)}


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib")
@pytest.mark.parametrize("folder", sorted(DISTRIBUTIONS), ids=lambda p: p.name)
def test_each_distribution_declares_what_it_imports(folder):
    import tomllib

    meta = tomllib.loads((folder / "pyproject.toml").read_text())["project"]
    reqs = list(meta.get("dependencies", []))
    for extra in meta.get("optional-dependencies", {}).values():
        reqs += extra
    declared = {r.split(";")[0].split("[")[0].split(">")[0].split("=")[0].split("<")[0]
                .strip().lower() for r in reqs} | {meta["name"]}
    missing = set()
    for package in DISTRIBUTIONS[folder]:
        for f, line, mod in imports(package):
            need = DIST_NAME.get(mod) or THIRD_PARTY.get(mod)
            if need and need.lower() not in declared:
                missing.add(f"{need} (imported at {f}:{line})")
    assert not missing, f"{meta['name']} does not declare: {sorted(missing)}"

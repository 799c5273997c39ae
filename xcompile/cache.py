"""The compile cache of `xrt run ZOO_NAME --target T`: a zoo network compiled once per target,
input size and source stamp under .icraft/cache, so a changed compiler never runs a stale
network."""

from __future__ import annotations

import os

from xcompile.pipeline import DEFAULTS, compile_model
from xrt import plugins

__all__ = ["compiled_zoo", "source_stamp"]


def source_stamp() -> str:
    """A short hash of the code a cached compile depends on, so a changed compiler never runs a
    stale cached network: the sources of every loaded package that is not installed into the
    interpreter's library folders (this project's editable packages: xir, the target plugin,
    the shared hardware model), and the versions of the installed icraft-xrt distributions."""
    import hashlib
    import importlib.metadata as md
    import sys
    import sysconfig
    from pathlib import Path

    libs = {Path(sysconfig.get_paths()[k]).resolve() for k in ("purelib", "platlib", "stdlib")}
    h = hashlib.sha256()
    for name, mod in sorted(list(sys.modules.items()), key=lambda kv: kv[0]):
        paths = getattr(mod, "__path__", None)
        if "." in name or not paths or not getattr(mod, "__file__", None):
            continue
        pkg = Path(mod.__file__).resolve().parent
        if any(pkg.is_relative_to(lib) for lib in libs):
            continue
        for f in sorted(pkg.rglob("*.py")):
            h.update(f"{name}/{f.relative_to(pkg)}".encode())
            h.update(f.read_bytes())
    for dist in sorted({d.metadata["Name"] for d in md.distributions()
                        if d.metadata["Name"] and d.metadata["Name"].startswith("icraft-xrt")}):
        h.update(f"{dist}={md.version(dist)}".encode())
    return h.hexdigest()[:10]


def compiled_zoo(model: str, target: str, input_size: int | None = None) -> str:
    """Path of the zoo network compiled for `target`, compiling it on first use."""
    lower = plugins.target(target)
    suffix = getattr(lower, "suffix", target.upper())
    tag = f"{model}_{input_size}" if input_size else model
    out = os.path.join(".icraft", "cache", f"{tag}_{target}_{source_stamp()}")
    path = os.path.join(out, f"{tag}_{suffix}.json")
    if not os.path.exists(path):
        print(f"compiling {model} for {target} into {out} (cached for later runs)")
        opts = dict(DEFAULTS, model=model, target=target, output=out, name=tag,
                    input_size=input_size)
        compile_model(opts)
    return path

"""The compile cache of `xrt run ZOO_NAME --target T`: a zoo network compiled once per target,
input size and source stamp under .icraft/cache, so a changed compiler never runs a stale
network."""

from __future__ import annotations

import os
import time

from xcompile.pipeline import DEFAULTS, compile_model
from xrt import plugins

__all__ = ["cache_dir", "compiled_zoo", "source_stamp"]

#: where cached compiles live, below the current folder
CACHE_ROOT = os.path.join(".icraft", "cache")
#: seconds after which another stamp's folder of the same compile is removed
STALE_S = 600.0


#: the packages every compile depends on; the installed xrt plugins' packages are added
CORE_PACKAGES = ("xir", "xrt", "xcompile", "host_backend", "npu_model", "npu_runtime")


def source_stamp(extra: tuple[str, ...] = ()) -> str:
    """A short hash of the sources a cached compile depends on (`CORE_PACKAGES`, the packages
    of the installed `xrt.plugins` entry points, and `extra` packages), so a changed compiler
    never runs a stale cached network. It depends on nothing else: `python -m xrt` and the
    `xrt` script, whatever they have imported and whether the current folder's egg-info shows
    a distribution twice, compute the same stamp."""
    import hashlib
    import importlib.metadata as md
    import importlib.util
    from pathlib import Path

    h = hashlib.sha256()
    plugins_ = {ep.value.split(":")[0].split(".")[0]
                for ep in md.entry_points(group="xrt.plugins")}
    for name in sorted(set(CORE_PACKAGES) | plugins_ | set(extra)):
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            h.update(f"{name}: absent".encode())
            continue
        for root in sorted(spec.submodule_search_locations):
            pkg = Path(root).resolve()
            for f in sorted(pkg.rglob("*.py")):
                h.update(f"{name}/{f.relative_to(pkg)}".encode())
                h.update(f.read_bytes())
    return h.hexdigest()[:10]


def cache_dir(name: str, root: str = CACHE_ROOT) -> str:
    """The folder of cached compile `name` for today's sources (``{name}_{source_stamp}``).
    The same name's folders of other stamps are removed: a compile of a changed compiler is
    never run again, and a developer's edits would otherwise leave one behind per change (a
    checkout once held 47 GB of them)."""
    import re
    import shutil

    stamp = source_stamp()
    if os.path.isdir(root):
        old = re.compile(re.escape(name) + r"_[0-9a-f]{10}")
        for entry in os.listdir(root):
            path = os.path.join(root, entry)
            # (one written in the last minutes may be another process's, still at work)
            if (old.fullmatch(entry) and entry != f"{name}_{stamp}"
                    and time.time() - os.path.getmtime(path) > STALE_S):
                shutil.rmtree(path, ignore_errors=True)
    return os.path.join(root, f"{name}_{stamp}")


def compiled_zoo(model: str, target: str, input_size: int | None = None) -> str:
    """Path of the zoo network compiled for `target`, compiling it on first use."""
    lower = plugins.target(target)
    suffix = getattr(lower, "suffix", target.upper())
    tag = f"{model}_{input_size}" if input_size else model
    out = cache_dir(f"{tag}_{target}")
    path = os.path.join(out, f"{tag}_{suffix}.json")
    if not os.path.exists(path):
        print(f"compiling {model} for {target} into {out} (cached for later runs)")
        opts = dict(DEFAULTS, model=model, target=target, output=out, name=tag,
                    input_size=input_size)
        compile_model(opts)
    return path

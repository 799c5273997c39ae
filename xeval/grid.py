"""Design-space grids: a TOML file's `[grid]` table expanded into points, and one point run.

    [grid]
    mpe = ["4x4", "2x4", "2x2"]      # MPE rows x cols enabled (at most the chip's array)
    ocm_kib = [0, 512, 1024]         # on-chip memory size
    icore_mhz = [800, 1000]          # icore clock (optional)
    ddr_mhz = [800]                  # DDR clock (optional)
    ocm_opt = ["BEST_SCORE", "NONE"] # OcmOpt the backend plans with (ZG330, Buyi)
    etm_reuse = [true, false]        # ZG330: false calls disableEtmOptimize()
    merge = [true, false]            # ZG330: false calls disableMergeHardOp()
    speed_mode = [false, true]       # Buyi: true calls speedMode()
    compress_ftmp = [false, true]    # Buyi: true calls compressFtmp()

Hardware keys become the device URL's query (`npu_runtime.url_params`, always with
``mode=cycles``: a sweep needs cycles, not outputs); deployment keys call the backend's vendor
methods before `apply()`. Points are the Cartesian product, in the file's key order.
"""

from __future__ import annotations

import itertools
import os
from typing import Any

import numpy as np

from xrt.errors import XrtError

#: keys that change the hardware (the device URL's query)
HARDWARE = ("mpe", "ocm_kib", "icore_mhz", "ddr_mhz")
#: keys that change the deployment: key -> (vendor method, the value that calls it, argument)
DEPLOYMENT = {"etm_reuse": ("disableEtmOptimize", False), "merge": ("disableMergeHardOp", False),
              "speed_mode": ("speedMode", True), "compress_ftmp": ("compressFtmp", True),
              "ocm_opt": ("ocmOptimize", None)}
#: the columns every sweep row has after its parameters
FIGURES = ("cycles", "chip_ms", "macs", "utilisation", "peak_macs_per_cycle", "etm_bytes",
           "ocm_bytes", "ftmp_bytes", "ocm_footprint")


def load_grid(path: str | os.PathLike) -> dict[str, list[Any]]:
    """The `[grid]` table of a TOML file, each key a non-empty list; XrtError names the fault."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    try:
        with open(path, "rb") as fh:
            table = tomllib.load(fh).get("grid")
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise XrtError(f"grid {os.fspath(path)}: {exc}") from exc
    if not isinstance(table, dict) or not table:
        raise XrtError(f"grid {os.fspath(path)}: no [grid] table with at least one key")
    return check_grid(table, os.fspath(path))


def check_grid(table: dict[str, Any], where: str = "grid") -> dict[str, list[Any]]:
    """`table` with scalars made one-element lists, every key known and every value typed."""
    known = HARDWARE + tuple(DEPLOYMENT)
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise XrtError(f"{where}: unknown key(s) {unknown}; a grid takes {list(known)}")
    grid: dict[str, list[Any]] = {}
    for key, values in table.items():
        values = list(values) if isinstance(values, (list, tuple)) else [values]
        if not values:
            raise XrtError(f"{where}: '{key}' is an empty list")
        want = {"mpe": str, "ocm_opt": str, "etm_reuse": bool, "merge": bool,
                "speed_mode": bool, "compress_ftmp": bool}.get(key, int)
        for v in values:
            if type(v) is not want:
                raise XrtError(f"{where}: '{key}' takes {want.__name__} values, got {v!r}")
        grid[key] = values
    return grid


def points(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Every combination of the grid's values, one dict per point."""
    keys = list(grid)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(grid[k] for k in keys))]


def variant_url(url: str, point: dict[str, Any]) -> str:
    """`url` with the point's hardware keys and ``mode=cycles`` in its query."""
    query = [f"{k}={point[k]}" for k in HARDWARE if k in point] + ["mode=cycles"]
    return url + ("&" if "?" in url else "?") + "&".join(query)


def _configure(backend: Any, point: dict[str, Any]) -> None:
    for key, (method, trigger) in DEPLOYMENT.items():
        if key not in point:
            continue
        fn = getattr(backend, method, None)
        if fn is None:
            raise XrtError(f"grid key '{key}': {type(backend).__name__} has no {method}()")
        if key == "ocm_opt":
            # the option by name, in the option type of the backend a plugin opened (its
            # `ocmopt` field): xeval imports no plugin
            kind = type(backend.ocmopt)
            try:
                fn(kind[str(point[key]).upper()])
            except KeyError:
                raise XrtError(f"grid key 'ocm_opt': {point[key]!r} is not one of "
                               f"{[o.name for o in kind]}") from None
        elif point[key] == trigger:
            fn()


def run_point(paths: tuple[str, str], backends: list[tuple[str, str]],
              point: dict[str, Any]) -> dict[str, Any]:
    """Deploy the network (json, raw) with the first backend on the point's hardware variant,
    run one cycles-only forward and return the point's figures (`FIGURES`)."""
    from xrt import Session, Tensor
    from xrt.cli.run_cmd import load_model, open_backends

    net = load_model(*paths)
    name, url = backends[0]
    classes, devices = open_backends([(name, variant_url(url, point))] + backends[1:])
    sess = None
    try:
        sess = Session.Create(classes, net.view(0), devices)
        chip = sess.backends[0]
        _configure(chip, point)
        sess.apply()
        rng = np.random.default_rng(0)
        inputs = [Tensor(rng.standard_normal(v.shape).astype(v.dtype.numpy_dtype))
                  for v in net.inputs()]
        sess.forward(inputs)
        prof = chip.profileInfo()
        dev = devices[0]
        rows, cols = dev.getRowsCols()
        cycles = sum(int(r["cycles"]) for r in prof.values())
        macs = sum(int(r["macs"]) for r in prof.values())
        peak = dev.config.peak_macs_per_cycle("int8", rows, cols)
        rep = chip.deployment_report()
        return {"cycles": cycles,
                "chip_ms": cycles * 1e3 / dev.config.icore_clk_hz,
                "macs": macs, "utilisation": macs / max(cycles * peak, 1),
                "peak_macs_per_cycle": peak,
                "etm_bytes": sum(int(r["etm_bytes"]) for r in prof.values()),
                "ocm_bytes": sum(int(r["ocm_bytes"]) for r in prof.values()),
                "ftmp_bytes": int(rep["etm"]["ftmp_bytes"]),
                "ocm_footprint": int(rep["ocm"]["footprint"])}
    finally:
        if sess is not None:
            sess.close()
        for d in devices:
            d.close()

"""Device memory of a bundle of three shapes against three separate deployments (issue 29,
"Done when"; docs/memory-and-weights.md, "Bundles").

yolov5s is quantized once (calibrated at 160x160) and lowered at 160, 224 and 320 for each chip
(`xcompile.bundle.reshape_network`, as `xrt compile --bundle-shapes` does). Deployed on one
device (the chip's mock device: allocation only, no forward needed to count bytes):

- **separate**: the three networks each lowered alone, each session with its own chunks;
- **bundle**: the three members of one `xir.Bundle`, one WEIGHT chunk for the three
  (`userReuseSegment`, sized by `QuerySize`);
- **bundle + work memory**: the same, and one FTMP chunk sized to the largest member (networks
  run one after another: Ascend's shared work memory).

The figure is the device's ETM bytes in use (`MemRegion.used_bytes`) after the three `apply`s;
the benchmark times the bundle's three applies. `python benchmarks/bench_bundle.py` prints the
table of the doc.
"""

from __future__ import annotations

import importlib
import sys
import time

import pytest
from helpers import load_average

import xir
from host_backend import HostBackend
from npu_runtime import SegmentType
from xcompile.bundle import reshape_network
from xrt import Device, HostDevice, Session, plugins

SIZES = (160, 224, 320)
CHIPS = {"zg330": ("zg330backend", "ZG330"), "buyi": ("buyibackend", "Buyi")}
_NETS: dict = {}


def members(kind: str) -> tuple[dict, bytes]:
    """({size: yolov5s lowered alone at that size}, the bundle of the three as bytes)."""
    if kind not in _NETS:
        from xcompile import zoo
        from xcompile.quant.quantize import quantize_network

        lowering = importlib.import_module(f"{CHIPS[kind][0]}.lowering")
        net = zoo.build("yolov5s", input_size=SIZES[0])
        q = quantize_network(net, zoo.calibration_set("yolov5s", count=2, input_size=SIZES[0]),
                             bits=8, method="minmax", weight_rounding="nearest")
        alone = {n: lowering.lower(lowering.adapt(reshape_network(
            q, {net.inputs()[0].name: (1, n, n, 3)}))) for n in SIZES}
        copies = {}
        for n, z in alone.items():
            c = xir.Network.CreateFromJsonStr(z.dumpJsonToStr())
            copies[f"{n}"] = c.loadParamsFromBuffer(z.dumpParamsToBuffer())
        _NETS[kind] = (alone, xir.Bundle.from_networks(copies, name="yolov5s").dumpToBuffer())
    return _NETS[kind]


def deploy(kind: str, how: str) -> dict:
    """Deploy the three networks `how` ("separate", "bundle", "bundle+ftmp") on a fresh mock
    device; the ETM bytes in use and the apply time."""
    backend = plugins.backend_class(CHIPS[kind][1])
    alone, data = members(kind)
    dev = Device.Open(f"mock://{kind}")
    region = dev.defaultMemRegion()
    base = region.used_bytes
    if how == "separate":
        nets = list(alone.values())
    else:
        bundle = xir.Bundle.CreateFromBuffer(data)
        nets = [bundle.network(k) for k in bundle.names()]
    chunks = {}
    if how != "separate":
        sizes = [backend.QuerySize(n.view(0)) for n in nets]
        for st in (SegmentType.WEIGHT, SegmentType.FTMP)[:1 if how == "bundle" else 2]:
            chunks[st] = region.malloc(max(s.chunk_bytes(st) for s in sizes), True,
                                       sizes[0].align)
    sessions = []
    t0 = time.perf_counter()
    for n in nets:
        s = Session.Create([backend, HostBackend], n.view(0), [dev, HostDevice.Default()])
        for st, c in chunks.items():
            s.backends[0].userReuseSegment(c, st)
        s.apply()
        sessions.append(s)
    apply_s = time.perf_counter() - t0
    weight = sum(s.backends[0].logic_segment_map[SegmentType.WEIGHT].byte_size
                 for s in sessions) if how == "separate" else \
        chunks[SegmentType.WEIGHT].byte_size
    row = {"how": how, "etm_bytes": region.used_bytes - base, "weight_bytes": weight,
           "apply_s": apply_s}
    for s in sessions:
        s.close()
    for c in chunks.values():
        c.free()
    dev.close()
    return row


@pytest.mark.parametrize("kind", list(CHIPS))
def test_bench_bundle_memory(benchmark, kind):
    members(kind)
    rows = {how: deploy(kind, how) for how in ("separate", "bundle", "bundle+ftmp")}
    benchmark.pedantic(lambda: deploy(kind, "bundle"), rounds=1, warmup_rounds=0)
    sep, bun = rows["separate"]["etm_bytes"], rows["bundle"]["etm_bytes"]
    benchmark.extra_info.update({f"{k}_etm_bytes": r["etm_bytes"] for k, r in rows.items()})
    print(f"\n{kind}: yolov5s at {'/'.join(map(str, SIZES))}: ETM in use, separate "
          f"{sep:,} B, bundle {bun:,} B (saved {sep - bun:,} B, {1 - bun / sep:.0%}), bundle "
          f"+ one FTMP chunk {rows['bundle+ftmp']['etm_bytes']:,} B; WEIGHT "
          f"{rows['separate']['weight_bytes']:,} -> {rows['bundle']['weight_bytes']:,} B "
          f"({load_average()})")
    assert bun < sep
    assert rows["bundle"]["weight_bytes"] < 0.5 * rows["separate"]["weight_bytes"]


def main(kinds: list[str]) -> None:
    print("| chip | deployment | ETM in use (B) | WEIGHT (B) | 3 applies (s) |")
    print("|---|---|---|---|---|")
    for kind in kinds:
        for how in ("separate", "bundle", "bundle+ftmp"):
            r = deploy(kind, how)
            print(f"| {kind} | {how} | {r['etm_bytes']:,} | {r['weight_bytes']:,} | "
                  f"{r['apply_s']:.2f} |")
    print(f"({load_average()})")


if __name__ == "__main__":
    main(sys.argv[1:] or list(CHIPS))

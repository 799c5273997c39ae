"""ZG330 deployment options on the simulator (docs/zg330-deployment.md): FTMP bytes with ETM
reuse on and off against the planner's lower bound, simulated cycles and ETM/OCM traffic per
OcmOpt, and the time of Session.apply().

`python benchmarks/bench_zg330_deploy.py [yolov5s:160 tiny_cnn ...]` prints the tables of the
doc. `test_bench_snapshot_load_yolov5s_320` compares loading a yolov5s (input 320) snapshot
with building the same session from json+raw, in the same run (docs/snapshot-format.md).
"""

from __future__ import annotations

import sys
import time

import numpy as np
import pytest

from host_backend import HostBackend
from xrt import Device, HostDevice, Session
from zg330backend import OcmOpt, ZG330Backend

_NETS: dict = {}


def compiled(name: str, size: int | None = None):
    key = (name, size)
    if key not in _NETS:
        from xcompile import zoo
        from xcompile.quant.quantize import quantize_network
        from zg330backend.lowering import adapt, lower

        kw = {"input_size": size} if size else {}
        net = zoo.build(name, **kw)
        q = quantize_network(net, zoo.calibration_set(name, count=2, **kw), bits=8,
                             method="minmax", weight_rounding="nearest")
        _NETS[key] = (q, lower(adapt(q)))
    return _NETS[key]


def measure(z, dev, x, *, reuse: bool, ocm: OcmOpt) -> dict:
    s = Session.Create([ZG330Backend, HostBackend], z.view(0), [dev, HostDevice.Default()])
    zb = s.backends[0]
    if not reuse:
        zb.disableEtmOptimize()
    zb.ocmOptimize(ocm)
    s.enableTimeProfile(True)
    t0 = time.perf_counter()
    s.apply()
    apply_ms = (time.perf_counter() - t0) * 1e3
    s.forward([x])
    prof = zb.profileInfo()
    p = zb.deployment.plan
    row = {"reuse": reuse, "ocm": ocm.name, "winner": zb.ocmopt.name, "apply_ms": apply_ms,
           "cycles": sum(d["cycles"] for d in prof.values()),
           "etm_bytes": sum(d["etm_bytes"] for d in prof.values()),
           "ocm_bytes": sum(d["ocm_bytes"] for d in prof.values()),
           "ftmp": p.ftmp_size, "bound": p.ftmp_lower_bound, "no_reuse": p.ftmp_no_reuse,
           "compiler": p.ftmp_compiler, "ocm_footprint": p.ocm_footprint}
    s.close()
    return row


def table(name: str, size: int | None) -> list[dict]:
    q, z = compiled(name, size)
    dev = Device.Open("sim://zg330")
    x = np.random.default_rng(0).normal(size=q.inputs()[0].shape).astype(np.float32)
    rows = [measure(z, dev, x, reuse=r, ocm=OcmOpt.NONE) for r in (True, False)]
    rows += [measure(z, dev, x, reuse=True, ocm=o)
             for o in (OcmOpt.OPTION1, OcmOpt.OPTION2, OcmOpt.OPTION3, OcmOpt.BEST_SCORE)]
    dev.close()
    return rows


@pytest.mark.parametrize("ocm", [OcmOpt.NONE, OcmOpt.BEST_SCORE])
def test_bench_apply_yolov5s_160(benchmark, ocm):
    q, z = compiled("yolov5s", 160)
    dev = Device.Open("sim://zg330")
    x = np.random.default_rng(0).normal(size=q.inputs()[0].shape).astype(np.float32)
    ref = measure(z, dev, x, reuse=True, ocm=OcmOpt.NONE)

    def deploy():
        s = Session.Create([ZG330Backend, HostBackend], z.view(0), [dev, HostDevice.Default()])
        s.backends[0].ocmOptimize(ocm)
        s.apply()
        return s

    s = benchmark.pedantic(deploy, rounds=5, warmup_rounds=1)
    s.forward([x])
    prof = s.backends[0].profileInfo()
    cycles = sum(d["cycles"] for d in prof.values())
    benchmark.extra_info.update({"cycles": cycles, "cycles_ocm_none": ref["cycles"],
                                 "ratio": cycles / ref["cycles"]})
    s.close()
    dev.close()


def test_bench_snapshot_load_yolov5s_320(benchmark, tmp_path):
    """Session from a snapshot (made on mock://zg330) against CreateFromJsonFile +
    loadParamsFromFile + Session.Create + apply; yolov5s at input_size 320, default settings
    (merge on, ETM reuse on, OcmOpt.BEST_SCORE). Both are timed here; the benchmark itself
    is the snapshot load."""
    import xir

    q, z = compiled("yolov5s", 320)
    js, raw, snap = tmp_path / "y.json", tmp_path / "y.raw", tmp_path / "y.snap"
    z.save(js, raw)
    mock = Device.Open("mock://zg330")
    s = Session.Create([ZG330Backend, HostBackend], z.view(0), [mock, HostDevice.Default()])
    s.apply()
    s.dumpSnapshot(snap)
    s.close()
    dev = Device.Open("sim://zg330")
    host = HostDevice.Default()

    def from_json() -> Session:
        net = xir.Network.CreateFromJsonFile(js)
        net.loadParamsFromFile(raw)
        sess = Session.Create([ZG330Backend, HostBackend], net.view(0), [dev, host])
        sess.apply()
        return sess

    def from_snapshot() -> Session:
        return Session.CreateWithSnapshot(snap, [ZG330Backend, HostBackend], [dev, host])

    json_ms = []
    for _ in range(3):
        t0 = time.perf_counter()
        sess = from_json()
        json_ms.append((time.perf_counter() - t0) * 1e3)
        sess.close()
    snap_ms = []
    for _ in range(3):
        t0 = time.perf_counter()
        sess = from_snapshot()
        snap_ms.append((time.perf_counter() - t0) * 1e3)
        sess.close()
    sess = benchmark.pedantic(from_snapshot, rounds=5, warmup_rounds=1)
    x = np.random.default_rng(0).normal(size=q.inputs()[0].shape).astype(np.float32)
    got = [np.asarray(t).copy() for t in sess.forward([x])]
    ref = from_json()
    want = [np.asarray(t).copy() for t in ref.forward([x])]
    assert all(a.tobytes() == b.tobytes() for a, b in zip(got, want))
    benchmark.extra_info.update({
        "input_size": 320, "snapshot_bytes": snap.stat().st_size,
        "json_raw_bytes": js.stat().st_size + raw.stat().st_size,
        "snapshot_load_ms": min(snap_ms), "json_raw_create_apply_ms": min(json_ms),
        "speedup": min(json_ms) / min(snap_ms)})
    print(f"yolov5s@320: snapshot {min(snap_ms):.1f} ms, json+raw+Create+apply "
          f"{min(json_ms):.1f} ms ({min(json_ms) / min(snap_ms):.1f}x)")
    ref.close()
    sess.close()
    dev.close()
    mock.close()


if __name__ == "__main__":
    specs = sys.argv[1:] or ["tiny_cnn", "yolov5s:160"]
    print("| network | ETM reuse | OCM asked | OCM used | FTMP bytes | lower bound | no reuse "
          "| cycles | ETM bytes | OCM bytes | apply ms |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for spec in specs:
        name, _, size = spec.partition(":")
        for r in table(name, int(size) if size else None):
            print(f"| {spec} | {'on' if r['reuse'] else 'off'} | {r['ocm']} | {r['winner']} | "
                  f"{r['ftmp']} | {r['bound']} | {r['no_reuse']} | {r['cycles']} | "
                  f"{r['etm_bytes']} | {r['ocm_bytes']} | {r['apply_ms']:.0f} |")

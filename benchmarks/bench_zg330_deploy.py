"""ZG330 deployment options on the simulator (docs/zg330-deployment.md): FTMP bytes with ETM
reuse on and off against the planner's lower bound, simulated cycles and ETM/OCM traffic per
OcmOpt, and the time of Session.apply().

`python benchmarks/bench_zg330_deploy.py [yolov5s:160 tiny_cnn ...]` prints the tables of the
doc. Snapshot load time against json+raw is not measured yet (snapshots are not implemented).
"""

from __future__ import annotations

import inspect
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
        from xir import zoo
        from xir.quant.quantize import quantize_network
        from zg330backend.lowering import adapt, lower

        kw = {"input_size": size} if size else {}
        net = zoo.build(name, **kw)
        fast = {"weight_rounding": "nearest"} if "weight_rounding" in \
            inspect.signature(quantize_network).parameters else {}
        q = quantize_network(net, zoo.calibration_set(name, count=2, **kw), bits=8,
                             method="minmax", **fast)
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
    p = zb._plan
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

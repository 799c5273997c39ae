"""Mutated network files, loaded and run: a session either runs them or raises a project error.

The loader-only fuzzer (test_xir_mutation.py) stops at `validate()`. Here every mutant of a real
compiled network goes the whole way a user's file goes -- load json + raw, `Session.Create`,
`apply`, one forward -- on the ZG330 and Buyi simulators and on the HostBackend (the quantized
and the float network), so the fields only a backend reads (HardOp device_info, the chips' value
placements, op attributes such as padding_mode or act_max, quantized types) are exercised too.
Nothing but `xir.XirError` / `xrt.XrtError` may escape. The default run takes a share of each
target; the full count (10,000 files) is marked slow.
"""

from __future__ import annotations

import json
import random
import warnings

import numpy as np
import pytest
from mutation import Outcomes, mutate, paths

FAST_CASES = 150
FULL_CASES = 2500  # per target: 4 targets, 10,000 files

TARGETS = ["zg330", "buyi", "host_int8", "host_float"]


def _files(target: str, tmp) -> tuple[bytes, bytes]:
    from xcompile import zoo
    from xcompile.quant.quantize import quantize_network

    net = zoo.build("tiny_cnn")
    q = quantize_network(net, zoo.calibration_set("tiny_cnn", count=2), bits=8,
                         method="minmax", weight_rounding="nearest")
    if target == "zg330":
        from zg330backend.lowering import adapt, lower
        out = lower(adapt(q))
    elif target == "buyi":
        from buyibackend.lowering import adapt, lower
        out = lower(adapt(q))
    else:
        out = q if target == "host_int8" else net
    out.save(tmp / "m.json", tmp / "m.raw")
    return (tmp / "m.json").read_bytes(), (tmp / "m.raw").read_bytes()


def _fuzz(target: str, cases: int, seed: int, devices, tmp) -> Outcomes:
    from host_backend import HostBackend
    from xir.serialize import loads, read_raw_bytes
    from xrt import Session

    pytest.importorskip("zg330backend")
    pytest.importorskip("buyibackend")
    from buyibackend import BuyiBackend
    from zg330backend import ZG330Backend

    js, raw = _files(target, tmp)
    where = paths(json.loads(js))
    chip = {"zg330": ZG330Backend, "buyi": BuyiBackend}.get(target)
    types = [chip, HostBackend] if chip else [HostBackend]
    devs = [devices[target], devices["host"]] if chip else [devices["host"]]
    rng = random.Random(seed)
    out = Outcomes()

    def case(text: str) -> None:
        net = loads(text, file="m.json")
        read_raw_bytes(net, raw, file="m.raw")
        with warnings.catch_warnings():  # a mutated scale may overflow: numbers, not errors
            warnings.simplefilter("ignore", RuntimeWarning)
            with Session.Create(types, net.view(0), devs) as s:
                s.apply()
                s.forward([np.zeros(v.shape, np.float32) for v in net.inputs()])

    while out.total < cases:
        mutant = mutate(json.loads(js), rng, where)
        if mutant is None:
            continue
        text = json.dumps(mutant)
        if text == js.decode():
            continue
        out.run(lambda text=text: case(text), target)
    return out


@pytest.mark.parametrize("target", TARGETS)
def test_mutated_networks_run_or_raise_project_errors(target, devices, tmp_path):
    out = _fuzz(target, FAST_CASES, 11, devices, tmp_path)
    assert not out.escapes, out.report()
    assert out.accepted and out.refused  # the mutants reach both outcomes


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_mutated_networks_full_count(target, devices, tmp_path):
    out = _fuzz(target, FULL_CASES, 1000 + TARGETS.index(target), devices, tmp_path)
    print(f"\n{target}: {out.report()}")
    assert not out.escapes, out.report()

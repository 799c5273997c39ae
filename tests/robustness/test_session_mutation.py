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
from mutation import Outcomes, at, mutate, paths

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


def _runner(target: str, devices, raw: bytes):
    """A function that loads a json text (with `raw`) and runs it as a user's file goes."""
    from host_backend import HostBackend
    from xir.serialize import loads, read_raw_bytes
    from xrt import Session

    pytest.importorskip("zg330backend")
    pytest.importorskip("buyibackend")
    from buyibackend import BuyiBackend
    from zg330backend import ZG330Backend

    chip = {"zg330": ZG330Backend, "buyi": BuyiBackend}.get(target)
    types = [chip, HostBackend] if chip else [HostBackend]
    devs = [devices[target], devices["host"]] if chip else [devices["host"]]

    def case(text: str) -> None:
        net = loads(text, file="m.json")
        read_raw_bytes(net, raw, file="m.raw")
        with warnings.catch_warnings():  # a mutated scale may overflow: numbers, not errors
            warnings.simplefilter("ignore", RuntimeWarning)
            with Session.Create(types, net.view(0), devs) as s:
                s.apply()
                s.forward([np.zeros(v.shape, np.float32) for v in net.inputs()])

    return case


def _fuzz(target: str, cases: int, seed: int, devices, tmp) -> Outcomes:
    js, raw = _files(target, tmp)
    where = paths(json.loads(js))
    case = _runner(target, devices, raw)
    rng = random.Random(seed)
    out = Outcomes()
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


STORAGE_SWAPS = ["@uint(8)", "@uint(16)", "@uint(32)", "@fp(32)", "@fp(16)", "@bool(8)"]


@pytest.mark.parametrize("target", ["host_int8", "zg330"])
def test_every_quantized_storage_swap_runs_or_raises(target, devices, tmp_path):
    """Each quantized type's storage replaced by every other scalar type, one at a time: the
    random fuzzer drew a uint16 storage 3 times in 2,000 files and it reached the integer
    kernels at forward time as a bare TypeError; here every such swap is tried."""
    js, raw = _files(target, tmp_path)
    doc = json.loads(js)
    # every place a value is written (its producer's outputs, its consumers' inputs) changes
    # together, as in a file whose author typed the value differently
    by_value: dict[int, list[tuple]] = {}
    for p in paths(doc):
        if len(p) > 3 and p[-3:] == ("dtype", "element_dtype", "storage"):
            by_value.setdefault(at(doc, p[:-3])["v_id"], []).append(p)
    assert by_value, "the network has quantized types"
    case = _runner(target, devices, raw)
    out = Outcomes()
    for v_id, where in sorted(by_value.items()):
        for swap in STORAGE_SWAPS:
            mutant = json.loads(js)
            for p in where:
                at(mutant, p[:-1])[p[-1]] = swap
            text = json.dumps(mutant)
            out.run(lambda text=text: case(text), f"v_id {v_id} -> {swap}")
    assert not out.escapes, out.report()
    assert out.refused

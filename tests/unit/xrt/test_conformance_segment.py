"""The conformance kit's `forward_segment` check: a backend's optional `forwardSegment` gives
exactly what its op-by-op forward gives. Listed only for backends that have one (the
HostBackend has one: its fused Conv2d chains); a segment that computes anything else, or
returns too few tensors, fails it; the shipped chips pass it."""

from __future__ import annotations

import importlib.metadata as md
import sys
import types

import numpy as np
import pytest

import xrt
from xrt import Tensor, plugins
from xrt.hookspecs import hookimpl
from xrt.testing import Subject, checks, run_conformance


def _relu(op, inputs, outputs, backend):
    return [Tensor(np.maximum(np.asarray(inputs[0]), 0).astype(np.float32))]


class SegRelu(xrt.Backend):
    """Relu op by op, and the same Relu per segment: meets the contract."""

    name = "KitSegRelu"
    default_url = "host://"
    FORWARDS = {"Relu": _relu}

    def forwardSegment(self, ops, feeds, wanted):
        values = dict(feeds)
        for op in ops:
            (out,) = _relu(op, [values[v.v_id] for v in op.inputs], [], self)
            values[op.outputs[0].v_id] = out
        return [values[vid] for vid in wanted]


class OffSegRelu(SegRelu):
    """Its segments add 1e-3: the plain forward differs from the op-by-op one."""

    name = "KitOffSegRelu"

    def forwardSegment(self, ops, feeds, wanted):
        return [Tensor(np.asarray(t) + np.float32(1e-3))
                for t in super().forwardSegment(ops, feeds, wanted)]


class ShortSegRelu(SegRelu):
    """Its segments return one tensor too few."""

    name = "KitShortSegRelu"

    def forwardSegment(self, ops, feeds, wanted):
        return super().forwardSegment(ops, feeds, wanted)[:-1]


@pytest.fixture
def seg_plugin(monkeypatch):
    mod = types.ModuleType("kit_segment_plugin")

    @hookimpl
    def xrt_register_backends(register):
        for cls in (SegRelu, OffSegRelu, ShortSegRelu):
            register(cls)

    mod.xrt_register_backends = xrt_register_backends
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    real = plugins._entry_points
    ep = md.EntryPoint("kit_segment", mod.__name__, plugins.ENTRY_POINT_GROUP)
    monkeypatch.setattr(plugins, "_entry_points", lambda: [*real(), ep])
    plugins.reset()
    yield mod
    monkeypatch.undo()
    plugins.reset()


def _segment_result(backend, **kw):
    report = run_conformance(backend, only="forward_segment", trials=1, **{"models": (), **kw})
    (r,) = report.results
    return r


def test_listed_only_for_backends_with_a_segment(seg_plugin):
    assert "forward_segment" in [c.name for c in checks(Subject(SegRelu))]
    assert "forward_segment" in [c.name for c in checks(Subject(plugins.backend_class(
        "Host")))]

    class NoSegment(xrt.Backend):
        name = "KitNoSegment"
        default_url = "host://"
        FORWARDS = {"Relu": _relu}

    assert "forward_segment" not in [c.name for c in checks(Subject(NoSegment))]


def test_a_faithful_segment_passes(seg_plugin):
    r = _segment_result("KitSegRelu")
    assert r.status == "passed", r.message


def test_a_segment_that_differs_fails_naming_it(seg_plugin):
    r = _segment_result("KitOffSegRelu")
    assert r.status == "failed"
    assert "forwardSegment (plain forward) against forwardOp" in r.message
    assert "differs" in r.message


def test_a_segment_returning_too_few_fails(seg_plugin):
    r = _segment_result("KitShortSegRelu")
    assert r.status == "failed" and "forwardSegment" in r.message


@pytest.mark.parametrize("backend", ["ZG330", "Buyi"])
def test_the_chips_segments_are_their_op_by_op_forward(backend):
    pytest.importorskip(f"{backend.lower()}backend")
    r = _segment_result(backend, models=("tiny_cnn",))
    assert r.status == "passed", r.message

"""Per-op output sensitivity (`xcompile.quant.sensitivity`, the report's `output_loss`):
measured by putting one op's integer computation (as the report runs it alone) into the float
network and running the rest again, checked here against the same replacement done inside a
whole HostBackend forward, and used by
`Report.raisable` to rank the ops the mixed-precision search raises."""

from __future__ import annotations

import numpy as np
import pytest
from conv_graph import ConvGraph

import xcompile.quant.report as report_mod
from xcompile.frontend.onnx_import import import_onnx
from xcompile.passes import optimize
from xcompile.quant.parts import compare_parts, output_parts
from xcompile.quant.quantize import quantize_network
from xcompile.quant.report import accuracy_report
from xcompile.runner import HostRunner


def _model():
    """conv (channels 40x apart) -> HardSwish -> depthwise conv -> conv -> Sigmoid."""
    g = ConvGraph(5, bias_std=0.3, name_nodes=False)
    x = g.conv("x", 3, 12, 3, "stem", gain=np.geomspace(0.25, 10.0, 12))
    g.node("HardSwish", [x], ["hs"])
    x = g.conv("hs", 12, 12, 3, "dw", groups=12)
    x = g.conv(x, 12, 4, 1, "head")
    g.node("Sigmoid", [x], ["y"])
    return g.model("sens", {"x": [1, 3, 16, 16]}, {"y": [1, 4, 16, 16]})


def _images(n, seed):
    r = np.random.default_rng(seed)
    return [r.uniform(-1, 1, (1, 3, 16, 16)).astype(np.float32) for _ in range(n)]


@pytest.fixture(scope="module")
def case():
    net = import_onnx(_model())
    cal = _images(4, 0)
    q = quantize_network(net, cal)
    return optimize(net), q, cal


def _by_callback(opt, q, op_id, xs):
    """1 - worst part per sample with `op_id`'s outputs replaced, inside one whole forward,
    by the op run alone (the post-callback writes them into the session's tensors)."""
    runner = HostRunner()
    fvals, _ = report_mod._capture(opt, [[x] for x in xs], runner)
    op = next(o for o in q.ops if o.op_id == op_id)
    runs = report_mod._Alone(fvals, HostRunner()).runs(op)
    writes = {int(v.tags["float_v_id"]): (k, float(v.dtype.element_dtype.scale[0]))
              for k, v in enumerate(op.outputs)}
    sample = [0]

    def replace(v, a):
        if v.v_id in writes:
            k, s = writes[v.v_id]
            a[...] = (runs[sample[0]][k].astype(np.float64) * s).reshape(a.shape)

    ref = runner.run(opt, [[x] for x in xs], lambda v, a: None)
    got = []
    for i, x in enumerate(xs):
        sample[0] = i
        got += runner.run(opt, [[x]], replace)
    parts = output_parts(opt, reference=ref[0])
    return float(np.mean([1.0 - min(r.figure for r in compare_parts(f, g, parts))
                          for f, g in zip(ref, got)]))


def test_output_loss_matches_rounding_inside_a_whole_forward(case):
    opt, q, cal = case
    rep = accuracy_report(opt, q, cal[:2], sensitivity=True)
    rows = rep.raisable()
    assert rows and all(r.output_loss is not None for r in rows)
    for r in rows:
        want = _by_callback(opt, q, r.op_id, cal[:2])
        # float32 kernels of a whole session and of single ops differ in their last bits
        assert r.output_loss == pytest.approx(want, rel=0.03, abs=2e-7), r.name
    assert max(r.output_loss for r in rows) > 1e-5  # int8 rounding costs something


def test_raisable_ranks_by_output_loss_where_measured(case):
    opt, q, cal = case
    rep = accuracy_report(opt, q, cal[:1], sensitivity=True)
    losses = [r.output_loss for r in rep.raisable()]
    assert losses == sorted(losses, reverse=True)
    plain = accuracy_report(opt, q, cal[:1], sensitivity=False)
    assert all(r.output_loss is None for r in plain.rows)
    alone = [r.alone for r in plain.raisable()]
    assert alone == sorted(alone)


def test_measured_by_default_only_within_the_budget(case, monkeypatch):
    opt, q, cal = case
    assert any(r.output_loss is not None for r in accuracy_report(opt, q, cal[:1]).rows)
    monkeypatch.setattr(report_mod, "MAX_MACS", 0)
    assert all(r.output_loss is None for r in accuracy_report(opt, q, cal[:1]).rows)

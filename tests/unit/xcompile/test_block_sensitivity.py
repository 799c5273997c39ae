"""Output sensitivity per block (`xcompile.quant.sensitivity.block_sensitivity`): a stretch of
consecutive integer ops computed as the integer network computes them, the rest float. One op
alone is the report's `output_loss`; every op together is the quantized network itself; the
mixed-precision search ranks by block where the per-op partial forwards exceed the budget
(ddddocr's YOLOX detector). Networks written with onnx.helper, as exporters write them."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import xcompile.quant.report as report_mod
from xcompile.frontend.onnx_import import import_onnx
from xcompile.passes import optimize
from xcompile.quant.calibrate import run_float
from xcompile.quant.mixed import choose_bits
from xcompile.quant.parts import compare_parts, output_parts
from xcompile.quant.quantize import quantize_network
from xcompile.quant.report import accuracy_report
from xcompile.quant.sensitivity import (
    MIN_BLOCK,
    Block,
    _integer_writes,
    block_ranking,
    block_sensitivity,
    blocks,
    blocks_macs,
)
from xcompile.runner import HostRunner

SHAPE = (1, 3, 16, 16)


def _stages(stem_gain: float = 30.0) -> object:
    """A small detector-like trunk: a stem conv whose channels are `stem_gain` apart in range
    (folded BatchNorms), HardSwish, then three stages of conv -> ReLU -> conv with a
    residual Add, a 1x1 head and a Sigmoid: the stem's int8 rounding is what the output
    loses most, though its own output looks fine."""
    r = np.random.default_rng(3)
    inits, nodes = [], []

    def conv(x, cin, cout, k, name, gain=None):
        w = r.normal(0, np.sqrt(2 / (cin * k * k)), (cout, cin, k, k))
        if gain is not None:
            w *= gain.reshape(-1, 1, 1, 1)
        inits.append(numpy_helper.from_array(w.astype(np.float32), name + ".w"))
        inits.append(numpy_helper.from_array(r.normal(0, 0.2, cout).astype(np.float32),
                                             name + ".b"))
        nodes.append(helper.make_node("Conv", [x, name + ".w", name + ".b"], [name],
                                      pads=[k // 2] * 4, name=name))
        return name

    x = conv("x", 3, 8, 3, "stem", gain=np.geomspace(1.0 / stem_gain, 1.0, 8))
    nodes.append(helper.make_node("HardSwish", [x], ["stem_hs"], name="stem_hs"))
    x = "stem_hs"
    for s in range(3):
        a = conv(x, 8, 8, 3, f"s{s}a")
        nodes.append(helper.make_node("Relu", [a], [f"s{s}r"], name=f"s{s}r"))
        b = conv(f"s{s}r", 8, 8, 3, f"s{s}b")
        nodes.append(helper.make_node("Add", [x, b], [f"s{s}"], name=f"s{s}add"))
        x = f"s{s}"
    x = conv(x, 8, 4, 1, "head")
    nodes.append(helper.make_node("Sigmoid", [x], ["y"], name="y"))
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
          for n, s in (("x", list(SHAPE)), ("y", [1, 4, 16, 16]))]
    g = helper.make_graph(nodes, "stages", vi[:1], vi[1:], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def case():
    opt = optimize(import_onnx(_stages()))
    rng = np.random.default_rng(0)
    cal = [rng.uniform(-1, 1, SHAPE).astype(np.float32) for _ in range(3)]
    q = quantize_network(opt, cal, method="minmax", weight_rounding="nearest")
    runner = HostRunner()
    values: dict = {}
    outs = run_float(opt, [[x] for x in cal[:2]],
                     lambda v, a: values.setdefault(v.v_id, []).append(np.array(a)), runner)
    return opt, q, cal, values, outs, runner


def test_one_op_is_its_output_loss_and_every_op_is_the_integer_network(case):
    opt, q, cal, values, outs, runner = case
    rep = accuracy_report(opt, q, cal[:2], sensitivity=True)
    rows = rep.raisable()
    assert len(rows) >= 8
    for r in rows:
        (b,) = block_sensitivity(opt, q, values, outs, runner, [Block([r.op_id])])
        assert b.loss == pytest.approx(r.output_loss, rel=1e-6, abs=1e-9), r.name
    # every integer op at once, each from the others' values: the quantized network itself
    (whole,) = block_sensitivity(opt, q, values, outs, runner, [Block(list(_integer_writes(q)))])
    got = run_float(q, [[x] for x in cal[:2]], lambda v, a: None, runner)
    parts = output_parts(opt, reference=outs[0])
    want = np.mean([1.0 - min(p.figure for p in compare_parts(f, g, parts))
                    for f, g in zip(outs, got)])
    assert whole.loss == pytest.approx(want, rel=1e-6) and whole.loss > 1e-5
    # a block is not the sum of its ops alone: its ops compute from each other's values
    stem = [r.op_id for r in rows if r.name in ("stem", "stem_hs")]
    (both,) = block_sensitivity(opt, q, values, outs, runner, [Block(stem)])
    alone = [r.output_loss for r in rows if r.op_id in stem]
    assert both.loss != pytest.approx(sum(alone), rel=1e-3)


def test_blocks_cover_the_integer_ops_in_order(case):
    opt, q, *_ = case
    found = blocks(opt, q, count=4)
    ids = [i for b in found for i in b.op_ids]
    order = [op.op_id for op in q.ops if op.op_id in _integer_writes(q)]
    assert ids == order  # every integer op once, in network order
    assert len(found) >= 2 and all(len(b.op_ids) >= MIN_BLOCK for b in found)
    names = {op.op_id: op.name for op in q.ops}
    # cut where the network narrows to one tensor: after a residual Add, not inside a stage
    assert all(names[b.op_ids[-1]].endswith("add") for b in found[:-1])
    assert all(len(b.op_ids) >= MIN_BLOCK for b in blocks(opt, q, count=100))
    assert len(blocks(opt, q, count=1)) == 1


def test_block_ranking_ranks_ops_by_their_share_of_their_blocks_loss(case):
    opt, q, cal, values, outs, runner = case
    ranked = accuracy_report(opt, q, cal[:1], sensitivity=False).raisable()
    order, errors, found = block_ranking(opt, q, [[cal[0]]], ranked, runner)
    assert sorted(r.op_id for r in order) == sorted(r.op_id for r in ranked)
    shares = [errors[r.op_id] for r in order if r.op_id in errors]
    assert shares == sorted(shares, reverse=True) and shares[0] > 0
    for b in found:  # each block's loss is shared out over its ranked ops by their own error
        mine = {r.op_id: 1.0 - r.alone for r in ranked if r.op_id in b.op_ids}
        if mine and sum(mine.values()) > 0:
            assert sum(errors[i] for i in mine) == pytest.approx(b.loss)
            for i, e in mine.items():
                assert errors[i] == pytest.approx(b.loss * e / sum(mine.values()))
    assert blocks_macs(opt, q, found, 1) > 0
    assert block_ranking(opt, q, [[cal[0]]], ranked, runner, max_macs=0) is None


def test_search_ranks_by_block_where_per_op_is_over_budget(case, monkeypatch):
    """The report's per-op measure over its budget: the search measures blocks instead (one
    partial forward each) and says so in the tag."""
    opt, q, cal, *_ = case
    monkeypatch.setattr(report_mod, "MAX_MACS", 0)

    def quantize(op_bits):
        return quantize_network(opt, cal, method="minmax", weight_rounding="nearest",
                                op_bits=op_bits)

    _, mp = choose_bits(opt, quantize(None), quantize, [[x] for x in cal], 0.99999999,
                        max_int16=1.0, max_tries=1)
    tag = mp.to_tag()
    assert tag["ranking"] == "blocks" and tag["blocks"]
    losses = [b[3] for b in tag["blocks"]]
    assert losses == sorted(losses, reverse=True)
    assert mp.attempts  # measured a raise

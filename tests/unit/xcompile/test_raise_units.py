"""A hard-swish table and the depthwise convolution reading it, raised as one
(`xcompile.quant.units`, docs/quantization.md section 10): a PP-LCNet stage as paddle2onnx
writes it (a pointwise convolution whose folded BatchNorm leaves one channel far louder than
the rest, HardSwish written out as Add / Clip / Mul / Div, a 3x3 depthwise convolution), the
pair found in the quantized network, measured together, ranked by that loss, and the layers
the int16 cap counts (`xcompile.quant.layers`: a convolution and the table it alone feeds are
one)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from xcompile.frontend.onnx_import import import_onnx
from xcompile.passes import optimize
from xcompile.quant.calibrate import load_calibration
from xcompile.quant.capability import integer_ops
from xcompile.quant.layers import layer_of, wide_layers
from xcompile.quant.mixed import planned_int16
from xcompile.quant.quantize import quantize_network
from xcompile.quant.report import accuracy_report
from xcompile.quant.units import depthwise_units, unit_ranking
from xcompile.runner import HostRunner


def _model():
    r = np.random.default_rng(5)
    inits, nodes = [], []

    def const(name, a):
        inits.append(numpy_helper.from_array(np.asarray(a, np.float32), name))
        return name

    def conv(x, cin, cout, k, name, groups=1, gain=None):
        w = r.normal(0, np.sqrt(2 / (cin // groups * k * k)), (cout, cin // groups, k, k))
        if gain is not None:
            w *= gain.reshape(-1, 1, 1, 1)
        nodes.append(helper.make_node("Conv", [x, const(name + ".w", w),
                                               const(name + ".b", r.normal(0, 0.2, cout))],
                                      [name], pads=[k // 2] * 4, group=groups, name=name))
        return name

    def hardswish(x, k):  # paddle2onnx: x * clip(x + 3, 0, 6) / 6
        three, zero, six = const(f"three{k}", 3.0), const(f"zero{k}", 0.0), const(f"six{k}", 6.0)
        nodes.extend([helper.make_node("Add", [x, three], [f"a{k}"]),
                      helper.make_node("Clip", [f"a{k}", zero, six], [f"c{k}"]),
                      helper.make_node("Mul", [x, f"c{k}"], [f"m{k}"]),
                      helper.make_node("Div", [f"m{k}", six], [f"h{k}"], name=f"hs{k}")])
        return f"h{k}"

    x = hardswish(conv("x", 3, 16, 3, "stem"), 0)
    gain = np.ones(16)
    gain[6] = 12.0  # one loud channel sets the map's scale
    x = hardswish(conv(x, 16, 16, 1, "pw", gain=gain), 1)
    x = hardswish(conv(x, 16, 16, 3, "dw", groups=16), 2)
    conv(x, 16, 8, 1, "y")
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
          for n, s in (("x", [1, 3, 16, 16]), ("y", [1, 8, 16, 16]))]
    g = helper.make_graph(nodes, "lcnet_stage", vi[:1], vi[1:], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def case():
    r = np.random.default_rng(3)
    cal = [r.uniform(-1, 1, (1, 3, 16, 16)).astype(np.float32) for _ in range(4)]
    net = import_onnx(_model())
    opt = optimize(net)
    q = quantize_network(net, cal, activation_bias=False)
    return opt, q, cal


def test_the_table_feeding_a_depthwise_convolution_is_found(case):
    opt, q, _ = case
    names = {op.op_id: op.name for op in q.ops}
    units = depthwise_units(q)
    assert [(names[t], names[d]) for t, d in units.items()] == [("hs1", "dw")]
    assert next(op for op in q.ops if op.op_id in units).op_type == "Hardswish"


def test_the_pair_is_ranked_by_what_both_cost_together(case):
    opt, q, cal = case
    data = load_calibration(cal, opt)
    runner = HostRunner()
    rep = accuracy_report(opt, q, data[:2], runner)
    ranked = rep.raisable()
    assert all(r.output_loss is not None for r in ranked)
    by_id = {r.op_id: r for r in ranked}
    names = {r.op_id: r.name for r in ranked}
    (table, dw), = depthwise_units(q).items()
    merged, errors, partners = unit_ranking(opt, q, data[:2], ranked, None, runner)
    assert partners == {table: (dw,)}
    assert dw not in {r.op_id for r in merged} and table in {r.op_id for r in merged}
    pair = next(r for r in merged if r.op_id == table)
    # the two in integers together cost the outputs at least what the table alone does
    assert pair.output_loss == errors[table] >= by_id[table].output_loss
    assert [errors[r.op_id] for r in merged] == sorted(errors[r.op_id] for r in merged)[::-1]
    assert len(merged) == len(ranked) - 1, [names[r.op_id] for r in merged]


def test_layers_fold_the_tables_into_their_writers(case):
    opt, _, _ = case
    ops = {op.name: op.op_id for op in opt.ops}
    int_ops = integer_ops(opt)
    layer = layer_of(opt, int_ops)
    # four convolutions, each with the hard-swish table it alone feeds (the last, with the
    # layout Transpose it writes through), and the input's layout Transpose
    assert len(int_ops) == 9 and len(set(layer.values())) == 5
    assert layer[ops["hs1"]] == layer[ops["pw"]] != layer[ops["dw"]]
    # raising the table and the depthwise reader: pw's pass writes 16 bits, dw's reads them
    at16 = planned_int16(opt, {ops["hs1"]: 16, ops["dw"]: 16})
    assert wide_layers(opt, layer, at16) - wide_layers(opt, layer, set()) == \
        {layer[ops["pw"]], layer[ops["dw"]]}

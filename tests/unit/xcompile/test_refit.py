"""The compile half of a refit (`xcompile.refit`, issue 29 point 5) on the HostBackend: the
provenance the importer and the passes record gives back, from the initializers alone, the very
float parameters a fresh import + optimize computes (BatchNorms folded, Gemm's transB / alpha /
beta); a refit re-quantizes them as a fresh nearest-rounding quantization does, at the frozen
activation scales; every refused source names what is at fault and changes nothing."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from refit_nets import copy_network, nchw, tiny_exports, tiny_quantized

from host_backend import HostBackend
from xcompile import zoo
from xcompile.frontend import import_onnx
from xcompile.passes import optimize
from xcompile.quant.quantize import quantize_network
from xcompile.refit.plan import plan_refit
from xcompile.refit.provenance import evaluate
from xcompile.refit.record import RECORDS_TAG
from xir.serialize import load_network
from xrt import HostDevice, Session
from xrt.errors import InvalidArgumentError


@pytest.fixture(scope="module")
def tiny():
    """tiny_cnn exported to ONNX twice (seeds 0 and 1), the first imported and quantized."""
    return (*tiny_exports(), tiny_quantized())


def _inits(m):
    return {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}


def _host(net):
    s = Session.Create([HostBackend], net.view(0), [HostDevice.Default()])
    s.apply()
    return s


def _x(q, seed=3):
    return np.random.default_rng(seed).normal(size=q.inputs()[0].shape).astype(np.float32)


def _params(net):
    return {(op.op_id, i): np.array(p.data) for op in net.ops for i, p in enumerate(op.inputs)
            if p.is_params and p.data is not None}


def test_provenance_gives_the_parameters_a_fresh_import_computes(tiny):
    """Every recorded expression, evaluated on the *new* model's initializers, equals the
    parameter a fresh import + optimize of the new model holds, bit for bit (BN re-folded)."""
    m0, m1, q = tiny
    opt1 = optimize(import_onnx(m1))
    arrays = _inits(m1)
    recs = q.tags[RECORDS_TAG]
    assert len(recs) == 9  # 7 convolutions (6 with a folded BN), the SE pair, the classifier
    for oid, rec in recs.items():
        op = opt1.getOpById(int(oid))
        for key, i in (("w", 1), ("b", 2)):
            got = evaluate(rec[key]["src"], arrays).reshape(rec[key]["shape"])
            np.testing.assert_array_equal(got, np.asarray(op.inputs[i].data), err_msg=oid)
    assert sum(rec["w"]["src"].get("op") == "bn_w" for rec in recs.values()) == 6


def test_gemm_exporter_idiom_transb_alpha_beta():
    """torch's nn.Linear as Gemm(transB=1), with alpha and beta: the weight is read transposed
    and scaled, the bias scaled, as the importer computes them."""
    rng = np.random.default_rng(0)
    w = rng.normal(size=(6, 4)).astype(np.float32)
    b = rng.normal(size=(6,)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Gemm", ["x", "W", "B"], ["y"], transB=1, alpha=0.5, beta=2.0)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    net = optimize(import_onnx(m))
    mm = next(op for op in net.ops if op.op_type == "Matmul")
    w2, b2 = rng.normal(size=(6, 4)).astype(np.float32), rng.normal(size=(6,)).astype(np.float32)
    got_w = evaluate(mm.inputs[1].tags["src"], {"W": w2})
    got_b = evaluate(mm.inputs[2].tags["src"], {"B": b2})
    np.testing.assert_array_equal(got_w, (w2.T * np.float32(0.5)).astype(np.float32))
    np.testing.assert_array_equal(got_b, (b2 * np.float32(2.0)).astype(np.float32))


def test_refit_requantizes_as_a_fresh_quantization(tiny):
    """The refitted integer reference holds the weight codes and per-channel scales a fresh
    nearest-rounding quantization of the new model computes, and the bias at the frozen
    input scale; the activation types are unchanged; the report names every initializer."""
    m0, m1, q = tiny
    net = copy_network(q)
    s = _host(net)
    before = {op.op_id: [v.dtype for v in op.inputs + op.outputs if not v.is_params]
              for op in net.ops}
    rep = s.refitWeights(m1)
    assert len(rep.rows) == 9 and rep.unchanged == 0 and rep.hardops == []
    assert sorted(rep.host_ops) == sorted(int(k) for k in q.tags[RECORDS_TAG])
    assert "stem.conv.weight" in rep.initializers and "stem.bn.running_var" in rep.initializers
    folded = {"stem", "down", "dw", "pw", "branch1", "branch2"}
    assert all(r.bn_refolded == (r.name.split(".")[0] in folded) for r in rep.rows)
    assert all(r.weight_saturated == 0 and 0 < r.weight_err_max for r in rep.rows)
    fresh = quantize_network(import_onnx(m1), nchw(zoo.calibration_set("tiny_cnn", count=2)),
                             bits=8, method="minmax", weight_rounding="nearest")
    for row in rep.rows:
        mine, theirs = net.getOpById(row.op_id), fresh.getOpById(row.op_id)
        np.testing.assert_array_equal(mine.inputs[1].data, theirs.inputs[1].data)
        np.testing.assert_array_equal(mine.inputs[1].dtype.element_dtype.scale,
                                      theirs.inputs[1].dtype.element_dtype.scale)
        assert [v.dtype for v in mine.inputs + mine.outputs if not v.is_params] == \
            before[row.op_id]
    assert "refit from a ModelProto: 9 layers" in str(rep)
    s.close()


def test_dict_subset_file_and_unchanged_layers(tiny, tmp_path):
    """A dict refits only the layers it feeds; a file whose initializers equal the deployed
    ones changes nothing; the digests follow the refit (a second identical refit is a no-op)."""
    m0, m1, q = tiny
    net = copy_network(q)
    s = _host(net)
    # several inputs: the squeeze-excite gate se.fc1 feeds moves the int8 output on some
    # inputs only (its change is a code or two through the gate's Multiply)
    xs = [_x(q, seed) for seed in range(3, 11)]

    def outputs():
        return [np.asarray(s.forward([x])[0]).copy() for x in xs]

    old = outputs()
    new = _inits(m1)
    rep = s.refitWeights({"se.fc1.weight": new["se.fc1.weight"],
                          "se.fc1.bias": new["se.fc1.bias"]})
    assert [r.name for r in rep.rows] == ["se.fc1/Conv"] and rep.unchanged == 8
    mid = outputs()
    assert any(not np.array_equal(a, b) for a, b in zip(old, mid))
    path = tmp_path / "v0.onnx"
    onnx.save(m0, path)
    rep0 = s.refitWeights(str(path))  # only se.fc1 differs from the original now
    assert [r.name for r in rep0.rows] == ["se.fc1/Conv"]
    for a, b in zip(old, outputs()):
        np.testing.assert_array_equal(a, b)
    assert s.refitWeights(str(path)).rows == []
    s.close()


def _refused(q, source, match):
    net = copy_network(q)
    s = _host(net)
    x = _x(q)
    want = [np.asarray(t).copy() for t in s.forward([x])]
    before = _params(net)
    with pytest.raises(InvalidArgumentError, match=match):
        s.refitWeights(source)
    after = _params(net)
    assert before.keys() == after.keys()
    assert all(np.array_equal(before[k], after[k]) for k in before)
    np.testing.assert_array_equal(want[0], np.asarray(s.forward([x])[0]))
    s.close()


def test_refused_sources_change_nothing(tiny):
    m0, m1, q = tiny
    new = _inits(m1)
    w = new["se.fc1.weight"]
    _refused(q, {"nope.weight": w}, "initializer 'nope.weight'.*not one of the model")
    _refused(q, {"se.fc1.weight": w[:, :-1]}, "'se.fc1.weight' has shape")
    _refused(q, {"se.fc1.weight": w.astype(np.float64)}, "'se.fc1.weight' is float64")
    _refused(q, {"stem.conv.weight": new["stem.conv.weight"]},
             "stem.conv/Conv.*not 'stem.bn.weight'.*partner of a folded pair")
    _refused(q, {"up_scales": np.asarray([1, 1, 4, 4], np.float32)},
             "'up_scales' was given but feeds no layer a refit can update")
    _refused(q, {"se.fc1.weight": w * np.nan, "se.fc1.bias": new["se.fc1.bias"]},
             "weight of layer 'se.fc1/Conv'.*NaN")
    _refused(q, {"se.fc1.weight": w, "se.fc1.bias": new["se.fc1.bias"] * 1e9},
             "bias of layer 'se.fc1/Conv'.*beyond the int32 accumulator")
    _refused(q, {"se.fc1.weight": w * 1e9, "se.fc1.bias": new["se.fc1.bias"]},
             "requantization multiplier.*outside the hardware's range")
    _refused(q, "/nonexistent/model.onnx", "no ONNX file")
    _refused(q, 42, "not int")
    other = onnx.ModelProto()
    other.CopyFrom(m1)
    relu = next(n for n in other.graph.node if n.op_type == "Relu")
    relu.op_type = "Sigmoid"
    _refused(q, other, "another graph")
    fewer = onnx.ModelProto()
    fewer.CopyFrom(m1)
    fewer.graph.initializer.pop()
    _refused(q, fewer, "lacks initializer")


def test_a_network_without_records_is_refused():
    net = zoo.build("tiny_cnn")  # built in Python: no ONNX initializers to map
    s = _host(net)
    with pytest.raises(InvalidArgumentError, match="carries no refit records"):
        s.refitWeights({"w": np.zeros(3)})
    s.close()


def test_records_survive_save_and_load(tiny, tmp_path):
    """The frozen records and digests are json: a saved and reloaded network refits the same
    way (an inf act_max attribute included)."""
    m0, m1, q = tiny
    path = str(tmp_path / "q.json")
    q.save(path)
    back = load_network(path)
    assert back.tags[RECORDS_TAG] == q.tags[RECORDS_TAG]
    a = plan_refit(copy_network(q), m1)
    b = plan_refit(back, m1)
    for oid, layer in a.layers.items():
        np.testing.assert_array_equal(layer.op.inputs[1].data, b.layers[oid].op.inputs[1].data)
        assert layer.op.attrs == b.layers[oid].op.attrs


def test_an_equalized_network_is_refused(tiny):
    """Cross-layer equalisation rescaled pairs by factors of the old weights: a refit cannot
    recompute them from initializers, and says so."""
    m0, m1, q = tiny
    net = copy_network(q)
    net.tags["quantization"] = {**net.tags["quantization"], "equalized_pairs": 2}
    s = _host(net)
    with pytest.raises(InvalidArgumentError, match="cross-layer equalisation"):
        s.refitWeights(m1)
    s.close()


def test_per_tensor_weights_stay_per_tensor(tiny):
    """A network compiled with per-tensor weights (no equalisation) is refitted per tensor: the
    codes and the one scale a fresh per-tensor quantization of the new model computes."""
    m0, m1, q = tiny
    cal = nchw(zoo.calibration_set("tiny_cnn", count=2))
    kw = dict(bits=8, method="minmax", weight_rounding="nearest", per_channel=False,
              equalize=False)
    net = quantize_network(import_onnx(m0), cal, **kw)
    s = _host(net)
    rep = s.refitWeights(m1)
    fresh = quantize_network(import_onnx(m1), cal, **kw)
    assert len(rep.rows) == 9
    for row in rep.rows:
        mine, theirs = net.getOpById(row.op_id).inputs[1], fresh.getOpById(row.op_id).inputs[1]
        assert mine.dtype.element_dtype.axis is None
        np.testing.assert_array_equal(mine.data, theirs.data)
        np.testing.assert_array_equal(mine.dtype.element_dtype.scale,
                                      theirs.dtype.element_dtype.scale)
    s.close()


def test_a_warm_host_session_after_a_refit_equals_a_fresh_one(tiny, tmp_path):
    """A HostBackend session that ran before its refit computes with the new weights' scales,
    not those it planned its ops with: every output equals a session made afresh on the
    refitted network (a refit gives the weight and bias Params new types in place)."""
    m0, m1, q = tiny
    net = copy_network(q)
    s = _host(net)
    xs = [_x(q, seed) for seed in range(3, 9)]
    for x in xs:
        s.forward([x])  # the ops are planned with the first weights' types
    path = tmp_path / "v1.onnx"
    onnx.save(m1, path)
    assert len(s.refitWeights(str(path)).rows) == 9
    fresh = _host(copy_network(net))
    for x in xs:
        np.testing.assert_array_equal(np.asarray(s.forward([x])[0]),
                                      np.asarray(fresh.forward([x])[0]))
    fresh.close()
    s.close()

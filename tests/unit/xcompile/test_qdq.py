"""Pre-quantized QDQ models (xcompile.quant.qdq): onnxruntime's quantize_static output imports
as the float model its pairs stand for, the pairs' scales land on the right values, the
quantize stage uses them instead of calibrated ones, and weights keep the author's codes."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from corpus import forward_once  # noqa: E402
from field_nets import Builder, qdq_model  # noqa: E402

from xcompile.quant.qdq import (  # noqa: E402
    AMAX_TAG,
    import_qdq,
    remove_qdq,
    strip_qdq_model,
)
from xcompile.quant.quantize import quantize_network  # noqa: E402
from xcompile.quant.report import cosine  # noqa: E402

SHAPE = (1, 3, 16, 16)


def _float_model(seed: int = 0):
    """conv -> ReLU -> conv -> add (residual) -> ReLU -> 1x1 conv, opset 13."""
    g = Builder(np.random.default_rng(seed))
    a = g.op("Relu", [g.conv("x", 3, 8)])
    b = g.op("Relu", [g.op("Add", [g.conv(a, 8, 8), a])])
    return g.model(list(SHAPE), g.conv(b, 8, 4, k=1))


def _samples(n: int = 4, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(0, 1, SHAPE).astype(np.float32) for _ in range(n)]


def _ort(model, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def _q_scales(model) -> dict[str, float]:
    """QuantizeLinear input tensor -> its scale, read from the QDQ model itself."""
    from onnx import numpy_helper

    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    return {n.input[0]: float(inits[n.input[1]]) for n in model.graph.node
            if n.op_type == "QuantizeLinear"}


def _host(net, x: np.ndarray) -> np.ndarray:
    from host_backend import HostBackend
    from xrt import HostDevice

    return forward_once(net, [HostBackend], [HostDevice.Default()], x)[0]


def test_stripped_qdq_model_is_the_float_model_with_the_authors_weights():
    fm = _float_model()
    qm = qdq_model(fm, _samples())
    assert sum(n.op_type == "QuantizeLinear" for n in qm.graph.node) >= 5
    stripped, pairs, weights = strip_qdq_model(qm)
    ops = {n.op_type for n in stripped.graph.node}
    assert not ops & {"QuantizeLinear", "DequantizeLinear"}
    assert pairs and {k: s.scale for k, s in pairs.items()} == \
        {k: v for k, v in _q_scales(qm).items() if k in pairs}
    assert all(s.symmetric and s.zero_point == 0 for s in pairs.values())
    # weights are the author's int8 codes times the per-channel scales, channel max 127
    from onnx import numpy_helper

    inits = {i.name: numpy_helper.to_array(i) for i in stripped.graph.initializer}
    conv_ws = [n.input[1] for n in stripped.graph.node if n.op_type == "Conv"]
    for w in conv_ws:
        s = weights[w].reshape(-1, 1, 1, 1)
        k = inits[w] / s
        assert np.allclose(k, np.round(k), atol=1e-3)
        assert np.abs(np.round(k)).reshape(len(s), -1).max(axis=1).tolist() == [127] * len(s)
    x = _samples(1, 9)[0]
    assert cosine(_ort(stripped, x), _ort(fm, x)) > 0.999
    assert cosine(_ort(stripped, x), _ort(qm, x)) > 0.99


def test_asymmetric_pairs_put_back_the_relus_onnxruntime_folded_into_them():
    fm = _float_model(1)
    qm = qdq_model(fm, _samples(), symmetric=False)
    assert not any(n.op_type == "Relu" for n in qm.graph.node)  # folded into uint8 ranges
    stripped, pairs, _ = strip_qdq_model(qm)
    assert sum(n.op_type == "Relu" for n in stripped.graph.node) == 2
    assert any(s.clips_negatives for s in pairs.values())
    assert all(s.amax == pytest.approx(max(abs(s.lo), abs(s.hi))) for s in pairs.values())
    x = _samples(1, 9)[0]
    assert cosine(_ort(stripped, x), _ort(fm, x)) > 0.999


def test_import_qdq_tags_values_and_quantize_uses_the_authors_scales():
    fm = _float_model(2)
    cal = _samples()
    qm = qdq_model(fm, cal)
    want = _q_scales(qm)
    net = import_qdq(qm, {"x": list(SHAPE)})
    assert not any(op.op_type == "OnnxGraph" for op in net.ops)
    tagged = {v.name: v.tags[AMAX_TAG] for op in net.ops for v in op.outputs
              if AMAX_TAG in v.tags}
    assert "x" in tagged and len(tagged) >= 3
    for name, amax in tagged.items():
        assert amax == pytest.approx(want[name] * 127, rel=1e-12)
    q = quantize_network(net, [[s] for s in cal])
    by_float = {v.tags.get("float_v_id"): v for op in q.ops for v in op.outputs}
    checked = 0
    for op in net.ops:
        for v in op.outputs:
            qv = by_float.get(v.v_id)
            if AMAX_TAG not in v.tags or qv is None or not qv.dtype.is_quantized():
                continue
            el = qv.dtype.element_dtype
            qmax = 127 if el.storage.bits == 8 else 32767
            assert float(el.scale[0]) == pytest.approx(v.tags[AMAX_TAG] / qmax, rel=1e-9)
            checked += 1
    assert checked >= 3
    # without the pairs' scales, calibration gives other ones (the test can fail)
    plain = quantize_network(import_qdq(fm, {"x": list(SHAPE)}), [[s] for s in cal])
    s_plain = {v.name: float(v.dtype.element_dtype.scale[0]) for op in plain.ops
               for v in op.outputs if v.dtype.is_quantized()}
    s_qdq = {v.name: float(v.dtype.element_dtype.scale[0]) for op in q.ops
             for v in op.outputs if v.dtype.is_quantized()}
    assert any(abs(s_plain[k] / s_qdq[k] - 1) > 1e-3 for k in s_qdq if k in s_plain)
    # the author's weight codes: per-channel scales and int8 codes as in the QDQ model
    from onnx import numpy_helper

    inits = {i.name: numpy_helper.to_array(i) for i in qm.graph.initializer}
    authors = sorted(tuple(np.round(inits[n.input[1]].astype(np.float64), 12))
                     for n in qm.graph.node if n.op_type == "DequantizeLinear"
                     and n.input[0] in inits and inits[n.input[0]].ndim == 4)
    ours = sorted(tuple(np.round(np.asarray(op.inputs[1].dtype.element_dtype.scale,
                                            np.float64), 12))
                  for op in q.ops if op.op_type == "Conv2d")
    assert len(ours) == len(authors) == 3
    for a, b in zip(authors, ours):
        assert np.allclose(a, b, rtol=1e-6)


def test_remove_qdq_takes_pairs_out_of_an_imported_network():
    """The pairs as the importer takes them (one OnnxGraph op each): removed in place, the
    scales returned per value, the network computing the float model."""
    from xcompile.frontend import import_onnx

    fm = _float_model(3)
    qm = qdq_model(fm, _samples())
    net = import_onnx(qm, {"x": list(SHAPE)})
    n_pairs = sum(op.op_type == "OnnxGraph" for op in net.ops)
    assert n_pairs >= 8
    got = remove_qdq(net)
    assert not any(op.op_type == "OnnxGraph" for op in net.ops)
    want = _q_scales(qm)
    assert got and all(s.scale in want.values() for s in got.values())
    assert all(net.getValueById(vid).tags[AMAX_TAG] == pytest.approx(s.amax)
               for vid, s in got.items())
    x = _samples(1, 9)[0]
    assert cosine(_host(net, x), _ort(fm, x)) > 0.999


def test_float_models_are_left_alone():
    from xcompile.frontend import import_onnx

    fm = _float_model(4)
    a, b = import_onnx(fm, {"x": list(SHAPE)}), import_qdq(fm, {"x": list(SHAPE)})
    assert [op.op_type for op in a.ops] == [op.op_type for op in b.ops]
    assert remove_qdq(b) == {}
    assert not any(AMAX_TAG in v.tags for op in b.ops for v in op.outputs)


def test_pairs_that_are_not_round_trips_stay():
    """A DequantizeLinear whose scale differs from its QuantizeLinear's rescales: the pair is
    not a plain round trip and stays (the host runs it); the round trip beside it goes."""
    from onnx import TensorProto, helper, numpy_helper

    def c(name, arr):
        return numpy_helper.from_array(np.asarray(arr), name)

    nodes = [helper.make_node("QuantizeLinear", ["x", "s1", "z"], ["q1"]),
             helper.make_node("DequantizeLinear", ["q1", "s2", "z"], ["d1"]),
             helper.make_node("QuantizeLinear", ["d1", "s1", "z"], ["q2"]),
             helper.make_node("DequantizeLinear", ["q2", "s1", "z"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                          [c("s1", np.float32(0.1)), c("s2", np.float32(0.2)),
                           c("z", np.int8(0))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    stripped, pairs, _ = strip_qdq_model(m)
    assert [n.op_type for n in stripped.graph.node] == ["QuantizeLinear", "DequantizeLinear",
                                                         "Identity"]
    assert set(pairs) == {"d1"} and pairs["d1"].scale == pytest.approx(0.1)
    x = np.array([[0.33, -1.0, 2.5, 20.0]], np.float32)
    assert np.allclose(_ort(stripped, x), np.clip(np.round(x / 0.1), -128, 127) * 0.2)


def test_import_qdq_takes_files_and_bytes_and_names_a_bad_file(tmp_path):
    from xir.errors import XirError

    fm = _float_model(5)
    qm = qdq_model(fm, _samples())
    path = tmp_path / "qdq.onnx"
    path.write_bytes(qm.SerializeToString())
    for src in (str(path), qm.SerializeToString()):
        net = import_qdq(src, {"x": list(SHAPE)})
        assert not any(op.op_type == "OnnxGraph" for op in net.ops)
        assert any(AMAX_TAG in v.tags for op in net.ops for v in op.outputs)
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"QuantizeLinear but not a model")
    with pytest.raises(XirError, match="broken.onnx"):
        import_qdq(str(bad))
    with pytest.raises(XirError, match="missing.onnx"):
        import_qdq(str(tmp_path / "missing.onnx"))

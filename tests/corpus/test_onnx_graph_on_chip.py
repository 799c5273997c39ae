"""A network with OnnxGraph ops (a computed-condition If and an Einsum between convolutions)
compiled for the chips: the convolutions run inside HardOps on the chip, the carried ONNX graphs
stay on the host in float with their reason, Casts placed around them by the quantizer; the
whole runs bit-exactly against the integer reference and within a cosine of 0.99 of
onnxruntime float."""

from __future__ import annotations

import numpy as np
import pytest
from corpus import load_stage, run_on_chip, run_reference

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from xcompile.pipeline import DEFAULTS, compile_model  # noqa: E402
from xcompile.quant.report import cosine  # noqa: E402

CHIPS = {"zg330": ("ZG330", "ZG"), "buyi": ("Buyi", "BY")}


def gated_net(seed: int = 5) -> onnx.ModelProto:
    """Conv -> Relu -> If(mean of the conv > 0: r * 0.5 else r - 1, on the outer value r) ->
    Einsum mixing the channels -> Conv -> Relu; the If and Einsum as exporters write them."""
    rng = np.random.default_rng(seed)

    def w(*shape):
        return (rng.normal(0, 1, shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)

    half = helper.make_graph([helper.make_node("Mul", ["r1", "h"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)],
                             [numpy_helper.from_array(np.float32(0.5), "h")])
    shift = helper.make_graph([helper.make_node("Sub", ["r1", "one"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.float32(1.0), "one")])
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("ReduceMean", ["c1"], ["m"], keepdims=0),
        helper.make_node("Greater", ["m", "zero"], ["cond"]),
        helper.make_node("If", ["cond"], ["g"], then_branch=half, else_branch=shift,
                         name="gate"),
        helper.make_node("Einsum", ["g", "mix"], ["e1"], equation="nchw,cd->ndhw",
                         name="mix"),
        helper.make_node("Conv", ["e1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["y"]),
    ]
    inits = [numpy_helper.from_array(a, n) for n, a in (
        ("w1", w(8, 3, 3, 3)), ("b1", w(8) * 0.1), ("zero", np.float32(0.0)),
        ("mix", w(8, 8)), ("w2", w(6, 8, 3, 3)), ("b2", w(6) * 0.1))]
    graph = helper.make_graph(
        nodes, "gated", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("target", sorted(CHIPS))
def test_onnx_graph_ops_stay_on_the_host_beside_the_chip(target, tmp_path):
    import onnxruntime as ort

    rng = np.random.default_rng(2)
    path = tmp_path / "gated.onnx"
    path.write_bytes(gated_net().SerializeToString())
    cal = tmp_path / "cal"
    cal.mkdir()
    for k in range(6):  # both branches of the If: inputs around +1 and -1
        np.save(cal / f"{k}.npy",
                rng.normal((-1) ** k, 1, (1, 3, 16, 16)).astype(np.float32))
    written = compile_model(dict(DEFAULTS, model=str(path), target=target, calib=str(cal),
                                 output=str(tmp_path / "out"), name="gated"))
    backend_name, suffix = CHIPS[target]
    net = load_stage(written[suffix])
    adapted = {op.op_id: op.op_type for op in load_stage(written["adapted"]).ops}
    hard = [op for op in net.ops if op.op_type == "HardOp"]
    fused = [adapted[i] for op in hard for i in op.attrs["origin_ops_id"] if i in adapted]
    assert fused.count("Conv2d") == 2
    carried = [op for op in net.ops if op.op_type == "OnnxGraph"]
    assert sorted(op.label for op in carried) == ["OnnxGraph(Einsum)", "OnnxGraph(If)"]
    reasons = net.tags[target]["host_ops"]
    assert all(str(op.op_id) in reasons for op in carried)
    assert all(v.dtype.numpy_dtype == np.float32 for op in carried for v in op.outputs)
    branches = set()
    for x in (rng.normal(1, 1, (1, 3, 16, 16)).astype(np.float32),
              rng.normal(-1, 1, (1, 3, 16, 16)).astype(np.float32)):
        branches.add(_mean_conv(path, x) > 0)
        got, bound, npu = run_on_chip(net, backend_name, target, x)
        assert all(isinstance(bound[op.op_id], npu) for op in hard)
        assert not any(isinstance(bound[op.op_id], npu) for op in carried)
        assert got.tobytes() == run_reference(written["adapted"], x).tobytes()
        want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
            None, {"x": x})[0]
        assert cosine(got, want) >= 0.99
    assert branches == {True, False}


def _mean_conv(path, x: np.ndarray) -> float:
    """The If's condition value for `x` (the mean of the first conv), from onnxruntime."""
    import onnxruntime as ort

    model = onnx.load(str(path))
    model.graph.output.append(helper.make_tensor_value_info("m", TensorProto.FLOAT, []))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return float(sess.run(["m"], {"x": x})[0])

"""ONNX import's fallback (handlers/generic.py): nodes without a native xir form run as
OnnxGraph ops; If with a constant condition inlines; If/Loop/Scan read the outer scope; what is
refused, and why. Checked against onnxruntime on models written the way exporters write them."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import xir  # noqa: E402
from xcompile.frontend import import_onnx  # noqa: E402

RNG = np.random.default_rng(11)


def _model(nodes, inputs, outputs, inits=(), opset=17, domains=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs,
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits])
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 10
    return model


def _vi(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def _rand(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _const(name, value) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name],
                            value=numpy_helper.from_array(np.asarray(value), name))


def _forward(net: xir.Network, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    from host_backend import HostBackend
    from xrt import HostDevice, Session, Tensor

    sess = Session.Create([HostBackend], net.view(0), [HostDevice.Default()])
    sess.apply()
    outs = sess.forward([Tensor(np.ascontiguousarray(feeds[v.name])) for v in net.inputs()])
    return [np.asarray(t) for t in outs]


def _check(model, feeds, rtol=1e-5, atol=1e-5) -> xir.Network:
    net = import_onnx(model)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)
    got = _forward(net, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return net


def _carried(net) -> list:
    return [op for op in net.ops if op.op_type == "OnnxGraph"]


def _inner(op) -> onnx.ModelProto:
    return onnx.load_from_string(op.model_bytes())


# --- the fallback ----------------------------------------------------------------------------

def test_an_op_without_a_handler_runs_as_onnx_graph():
    """Einsum (a torch.einsum export) with a constant operand: the constant rides inside the
    carried model, the feature map is the op's input."""
    w = _rand(4, 5)
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Einsum", ["r", "w"], ["y"], equation="bij,jk->bik", name="ein")]
    model = _model(nodes, [_vi("x", [2, 3, 4])], [_vi("y", None)], [("w", w)])
    net = _check(model, {"x": _rand(2, 3, 4)})
    (op,) = _carried(net)
    assert op.attrs["onnx_ops"] == ["Einsum"] and op.name == "ein" and op.label == \
        "OnnxGraph(Einsum)"
    assert op.attrs["opset"] == 17
    assert len(op.graph_inputs()) == 1 and op.graph_inputs()[0].producer.op_type == "Relu"
    inner = _inner(op)
    assert [i.name for i in inner.graph.initializer] == ["w"]
    assert [d.dim_value for d in inner.graph.output[0].type.tensor_type.shape.dim] == [2, 3, 5]


def test_a_refusing_native_handler_falls_back():
    """MaxPool over a 3-D volume (rank 5): the native handler takes 2-D only."""
    nodes = [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2, 2],
                              strides=[2, 2, 2])]
    model = _model(nodes, [_vi("x", [1, 2, 4, 4, 4])], [_vi("y", None)])
    net = _check(model, {"x": _rand(1, 2, 4, 4, 4)})
    assert [op.attrs["onnx_ops"] for op in _carried(net)] == [["MaxPool"]]


def test_all_constant_inputs_fold_with_the_runtime():
    """A node the reference cannot fold but every input is constant: computed once at import,
    no op is left (shape chains stay constants)."""
    nodes = [helper.make_node("Einsum", ["a", "b"], ["c"], equation="i,i->"),
             helper.make_node("Add", ["x", "c"], ["y"])]
    a, b = _rand(4), _rand(4)
    model = _model(nodes, [_vi("x", [3])], [_vi("y", None)], [("a", a), ("b", b)])
    net = _check(model, {"x": _rand(3)})
    assert not _carried(net)


def test_integer_outputs_keep_their_types():
    nodes = [helper.make_node("BitShift", ["x", "s"], ["y"], direction="RIGHT")]
    model = _model(nodes, [_vi("x", [5], TensorProto.UINT16)], [_vi("y", None,
                                                                     TensorProto.UINT16)],
                   [("s", np.array([1], np.uint16))])
    net = _check(model, {"x": np.array([1, 2, 300, 4000, 65535], np.uint16)})
    assert net.outputs()[0].dtype.numpy_dtype == np.uint16


def test_a_constant_graph_output_is_computed_by_its_node():
    """Shape(x) as an output: it folds, but a network computes its outputs, so the Shape node
    runs as an OnnxGraph on x."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Relu", ["x"], ["y"])]
    model = _model(nodes, [_vi("x", [2, 3, 5])], [_vi("s", None, TensorProto.INT64),
                                                  _vi("y", None)])
    net = _check(model, {"x": _rand(2, 3, 5)})
    assert [op.attrs["onnx_ops"] for op in _carried(net)] == [["Shape"]]


def test_json_raw_round_trip_of_an_imported_onnx_graph(tmp_path):
    nodes = [helper.make_node("Einsum", ["x"], ["y"], equation="ij->ji")]
    model = _model(nodes, [_vi("x", [3, 4])], [_vi("y", None)])
    net = import_onnx(model)
    net.save(tmp_path / "n.json")
    back = xir.Network.CreateFromJsonFile(tmp_path / "n.json").loadParamsFromFile(
        tmp_path / "n.raw")
    x = _rand(3, 4)
    np.testing.assert_array_equal(_forward(back, {"x": x})[0], x.T)


# --- control flow ----------------------------------------------------------------------------

def _conv_branch(name: str, w: np.ndarray, outer: str) -> onnx.GraphProto:
    """A branch graph reading `outer` from the enclosing scope: Conv + Relu."""
    nodes = [helper.make_node("Conv", [outer, f"{name}_w"], [f"{name}_c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", [f"{name}_c"], [f"{name}_out"])]
    return helper.make_graph(nodes, name, [], [_vi(f"{name}_out", None)],
                             [numpy_helper.from_array(w, f"{name}_w")])


def test_if_with_a_constant_condition_inlines_the_taken_branch():
    """The voice-activity detector's idiom: Equal on a shape-derived value decides an If whose
    branches hold the conv front end. The condition folds, the taken branch imports natively."""
    w_then, w_else = _rand(4, 3, 3, 3), _rand(4, 3, 3, 3)
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             _const("idx", np.array(0, np.int64)),
             helper.make_node("Gather", ["shape", "idx"], ["batch"]),
             _const("one", np.array(1, np.int64)),
             helper.make_node("Equal", ["batch", "one"], ["single"]),
             helper.make_node("If", ["single"], ["y"], name="vad_if",
                              then_branch=_conv_branch("then", w_then, "x"),
                              else_branch=_conv_branch("else", w_else, "x"))]
    model = _model(nodes, [_vi("x", [1, 3, 8, 8])], [_vi("y", None)])
    net = _check(model, {"x": _rand(1, 3, 8, 8)}, rtol=1e-4, atol=1e-4)
    assert not _carried(net)
    conv = next(op for op in net.ops if op.op_type == "Conv2d")
    np.testing.assert_array_equal(conv.inputs[1].data, w_then.transpose(2, 3, 1, 0))


def test_if_with_a_computed_condition_runs_whole_with_its_outer_reads():
    h_then = helper.make_graph([helper.make_node("Mul", ["h", "h"], ["t_out"])], "then", [],
                               [_vi("t_out", [2, 3])])
    h_else = helper.make_graph([helper.make_node("Sub", ["h", "x"], ["e_out"])], "else", [],
                               [_vi("e_out", [2, 3])])
    nodes = [helper.make_node("Relu", ["x"], ["h"]),
             helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             _const("zero", np.array(0, np.float32)),
             helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], name="gate", then_branch=h_then,
                              else_branch=h_else)]
    model = _model(nodes, [_vi("x", [2, 3])], [_vi("y", None)])
    for sign in (1.0, -1.0):
        x = np.abs(_rand(2, 3)) * sign
        net = _check(model, {"x": x})
    (op,) = _carried(net)
    assert op.attrs["onnx_ops"] == ["If"]
    inner = _inner(op)
    assert [i.name for i in inner.graph.input] == ["c", "h", "x"]  # cond, then outer reads
    assert [v.producer.op_type for v in op.graph_inputs()[:2]] != ["Input", "Input"]


def _loop_body(outer: str) -> onnx.GraphProto:
    """for i in range(M): s = s + outer * i; ys.append(s) -- torch's export of a python loop
    (the condition passed through an Identity)."""
    nodes = [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
             helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
             helper.make_node("Mul", [outer, "fi"], ["step"]),
             helper.make_node("Add", ["s_in", "step"], ["s_out"]),
             helper.make_node("Identity", ["s_out"], ["scan_out"])]
    return helper.make_graph(
        nodes, "body",
        [_vi("i", [], TensorProto.INT64), _vi("cond_in", [], TensorProto.BOOL),
         _vi("s_in", [2, 3])],
        [_vi("cond_out", [], TensorProto.BOOL), _vi("s_out", [2, 3]), _vi("scan_out", [2, 3])])


def test_loop_with_a_constant_trip_count_reads_the_outer_scope():
    nodes = [helper.make_node("Sigmoid", ["x"], ["g"]),
             _const("M", np.array(4, np.int64)), _const("T", np.array(True)),
             helper.make_node("Loop", ["M", "T", "x"], ["s_final", "ys"], body=_loop_body("g"))]
    model = _model(nodes, [_vi("x", [2, 3])], [_vi("s_final", None), _vi("ys", None)])
    net = _check(model, {"x": _rand(2, 3)})
    (op,) = _carried(net)
    assert [v.shape for v in op.outputs] == [(2, 3), (4, 2, 3)]
    assert [i.name for i in _inner(op).graph.input] == ["x", "g"]  # state, then outer read
    assert [i.name for i in _inner(op).graph.initializer] == ["M", "T"]


def test_loop_whose_count_depends_on_the_data_is_refused():
    nodes = [helper.make_node("ReduceMax", ["n"], ["m"], keepdims=0),
             helper.make_node("Cast", ["m"], ["M"], to=TensorProto.INT64),
             _const("T", np.array(True)),
             helper.make_node("Loop", ["M", "T", "x"], ["s_final", "ys"], name="loop",
                              body=_loop_body("x"))]
    model = _model(nodes, [_vi("x", [2, 3]), _vi("n", [3])],
                   [_vi("s_final", None), _vi("ys", None)])
    with pytest.raises(xir.UnsupportedOnnxOpError, match="'loop' \\(Loop\\).*data-dependent"):
        import_onnx(model)


def test_scan_reads_the_outer_scope():
    """A recurrence written as Scan (tf2onnx's idiom): h = tanh(x_t + h * w), w computed
    outside the body."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["h_in", "w"], ["hw"]),
         helper.make_node("Add", ["x_t", "hw"], ["a"]),
         helper.make_node("Tanh", ["a"], ["h_out"]),
         helper.make_node("Identity", ["h_out"], ["y_t"])],
        "body", [_vi("h_in", [4]), _vi("x_t", [4])], [_vi("h_out", [4]), _vi("y_t", [4])])
    nodes = [helper.make_node("Sigmoid", ["v"], ["w"]),
             helper.make_node("Scan", ["h0", "x"], ["h", "ys"], num_scan_inputs=1, body=body)]
    model = _model(nodes, [_vi("h0", [4]), _vi("x", [6, 4]), _vi("v", [4])],
                   [_vi("h", None), _vi("ys", None)])
    net = _check(model, {"h0": _rand(4), "x": _rand(6, 4), "v": _rand(4)})
    (op,) = _carried(net)
    assert [i.name for i in _inner(op).graph.input] == ["h0", "x", "w"]
    assert [v.shape for v in op.outputs] == [(4,), (6, 4)]


# --- refusals --------------------------------------------------------------------------------

def test_every_refused_node_is_listed_once_with_its_reason():
    nodes = [helper.make_node("NonZero", ["x"], ["nz"], name="nonzero0"),
             helper.make_node("Cast", ["nz"], ["nzf"], to=TensorProto.FLOAT, name="after_nz"),
             helper.make_node("SplitToSequence", ["x"], ["seq"], axis=0, name="split_seq"),
             helper.make_node("SequenceAt", ["seq", "zero"], ["first"], name="seq_at"),
             helper.make_node("Frobnicate", ["x"], ["f"], domain="acme.ops", name="custom0"),
             helper.make_node("Momentum", ["r", "t", "x", "x", "x"], ["m1", "m2"],
                              domain="ai.onnx.preview.training", alpha=0.9, beta=0.1,
                              mode="standard", norm_coefficient=0.0, name="train0"),
             helper.make_node("Relu", ["x"], ["ok"], name="fine")]
    model = _model(nodes, [_vi("x", [2, 3])],
                   [_vi("nzf", None), _vi("first", None), _vi("f", None), _vi("m1", None),
                    _vi("ok", None)],
                   [("zero", np.array(0, np.int64)), ("r", np.array(0.1, np.float32)),
                    ("t", np.array(1, np.int64))],
                   domains=["acme.ops", "ai.onnx.preview.training"])
    with pytest.raises(xir.UnsupportedOnnxOpError) as info:
        import_onnx(model)
    reasons = {name: (op, why) for name, op, why in info.value.nodes}
    assert set(reasons) == {"nonzero0", "split_seq", "custom0", "train0"}
    assert "data-dependent" in reasons["nonzero0"][1]
    assert "sequence" in reasons["split_seq"][1]
    assert "custom domain" in reasons["custom0"][1] and "Frobnicate" in reasons["custom0"][1]
    assert "training op" in reasons["train0"][1]
    text = str(info.value)
    assert all(f"node '{n}'" in text for n in reasons)
    assert all("\n" not in why for _, why in reasons.values())


def test_string_outputs_are_refused():
    nodes = [helper.make_node("Cast", ["x"], ["s"], to=TensorProto.STRING, name="to_str")]
    model = _model(nodes, [_vi("x", [3])], [_vi("s", None, TensorProto.STRING)])
    with pytest.raises(xir.UnsupportedOnnxOpError, match="to_str.*string"):
        import_onnx(model)


# --- the long tail, op by op -----------------------------------------------------------------

def _u8(*shape) -> np.ndarray:
    return RNG.integers(0, 255, shape).astype(np.uint8)


def _long_tail():
    """(id, nodes, inputs, feeds, inits, opset, tolerance) for ops that import as OnnxGraph."""
    q, k, v = _rand(1, 2, 4, 8), _rand(1, 2, 6, 8), _rand(1, 2, 6, 8)
    yield ("Attention", [helper.make_node("Attention", ["q", "k", "v"], ["y"], is_causal=1)],
           [_vi("q", [1, 2, 4, 8]), _vi("k", [1, 2, 6, 8]), _vi("v", [1, 2, 6, 8])],
           {"q": q, "k": k, "v": v}, [], 23, 1e-5)
    rois = np.array([[0, 0, 3, 3], [1, 1, 6, 5], [2, 0, 7, 7]], np.float32)
    yield ("RoiAlign", [helper.make_node("RoiAlign", ["x", "rois", "bi"], ["y"],
                                         output_height=3, output_width=3, sampling_ratio=2,
                                         spatial_scale=1.0)],
           [_vi("x", [2, 3, 8, 8])], {"x": _rand(2, 3, 8, 8)},
           [("rois", rois), ("bi", np.array([0, 1, 1], np.int64))], 16, 1e-5)
    yield ("GridSample", [helper.make_node("GridSample", ["x", "g"], ["y"], mode="linear",
                                           align_corners=0)],
           [_vi("x", [1, 2, 5, 5]), _vi("g", [1, 3, 4, 2])],
           {"x": _rand(1, 2, 5, 5), "g": np.tanh(_rand(1, 3, 4, 2))}, [], 20, 1e-5)
    yield ("QLinearConv", [helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz",
                                                            "ys", "yz"], ["y"], pads=[1] * 4)],
           [_vi("x", [1, 3, 6, 6], TensorProto.UINT8)], {"x": _u8(1, 3, 6, 6)},
           [("xs", np.float32(0.02)), ("xz", np.uint8(128)), ("w", _u8(4, 3, 3, 3)),
            ("ws", np.float32(0.01)), ("wz", np.uint8(127)), ("ys", np.float32(0.05)),
            ("yz", np.uint8(120))], 13, 0)
    yield ("QLinearMatMul", [helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs",
                                                                "bz", "ys", "yz"], ["y"])],
           [_vi("a", [3, 5], TensorProto.UINT8)], {"a": _u8(3, 5)},
           [("as", np.float32(0.03)), ("az", np.uint8(100)), ("b", _u8(5, 4)),
            ("bs", np.float32(0.02)), ("bz", np.uint8(130)), ("ys", np.float32(0.4)),
            ("yz", np.uint8(90))], 13, 0)
    yield ("MatMulInteger", [helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])],
           [_vi("a", [3, 5], TensorProto.UINT8)], {"a": _u8(3, 5)},
           [("b", _u8(5, 4)), ("az", np.uint8(12)), ("bz", np.uint8(7))], 13, 0)
    yield ("ConvInteger", [helper.make_node("ConvInteger", ["x", "w", "xz"], ["y"])],
           [_vi("x", [1, 2, 5, 5], TensorProto.UINT8)], {"x": _u8(1, 2, 5, 5)},
           [("w", _u8(3, 2, 3, 3)), ("xz", np.uint8(3))], 13, 0)
    yield ("QuantizeLinear", [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"],
                                               axis=1)],
           [_vi("x", [2, 3, 4])], {"x": _rand(2, 3, 4)},
           [("s", np.array([0.01, 0.02, 0.05], np.float32)),
            ("z", np.array([0, 3, -2], np.int8))], 13, 0)
    yield ("DequantizeLinear", [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"])],
           [_vi("x", [2, 6], TensorProto.INT8)],
           {"x": RNG.integers(-128, 127, (2, 6)).astype(np.int8)},
           [("s", np.float32(0.125)), ("z", np.int8(-3))], 13, 0)
    yield ("DFT", [helper.make_node("DFT", ["x", "", "ax"], ["y"], onesided=1)],
           [_vi("x", [1, 32, 1])], {"x": _rand(1, 32, 1)}, [("ax", np.int64(1))], 20, 1e-4)
    yield ("STFT", [helper.make_node("STFT", ["x", "step", "win"], ["y"])],
           [_vi("x", [1, 64, 1])], {"x": _rand(1, 64, 1)},
           [("step", np.int64(8)), ("win", np.hanning(16).astype(np.float32))], 17, 1e-4)


@pytest.mark.parametrize("case", list(_long_tail()), ids=lambda c: c[0])
def test_long_tail_ops_run_as_onnx_graphs(case):
    op_type, nodes, inputs, feeds, inits, opset, tol = case
    model = _model(nodes, inputs, [helper.make_empty_tensor_value_info("y")], inits,
                   opset=opset)
    net = _check(model, feeds, rtol=tol, atol=tol)
    assert [op.attrs["onnx_ops"] for op in _carried(net)] in ([[op_type]], [])


def test_window_ops_with_a_constant_size_fold():
    nodes = [helper.make_node("HannWindow", ["n"], ["w"], periodic=1),
             helper.make_node("Mul", ["x", "w"], ["y"])]
    model = _model(nodes, [_vi("x", [2, 16])], [_vi("y", None)], [("n", np.int64(16))],
                   opset=17)
    net = _check(model, {"x": _rand(2, 16)})
    assert not _carried(net)


def test_non_max_suppression_folds_on_constants_and_is_refused_on_computed_boxes():
    boxes = np.array([[[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, 5, 1, 6], [0, 10, 1, 11]]],
                     np.float32)
    scores = np.array([[[0.9, 0.75, 0.6, 0.95]]], np.float32)
    inits = [("boxes", boxes), ("scores", scores), ("m", np.int64(3)),
             ("iou", np.float32(0.5)), ("thr", np.float32(0.0))]
    nms = helper.make_node("NonMaxSuppression", ["boxes", "scores", "m", "iou", "thr"],
                           ["sel"], name="nms")
    # constant boxes: the selection folds; the network gathers the kept scores of x
    nodes = [nms, _const("two", np.array([2], np.int64)),
             helper.make_node("Gather", ["sel", "two"], ["idx"], axis=1),
             helper.make_node("Squeeze", ["idx", "one"], ["flat"]),
             helper.make_node("Gather", ["x", "flat"], ["y"], axis=0)]
    model = _model(nodes, [_vi("x", [4])], [_vi("y", None)],
                   inits + [("one", np.array([1], np.int64))], opset=13)
    net = _check(model, {"x": _rand(4)})
    assert not _carried(net)
    # computed scores (a detector's head): refused, naming the data dependence
    nodes = [helper.make_node("Sigmoid", ["logits"], ["s"]),
             helper.make_node("NonMaxSuppression", ["boxes", "s", "m", "iou", "thr"], ["y"],
                              name="nms")]
    model = _model(nodes, [_vi("logits", [1, 1, 4])], [_vi("y", None, TensorProto.INT64)],
                   [i for i in inits if i[0] != "scores"], opset=13)
    with pytest.raises(xir.UnsupportedOnnxOpError,
                       match="'nms' \\(NonMaxSuppression\\).*data-dependent shape"):
        import_onnx(model)


def test_if_inlined_branch_with_a_conv_front_end_and_an_lstm_imports_natively():
    """silero-VAD's shape: If(Equal(a constant rate, 16000)) whose branch holds a Conv1d front
    end and an LSTM; once inlined, the branch's nodes are the native ops."""
    t, c, hidden = 12, 4, 6
    w_conv = _rand(c, 1, 3)
    w, r = _rand(1, 4 * hidden, c) * 0.5, _rand(1, 4 * hidden, hidden) * 0.5
    branch_nodes = [
        helper.make_node("Conv", ["x", "wc"], ["f"], pads=[1, 1]),            # [1, c, t]
        helper.make_node("Relu", ["f"], ["fr"]),
        helper.make_node("Transpose", ["fr"], ["seq"], perm=[2, 0, 1]),       # [t, 1, c]
        helper.make_node("LSTM", ["seq", "W", "R"], ["", "h"], hidden_size=hidden),
        helper.make_node("Squeeze", ["h", "ax0"], ["out16k"])]
    then_b = helper.make_graph(branch_nodes, "sr16k", [], [_vi("out16k", None)],
                               [numpy_helper.from_array(a, n) for n, a in (
                                   ("wc", w_conv), ("W", w), ("R", r),
                                   ("ax0", np.array([0], np.int64)))])
    else_b = helper.make_graph([helper.make_node("ReduceMean", ["x"], ["out8k"], axes=[2],
                                                 keepdims=0)], "sr8k", [],
                               [_vi("out8k", None)])
    nodes = [_const("sr", np.array(16000, np.int64)), _const("k16", np.array(16000, np.int64)),
             helper.make_node("Equal", ["sr", "k16"], ["is16k"]),
             helper.make_node("If", ["is16k"], ["y"], then_branch=then_b, else_branch=else_b)]
    model = _model(nodes, [_vi("x", [1, 1, t])], [_vi("y", None)])
    net = _check(model, {"x": _rand(1, 1, t)}, rtol=1e-4, atol=1e-5)
    assert not _carried(net)
    kinds = {op.op_type for op in net.ops}
    assert "Conv2d" in kinds and "LSTMRecurrence" in kinds


def test_a_custom_domain_op_onnxruntime_runs_is_carried():
    """com.microsoft's FusedMatMul (onnxruntime's fusion of MatMul * alpha): onnx has no schema
    for it, onnxruntime types its output."""
    nodes = [helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain="com.microsoft",
                              alpha=0.5, transB=1, name="fmm")]
    b = _rand(5, 4)
    model = _model(nodes, [_vi("a", [3, 4])], [_vi("y", None)], [("b", b)],
                   domains=["com.microsoft"])
    a = _rand(3, 4)
    net = _check(model, {"a": a})
    (op,) = _carried(net)
    assert op.attrs["onnx_ops"] == ["com.microsoft.FusedMatMul"]
    np.testing.assert_allclose(_forward(net, {"a": a})[0], 0.5 * a @ b.T, rtol=1e-5,
                               atol=1e-6)


def test_ops_of_a_refusing_handler_are_taken_back(monkeypatch):
    """A native handler that emits ops before refusing leaves nothing behind: the fallback's
    OnnxGraph is the node's only op."""
    from xcompile.frontend.onnx_import import registry
    from xcompile.frontend.onnx_import.registry import _Unsupported

    def half_done(im, node, attrs, ins):
        im.emit1("Relu", [im.value(ins[0])])
        im.value(ins[0], perm=(1, 0))  # a cached transposed view, dropped with its op
        raise _Unsupported("changed its mind")

    monkeypatch.setitem(registry._HANDLERS, "Einsum", half_done)
    nodes = [helper.make_node("Einsum", ["x"], ["y"], equation="ij->ji"),
             helper.make_node("Transpose", ["x"], ["z"], perm=[1, 0])]
    model = _model(nodes, [_vi("x", [3, 4])], [_vi("y", None), _vi("z", None)])
    net = _check(model, {"x": _rand(3, 4)})
    assert sorted(op.op_type for op in net.ops) == ["Input", "OnnxGraph", "Output",
                                                   "Transpose"]


def test_if_branch_that_returns_an_outer_value_or_a_constant():
    then_b = helper.make_graph([helper.make_node("Identity", ["x"], ["xo"])], "then", [],
                               [_vi("xo", None)])
    else_b = helper.make_graph([], "else", [], [_vi("k", None)],
                               [numpy_helper.from_array(np.zeros((2, 3), np.float32), "k")])
    for cond, want_x in ((True, True), (False, False)):
        nodes = [_const("c", np.array(cond)),
                 helper.make_node("If", ["c"], ["b"], then_branch=then_b, else_branch=else_b),
                 helper.make_node("Add", ["x", "b"], ["y"])]
        model = _model(nodes, [_vi("x", [2, 3])], [_vi("y", None)])
        x = _rand(2, 3)
        net = _check(model, {"x": x})
        assert not _carried(net)
        np.testing.assert_allclose(_forward(net, {"x": x})[0], 2 * x if want_x else x)


def test_without_onnxruntime_the_reference_decides(monkeypatch):
    """onnxruntime missing: output types come from onnx's inference, runnability from the
    reference evaluator; an op neither runs is refused saying so."""
    from xcompile.frontend.onnx_import.handlers import generic

    monkeypatch.setattr(generic, "_ort_shapes", lambda data: (None, ""))
    nodes = [helper.make_node("Einsum", ["x"], ["y"], equation="ij->j")]
    model = _model(nodes, [_vi("x", [3, 4])], [_vi("y", None)])
    (op,) = _carried(import_onnx(model))
    assert [v.shape for v in op.outputs] == [(4,)]
    monkeypatch.setattr(generic, "_ort_shapes", lambda data: (None, "not installed"))
    nodes = [helper.make_node("Frobnicate", ["x"], ["y"], domain="acme.ops", name="frob")]
    model = _model(nodes, [_vi("x", [3])], [_vi("y", None)], domains=["acme.ops"])
    with pytest.raises(xir.UnsupportedOnnxOpError,
                       match=r"'frob'.*onnxruntime \(not installed\).*reference"):
        import_onnx(model)


def test_an_input_fixed_to_a_value_decides_the_if():
    """silero-VAD takes its sample rate as an input: fixed at import (`input_values`), its
    Equal folds and the If inlines; left free, the If runs whole as an OnnxGraph."""
    w = _rand(4, 1, 3)
    then_b = helper.make_graph([helper.make_node("Conv", ["x", "w16"], ["o16"], pads=[1, 1])],
                               "sr16k", [], [_vi("o16", None)],
                               [numpy_helper.from_array(w, "w16")])
    else_b = helper.make_graph([helper.make_node("Conv", ["x", "w8"], ["o8"], pads=[1, 1])],
                               "sr8k", [], [_vi("o8", None)],
                               [numpy_helper.from_array(w[::-1].copy(), "w8")])
    nodes = [_const("k16", np.array(16000, np.int64)),
             helper.make_node("Equal", ["sr", "k16"], ["is16k"]),
             helper.make_node("If", ["is16k"], ["y"], then_branch=then_b, else_branch=else_b)]
    model = _model(nodes, [_vi("x", [1, 1, 10]), _vi("sr", [], TensorProto.INT64)],
                   [_vi("y", None)])
    x = _rand(1, 1, 10)
    free = import_onnx(model)
    assert [op.attrs["onnx_ops"] for op in _carried(free)] == [["If"]]
    fixed = import_onnx(model, input_values={"sr": 16000})
    assert not _carried(fixed) and [v.name for v in fixed.inputs()] == ["x"]
    want = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, {"x": x, "sr": np.array(16000, np.int64)})[0]
    np.testing.assert_allclose(_forward(fixed, {"x": x})[0], want, rtol=1e-5, atol=1e-6)
    with pytest.raises(xir.DynamicShapeError, match="not graph inputs"):
        import_onnx(model, input_values={"rate": 8000})

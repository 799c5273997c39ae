"""ONNX import: folding, layout handling, fusions and errors, checked against onnxruntime."""

from __future__ import annotations

import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import xir  # noqa: E402
from xcompile.frontend import import_onnx  # noqa: E402

RNG = np.random.default_rng(0)


def _model(nodes, inputs, outputs, inits=(), opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs,
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10  # onnx 1.23 writes a version onnxruntime 1.31 refuses
    return model


def _vi(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def _ort(model, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _forward(net: xir.Network, inputs: list[np.ndarray]) -> list[np.ndarray]:
    from host_backend import HostBackend
    from xrt import HostDevice, Session, Tensor

    sess = Session.Create([HostBackend], net.view(0), [HostDevice.Default()])
    sess.apply()
    outs = sess.forward([Tensor(np.asarray(a, order="C")) for a in inputs])
    return [np.asarray(t) for t in outs]


def _op_types(net: xir.Network) -> list[str]:
    return [op.op_type for op in net.ops]


def _rand(*shape, scale=1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _check_against_ort(model, feeds, rtol=1e-5, atol=1e-5, **kw) -> xir.Network:
    net = import_onnx(model, **kw)
    want = _ort(model, feeds)
    got = _forward(net, [feeds[v.name] for v in net.inputs()])
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return net


# --- folding ---------------------------------------------------------------------------------

def test_batchnorm_folds_into_conv():
    c = 8
    inits = [("w", _rand(c, 3, 3, 3)), ("b", _rand(c)), ("g", _rand(c) + 2), ("be", _rand(c)),
             ("m", _rand(c)), ("v", np.abs(_rand(c)) + 0.5)]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "g", "be", "m", "v"], ["bn"],
                              epsilon=1e-3),
             helper.make_node("Relu", ["bn"], ["y"])]
    model = _model(nodes, [_vi("x", [1, 3, 10, 10])], [_vi("y", [1, c, 10, 10])], inits)
    net = _check_against_ort(model, {"x": _rand(1, 3, 10, 10)}, rtol=1e-4, atol=1e-4)
    assert "BatchNorm2d" not in _op_types(net)
    assert _op_types(net).count("Conv2d") == 1


def test_batchnorm_folds_into_conv_transpose_with_groups():
    cin, cout_g, g = 4, 3, 2
    inits = [("w", _rand(cin, cout_g, 3, 3)), ("g", _rand(cout_g * g) + 2),
             ("be", _rand(cout_g * g)), ("m", _rand(cout_g * g)),
             ("v", np.abs(_rand(cout_g * g)) + 0.5)]
    nodes = [helper.make_node("ConvTranspose", ["x", "w"], ["c"], group=g, strides=[2, 2]),
             helper.make_node("BatchNormalization", ["c", "g", "be", "m", "v"], ["y"])]
    model = _model(nodes, [_vi("x", [1, cin, 5, 5])], [_vi("y", None)], inits)
    net = _check_against_ort(model, {"x": _rand(1, cin, 5, 5)}, rtol=1e-4, atol=1e-4)
    assert "BatchNorm2d" not in _op_types(net)


def test_batchnorm_that_cannot_fold_stays():
    c = 3
    inits = [("g", _rand(c)), ("be", _rand(c)), ("m", _rand(c)), ("v", np.abs(_rand(c)) + 1)]
    nodes = [helper.make_node("BatchNormalization", ["x", "g", "be", "m", "v"], ["y"])]
    model = _model(nodes, [_vi("x", [2, c, 4, 4])], [_vi("y", [2, c, 4, 4])], inits)
    net = _check_against_ort(model, {"x": _rand(2, c, 4, 4)})
    assert "BatchNorm2d" in _op_types(net)


def test_shape_gather_concat_reshape_chain_folds():
    i64 = lambda v: np.asarray(v, dtype=np.int64)  # noqa: E731
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"]),
        helper.make_node("Constant", [], ["minus1"], value=numpy_helper.from_array(i64([-1]))),
        helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
        helper.make_node("Cast", ["shape"], ["shape64"], to=TensorProto.INT64),
        helper.make_node("Reshape", ["x", "shape64"], ["y"]),
    ]
    model = _model(nodes, [_vi("x", [2, 3, 4, 5])], [_vi("y", None)],
                   [("i0", i64(0)), ("ax0", i64([0]))])
    net = _check_against_ort(model, {"x": _rand(2, 3, 4, 5)})
    assert _op_types(net) == ["Input", "Reshape", "Output"]
    assert net.outputs()[0].shape == (2, 60)


# --- layout ----------------------------------------------------------------------------------

def test_layer_norm_after_conv_matches_onnxruntime():
    """LayerNormalization over C, H, W of a conv output, with the Mean / InvStdDev outputs."""
    inits = [("w", _rand(4, 3, 3, 3)), ("s", _rand(4, 6, 6)), ("b", _rand(4, 6, 6))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("LayerNormalization", ["c", "s", "b"], ["y", "m", "inv"], axis=1,
                              epsilon=1e-3)]
    model = _model(nodes, [_vi("x", [2, 3, 6, 6])],
                   [_vi("y", [2, 4, 6, 6]), _vi("m", [2, 1, 1, 1]), _vi("inv", [2, 1, 1, 1])],
                   inits)
    net = _check_against_ort(model, {"x": _rand(2, 3, 6, 6)}, rtol=1e-4, atol=1e-4)
    ln = next(op for op in net.ops if op.op_type == "LayerNorm")
    assert ln.attrs["stats"] and ln.attrs["axis"] == 1


@pytest.mark.parametrize("keepdims", [1, 0])
def test_squeeze_excite_gate_reduce_mean_and_hardsigmoid(keepdims):
    """PyTorch's `x.mean((2, 3))` (ReduceMean over H, W) becomes a global AvgPool2d, and
    HardSigmoid a Multiply, Add and bounded Relu: all of it quantizes to integer ops."""
    from xcompile.quant.quantize import quantize_network

    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("ReduceMean", ["c"], ["m"], axes=[2, 3], keepdims=keepdims),
             helper.make_node("HardSigmoid", ["m"], ["y"], alpha=0.3, beta=0.4)]
    out = [2, 8, 1, 1] if keepdims else [2, 8]
    model = _model(nodes, [_vi("x", [2, 3, 6, 6])], [_vi("y", out)], [("w", _rand(8, 3, 3, 3))])
    net = _check_against_ort(model, {"x": _rand(2, 3, 6, 6)})
    assert "AvgPool2d" in _op_types(net) and "Relu" in _op_types(net)
    q = quantize_network(net, [[_rand(2, 3, 6, 6)] for _ in range(2)], method="minmax",
                         weight_rounding="nearest")
    assert q.tags["quantization"]["float_ops"] == []


@pytest.mark.parametrize("axes, keepdims", [([1], 1), ([-1], 0), ([1, 3], 1)])
def test_reduce_mean_over_other_axes_is_a_float_reduce_mean(axes, keepdims):
    nodes = [helper.make_node("ReduceMean", ["x"], ["y"], axes=axes, keepdims=keepdims)]
    model = _model(nodes, [_vi("x", [2, 3, 6, 5])], [_vi("y", None)])
    net = import_onnx(model)
    means = [op for op in net.ops if op.op_type == "Reduce"]
    assert [op.attrs["func"] for op in means] == ["mean"]
    x = _rand(2, 3, 6, 5)
    np.testing.assert_allclose(_forward(net, [x])[0], _ort(model, {"x": x})[0], rtol=1e-5,
                               atol=1e-6)


def test_reduce_mean_over_every_axis_is_one_reduce():
    nodes = [helper.make_node("ReduceMean", ["x"], ["y"], keepdims=1)]
    model = _model(nodes, [_vi("x", [2, 3, 6, 6])], [_vi("y", None)])
    net = import_onnx(model)
    assert "Reduce" in {op.op_type for op in net.ops}
    x = _rand(2, 3, 6, 6)
    np.testing.assert_allclose(_forward(net, [x])[0], _ort(model, {"x": x})[0], rtol=1e-5,
                               atol=1e-6)


def test_layer_norm_exports_to_opset_17():
    from xcompile.frontend.onnx_export import OnnxExportError, export_onnx

    b = xir.NetworkBuilder("ln")
    x = b.input([2, 5, 8])
    b.output(b.layer_norm(x, _rand(8), _rand(8), epsilon=1e-3))
    net = b.build()
    model = export_onnx(net)
    model.ir_version = 10
    xs = _rand(2, 5, 8)
    np.testing.assert_allclose(_ort(model, {model.graph.input[0].name: xs})[0],
                               _forward(net, [xs])[0], rtol=1e-5, atol=1e-5)
    with pytest.raises(OnnxExportError, match="opset 17"):
        export_onnx(net, opset=16)


def test_conv_flatten_gemm_matches_onnxruntime():
    inits = [("w", _rand(6, 3, 3, 3)), ("b", _rand(6)), ("fw", _rand(10, 6 * 4 * 4)),
             ("fb", _rand(10))]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Flatten", ["r"], ["f"]),
             helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1, alpha=0.5)]
    model = _model(nodes, [_vi("x", [2, 3, 8, 8])], [_vi("y", [2, 10])], inits)
    net = _check_against_ort(model, {"x": _rand(2, 3, 8, 8)}, rtol=1e-4, atol=1e-4)
    types = _op_types(net)
    assert types.count("Transpose") == 2  # NCHW -> NHWC at the input, back before Flatten
    conv = next(op for op in net.ops if op.op_type == "Conv2d")
    assert conv.inputs[1].shape == (3, 3, 3, 6)  # HWIO
    assert conv.inputs[0].dtype.layout.spec == "NHWC"


def test_adjacent_layout_transposes_cancel():
    inits = [("w1", _rand(4, 3, 1, 1)), ("w2", _rand(5, 4, 3, 3)), ("k", _rand(1, 4, 1, 1))]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"]),
             helper.make_node("Mul", ["a", "k"], ["m"]),  # broadcast remapped, not transposed
             helper.make_node("Concat", ["m", "a"], ["cat"], axis=1),  # axis remapped
             helper.make_node("Slice", ["cat", "st", "en", "ax"], ["s"]),
             helper.make_node("MaxPool", ["s"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p", "w2"], ["y"], pads=[1, 1, 1, 1])]
    inits += [("st", np.array([2], np.int64)), ("en", np.array([6], np.int64)),
              ("ax", np.array([1], np.int64))]
    model = _model(nodes, [_vi("x", [1, 3, 8, 8])], [_vi("y", None)], inits)
    net = _check_against_ort(model, {"x": _rand(1, 3, 8, 8)}, rtol=1e-4, atol=1e-4)
    assert _op_types(net).count("Transpose") == 2  # only at the network boundary


def test_graph_output_transpose_and_softmax_keep_onnx_layout():
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("Softmax", ["t"], ["y"], axis=-1),
             helper.make_node("Sigmoid", ["x"], ["s"]),
             helper.make_node("Mul", ["x", "s"], ["z"])]
    model = _model(nodes, [_vi("x", [1, 4, 3, 5])], [_vi("y", None), _vi("z", None)])
    net = _check_against_ort(model, {"x": _rand(1, 4, 3, 5)})
    assert "Silu" in _op_types(net) and "Sigmoid" not in _op_types(net)
    assert [v.name for v in net.outputs()] == ["y", "z"]


def test_resize_nearest_integer_scale_becomes_upsample():
    nodes = [helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="nearest",
                              coordinate_transformation_mode="asymmetric", nearest_mode="floor")]
    model = _model(nodes, [_vi("x", [1, 2, 3, 4])], [_vi("y", None)],
                   [("sc", np.array([1, 1, 2, 2], np.float32))])
    net = _check_against_ort(model, {"x": _rand(1, 2, 3, 4)})
    assert "Upsample" in _op_types(net)


# --- errors ----------------------------------------------------------------------------------

def test_every_unsupported_node_is_listed_at_once():
    """What no backend can run is refused at import, every node at once, each with its reason:
    a custom domain nothing implements, data-dependent shapes, sequence values."""
    nodes = [helper.make_node("Foo", ["x"], ["a"], name="foo0", domain="com.acme"),
             helper.make_node("Relu", ["a"], ["b"], name="relu_after"),
             helper.make_node("NonZero", ["x"], ["c"], name="nonzero0"),
             helper.make_node("SequenceConstruct", ["x", "x"], ["s"], name="seq0"),
             helper.make_node("SequenceLength", ["s"], ["n"], name="seqlen0"),
             helper.make_node("Unique", ["x"], ["u"], name="unique0")]
    graph = helper.make_graph(nodes, "g", [_vi("x", [1, 4])],
                              [_vi("b", [1, 4]), _vi("c", None, TensorProto.INT64),
                               _vi("n", [], TensorProto.INT64), _vi("u", None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.acme", 1)])
    with pytest.raises(xir.UnsupportedOnnxOpError) as info:
        import_onnx(model)
    reasons = {n: r for n, _, r in info.value.nodes}
    assert list(reasons) == ["foo0", "nonzero0", "seq0", "unique0"]
    assert "custom domain" in reasons["foo0"]
    assert "data-dependent" in reasons["nonzero0"] and "data-dependent" in reasons["unique0"]
    assert "sequence" in reasons["seq0"]
    for name in reasons:
        assert name in str(info.value)
    assert isinstance(info.value, xir.NetworkFormatError)


def test_ops_without_an_xir_form_run_on_the_host_as_onnx_graphs():
    """Acosh has a native form; an op without one (here Det) still imports, as an OnnxGraph
    op the HostBackend runs, and the whole network matches onnxruntime."""
    nodes = [helper.make_node("Acosh", ["x"], ["a"]), helper.make_node("Det", ["m"], ["d"]),
             helper.make_node("Add", ["a", "d"], ["y"])]
    model = _model(nodes, [_vi("x", [1, 3]), _vi("m", [3, 3])], [_vi("y", None)])
    net = import_onnx(model)
    assert {"Unary", "OnnxGraph"} <= {op.op_type for op in net.ops}
    feeds = {"x": (1.5 + np.abs(_rand(1, 3))).astype(np.float32), "m": _rand(3, 3)}
    np.testing.assert_allclose(_forward(net, [feeds["x"], feeds["m"]])[0],
                               _ort(model, feeds)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("lo, hi", [(-1.0, 1.0), (0.5, 4.0), (-2.0, np.inf)])
def test_clip_with_any_bounds(lo, hi):
    """Clip(min != 0) as relu(x - min, max - min) + min (hardtanh is Clip(-1, 1))."""
    nodes = [helper.make_node("Clip", ["x", "lo", "hi"], ["y"])]
    model = _model(nodes, [_vi("x", [1, 3, 4, 5])], [_vi("y", None)],
                   [("lo", np.array(lo, np.float32)), ("hi", np.array(hi, np.float32))])
    _check_against_ort(model, {"x": _rand(1, 3, 4, 5, scale=3.0)})


def test_dynamic_dims_need_input_shapes():
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    model = _model(nodes, [_vi("x", ["batch", 3, "h", 4])], [_vi("y", None)])
    with pytest.raises(xir.DynamicShapeError, match="'x'"):
        import_onnx(model)
    net = import_onnx(model, input_shapes={"x": [2, 3, 5, 4]})
    assert net.inputs()[0].shape == (2, 3, 5, 4)
    with pytest.raises(xir.DynamicShapeError, match="contradicts"):
        import_onnx(model, input_shapes={"x": [2, 7, 5, 4]})
    with pytest.raises(xir.DynamicShapeError, match="not graph inputs"):
        import_onnx(model, input_shapes={"x": [2, 3, 5, 4], "nope": [1]})


def _small_model_bytes() -> bytes:
    inits = [("w", _rand(8, 3, 3, 3)), ("b", _rand(8))]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"])]
    return _model(nodes, [_vi("x", [1, 3, 8, 8])], [_vi("y", None)], inits).SerializeToString()


def test_corrupt_file_raises_located_xir_error(tmp_path):
    path = tmp_path / "garbage.onnx"
    path.write_bytes(b"\xff\xfe this is not protobuf \x00\x01" * 10)
    with pytest.raises(xir.OnnxModelError) as info:
        import_onnx(path)
    assert "garbage.onnx" in str(info.value)
    assert isinstance(info.value, xir.XirError)


@pytest.mark.parametrize("keep", [0.3, 0.6, 0.9, 0.99])
def test_truncated_file_raises_located_xir_error(tmp_path, keep):
    data = _small_model_bytes()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[:int(len(data) * keep)])
    with pytest.raises(xir.XirError) as info:
        import_onnx(str(path))
    assert "cut.onnx" in str(info.value)


def test_empty_and_missing_files(tmp_path):
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(xir.OnnxModelError, match="empty.onnx"):
        import_onnx(empty)
    with pytest.raises(xir.OnnxModelError, match="missing.onnx"):
        import_onnx(tmp_path / "missing.onnx")


def test_bytes_and_path_inputs_agree(tmp_path):
    data = _small_model_bytes()
    path = tmp_path / "m.onnx"
    path.write_bytes(data)
    a, b = import_onnx(data, name="n"), import_onnx(path)
    assert _op_types(a) == _op_types(b)
    assert a.name == "n"


def test_missing_onnx_raises_missing_dependency(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(xir.MissingDependencyError, match="pip install"):
        import_onnx(b"whatever")


@pytest.mark.parametrize("batch", [-1, "N", None])
def test_dynamic_dims_as_exporters_write_them(batch):
    """PaddlePaddle writes [-1, 3, ?, ?]; -1, a name and nothing are all dynamic, and
    `input_shapes` fills them (a 0, an empty axis otherwise, too). A dynamic batch alone is
    taken as 1."""
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    model = _model(nodes, [_vi("x", [batch, 3, None, "w"])], [_vi("y", None)])
    with pytest.raises(xir.DynamicShapeError, match="'x'"):
        import_onnx(model)
    net = import_onnx(model, input_shapes={"x": [1, 3, 48, 192]})
    assert net.inputs()[0].shape == (1, 3, 48, 192)
    with pytest.raises(xir.DynamicShapeError, match="contradicts"):
        import_onnx(model, input_shapes={"x": [1, 4, 48, 192]})
    with pytest.raises(xir.DynamicShapeError, match="positive"):
        import_onnx(model, input_shapes={"x": [-1, 3, 48, 192]})
    only_batch = _model(nodes, [_vi("x", [batch, 3, 8, 8])], [_vi("y", None)])
    assert import_onnx(only_batch).inputs()[0].shape == (1, 3, 8, 8)
    zero = _model(nodes, [_vi("x", [0, 3, 8, 8])], [_vi("y", None)])
    assert import_onnx(zero, input_shapes={"x": [2, 3, 8, 8]}).inputs()[0].shape == (2, 3, 8, 8)

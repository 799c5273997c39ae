"""ONNX import of reductions and index ops, as exporters write them, against onnxruntime.

Every case asserts the native xir ops it became (never the OnnxGraph fallback) and, for
feature maps, that the NHWC view is kept where the op is axis-local.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import xir  # noqa: E402
from xcompile.frontend import import_onnx  # noqa: E402

RNG = np.random.default_rng(0)
F = TensorProto.FLOAT
I64 = TensorProto.INT64


def model(nodes, inputs, outputs, inits=(), opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs,
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10 if opset < 21 else 10
    return m


def vi(name, shape, dtype=F):
    return helper.make_tensor_value_info(name, dtype, shape)


def rand(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def run_host(net: xir.Network, inputs: list[np.ndarray]) -> list[np.ndarray]:
    from host_backend import HostBackend
    from xrt import HostDevice, Session, Tensor

    sess = Session.Create([HostBackend], net.view(0), [HostDevice.Default()])
    sess.apply()
    return [np.asarray(t) for t in sess.forward([Tensor(np.asarray(a, order="C"))
                                                 for a in inputs])]


def check(m, feeds, rtol=1e-5, atol=1e-5) -> xir.Network:
    """Import, run on the HostBackend, compare with onnxruntime (values and dtypes)."""
    net = import_onnx(m)
    assert "OnnxGraph" not in ops(net), ops(net)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    want = ort.InferenceSession(m.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"]).run(None, feeds)
    got = run_host(net, [feeds[v.name] for v in net.inputs()])
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol,
                                   atol=atol)
    return net


def ops(net) -> list[str]:
    return [op.op_type for op in net.ops]


def conv(name_in, name_out, cin, cout):
    w = rand(cout, cin, 3, 3) * 0.3
    return helper.make_node("Conv", [name_in, f"{name_out}_w"], [name_out], pads=[1] * 4), \
        (f"{name_out}_w", w)


# --- reductions --------------------------------------------------------------------------------

@pytest.mark.parametrize("opset", [11, 13, 18])
@pytest.mark.parametrize("op_type", ["ReduceSum", "ReduceMax", "ReduceMean", "ReduceL2",
                                     "ReduceLogSumExp", "ReduceSumSquare"])
def test_reduce_axes_by_opset(op_type, opset):
    """Axes as an attribute before opset 13 (ReduceSum) / 18 (the rest), an input after."""
    as_input = opset >= (13 if op_type == "ReduceSum" else 18)
    inits = [("axes", np.array([-1, 1], np.int64))] if as_input else []
    node = helper.make_node(op_type, ["x", "axes"] if as_input else ["x"], ["y"], keepdims=0,
                            **({} if as_input else {"axes": [-1, 1]}))
    m = model([node], [vi("x", [2, 3, 4])], [vi("y", [2])], inits, opset=opset)
    net = check(m, {"x": rand(2, 3, 4)})
    red = next(op for op in net.ops if op.op_type == "Reduce")
    assert red.attrs["axes"] == [1, 2] and red.attrs["keepdims"] is False


def test_reduce_max_over_channels_of_a_feature_map_stays_nhwc():
    """keras2onnx's ReduceMax over C after a Conv: reduced in the NHWC view, no Transpose."""
    c, (name, w) = conv("x", "c", 3, 8)
    red = helper.make_node("ReduceMax", ["c"], ["y"], axes=[1], keepdims=1)
    relu = helper.make_node("Relu", ["y"], ["z"])
    c2 = helper.make_node("Conv", ["z", "w2"], ["o"])
    m = model([c, red, relu, c2], [vi("x", [1, 3, 8, 8])], [vi("o", [1, 2, 8, 8])],
              [(name, w), ("w2", rand(2, 1, 1, 1))], opset=13)
    net = check(m, {"x": rand(1, 3, 8, 8)}, rtol=1e-4, atol=1e-4)
    r = next(op for op in net.ops if op.op_type == "Reduce")
    assert r.attrs["axes"] == [3] and r.attrs["func"] == "max"
    assert ops(net).count("Transpose") == 2  # the network input and output only


def test_reduce_mean_over_hw_stays_a_global_avgpool_and_others_are_reduce():
    c, (name, w) = conv("x", "c", 3, 4)
    gap = helper.make_node("ReduceMean", ["c"], ["g"], axes=[2, 3], keepdims=0)
    ch = helper.make_node("ReduceMean", ["c"], ["m"], axes=[1], keepdims=1)
    m = model([c, gap, ch], [vi("x", [1, 3, 6, 6])], [vi("g", [1, 4]), vi("m", [1, 1, 6, 6])],
              [(name, w)], opset=13)
    net = check(m, {"x": rand(1, 3, 6, 6)}, rtol=1e-4, atol=1e-5)
    assert "AvgPool2d" in ops(net)
    assert [op.attrs["func"] for op in net.ops if op.op_type == "Reduce"] == ["mean"]
    assert "ReduceMean" not in ops(net)


@pytest.mark.parametrize("op_type", ["ReduceSum", "ReduceL1", "ReduceSumSquare",
                                     "ReduceLogSum"])
@pytest.mark.parametrize("noop", [0, 1])
def test_empty_axes_reduce_all_or_nothing(op_type, noop):
    """noop_with_empty_axes with no axes: the input unreduced (its per-entry part applied)."""
    node = helper.make_node(op_type, ["x", ""], ["y"], keepdims=1, noop_with_empty_axes=noop)
    shape = [2, 3] if noop else [1, 1]
    m = model([node], [vi("x", [2, 3])], [vi("y", shape)], opset=18)
    check(m, {"x": np.abs(rand(2, 3)) + 0.1})


def test_int_and_bool_reductions_keep_their_type():
    nodes = [helper.make_node("ReduceSum", ["a", "ax"], ["s"], keepdims=0),
             helper.make_node("ReduceMax", ["b", "ax"], ["m"], keepdims=0)]
    m = model(nodes, [vi("a", [3, 4], TensorProto.INT32), vi("b", [3, 2], TensorProto.BOOL)],
              [vi("s", [4], TensorProto.INT32), vi("m", [2], TensorProto.BOOL)],
              [("ax", np.array([0], np.int64))], opset=20)
    net = import_onnx(m)
    got = run_host(net, [np.arange(12, dtype=np.int32).reshape(3, 4),
                         np.array([[0, 0], [1, 0], [0, 0]], bool)])
    assert got[0].dtype == np.int32 and got[0].tolist() == [12, 15, 18, 21]
    assert got[1].dtype == np.bool_ and got[1].tolist() == [True, False]


@pytest.mark.parametrize("last", [0, 1])
def test_argmax_of_logits_torch_style(last):
    """torch.argmax(x, dim=-1) writes ArgMax(axis=-1, keepdims=0)."""
    node = helper.make_node("ArgMax", ["x"], ["y"], axis=-1, keepdims=0, select_last_index=last)
    m = model([node], [vi("x", [2, 3, 5])], [vi("y", [2, 3], I64)], opset=13)
    x = np.round(rand(2, 3, 5))
    net = check(m, {"x": x})
    assert ops(net).count("ArgReduce") == 1


def test_topk_both_outputs_with_constant_k():
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1, largest=1)
    m = model([node], [vi("x", [2, 7, 3])], [vi("v", [2, 3, 3]), vi("i", [2, 3, 3], I64)],
              [("k", np.array([3], np.int64))], opset=11)
    net = check(m, {"x": np.round(rand(2, 7, 3))})
    assert ops(net).count("TopK") == 1


def test_topk_opset1_k_attribute_on_a_feature_map():
    c, (name, w) = conv("x", "c", 3, 6)
    node = helper.make_node("TopK", ["c"], ["v", "i"], axis=1, k=2)
    m = model([c, node], [vi("x", [1, 3, 4, 4])], [vi("v", [1, 2, 4, 4]),
                                                   vi("i", [1, 2, 4, 4], I64)],
              [(name, w)], opset=9)
    check(m, {"x": rand(1, 3, 4, 4)}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op_type", ["CumSum"])
def test_cumsum_exclusive_reverse(op_type):
    node = helper.make_node(op_type, ["x", "ax"], ["y"], exclusive=1, reverse=1)
    m = model([node], [vi("x", [3, 4])], [vi("y", [3, 4])], [("ax", np.array(1, np.int32))],
              opset=14)
    check(m, {"x": rand(3, 4)})


@pytest.mark.parametrize("opset, axis", [(11, 1), (11, 0), (13, 1), (13, -1)])
@pytest.mark.parametrize("op_type", ["LogSoftmax", "Hardmax", "Softmax"])
def test_row_ops_old_2d_coercion_and_any_axis(op_type, opset, axis):
    node = helper.make_node(op_type, ["x"], ["y"], axis=axis)
    m = model([node], [vi("x", [2, 3, 4])], [vi("y", [2, 3, 4])], opset=opset)
    net = check(m, {"x": np.round(rand(2, 3, 4) * 2)})
    assert op_type in ops(net)


# --- index ops ---------------------------------------------------------------------------------

def test_embedding_lookup_gathers_from_a_constant_table():
    """torch.nn.Embedding: Gather(weight, token_ids) with the table as Params."""
    table = rand(10, 4)
    node = helper.make_node("Gather", ["w", "ids"], ["y"], axis=0)
    m = model([node], [vi("ids", [2, 3], I64)], [vi("y", [2, 3, 4])], [("w", table)])
    net = check(m, {"ids": np.array([[0, 9, -1], [3, 3, 2]], np.int64)})
    g = next(op for op in net.ops if op.op_type == "Gather")
    assert g.inputs[0].is_params


def test_class_token_gather_on_a_feature_map():
    """ViT's x[:, 0]: Gather(axis=1, indices=0) of a [N, T, D] map, a scalar constant index."""
    node = helper.make_node("Gather", ["x", "i"], ["y"], axis=1)
    m = model([node], [vi("x", [2, 5, 4])], [vi("y", [2, 4])], [("i", np.array(0, np.int64))])
    net = check(m, {"x": rand(2, 5, 4)})
    assert next(op for op in net.ops if op.op_type == "Gather").inputs[1].is_params


def test_gather_elements_nd_and_scatters():
    nodes = [helper.make_node("GatherElements", ["x", "ie"], ["a"], axis=1),
             helper.make_node("GatherND", ["x", "ind"], ["b"], batch_dims=1),
             helper.make_node("ScatterElements", ["x", "ie", "u"], ["c"], axis=1,
                              reduction="add"),
             helper.make_node("ScatterND", ["x", "isn", "v"], ["d"], reduction="max")]
    inits = [("ie", np.array([[0, 2], [1, -1], [3, 3]], np.int64)),
             ("ind", np.array([[1], [0], [3]], np.int64)),
             ("isn", np.array([[0, 1], [2, 3]], np.int64)),
             ("v", np.array([5.0, -5.0], np.float32))]
    m = model(nodes, [vi("x", [3, 4]), vi("u", [3, 2])],
              [vi("a", [3, 2]), vi("b", [3]), vi("c", [3, 4]), vi("d", [3, 4])], inits,
              opset=18)
    net = check(m, {"x": rand(3, 4), "u": rand(3, 2)})
    assert {"GatherElements", "GatherND", "ScatterElements", "ScatterND"} <= set(ops(net))


def test_old_scatter_is_scatter_elements():
    node = helper.make_node("Scatter", ["x", "i", "u"], ["y"], axis=0)
    m = model([node], [vi("x", [3, 3]), vi("u", [1, 3])], [vi("y", [3, 3])],
              [("i", np.array([[2, 0, 1]], np.int64))], opset=9)
    check(m, {"x": rand(3, 3), "u": rand(1, 3)})


def test_expand_tile_trilu_one_hot():
    nodes = [helper.make_node("Expand", ["x", "shp"], ["e"]),
             helper.make_node("Tile", ["x", "rep"], ["t"]),
             helper.make_node("Trilu", ["e", "k"], ["tr"], upper=0),
             helper.make_node("OneHot", ["ids", "depth", "vals"], ["oh"], axis=0)]
    inits = [("shp", np.array([2, 3, 4], np.int64)), ("rep", np.array([2, 3], np.int64)),
             ("k", np.array(1, np.int64)), ("depth", np.array(4, np.int64)),
             ("vals", np.array([0, 1], np.int64))]
    m = model(nodes, [vi("x", [3, 1]), vi("ids", [2, 3], I64)],
              [vi("e", [2, 3, 4]), vi("t", [6, 3]), vi("tr", [2, 3, 4]),
               vi("oh", [4, 2, 3], I64)], inits, opset=14)
    net = check(m, {"x": rand(3, 1), "ids": np.array([[0, 3, -1], [4, 1, 2]], np.int64)})
    assert {"Expand", "Tile", "Trilu", "OneHot"} <= set(ops(net))


def test_expand_with_a_shape_computed_from_shape_folds():
    """torch's expand_as: Shape -> Expand; the shape folds and Expand gets it constant."""
    nodes = [helper.make_node("Shape", ["y"], ["s"]),
             helper.make_node("Expand", ["x", "s"], ["e"]),
             helper.make_node("Add", ["e", "y"], ["z"])]
    m = model(nodes, [vi("x", [1, 4]), vi("y", [3, 4])], [vi("z", [3, 4])])
    net = check(m, {"x": rand(1, 4), "y": rand(3, 4)})
    assert "Expand" in ops(net) or "Add" in ops(net)


@pytest.mark.parametrize("to", [TensorProto.INT32, TensorProto.FLOAT16, TensorProto.BOOL,
                                TensorProto.DOUBLE, TensorProto.UINT8])
def test_cast_and_cast_like_of_computed_data(to):
    """tf2onnx casts feature maps (float -> int32 -> float is its floor/trunc idiom)."""
    nodes = [helper.make_node("Mul", ["x", "s"], ["m"]),
             helper.make_node("Cast", ["m"], ["c"], to=to),
             helper.make_node("CastLike", ["c", "x"], ["y"])]
    m = model(nodes, [vi("x", [2, 5])], [vi("y", [2, 5])], [("s", np.float32(7.3))], opset=15)
    net = check(m, {"x": rand(2, 5)})
    assert ops(net).count("Convert") == 2


def test_cast_to_bfloat16_is_refused_by_the_native_handler():
    from xcompile.frontend.onnx_import.handlers.index import cast_to
    from xcompile.frontend.onnx_import.registry import _Unsupported
    from xcompile.frontend.onnx_import.tensor import _T

    class _Im:
        onnx = onnx

    x = _T([2], value=xir.values.Value(0, xir.TensorType(np.float32, [2])))
    with pytest.raises(_Unsupported, match="bfloat16"):
        cast_to(_Im(), None, {"to": TensorProto.BFLOAT16}, x)


@pytest.mark.parametrize("op_type, mode", [("DepthToSpace", "DCR"), ("DepthToSpace", "CRD"),
                                           ("SpaceToDepth", "DCR")])
def test_depth_to_space_after_a_conv_works_on_nhwc(op_type, mode):
    """A super-resolution tail: Conv -> DepthToSpace (PixelShuffle is CRD)."""
    c, (name, w) = conv("x", "c", 3, 8)
    attrs = {"blocksize": 2} | ({"mode": mode} if op_type == "DepthToSpace" else {})
    node = helper.make_node(op_type, ["c"], ["y"], **attrs)
    out = [1, 2, 8, 8] if op_type == "DepthToSpace" else [1, 32, 2, 2]
    m = model([c, node], [vi("x", [1, 3, 4, 4])], [vi("y", out)], [(name, w)], opset=13)
    net = check(m, {"x": rand(1, 3, 4, 4)}, rtol=1e-4, atol=1e-4)
    # the NCHW->NHWC of the input, the 6-D shuffle, and NHWC->NCHW for the output
    assert ops(net).count("Transpose") == 3


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_every_mode_with_axes_and_negative_pads(mode):
    nodes = [helper.make_node("Pad", ["x", "p", "v", "ax"], ["y"], mode=mode)]
    inits = [("p", np.array([2, -1, 1, 3], np.int64)), ("v", np.float32(1.5)),
             ("ax", np.array([1, -1], np.int64))]
    m = model(nodes, [vi("x", [2, 4, 5])], [vi("y", [2, 7, 7])], inits, opset=18)
    check(m, {"x": rand(2, 4, 5)})


def test_compress_with_a_constant_condition_is_a_gather():
    nodes = [helper.make_node("Compress", ["x", "c"], ["y"], axis=1),
             helper.make_node("Compress", ["x", "c2"], ["z"])]
    inits = [("c", np.array([1, 0, 1], bool)), ("c2", np.array([0, 1, 0, 0, 1], bool))]
    m = model(nodes, [vi("x", [2, 4])], [vi("y", [2, 2]), vi("z", [2])], inits, opset=11)
    net = check(m, {"x": rand(2, 4)})
    assert ops(net).count("Gather") == 2


def test_compress_with_a_computed_condition_is_not_native():
    from xcompile.frontend.onnx_import.handlers.index import _compress
    from xcompile.frontend.onnx_import.registry import _Unsupported
    from xcompile.frontend.onnx_import.tensor import _T

    x = _T([4], value=xir.values.Value(0, xir.TensorType(np.float32, [4])))
    c = _T([4], value=xir.values.Value(1, xir.TensorType(np.bool_, [4])))
    with pytest.raises(_Unsupported, match="data-dependent"):
        _compress(None, None, {}, [x, c])


def test_reverse_sequence_and_range_with_a_computed_start():
    nodes = [helper.make_node("ReverseSequence", ["x", "lens"], ["r"], batch_axis=1,
                              time_axis=0),
             helper.make_node("ReduceSum", ["s"], ["s0"], keepdims=0),
             helper.make_node("Range", ["s0", "lim", "d"], ["rg"])]
    inits = [("lens", np.array([4, 1, 2], np.int64)), ("lim", np.float32(100.0)),
             ("d", np.float32(25.0))]
    m = model(nodes, [vi("x", [4, 3, 2]), vi("s", [2])], [vi("r", [4, 3, 2]), vi("rg", [4])],
              inits, opset=13)
    net = check(m, {"x": rand(4, 3, 2), "s": np.array([0.25, 0.5], np.float32)})
    assert {"ReverseSequence", "Range"} <= set(ops(net))


def test_flatten_any_axis_and_shape_slices():
    nodes = [helper.make_node("Flatten", ["x"], ["f0"], axis=0),
             helper.make_node("Flatten", ["x"], ["f2"], axis=-1),
             helper.make_node("Shape", ["x"], ["sh"], start=-2, end=10),
             helper.make_node("Reshape", ["x", "sh"], ["r"])]
    m = model(nodes, [vi("x", [2, 3, 4])], [vi("f0", [1, 24]), vi("f2", [6, 4]),
                                            vi("r", [3, 4])], opset=15)
    with pytest.raises(xir.OnnxImportError):  # 24 elements do not fit [3, 4]
        import_onnx(m)
    nodes[3] = helper.make_node("Expand", ["x", "sh"], ["r"])
    m = model(nodes, [vi("x", [2, 3, 4])], [vi("f0", [1, 24]), vi("f2", [6, 4]),
                                            vi("r", [2, 3, 4])], opset=15)
    check(m, {"x": rand(2, 3, 4)})


def test_computed_cumsum_axis_and_trilu_k_are_read_at_run_time():
    """ONNX's CumSum axis and Trilu k are tensors; computed ones become inputs of the op."""
    nodes = [helper.make_node("CumSum", ["x", "ax"], ["c"], exclusive=1),
             helper.make_node("CumProd", ["x", "ax"], ["p"], reverse=1),
             helper.make_node("Trilu", ["x", "k"], ["t"], upper=0)]
    m = model(nodes, [vi("x", [3, 4]), vi("ax", [], I64), vi("k", [], I64)],
              [vi("c", [3, 4]), vi("p", [3, 4]), vi("t", [3, 4])], opset=26)
    m.ir_version = 10
    net = import_onnx(m)
    assert {"CumSum", "CumProd", "Trilu"} <= set(ops(net)) and "OnnxGraph" not in ops(net)
    x = rand(3, 4)
    for ax, k in ((0, 1), (-1, -2)):
        c, p, t = run_host(net, [x, np.array(ax, np.int64), np.array(k, np.int64)])
        want_c = np.cumsum(x, axis=ax) - x
        want_p = np.flip(np.cumprod(np.flip(x, ax), axis=ax), ax)
        np.testing.assert_allclose(c, want_c, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(p, want_p, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(t, np.tril(x, k))
    from xrt.errors import TensorError

    with pytest.raises(TensorError, match="axis 2 is out of range"):
        run_host(net, [x, np.array(2, np.int64), np.array(0, np.int64)])


@pytest.mark.parametrize("idx", [np.array([5, 0, -1], np.int64), np.array(2, np.int64)])
def test_channel_gather_and_gather_elements_on_a_feature_map_keep_nhwc(idx):
    """YOLO-style channel picks after a Conv: no Transpose beyond the input/output ones."""
    c, (name, w) = conv("x", "c", 3, 6)
    nodes = [c, helper.make_node("Gather", ["c", "i"], ["g"], axis=1),
             helper.make_node("Relu", ["g"], ["y"]),
             helper.make_node("GatherElements", ["c", "ie"], ["e"], axis=1),
             helper.make_node("ScatterElements", ["c", "ie", "e"], ["s"], axis=1,
                              reduction="mul")]
    ie = RNG.integers(-6, 6, (1, 2, 5, 5)).astype(np.int64)
    gshape = [1, 3, 5, 5] if idx.ndim else [1, 5, 5]
    m = model(nodes, [vi("x", [1, 3, 5, 5])],
              [vi("y", gshape), vi("e", [1, 2, 5, 5]), vi("s", [1, 6, 5, 5])],
              [(name, w), ("i", idx), ("ie", ie)], opset=18)
    net = check(m, {"x": rand(1, 3, 5, 5)}, rtol=1e-4, atol=1e-5)
    g = next(op for op in net.ops if op.op_type == "Gather")
    assert g.attrs["axis"] == 3  # C of the NHWC view
    # the input's, one per NCHW output (a scalar pick leaves (N, H, W): already ONNX order)
    assert ops(net).count("Transpose") == (4 if idx.ndim else 3)


@pytest.mark.parametrize("axes", [[1], [2], [3], [1, 3], [0, 2]])
@pytest.mark.parametrize("op_type", ["ReduceSum", "ArgMin", "CumSum", "TopK"])
def test_axis_local_ops_on_an_nhwc_map_any_axis(op_type, axes):
    """Reduced / searched in the NHWC view of a Conv output, kept or dropped axes remapped."""
    c, (name, w) = conv("x", "c", 3, 5)
    inits = [(name, w)]
    if op_type == "ReduceSum":
        node = helper.make_node(op_type, ["c", "ax"], ["y"], keepdims=0)
        inits.append(("ax", np.array(axes, np.int64)))
    elif op_type == "ArgMin":
        node = helper.make_node(op_type, ["c"], ["y"], axis=axes[-1], keepdims=0)
    elif op_type == "CumSum":
        node = helper.make_node(op_type, ["c", "ax"], ["y"], reverse=1)
        inits.append(("ax", np.array(axes[0], np.int64)))
    else:
        node = helper.make_node(op_type, ["c", "k"], ["y", "i"], axis=axes[0])
        inits.append(("k", np.array([1], np.int64)))
    outs = [helper.make_empty_tensor_value_info("y")]
    m = model([c, node], [vi("x", [2, 3, 4, 6])], outs, inits, opset=13)
    net = check(m, {"x": rand(2, 3, 4, 6)}, rtol=1e-4, atol=1e-4)
    assert ops(net).count("Transpose") <= 2


def test_col2im_with_constant_shapes():
    """torch.nn.Fold exports Col2Im (opset 18) with constant image and block shapes."""
    node = helper.make_node("Col2Im", ["x", "img", "blk"], ["y"], strides=[2, 2],
                            pads=[1, 1, 1, 1])
    m = model([node], [vi("x", [1, 8, 9])], [vi("y", [1, 2, 5, 5])],
              [("img", np.array([5, 5], np.int64)), ("blk", np.array([2, 2], np.int64))],
              opset=18)
    net = check(m, {"x": rand(1, 8, 9)})
    assert "Col2Im" in ops(net)

"""Small networks that use every op of the op families added for the whole ONNX op set
(pointwise, reduce, index, recurrent, OnnxGraph): the serialization tests round-trip them and
the family tests run them."""

from __future__ import annotations

import numpy as np

import xir
from xir import FP32, NetworkBuilder


def reduce_index_net() -> xir.Network:
    """Every reduce and index op, 14 outputs."""
    rng = np.random.default_rng(3)
    b = NetworkBuilder("reduce_index")
    x = b.input([2, 5, 4], FP32, name="x")
    r = b.op("Reduce", [x], func="log_sum_exp", axes=[1], keepdims=True)
    a = b.op("ArgReduce", [x], func="min", axis=2, keepdims=False, select_last_index=True)
    tv, ti = b.op("TopK", [x], k=3, axis=1, largest=False)
    cs = b.op("CumSum", [x], axis=1, exclusive=True, reverse=True)
    cp = b.op("CumProd", [x], axis=2)
    hm = b.op("Hardmax", [cs], axis=1)
    ls = b.op("LogSoftmax", [cp], axis=-1)
    ex = b.op("Expand", [r], shape=[3, 2, 5, 4])
    tl = b.op("Tile", [x], repeats=[1, 2, 1])
    g = b.op("Gather", [x, b.params(np.array([[0, -1]], np.int64))], axis=1)
    ge = b.op("GatherElements", [x, b.params(rng.integers(0, 5, (2, 3, 4)))], axis=1)
    gn = b.op("GatherND", [x, b.params(np.array([[[1]], [[4]]], np.int64))], batch_dims=1)
    se = b.op("ScatterElements", [x, ti, tv], axis=1, reduction="max")
    sn = b.op("ScatterND", [x, b.params(np.array([[1, 2]], np.int64)),
                            b.params(np.ones((1, 4), np.float32))], reduction="mul")
    oh = b.op("OneHot", [a, b.params(np.array([0, 1], np.float32))], depth=4, axis=0)
    rg = b.op("Range", [b.params(np.array(0.5, np.float32)), b.params(np.array(3.5, np.float32)),
                        b.params(np.array(0.5, np.float32))], size=6)
    tr = b.op("Trilu", [x], upper=False, k=1)
    rs = b.op("ReverseSequence", [x, b.params(np.array([5, 2], np.int64))], batch_axis=0,
              time_axis=1)
    cv = b.op("Convert", [rs], to="@sint(16)")
    ci = b.op("Col2Im", [b.op("Reshape", [x], shape=[1, 4, 10])], image_shape=[3, 6],
              block_shape=[2, 2], strides=[1, 1], pads=[0, 0, 0, 0], dilations=[1, 1])
    b.output(hm, ls, ex, tl, g, ge, gn, se, sn, oh, rg, tr, cv, ci)
    return b.build()


def pointwise_net() -> xir.Network:
    """Unary, Binary, Where and PRelu on float and integer maps."""
    b = NetworkBuilder("pointwise")
    x = b.input([2, 3, 4], FP32, name="x")
    i = b.input([2, 3, 4], np.int32, name="i")
    e = b.op("Unary", [x], func="exp")
    c = b.params(np.linspace(-1, 1, 4).astype(np.float32), "c")
    m = b.op("Binary", [e, c], func="max")
    le = b.op("Binary", [x, c], func="less_equal")
    w = b.op("Where", [le, m, x])
    p = b.op("PRelu", [w, b.params(np.full(4, 0.25, np.float32), "slope")])
    sh = b.op("Binary", [i, b.params(np.array(2, np.int32), "two")], func="shift_left")
    b.output(p, sh)
    return b.build()


def recurrent_net() -> xir.Network:
    """The three recurrences over a projected sequence (T=3, B=2, H=4)."""
    rng = np.random.default_rng(5)
    T, B, H = 3, 2, 4

    def f(*shape):
        return rng.standard_normal(shape).astype(np.float32) * 0.3

    b = NetworkBuilder("recurrent")
    lx = b.input([T, B, 8 * H], FP32, name="lstm_xw")
    y, yh, yc = b.op("LSTMRecurrence", [lx, f(2, 4 * H, H), f(2, 8 * H), f(2, B, H),
                                        f(2, B, H), f(2, 3 * H), np.full(B, T, np.int32)],
                     hidden_size=H, direction="bidirectional")
    gx = b.input([T, B, 3 * H], FP32, name="gru_xw")
    gy, gyh = b.op("GRURecurrence", [gx, f(1, 3 * H, H), f(1, 6 * H), f(1, B, H),
                                     np.array([T, 2], np.int32)],
                   hidden_size=H, linear_before_reset=True)
    rx = b.input([T, B, H], FP32, name="rnn_xw")
    ry, ryh = b.op("RNNRecurrence", [rx, f(1, H, H), f(1, 2 * H), f(1, B, H),
                                     np.full(B, T, np.int32)], hidden_size=H)
    b.output(y, yh, yc, gy, gyh, ry, ryh)
    return b.build()


def onnx_graph_net() -> xir.Network:
    """One OnnxGraph carrying an Einsum (needs the onnx package to build the model)."""
    from onnx import TensorProto, helper

    from xir.ops.onnx_graph import make_onnx_graph
    from xir.types import TensorType

    node = helper.make_node("Einsum", ["a", "b"], ["y"], equation="ij,jk->ik", name="ein")
    graph = helper.make_graph(
        [node], "Einsum_graph",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]) \
        .SerializeToString()
    net = xir.Network("carried", framework_kind="onnx")
    a = net.newValue(TensorType(np.float32, [2, 3]), "a")
    bv = net.newValue(TensorType(np.float32, [3, 4]), "b")
    y = net.newValue(TensorType(np.float32, [2, 4]), "y")
    model = net.newParams(np.frombuffer(data, np.uint8).copy(), "ein.onnx")
    net.addOp(xir.OP_REGISTRY["Input"]([], [a], name="a"))
    net.addOp(xir.OP_REGISTRY["Input"]([], [bv], name="b"))
    net.addOp(make_onnx_graph([a, bv], [y], model, onnx_ops=["Einsum"], onnx_nodes=["ein"],
                              opset=17, name="ein"))
    net.addOp(xir.OP_REGISTRY["Output"]([y], []))
    net.validate()
    return net

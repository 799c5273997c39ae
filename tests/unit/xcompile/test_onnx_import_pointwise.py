"""ONNX import of element-wise math, comparison, logic and activations (xir.ops.pointwise),
checked against onnxruntime, with exporter idioms (NHWC maps, clips by Max, mel front ends)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import xir  # noqa: E402
from xcompile.frontend import import_onnx  # noqa: E402
from xcompile.frontend.onnx_import.registry import _HANDLERS  # noqa: E402

RNG = np.random.default_rng(3)


def _model(nodes, inputs, outputs, inits=(), opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs,
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def _vi(name, shape, dtype=np.float32):
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)),
                                         shape)


def _ort(model, feeds):
    """onnxruntime's outputs (onnx.reference's where onnxruntime has no kernel for a dtype:
    int64 Relu, float64 LeakyRelu)."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    try:
        sess = ort.InferenceSession(model.SerializeToString(), opts,
                                    providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - onnxruntime's NotImplemented has no public type
        if "NOT_IMPLEMENTED" not in str(exc):
            raise
        from onnx.reference import ReferenceEvaluator

        return ReferenceEvaluator(model).run(None, feeds)
    return sess.run(None, feeds)


def _forward(net, inputs):
    from host_backend import HostBackend
    from xrt import HostDevice, Session, Tensor

    sess = Session.Create([HostBackend], net.view(0), [HostDevice.Default()])
    sess.apply()
    return [np.asarray(t) for t in sess.forward([Tensor(np.asarray(a, order="C"))
                                                 for a in inputs])]


def _check(model, feeds, rtol=1e-5, atol=1e-5) -> xir.Network:
    net = import_onnx(model)
    want = _ort(model, feeds)
    got = _forward(net, [feeds[v.name] for v in net.inputs()])
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        if w.dtype.kind in "iub":
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return net


def _ops(net, op_type=None):
    return [op for op in net.ops if op_type is None or op.op_type == op_type]


def _data(dtype, shape):
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return RNG.integers(0, 2, shape).astype(bool)
    if dt.kind in "iu":
        return RNG.integers(1 if dt.kind == "u" else -20, 30, shape).astype(dt)
    return (RNG.standard_normal(shape) * 2).astype(dt)


def test_the_native_handlers_take_these_ops():
    ours = ("xcompile.frontend.onnx_import.handlers.pointwise",
            "xcompile.frontend.onnx_import.handlers.elementwise",
            "xcompile.frontend.onnx_import.handlers.activation")
    for op in ("Exp", "Log", "Abs", "Neg", "Max", "Min", "Mean", "Sum", "Mod", "Pow", "Where",
               "Equal", "Less", "Greater", "Not", "And", "Or", "Xor", "IsNaN", "IsInf",
               "BitShift", "BitwiseAnd", "BitwiseNot", "LeakyRelu", "PRelu", "Elu", "Selu",
               "Celu", "ThresholdedRelu", "Softplus", "Softsign", "Mish", "Shrink", "Swish",
               "Sign", "Round", "Floor", "Ceil", "Reciprocal", "Sin", "Cos", "Tan", "Add",
               "Div"):
        assert _HANDLERS[op].__module__ in ours, op


UNARY_CASES = [
    ("Exp", {}, np.float32, "exp"), ("Log", {}, np.float64, "log"),
    ("Abs", {}, np.int32, "abs"), ("Abs", {}, np.float32, "abs"),
    ("Reciprocal", {}, np.float32, "reciprocal"), ("Floor", {}, np.float64, "floor"),
    ("Ceil", {}, np.float32, "ceil"), ("Round", {}, np.float32, "round"),
    ("Sign", {}, np.int64, "sign"), ("Sin", {}, np.float32, "sin"),
    ("Atan", {}, np.float32, "atan"), ("IsNaN", {}, np.float32, "isnan"),
    ("IsInf", {"detect_negative": 0}, np.float32, "isinf"), ("Not", {}, np.bool_, "not"),
    ("BitwiseNot", {}, np.uint8, "bitwise_not"), ("Neg", {}, np.int8, "neg"),
    ("Elu", {"alpha": 0.5}, np.float32, "elu"), ("Selu", {}, np.float32, "selu"),
    ("Celu", {"alpha": 1.5}, np.float32, "celu"),
    ("ThresholdedRelu", {"alpha": 0.2}, np.float32, "thresholded_relu"),
    ("Softplus", {}, np.float32, "softplus"), ("Softsign", {}, np.float32, "softsign"),
    ("Mish", {}, np.float32, "mish"), ("Shrink", {"lambd": 0.7, "bias": 0.2}, np.float32,
                                       "shrink"),
]


@pytest.mark.parametrize("op,attrs,dtype,func", UNARY_CASES,
                         ids=[f"{c[0]}-{np.dtype(c[2]).name}" for c in UNARY_CASES])
def test_unary_ops_against_ort(op, attrs, dtype, func):
    x = _data(dtype, (2, 3, 4))
    if op == "Log":
        x = np.abs(x) + 0.1
    if op in ("IsNaN", "IsInf"):
        x.flat[:3] = [np.nan, np.inf, -np.inf]
    opset = 18 if op in ("BitwiseNot", "Mish") else 17
    model = _model([helper.make_node(op, ["x"], ["y"], **attrs)], [_vi("x", x.shape, dtype)],
                   [helper.make_empty_tensor_value_info("y")], opset=opset)
    net = _check(model, {"x": x})
    [u] = _ops(net, "Unary")
    assert u.attrs["func"] == func


BINARY_CASES = [
    ("Max", {}, np.float32, "max"), ("Min", {}, np.int64, "min"),
    ("Mod", {}, np.int32, "mod"), ("Mod", {"fmod": 1}, np.float32, "fmod"),
    ("Mod", {"fmod": 1}, np.int64, "fmod"), ("Pow", {}, np.float32, "pow"),
    ("Equal", {}, np.int64, "equal"), ("Less", {}, np.float32, "less"),
    ("LessOrEqual", {}, np.int32, "less_equal"), ("Greater", {}, np.float64, "greater"),
    ("GreaterOrEqual", {}, np.float32, "greater_equal"), ("And", {}, np.bool_, "and"),
    ("Or", {}, np.bool_, "or"), ("Xor", {}, np.bool_, "xor"),
    ("BitShift", {"direction": "RIGHT"}, np.uint32, "shift_right"),
    ("BitwiseXor", {}, np.int16, "bitwise_xor"), ("Add", {}, np.int32, "add"),
    ("Sub", {}, np.int64, "sub"), ("Mul", {}, np.float64, "mul"), ("Div", {}, np.int32, "div"),
]


@pytest.mark.parametrize("op,attrs,dtype,func", BINARY_CASES,
                         ids=[f"{c[0]}-{np.dtype(c[2]).name}" for c in BINARY_CASES])
def test_binary_ops_against_ort(op, attrs, dtype, func):
    a, b = _data(dtype, (2, 3, 4)), _data(dtype, (3, 1))
    if op == "Pow":
        a = np.abs(a) + 0.5
    if op == "BitShift":
        b = (b % 8).astype(dtype)
    opset = 18 if op.startswith("Bitwise") else 17
    model = _model([helper.make_node(op, ["a", "b"], ["y"], **attrs)],
                   [_vi("a", a.shape, dtype), _vi("b", b.shape, dtype)],
                   [helper.make_empty_tensor_value_info("y")], opset=opset)
    net = _check(model, {"a": a, "b": b})
    [op_] = _ops(net, "Binary")
    assert op_.attrs["func"] == func


def test_integer_division_truncates_toward_zero():
    a = np.array([7, -7, 7, -7, 0, 9], np.int32)
    b = np.array([2, 2, -2, -2, 5, 3], np.int32)
    model = _model([helper.make_node("Div", ["a", "b"], ["y"]),
                    helper.make_node("Mod", ["a", "b"], ["m"])],
                   [_vi("a", [6], np.int32), _vi("b", [6], np.int32)],
                   [_vi("y", [6], np.int32), _vi("m", [6], np.int32)])
    net = import_onnx(model)
    y, m = _forward(net, [a, b])
    np.testing.assert_array_equal(y, [3, -3, -3, 3, 0, 3])
    np.testing.assert_array_equal(m, [1, 1, -1, -1, 0, 0])  # the divisor's sign (fmod=0)


def test_float32_neg_stays_a_multiply_and_integer_neg_is_exact():
    model = _model([helper.make_node("Neg", ["x"], ["y"])], [_vi("x", [4])], [_vi("y", [4])])
    net = _check(model, {"x": _data(np.float32, (4,))})
    assert _ops(net, "Multiply") and not _ops(net, "Unary")
    model = _model([helper.make_node("Neg", ["x"], ["y"])], [_vi("x", [3], np.int64)],
                   [_vi("y", [3], np.int64)])
    big = np.array([2 ** 62 + 1, -(2 ** 62) - 3, 0], np.int64)  # float32 would round these
    _check(model, {"x": big})


def test_n_ary_max_min_mean_sum():
    xs = [_data(np.float32, s) for s in ((2, 3, 4), (3, 4), (4,))]
    names = ["a", "b", "c"]
    nodes = [helper.make_node(op, names, [op.lower()]) for op in ("Max", "Min", "Mean", "Sum")]
    model = _model(nodes, [_vi(n, x.shape) for n, x in zip(names, xs)],
                   [helper.make_empty_tensor_value_info(op.lower())
                    for op in ("max", "min", "mean", "sum")])
    net = _check(model, dict(zip(names, xs)))
    assert sorted(op.attrs["func"] for op in _ops(net, "Binary")) == ["max"] * 2 + ["min"] * 2
    ints = [_data(np.int64, (5,)) for _ in range(3)]
    model = _model([helper.make_node("Max", names, ["s"]), helper.make_node("Min", ["a"], ["m"])],
                   [_vi(n, [5], np.int64) for n in names],
                   [_vi("s", [5], np.int64), _vi("m", [5], np.int64)])
    _check(model, dict(zip(names, ints)))
    doubles = [_data(np.float64, (5,)) for _ in range(3)]
    model = _model([helper.make_node("Sum", names, ["s"])],
                   [_vi(n, [5], np.float64) for n in names], [_vi("s", [5], np.float64)])
    net = _check(model, dict(zip(names, doubles)), rtol=1e-12, atol=1e-12)
    assert {op.attrs["func"] for op in _ops(net, "Binary")} == {"add"}
    # float64 Mean (onnxruntime has no kernel for it): the sum divided by N in float64
    model = _model([helper.make_node("Mean", names, ["m"])],
                   [_vi(n, [5], np.float64) for n in names], [_vi("m", [5], np.float64)])
    net = import_onnx(model)
    [m] = _forward(net, doubles)
    np.testing.assert_array_equal(m, (doubles[0] + doubles[1] + doubles[2]) / 3)
    assert {op.attrs["func"] for op in _ops(net, "Binary")} == {"add", "div"}


def test_pow_with_a_feature_map_exponent_and_an_integer_base():
    a, e = np.abs(_data(np.float32, (2, 5))) + 0.1, _data(np.float32, (2, 5))
    model = _model([helper.make_node("Pow", ["a", "e"], ["y"])],
                   [_vi("a", [2, 5]), _vi("e", [2, 5])], [_vi("y", [2, 5])])
    _check(model, {"a": a, "e": e}, rtol=1e-5)
    model = _model([helper.make_node("Pow", ["a", "e"], ["y"])],
                   [_vi("a", [4], np.int64)], [_vi("y", [4], np.int64)],
                   [("e", np.array(3, np.int64))])
    net = _check(model, {"a": np.array([2, -3, 5, 100], np.int64)})
    assert [op.attrs["func"] for op in _ops(net, "Binary")] == ["pow"]
    # a float32 map to a constant scalar power keeps Caffe's Power (a table once quantized)
    model = _model([helper.make_node("Pow", ["a", "e"], ["y"])], [_vi("a", [2, 5])],
                   [_vi("y", [2, 5])], [("e", np.array(0.5, np.float32))])
    assert _ops(_check(model, {"a": a}), "Power")


def test_where_with_equal_like_a_voice_activity_detector():
    """VAD idiom: a state counter compared with Equal picks between two feature maps."""
    x = _data(np.float32, (1, 8, 16))
    model = _model([helper.make_node("Equal", ["n", "zero"], ["first"]),
                    helper.make_node("Where", ["first", "x", "h"], ["y"]),
                    helper.make_node("IsNaN", ["y"], ["bad"]),
                    helper.make_node("Not", ["bad"], ["ok"])],
                   [_vi("n", [1], np.int64), _vi("x", [1, 8, 16])],
                   [_vi("y", [1, 8, 16]), _vi("ok", [1, 8, 16], np.bool_)],
                   [("zero", np.array([0], np.int64)), ("h", np.zeros((8, 1), np.float32))])
    for n in (0, 3):
        net = _check(model, {"n": np.array([n], np.int64), "x": x})
    assert len(_ops(net, "Where")) == 1


def _conv_front(c_in=3, c=8):
    w = (RNG.standard_normal((c, c_in, 3, 3)) * 0.3).astype(np.float32)
    w2 = (RNG.standard_normal((c, c, 1, 1)) * 0.3).astype(np.float32)
    return w, w2


def test_prelu_and_max_clip_on_nhwc_maps_need_no_transpose():
    """PyTorch's PRelu (slope [C,1,1]) and a clip by Max/Min with constants between convs: the
    element-wise ops work on the convs' NHWC views."""
    w, w2 = _conv_front()
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("PRelu", ["c", "slope"], ["p"]),
             helper.make_node("Max", ["p", "lo"], ["m"]),
             helper.make_node("Min", ["m", "hi"], ["n"]),
             helper.make_node("Abs", ["n"], ["a"]),
             helper.make_node("Conv", ["a", "w2"], ["y"])]
    slope = (RNG.standard_normal((8, 1, 1)) * 0.2).astype(np.float32)
    model = _model(nodes, [_vi("x", [1, 3, 10, 10])], [_vi("y", [1, 8, 10, 10])],
                   [("w", w), ("w2", w2), ("slope", slope),
                    ("lo", np.array(-0.5, np.float32)), ("hi", np.array(2.0, np.float32))])
    net = _check(model, {"x": _data(np.float32, (1, 3, 10, 10))}, rtol=1e-4, atol=1e-5)
    types = [op.op_type for op in net.ops]  # Transposes only at the network's NCHW edges
    assert types == ["Input", "Transpose", "Conv2d", "PRelu", "Binary", "Binary", "Unary",
                     "Conv2d", "Transpose", "Output"]
    for t in ("PRelu", "Binary", "Unary"):
        for op in _ops(net, t):
            assert op.outputs[0].dtype.layout.encode() == "@layout(NHWC)", t
    [p] = _ops(net, "PRelu")
    assert p.inputs[1].shape == (1, 1, 1, 8)


def test_tf2onnx_speech_embedding_idiom():
    """tf2onnx: NHWC input, Transpose to NCHW for the conv, LeakyRelu, Max with a constant (a
    clip), Log, Transpose back."""
    w, _ = _conv_front(1, 4)
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2]),
             helper.make_node("Conv", ["t", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("LeakyRelu", ["c"], ["l"], alpha=0.3),
             helper.make_node("Max", ["l", "eps"], ["m"]),
             helper.make_node("Log", ["m"], ["g"]),
             helper.make_node("Transpose", ["g"], ["y"], perm=[0, 2, 3, 1])]
    model = _model(nodes, [_vi("x", [1, 12, 12, 1])], [_vi("y", [1, 12, 12, 4])],
                   [("w", w), ("eps", np.array([1e-3], np.float32))], opset=12)
    net = _check(model, {"x": _data(np.float32, (1, 12, 12, 1))}, rtol=1e-4, atol=1e-5)
    assert [op.attrs["func"] for op in _ops(net, "Binary")] == ["max"]
    assert [op.attrs["func"] for op in _ops(net, "Unary")] == ["log"]


def test_mel_front_end_idiom():
    """torch.onnx's mel spectrogram: |STFT|^2 by Pow, a MatMul with the mel matrix, Max with
    an amin constant, Log, a dB scale."""
    mel = np.abs(RNG.standard_normal((16, 6))).astype(np.float32)
    nodes = [helper.make_node("Pow", ["s", "two"], ["p"]),
             helper.make_node("MatMul", ["p", "mel"], ["m"]),
             helper.make_node("Max", ["m", "amin"], ["c"]),
             helper.make_node("Log", ["c"], ["l"]),
             helper.make_node("Mul", ["l", "db"], ["y"])]
    model = _model(nodes, [_vi("s", [1, 20, 16])], [_vi("y", [1, 20, 6])],
                   [("two", np.array(2.0, np.float32)), ("mel", mel),
                    ("amin", np.array(1e-10, np.float32)),
                    ("db", np.array(10 / np.log(10), np.float32))], opset=17)
    _check(model, {"s": _data(np.float32, (1, 20, 16))}, rtol=1e-4, atol=1e-4)


def test_swish_alpha_one_is_silu():
    nodes = [helper.make_node("Swish", ["x"], ["y"]), helper.make_node("Swish", ["x"], ["z"],
                                                                     alpha=0.5)]
    model = _model(nodes, [_vi("x", [2, 8])], [_vi("y", [2, 8]), _vi("z", [2, 8])], opset=24)
    net = import_onnx(model)
    x = _data(np.float32, (2, 8))
    y, z = _forward(net, [x])
    np.testing.assert_allclose(y, x / (1 + np.exp(-x)), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(z, x / (1 + np.exp(-0.5 * x)), rtol=1e-6, atol=1e-6)
    assert _ops(net, "Silu") and [op.attrs["func"] for op in _ops(net, "Unary")] == ["swish"]


def _tensor(shape, dtype):
    from xcompile.frontend.onnx_import.tensor import _T
    from xir.values import Value

    return _T(shape, value=Value(0, xir.TensorType(np.dtype(dtype), shape)))


@pytest.mark.parametrize("op,attrs,inputs,reason", [
    ("Not", {}, [([3], np.float32)], "Not of a float32"),
    ("BitShift", {}, [([3], np.uint8)] * 2, "direction"),
    ("BitShift", {"direction": "LEFT"}, [([3], np.int8), ([3], np.float32)], "of a float32"),
    ("Exp", {}, [([3], np.int32)], "Exp of a int32"),
    ("PRelu", {}, [([3], np.float32), ([2, 3], np.float32)], "broadcasts the slope to x"),
    ("PRelu", {}, [([3], np.float32), ([2], np.float32)], "does not broadcast"),
    ("Where", {}, [([3], np.int64), ([3], np.float32), ([3], np.float32)], "condition"),
    ("Where", {}, [([3], np.bool_), ([3], np.float32), ([3], np.int8)], "one type"),
    ("And", {}, [([3], np.bool_), ([3], np.int8)], "And of a int8"),
])
def test_handlers_refuse_what_onnx_does_not_define(op, attrs, inputs, reason):
    """The native handlers refuse with a reason (the importer then lists the node, or hands
    it to the generic OnnxGraph fallback where one is installed)."""
    from xcompile.frontend.onnx_import.registry import _Unsupported

    node = helper.make_node(op, [f"i{k}" for k in range(len(inputs))], ["y"], **attrs)
    with pytest.raises(_Unsupported, match=reason):
        _HANDLERS[op](None, node, attrs, [_tensor(s, d) for s, d in inputs])


def test_bool_input_and_output_types():
    model = _model([helper.make_node("Xor", ["a", "b"], ["y"])],
                   [_vi("a", [2, 3], np.bool_), _vi("b", [3], np.bool_)],
                   [_vi("y", [2, 3], np.bool_)])
    net = _check(model, {"a": _data(np.bool_, (2, 3)), "b": _data(np.bool_, (3,))})
    assert net.outputs()[0].dtype.numpy_dtype == np.bool_
    assert TensorProto.BOOL == helper.np_dtype_to_tensor_dtype(np.dtype(np.bool_))


def test_prelu_max_min_and_tables_quantize_to_integer_ops():
    """PRelu, a clip by Max/Min and Unary activations run as integer ops once quantized
    (docs/quantization.md, "Integer ops: pointwise"), close to the float network."""
    from xcompile.quant.quantize import quantize_network
    from xcompile.quant.report import cosine

    w, w2 = _conv_front()
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("PRelu", ["c", "slope"], ["p"]),
             helper.make_node("Max", ["p", "lo"], ["m"]),
             helper.make_node("Min", ["m", "hi"], ["n"]),
             helper.make_node("Elu", ["n"], ["e"], alpha=0.8),
             helper.make_node("Conv", ["e", "w2"], ["y"])]
    slope = (RNG.uniform(0.05, 0.4, (8, 1, 1))).astype(np.float32)
    model = _model(nodes, [_vi("x", [1, 3, 10, 10])], [_vi("y", [1, 8, 10, 10])],
                   [("w", w), ("w2", w2), ("slope", slope),
                    ("lo", np.array(-0.5, np.float32)), ("hi", np.array(2.0, np.float32))])
    net = import_onnx(model)
    cal = [[_data(np.float32, (1, 3, 10, 10))] for _ in range(4)]
    q = quantize_network(net, cal, bits=8, method="minmax", weight_rounding="nearest")
    ops = [op for op in q.ops if op.op_type in ("PRelu", "Binary", "Unary")]
    assert [op.op_type for op in ops] == ["PRelu", "Binary", "Binary", "Unary"]
    assert all(op.is_quantized() for op in ops)
    assert q.tags["quantization"]["float_ops"] == []
    x = cal[0][0]
    want = _forward(net, [x])[0]
    got = _forward(q, [x])[0]
    assert cosine(got, want) >= 0.99


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.float64])
def test_relu_leakyrelu_clip_of_other_dtypes_are_exact(dtype):
    """The Relu kernels compute in float32: integer and float64 Relu / Clip become Binary max /
    min in the dtype (opset 14 integer Relu), float64 LeakyRelu a PRelu."""
    big = np.array([2 ** 40 + 1, -(2 ** 40) - 1], np.float64).astype(dtype) \
        if np.dtype(dtype).itemsize == 8 else np.array([100, -100], dtype)
    x = np.concatenate([_data(dtype, (10,)), big])
    lo, hi = np.array(-5, dtype), np.array(2 ** 41 if np.dtype(dtype).itemsize == 8 else 7,
                                           dtype)
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Clip", ["x", "lo", "hi"], ["c"])]
    outs = [_vi("r", [12], dtype), _vi("c", [12], dtype)]
    if dtype == np.float64:
        nodes.append(helper.make_node("LeakyRelu", ["x"], ["l"], alpha=0.3))
        outs.append(_vi("l", [12], dtype))
    model = _model(nodes, [_vi("x", [12], dtype)], outs, [("lo", lo), ("hi", hi)], opset=14)
    net = _check(model, {"x": x}, rtol=0, atol=0)
    assert not _ops(net, "Relu")
    assert sorted(op.attrs["func"] for op in _ops(net, "Binary")) == ["max", "max", "min"]
    assert len(_ops(net, "PRelu")) == (dtype == np.float64)


def test_clip_without_lower_bound_or_with_computed_bounds():
    x = _data(np.float32, (2, 6))
    model = _model([helper.make_node("Clip", ["x", "", "hi"], ["y"]),
                    helper.make_node("Clip", ["x", "lo", "hi"], ["z"])],
                   [_vi("x", [2, 6]), _vi("lo", [])], [_vi("y", [2, 6]), _vi("z", [2, 6])],
                   [("hi", np.array(0.5, np.float32))], opset=13)
    net = _check(model, {"x": x, "lo": np.array(-0.25, np.float32)})
    assert sorted(op.attrs["func"] for op in _ops(net, "Binary")) == ["max", "min", "min"]


def test_scalar_results_keep_rank_zero():
    """A 0-d constant becomes a [1] Params in xir; a 0-d result still comes out 0-d
    (DynamicQuantizeLinear's expanded form: Max(ReduceMax(x), 0))."""
    model = _model([helper.make_node("Max", ["x", "zero"], ["y"]),
                    helper.make_node("Less", ["x", "zero"], ["n"])],
                   [_vi("x", [])], [_vi("y", []), _vi("n", [], np.bool_)],
                   [("zero", np.array(0.0, np.float32))])
    for v in (-1.5, 2.0):
        _check(model, {"x": np.array(v, np.float32)})

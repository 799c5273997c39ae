"""The optimize stage's affine passes: constant per-channel Multiply / Add and BatchNorm2d
chains merge into one affine, fold into the convolution before them, or become a depthwise 1x1
convolution (which the NPUs run); the float results stay those of the original network."""

from __future__ import annotations

import numpy as np
import pytest

import xir
from xcompile.passes import optimize
from xrt import HostDevice, Session, Tensor


def _run(net, x):
    from host_backend import HostBackend

    s = Session.Create([HostBackend], net.view(0), [HostDevice.Default()])
    s.apply()
    out = [np.asarray(t).copy() for t in s.forward([Tensor(x)])]
    s.close()
    return out


def _types(net):
    return [op.op_type for op in net.ops if op.op_type not in ("Input", "Output")]


@pytest.fixture
def rng():
    return np.random.default_rng(5)


def _bn(b, x, rng, c):
    return b.batch_norm2d(x, rng.uniform(0.5, 1.5, c).astype(np.float32),
                          rng.normal(0, 0.2, c).astype(np.float32),
                          rng.normal(0, 0.2, c).astype(np.float32),
                          rng.uniform(0.5, 1.5, c).astype(np.float32), epsilon=1e-3)


def test_affine_chain_after_a_concat_becomes_one_depthwise_conv(rng):
    """DenseNet's pattern as Caffe2 exports it: Concat -> BatchNorm -> Mul(scale) -> Add(bias)
    -> Relu. No convolution to fold into: one depthwise 1x1 Conv2d with the Relu folded."""
    b = xir.NetworkBuilder("dense")
    x = b.input([1, 6, 5, 3], layout="NHWC")
    c1 = b.conv2d(x, rng.normal(0, 0.5, (1, 1, 3, 4)).astype(np.float32))
    cat = b.concat(c1, x, axis=3)
    y = _bn(b, cat, rng, 7)
    y = b.multiply(y, rng.uniform(0.5, 2, (1, 1, 1, 7)).astype(np.float32))
    y = b.add(y, rng.normal(0, 0.3, (7,)).astype(np.float32))
    y = b.relu(y)
    b.output(b.conv2d(y, rng.normal(0, 0.5, (1, 1, 7, 2)).astype(np.float32)))
    net = b.build()
    opt = optimize(net)
    assert _types(opt) == ["Conv2d", "Concat", "Conv2d", "Conv2d"]
    dw = opt.ops[3]
    assert dw.attrs["groups"] == 7 and dw.attrs["act"] == "relu"
    assert dw.tags["affine"] == "BatchNorm2d" and len(dw.tags["fused_op_ids"]) >= 2
    x = rng.normal(0, 1, (1, 6, 5, 3)).astype(np.float32)
    np.testing.assert_allclose(_run(opt, x)[0], _run(net, x)[0], rtol=1e-5, atol=1e-5)


def test_constant_multiply_and_add_fold_into_the_conv_before_them(rng):
    b = xir.NetworkBuilder("scale")
    x = b.input([1, 4, 4, 2], layout="NHWC")
    y = b.conv2d(x, rng.normal(0, 0.5, (3, 3, 2, 5)).astype(np.float32),
                 rng.normal(0, 0.1, 5).astype(np.float32), pad_top=1, pad_bottom=1,
                 pad_left=1, pad_right=1)
    y = b.multiply(y, np.float32(0.25) * np.ones((1, 1, 1, 5), np.float32))
    y = b.add(y, rng.normal(0, 0.3, (1, 1, 1, 5)).astype(np.float32))
    b.output(y)
    net = b.build()
    opt = optimize(net)
    assert _types(opt) == ["Conv2d"]
    x = rng.normal(0, 1, (1, 4, 4, 2)).astype(np.float32)
    np.testing.assert_allclose(_run(opt, x)[0], _run(net, x)[0], rtol=1e-5, atol=1e-5)


def test_feature_map_and_spatial_operands_stay_elementwise(rng):
    """A Multiply by another feature map (a squeeze-excite gate) or by a constant that varies
    over H and W is no per-channel affine."""
    b = xir.NetworkBuilder("gate")
    x = b.input([1, 4, 4, 3], layout="NHWC")
    g = b.sigmoid(b.avg_pool2d(x, is_global=True))
    y = b.multiply(x, g)
    y = b.add(y, rng.normal(0, 1, (1, 4, 4, 3)).astype(np.float32))
    b.output(y)
    assert _types(optimize(b.build())) == ["AvgPool2d", "Sigmoid", "Multiply", "Add"]


@pytest.mark.parametrize("assoc", ["x*r/6", "x*(r/6)", "(r/6)*x"])
def test_decomposed_hardswish_becomes_one_op(rng, assoc):
    """HardSwish as PaddlePaddle and torch exporters write it, ``x * clip(x + 3, 0, 6) / 6``
    (the Clip imports as a Relu bounded at 6, the division as a Multiply by 1/6)."""
    b = xir.NetworkBuilder("hswish")
    x = b.input([1, 5, 4, 3], layout="NHWC")
    c = b.conv2d(x, rng.normal(0, 1, (1, 1, 3, 3)).astype(np.float32))
    r = b.relu(b.add(c, np.array([3.0], np.float32)), max_value=6.0)
    sixth = np.array([1 / 6], np.float32)
    if assoc == "x*r/6":
        y = b.multiply(b.multiply(c, r), sixth)
    elif assoc == "x*(r/6)":
        y = b.multiply(c, b.multiply(r, sixth))
    else:
        y = b.multiply(b.multiply(r, sixth), c)
    b.output(y)
    net = b.build()
    opt = optimize(net)
    assert _types(opt) == ["Conv2d", "Hardswish"]
    x = rng.normal(0, 2, (1, 5, 4, 3)).astype(np.float32)
    np.testing.assert_allclose(_run(opt, x)[0], _run(net, x)[0], rtol=1e-5, atol=1e-5)


def _onnx_model(nodes, inits, shape, opset=13):
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _ort(model, x):
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def _gelu_products(order: str) -> list:
    """GELU's final products, ``x * a * 0.5`` in either grouping (a = 1 + erf or 1 + tanh)."""
    from onnx import helper

    if order == "(x*a)*0.5":
        return [helper.make_node("Mul", ["x", "a"], ["m"]),
                helper.make_node("Mul", ["m", "half"], ["y"])]
    return [helper.make_node("Mul", ["x", "half"], ["h"]),
            helper.make_node("Mul", ["h", "a"], ["y"])]


@pytest.mark.parametrize("order", ["(x*a)*0.5", "(x*0.5)*a"])
def test_decomposed_gelu_from_onnx_becomes_one_op(rng, order):
    """GELU as torch.onnx writes it below opset 20: Div(x, sqrt 2) -> Erf -> Add(1) ->
    Mul(x) -> Mul(0.5); it imports as one Gelu op with onnxruntime's results."""
    from onnx import helper

    from xcompile.frontend import import_onnx

    c = {"sq2": np.array(2 ** 0.5, np.float32), "one": np.array(1.0, np.float32),
         "half": np.array(0.5, np.float32)}
    nodes = [helper.make_node("Div", ["x", "sq2"], ["d"]),
             helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["a"])]
    nodes += _gelu_products(order)
    net = import_onnx(_onnx_model(nodes, c, (2, 7, 16), opset=17))
    opt = optimize(net)
    assert _types(opt) == ["Gelu"]
    x = rng.normal(0, 2, (2, 7, 16)).astype(np.float32)
    np.testing.assert_allclose(_run(opt, x)[0], _run(net, x)[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("affine", [True, False])
def test_decomposed_layernorm_from_onnx_becomes_one_op(rng, affine):
    """LayerNorm as paddle2onnx and older torch.onnx write it: ReduceMean, Sub, Pow(2),
    ReduceMean, Add(eps), Sqrt, Div, then Mul(gamma), Add(beta)."""
    from onnx import helper

    from xcompile.frontend import import_onnx

    c = {"two": np.array(2.0, np.float32), "eps": np.array(1e-5, np.float32),
         "g": rng.uniform(0.5, 1.5, 16).astype(np.float32),
         "b": rng.normal(0, 0.1, 16).astype(np.float32)}
    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], axes=[-1]),
             helper.make_node("Sub", ["x", "m"], ["d"]),
             helper.make_node("Pow", ["d", "two"], ["p"]),
             helper.make_node("ReduceMean", ["p"], ["v"], axes=[-1]),
             helper.make_node("Add", ["v", "eps"], ["a"]),
             helper.make_node("Sqrt", ["a"], ["s"]),
             helper.make_node("Div", ["d", "s"], ["n" if affine else "y"])]
    if affine:
        nodes += [helper.make_node("Mul", ["n", "g"], ["t"]),
                  helper.make_node("Add", ["t", "b"], ["y"])]
    net = import_onnx(_onnx_model(nodes, c, (1, 40, 16)))
    opt = optimize(net)
    assert _types(opt) == ["LayerNorm"]
    x = rng.normal(0, 2, (1, 40, 16)).astype(np.float32)
    np.testing.assert_allclose(_run(opt, x)[0], _run(net, x)[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("layout", ["nchw", "last_axis"])
def test_channel_shuffle_becomes_one_op(rng, layout):
    """ShuffleNet's Reshape(g, C/g) -> Transpose -> Reshape, on an NCHW model (the importer's
    layout Transposes around it fold away too) and on the last axis: one ChannelShuffle with
    onnxruntime's results."""
    from onnx import helper

    from xcompile.frontend import import_onnx

    g, c = 3, 12
    if layout == "nchw":
        shape, split, perm = (1, c, 5, 4), [1, g, c // g, 5, 4], [0, 2, 1, 3, 4]
        inits = {"w": rng.normal(0, 0.5, (c, c, 1, 1)).astype(np.float32)}
        nodes = [helper.make_node("Conv", ["x", "w"], ["a"])]
    else:
        shape, split, perm = (1, 6, c), [1, 6, g, c // g], [0, 1, 3, 2]
        inits = {"w": rng.normal(0, 0.5, (c, c)).astype(np.float32)}
        nodes = [helper.make_node("MatMul", ["x", "w"], ["a"])]
    inits.update(s1=np.array(split, np.int64), s2=np.array(shape, np.int64))
    nodes += [helper.make_node("Reshape", ["a", "s1"], ["r"]),
              helper.make_node("Transpose", ["r"], ["t"], perm=perm),
              helper.make_node("Reshape", ["t", "s2"], ["y"])]
    model = _onnx_model(nodes, inits, shape)
    opt = optimize(import_onnx(model))
    shuffles = [op for op in opt.ops if op.op_type == "ChannelShuffle"]
    assert len(shuffles) == 1 and shuffles[0].attrs["groups"] == g
    assert "Reshape" not in _types(opt)
    x = rng.normal(0, 1, shape).astype(np.float32)
    np.testing.assert_allclose(_run(opt, x)[0], _ort(model, x), rtol=1e-5, atol=1e-5)


def test_attention_transpose_and_linear_bias_fold_into_the_matmuls(rng):
    """torch.onnx's attention: MatMul + Add(bias) for each projection, Q @ Transpose(K); the
    biases become Matmul biases and the Transpose the Matmul's transpose_b."""
    from onnx import helper

    from xcompile.frontend import import_onnx

    d = 8
    inits = {f"w{k}": rng.normal(0, 0.3, (d, d)).astype(np.float32) for k in "qk"}
    inits.update({f"b{k}": rng.normal(0, 0.3, (d,)).astype(np.float32) for k in "qk"})
    nodes = []
    for k in "qk":
        nodes += [helper.make_node("MatMul", ["x", f"w{k}"], [f"m{k}"]),
                  helper.make_node("Add", [f"m{k}", f"b{k}"], [k])]
    nodes += [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
              helper.make_node("MatMul", ["q", "kt"], ["y"])]
    model = _onnx_model(nodes, inits, (1, 5, d))
    opt = optimize(import_onnx(model))
    assert _types(opt) == ["Matmul"] * 3
    assert [len(op.inputs) for op in opt.ops[1:4]] == [3, 3, 2]
    assert opt.ops[3].attrs["transpose_b"] is True
    x = rng.normal(0, 1, (1, 5, d)).astype(np.float32)
    np.testing.assert_allclose(_run(opt, x)[0], _ort(model, x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("size", [1, 4, 5])
def test_lrn_becomes_ops_the_chips_run(rng, size):
    """LRN as x*x, a 1x1 Conv2d with a band of ones (the channel window), a Power table and
    x*d: the LRN's op_id and output value kept, float results those of the LRN kernel (even and
    odd windows, the window clipped at both channel ends)."""
    b = xir.NetworkBuilder("lrn")
    x = b.input([1, 5, 4, 7], layout="NHWC")
    y = b.op("LRN", [x], size=size, alpha=0.6, beta=0.75, bias=1.5)
    b.output(y)
    net = b.build()
    lrn = net.ops[1]
    opt = optimize(net)
    assert _types(opt) == ["Multiply", "Conv2d", "Power", "Multiply"]
    last = opt.ops[-2]
    assert last.op_id == lrn.op_id and last.outputs[0].v_id == lrn.outputs[0].v_id
    power = opt.ops[3]
    assert power.attrs == {"power": -0.75, "scale": pytest.approx(0.6 / size), "shift": 1.5}
    band = np.asarray(opt.ops[2].inputs[1].data)[0, 0]
    assert band.sum(axis=0).max() == size  # channels c - (size-1)//2 .. c + size//2
    x = rng.normal(0, 2, (1, 5, 4, 7)).astype(np.float32)
    np.testing.assert_allclose(_run(opt, x)[0], _run(net, x)[0], rtol=1e-5, atol=1e-6)


def test_power_refuses_non_finite_parameters():
    from xir.errors import FieldTypeError

    b = xir.NetworkBuilder("pow")
    x = b.input([1, 2, 2, 3], layout="NHWC")
    with pytest.raises(FieldTypeError, match="power must be a finite number"):
        b.op("Power", [x], power=float("nan"))


@pytest.mark.parametrize("cube", ["pow", "mul"])
@pytest.mark.parametrize("order", ["(x*a)*0.5", "(x*0.5)*a"])
def test_decomposed_gelu_tanh_form_becomes_one_op(rng, cube, order):
    """GELU's tanh form as torch.onnx writes approximate="tanh" below opset 20 (x**3 as Pow 3 or
    x*x*x): one Gelu(approximate="tanh") with onnxruntime's results, and the ONNX Gelu op of
    opset 20 with approximate="tanh" imports as the same op."""
    from onnx import helper

    from xcompile.frontend import import_onnx

    c = {"three": np.array(3.0, np.float32), "k": np.array(0.044715, np.float32),
         "c": np.array((2 / np.pi) ** 0.5, np.float32), "one": np.array(1.0, np.float32),
         "half": np.array(0.5, np.float32)}
    nodes = [helper.make_node("Pow", ["x", "three"], ["x3"])] if cube == "pow" else \
        [helper.make_node("Mul", ["x", "x"], ["sq"]), helper.make_node("Mul", ["sq", "x"], ["x3"])]
    nodes += [helper.make_node("Mul", ["x3", "k"], ["kx3"]),
              helper.make_node("Add", ["x", "kx3"], ["inner"]),
              helper.make_node("Mul", ["c", "inner"], ["s"]),
              helper.make_node("Tanh", ["s"], ["t"]),
              helper.make_node("Add", ["t", "one"], ["a"])]
    nodes += _gelu_products(order)
    model = _onnx_model(nodes, c, (2, 7, 16), opset=17)
    opt = optimize(import_onnx(model))
    assert _types(opt) == ["Gelu"] and opt.ops[1].attrs["approximate"] == "tanh"
    x = rng.normal(0, 2, (2, 7, 16)).astype(np.float32)
    np.testing.assert_allclose(_run(opt, x)[0], _ort(model, x), rtol=1e-4, atol=1e-5)
    gelu = _onnx_model([helper.make_node("Gelu", ["x"], ["y"], approximate="tanh")], {},
                       (2, 7, 16), opset=20)
    net = import_onnx(gelu)
    assert _types(net) == ["Gelu"] and net.ops[1].attrs["approximate"] == "tanh"
    np.testing.assert_allclose(_run(net, x)[0], _run(opt, x)[0], rtol=1e-6, atol=1e-6)

"""Pointwise ops on the chips (docs/zg330-lowering.md): element-wise Max / Min (ELTW MAX / MIN,
a clip by a constant included), the Unary table functions (LUT: abs, exp, log, reciprocal,
softplus, elu, ...), PRelu (a depthwise 1x1 CONV carrying each channel's LeakyReLU pair),
LeakyRelu (Relu with alpha) and Conv1d, bit-exact against the integer reference on the ZG330
and the Buyi, with where each op ran asserted."""

from __future__ import annotations

import numpy as np
import pytest
from npu_chip_lib import assert_bit_exact, check_quantized, compile_onnx, hard_kinds, host_types

from xir.builder import NetworkBuilder
from xir.types import INT8, INT16, INT32, QuantizedType, TensorType

CHIPS = ["zg330", "buyi"]


def _q(bits, scale):
    return QuantizedType(INT8 if bits == 8 else INT16, scale)


def _t(shape, bits, scale):
    return TensorType(_q(bits, scale), list(shape), "NHWC" if len(shape) == 4 else None)


@pytest.mark.parametrize("target", CHIPS)
@pytest.mark.parametrize("func", ["max", "min"])
@pytest.mark.parametrize("kind,bits,scales", [
    ("map", 8, (0.05, 0.02, 0.04)),
    ("map", 16, (0.001, 0.003, 0.002)),
    ("same", 8, (0.05, 0.05, 0.05)),  # equal scales: the codes compare as they are
    ("pixel", 8, (0.05, 0.08, 0.06)),  # a per-channel operand of one pixel
    ("const", 8, (0.05, 0.01, 0.05)),  # a clip by a constant
    ("batch", 8, (0.03, 0.05, 0.04)),  # [2, ...] against [2, 1, 1, C]: one pixel per item
])
def test_binary_max_min_bit_exact(target, func, kind, bits, scales):
    s_a, s_b, s_y = scales
    n = 2 if kind == "batch" else 1
    shape = (n, 5, 6, 20)
    b = NetworkBuilder("mm")
    x = b.input(list(shape), _q(bits, s_a), "NHWC", "x")
    if kind == "const":
        other = b.params(np.array([[[[17]]]], np.int8), "k", "NHWC", _q(8, s_b))
    else:
        oshape = (n, 1, 1, 20) if kind in ("pixel", "batch") else shape
        other = b.input(list(oshape), _q(bits, s_b), "NHWC", "y")
    y = b.op("Binary", [x, other], out_types=[_t(shape, bits, s_y)], func=func)
    b.output(y)
    net = b.build()
    z = check_quantized(net, target, seed=len(kind) + len(func))
    assert "Binary" not in host_types(z, target)
    assert hard_kinds(z, "Binary", net) == [["eltw"] * (n if kind == "batch" else 1)]


@pytest.mark.parametrize("target", CHIPS)
@pytest.mark.parametrize("func,attrs", [("abs", {}), ("neg", {}), ("exp", {}), ("log", {}),
                                        ("reciprocal", {}), ("softplus", {}),
                                        ("elu", {"alpha": 0.7}), ("mish", {})])
def test_unary_tables_bit_exact(target, func, attrs):
    shape = (1, 4, 5, 12)
    b = NetworkBuilder("un")
    x = b.input(list(shape), _q(8, 0.04), "NHWC", "x")
    b.output(b.op("Unary", [x], out_types=[_t(shape, 8, 0.03)], func=func, **attrs))
    net = b.build()
    z = check_quantized(net, target, seed=3)
    assert hard_kinds(z, "Unary", net) == [["lut"]]


@pytest.mark.parametrize("target", CHIPS)
@pytest.mark.parametrize("c,bits", [(1, 8), (20, 8), (40, 16)])
def test_prelu_per_channel_bit_exact(target, c, bits):
    shape = (2, 3, 4, c)
    b = NetworkBuilder("prelu")
    x = b.input(list(shape), _q(bits, 0.02), "NHWC", "x")
    slope = np.random.default_rng(c).uniform(-0.5, 0.9, (1, 1, 1, c)).astype(np.float32)
    sp = b.params(slope, "slope", "NHWC")
    b.output(b.op("PRelu", [x, sp], out_types=[_t(shape, bits, 0.015)]))
    net = b.build()
    z = check_quantized(net, target, seed=c)
    assert hard_kinds(z, "PRelu", net) == [["conv"]]


def _audio_model():
    """A speech CNN as tf2onnx / torch.onnx write it on a [N, C, L] signal: Conv1d,
    LeakyRelu, MaxPool1d, PRelu, Abs, Exp(Neg), Min and Max with constants (clips), Softplus,
    Log, Sqrt, Reciprocal, Elu, a 1x1 Conv1d."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits, nodes = [], []

    def c(a):
        name = f"c{len(inits)}"
        inits.append(numpy_helper.from_array(np.asarray(a, np.float32), name))
        return name

    def op(t, ins, **kw):
        out = f"{t.lower()}{len(nodes)}"
        nodes.append(helper.make_node(t, ins, [out], **kw))
        return out

    y = op("Conv", ["x", c(rng.normal(0, 0.3, (16, 4, 5))), c(rng.normal(0, .1, 16))],
           pads=[2, 2])
    y = op("MaxPool", [op("LeakyRelu", [y], alpha=0.1)], kernel_shape=[2], strides=[2])
    p = op("PRelu", [y, c(rng.uniform(0.05, 0.3, (16, 1)))])
    e = op("Exp", [op("Neg", [op("Abs", [p])])])
    m = op("Max", [op("Min", [e, c(np.array(0.7))]), c(np.array(0.05))])
    t = op("Log", [op("Softplus", [op("Max", [m, p])])])
    t = op("Sqrt", [op("Relu", [t])])
    t = op("Elu", [op("Reciprocal", [op("Add", [t, c(np.array(1.0))])])], alpha=0.5)
    out = op("Conv", [t, c(rng.normal(0, 0.3, (8, 16, 1)))])
    g = helper.make_graph(nodes, "audio",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 64])],
                          [helper.make_tensor_value_info(out, TensorProto.FLOAT, ["N", 8, 32])],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("target", CHIPS)
@pytest.mark.parametrize("n", [1, 2])
def test_audio_cnn_pointwise_ops_run_on_the_chip(target, n):
    c = compile_onnx(_audio_model(), (n, 4, 64), target)
    on = c.on_chip()
    # Conv1d as Conv2d over a unit H axis, LeakyRelu as Relu(alpha), the NCL<->NLC transposes
    for t in ("Conv2d", "MaxPool2d", "PRelu", "Unary", "Binary", "Transpose", "Add"):
        assert t in on, (t, c.host_ops)
    funcs = {op.attrs.get("func") for op in c.adapted.ops if op.op_type in ("Unary", "Binary")
             and op.op_id in {i for h in c.lowered.ops if h.op_type == "HardOp"
                              for i in h.origin_ops_id}}
    assert {"abs", "exp", "log", "softplus", "reciprocal", "elu", "max", "min"} <= funcs
    # at most Sqrt stays on the host, because the quantizer keeps it float (no table yet)
    assert c.host_types() <= {"Sqrt"}, c.host_ops
    assert all(r.startswith("float op") for t, r in c.host_ops.values() if t == "Sqrt")
    x = np.random.default_rng(9).normal(0, 1, (n, 4, 64)).astype(np.float32)
    assert_bit_exact(c, [x])


@pytest.mark.parametrize("target", CHIPS)
@pytest.mark.parametrize("shape,axes,keep", [
    ((1, 6, 7, 20), [1, 2], True), ((2, 6, 7, 20), [1, 2], False),
    ((2, 6, 7, 20), [2], True), ((2, 6, 7, 20), [1], False),
    ((1, 5, 6, 40), [3], True), ((3, 5, 6, 40), [-1], False),
    ((2, 4, 5, 33), [3], True),
    ((1, 65, 16), [0, 1, 2], True),  # a mel front end's max over everything
    ((1, 6, 7, 20), [1, 2, 3], True), ((2, 6, 7, 20), [2, 3], True),
    ((3, 9, 12), [1], False), ((3, 9, 12), [2], True), ((9, 12), [1], True), ((9, 12), [0], True),
])
def test_reduce_max_over_space_or_channels_bit_exact(target, shape, axes, keep):
    """Reduce max (the integer reference moves codes) as POOL MAX over the reduced spatial
    axes, or over the channels after a COPY PERMUTE that lays them out as a row."""
    r = len(shape)
    red = [a % r for a in axes]
    out = [1 if i in red else d for i, d in enumerate(shape)]
    if not keep:
        out = [d for i, d in enumerate(shape) if i not in red]
    b = NetworkBuilder("rmax")
    x = b.input(list(shape), _q(8, 0.03), "NHWC" if r == 4 else None, "x")
    s = b.op("Sigmoid", [x], out_types=[_t(shape, 8, 1 / 250)])
    rd = b.op("Reduce", [s], out_types=[_t(out, 8, 1 / 250)], func="max", axes=axes,
             keepdims=keep)
    b.output(b.op("Tanh", [rd], out_types=[_t(out, 8, 1 / 120)]))
    net = b.build()
    z = check_quantized(net, target, seed=len(out))
    assert "Reduce" not in host_types(z, target)
    kinds = [k for ks in hard_kinds(z, "Reduce", net) for k in ks if k != "lut"]
    assert "maxpool" in kinds and (("copy" in kinds) == (r - 1 in red))


@pytest.mark.parametrize("target", CHIPS)
def test_gate_matmul_of_a_recurrent_layer(target):
    """The gate products of an LSTM as the recurrent importer emits them: a plain Matmul of the
    [T * B, I] inputs by the [I, 4H] weights, with the bias: one MATMUL layer."""
    t_b, i, h4 = 6 * 2, 20, 4 * 16
    rng = np.random.default_rng(1)
    b = NetworkBuilder("gates")
    x = b.input([t_b, i], _q(8, 0.04), None, "x")
    s_w = rng.uniform(0.002, 0.01, h4)
    w = b.params(rng.integers(-127, 128, (i, h4)).astype(np.int8), "w", None,
                 QuantizedType(INT8, s_w, axis=1))
    bias = b.params(rng.integers(-900, 900, h4).astype(np.int32), "b", None,
                    QuantizedType(INT32, 0.04 * s_w, axis=0))
    b.output(b.op("Matmul", [x, w, bias], out_types=[_t((t_b, h4), 8, 0.05)]))
    net = b.build()
    z = check_quantized(net, target, seed=2)
    assert hard_kinds(z, "Matmul", net) == [["matmul"]]


@pytest.mark.parametrize("target", CHIPS)
@pytest.mark.parametrize("op_type,shape,oshape,swap", [
    ("Sub", (1, 65, 16), (1, 1, 1), False),  # melspec: x - max(x)
    ("Sub", (1, 65, 16), (1, 1, 1), True),  # max(x) - x: the scalar first
    ("Multiply", (2, 5, 6, 20), (2, 1, 1, 1), False),  # one scalar per item
    ("Add", (1, 5, 6, 20), (1, 5, 6, 1), False),  # one value per pixel
    ("Binary", (2, 5, 6, 24), (2, 5, 6, 1), True),  # max against a per-pixel value
])
def test_one_channel_operand_spread_over_the_channels(target, op_type, shape, oshape, swap):
    """A one-channel operand (a per-item or per-pixel scalar) is spread over the channels by a
    1x1 CONV of weight 1, then the ELTW reads it as a full map or one pixel."""
    b = NetworkBuilder("spread")
    x = b.input(list(shape), _q(8, 0.04), "NHWC" if len(shape) == 4 else None, "x")
    s = b.input(list(oshape), _q(8, 0.03), "NHWC" if len(shape) == 4 else None, "s")
    ins = [s, x] if swap else [x, s]
    attrs = {"func": "max"} if op_type == "Binary" else {}
    b.output(b.op(op_type, ins, out_types=[_t(shape, 8, 0.05)], **attrs))
    net = b.build()
    z = check_quantized(net, target, seed=len(shape))
    assert op_type not in host_types(z, target)
    kinds = hard_kinds(z, op_type, net)
    assert len(kinds) == 1 and kinds[0].count("conv") == kinds[0].count("eltw") >= 1

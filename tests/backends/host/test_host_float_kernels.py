"""HostBackend float32 kernels against onnxruntime (one-node ONNX models) or plain numpy.

Feature maps are NHWC and conv weights HWIO on our side; ONNX gets NCHW / OIHW copies.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import xir
from host_backend.ops import FLOAT_KERNELS

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

OPSET = 17
IR_VERSION = 10  # onnx 1.23 writes a newer one that onnxruntime 1.31 refuses


# --------------------------------------------------------------------------- helpers


def run_onnx(
    nodes: list,
    feeds: dict[str, np.ndarray],
    outputs: list[str],
    initializers: dict[str, np.ndarray] | None = None,
    opset: int = OPSET,
) -> list[np.ndarray]:
    """Run a small ONNX graph on onnxruntime, single-threaded."""
    inputs = [
        helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(arr.dtype), list(arr.shape)
        )
        for name, arr in feeds.items()
    ]
    outs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in outputs]
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in (initializers or {}).items()]
    graph = helper.make_graph(nodes, "test", inputs, outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = max(IR_VERSION, 10) if opset >= 21 else IR_VERSION
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return session.run(outputs, feeds)


def run_kernel(op: str, inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """Call a kernel and check the contract: inputs untouched, outputs fresh float32."""
    saved = [np.array(x, copy=True) for x in inputs]
    outs = FLOAT_KERNELS[op](inputs, attrs)
    assert isinstance(outs, list)
    for x, s in zip(inputs, saved):
        np.testing.assert_array_equal(x, s)
    for y in outs:
        assert y.dtype == np.float32
        assert y.flags.c_contiguous
        assert not any(np.shares_memory(y, x) for x in inputs)
    return outs


def assert_close(got: np.ndarray, ref: np.ndarray) -> None:
    assert got.shape == ref.shape, (got.shape, ref.shape)
    scale = float(np.abs(ref).max()) if ref.size else 0.0
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * max(scale, 1e-30))


def nchw(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))


def nhwc(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1))


def randn(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


def test_registry_covers_every_kernel_op() -> None:
    expected = {
        "Conv2d", "ConvTranspose2d", "Matmul", "Add", "Sub", "Multiply", "Div", "Sqrt",
        "ReduceMean", "Concat", "Split",
        "Slice", "Reshape", "Transpose", "ChannelShuffle", "Squeeze", "Unsqueeze", "Pad",
        "MaxPool2d",
        "AvgPool2d", "Relu", "Sigmoid", "Tanh", "Silu", "Hardswish", "Gelu", "Erf", "Power",
        "Softmax", "Resize",
        "Upsample",
        "BatchNorm2d", "LayerNorm", "GroupNorm", "LRN", "AlignAxis", "PruneAxis",
        # the op families of the whole ONNX op set
        "Unary", "Binary", "Where", "PRelu",
        "Reduce", "ArgReduce", "TopK", "CumSum", "CumProd", "Hardmax", "LogSoftmax",
        "Expand", "Tile", "Gather", "GatherElements", "GatherND", "ScatterElements",
        "ScatterND", "OneHot", "Range", "Trilu", "ReverseSequence", "Convert", "Col2Im",
        "LSTMRecurrence", "GRURecurrence", "RNNRecurrence", "OnnxGraph",
    }  # fmt: skip
    assert set(FLOAT_KERNELS) == expected
    # every registered op but the network's edges and HardOp has a float kernel
    assert set(xir.OP_REGISTRY) - set(FLOAT_KERNELS) == {"Input", "Output", "HardOp", "Cast"}
    assert all(callable(k) for k in FLOAT_KERNELS.values())


# --------------------------------------------------------------------------- Conv2d

# (n, h, w, cin, cout, kh, kw, (sh, sw), (pt, pb, pl, pr), (dh, dw), groups, bias)
CONV_CASES = {
    "3x3": (1, 9, 10, 8, 16, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1, True),
    "3x3-s2-asym": (2, 11, 9, 6, 8, 3, 3, (2, 2), (0, 1, 2, 1), (1, 1), 1, True),
    "3x3-dil2": (1, 12, 12, 4, 8, 3, 3, (1, 1), (2, 2, 2, 2), (2, 2), 1, False),
    "5x3-s21-d12": (1, 13, 11, 5, 7, 5, 3, (2, 1), (1, 2, 0, 3), (1, 2), 1, True),
    "7x7-stem": (1, 32, 32, 3, 16, 7, 7, (2, 2), (3, 3, 3, 3), (1, 1), 1, True),
    "1x1": (2, 7, 5, 16, 24, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 1, True),
    "1x1-s2": (1, 9, 8, 16, 12, 1, 1, (2, 2), (0, 0, 0, 0), (1, 1), 1, False),
    "1x1-pad": (1, 6, 6, 8, 4, 1, 1, (1, 1), (1, 0, 0, 2), (1, 1), 1, True),
    "1x1-g2": (1, 6, 6, 8, 12, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 2, True),
    "3x3-g2": (1, 10, 10, 8, 6, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 2, True),
    "3x3-g4-s2": (2, 9, 9, 8, 8, 3, 3, (2, 2), (1, 0, 0, 1), (1, 1), 4, False),
    "dw3x3": (1, 10, 10, 16, 16, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 16, True),
    "dw3x3-s2-asym": (2, 11, 10, 8, 8, 3, 3, (2, 2), (0, 1, 1, 0), (1, 1), 8, True),
    "dw5x5-dil2": (1, 14, 14, 6, 6, 5, 5, (1, 1), (4, 4, 4, 4), (2, 2), 6, False),
    "dw-mult2": (1, 8, 8, 4, 8, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 4, True),
}


def conv_attrs(stride, pads, dil, groups) -> dict:
    return {
        "stride_height": stride[0], "stride_width": stride[1],
        "pad_top": pads[0], "pad_bottom": pads[1], "pad_left": pads[2], "pad_right": pads[3],
        "dilation_height": dil[0], "dilation_width": dil[1], "groups": groups,
    }  # fmt: skip


def check_conv(rng, n, h, w, cin, cout, kh, kw, stride, pads, dil, groups, bias) -> None:
    x = randn(rng, n, h, w, cin)
    wt = randn(rng, kh, kw, cin // groups, cout)
    b = randn(rng, cout)
    ins = [x, wt] + ([b] if bias else [])
    got = run_kernel("Conv2d", ins, conv_attrs(stride, pads, dil, groups))[0]
    onnx_ins = ["x", "w"] + (["b"] if bias else [])
    node = helper.make_node(
        "Conv", onnx_ins, ["y"], kernel_shape=[kh, kw], strides=list(stride),
        pads=[pads[0], pads[2], pads[1], pads[3]], dilations=list(dil), group=groups,
    )  # fmt: skip
    inits = {"w": np.ascontiguousarray(wt.transpose(3, 2, 0, 1))}
    if bias:
        inits["b"] = b
    (ref,) = run_onnx([node], {"x": nchw(x)}, ["y"], inits)
    assert_close(got, nhwc(ref))


@pytest.mark.parametrize("case", CONV_CASES.values(), ids=CONV_CASES.keys())
def test_conv2d(rng, case) -> None:
    check_conv(rng, *case)


@given(
    hw=st.tuples(st.integers(3, 12), st.integers(3, 12)),
    k=st.tuples(st.integers(1, 4), st.integers(1, 4)),
    stride=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    pads=st.tuples(*[st.integers(0, 2)] * 4),
    dil=st.tuples(st.integers(1, 2), st.integers(1, 2)),
    groups=st.sampled_from([1, 2, 3]),
    seed=st.integers(0, 2**16),
)
@settings(max_examples=30, deadline=None)
def test_conv2d_random_geometry(hw, k, stride, pads, dil, groups, seed) -> None:
    h, w = hw
    kh, kw = k
    # Keep the padded input at least as large as the dilated kernel.
    if (
        h + pads[0] + pads[1] < dil[0] * (kh - 1) + 1
        or w + pads[2] + pads[3] < dil[1] * (kw - 1) + 1
    ):
        return
    # ONNX requires pads smaller than the kernel's extent only for pools; convs accept any.
    check_conv(
        np.random.default_rng(seed), 1, h, w, 2 * groups, 3 * groups, kh, kw,
        stride, pads, dil, groups, True,
    )  # fmt: skip


def test_conv2d_defaults(rng) -> None:
    x, w = randn(rng, 1, 5, 5, 3), randn(rng, 3, 3, 3, 4)
    got = run_kernel("Conv2d", [x, w], {})[0]
    explicit = run_kernel("Conv2d", [x, w], conv_attrs((1, 1), (0, 0, 0, 0), (1, 1), 1))[0]
    np.testing.assert_array_equal(got, explicit)
    assert got.shape == (1, 3, 3, 4)


@pytest.mark.parametrize(
    "mode, np_mode", [("reflect", "reflect"), ("replicate", "edge"), ("circular", "wrap")]
)
def test_conv2d_padding_modes(rng, mode, np_mode) -> None:
    """Non-zero padding modes equal np.pad followed by an unpadded convolution."""
    x, w, b = randn(rng, 1, 6, 7, 3), randn(rng, 3, 3, 3, 5), randn(rng, 5)
    got = run_kernel(
        "Conv2d", [x, w, b], conv_attrs((1, 2), (1, 2, 2, 1), (1, 1), 1) | {"padding_mode": mode}
    )[0]
    xp = np.pad(x, ((0, 0), (1, 2), (2, 1), (0, 0)), mode=np_mode)
    ref = run_kernel("Conv2d", [xp, w, b], conv_attrs((1, 2), (0, 0, 0, 0), (1, 1), 1))[0]
    assert_close(got, ref)


# --------------------------------------------------------------------------- ConvTranspose2d

# (n, h, w, cin, cout, kh, kw, (sh, sw), (pt, pb, pl, pr), (dh, dw), groups, (oph, opw), bias)
DECONV_CASES = {
    "k3-s2-op1": (1, 5, 6, 4, 6, 3, 3, (2, 2), (1, 1, 1, 1), (1, 1), 1, (1, 1), True),
    "k4-s2-p1": (2, 4, 4, 8, 4, 4, 4, (2, 2), (1, 1, 1, 1), (1, 1), 1, (0, 0), True),
    "k3-s1": (1, 6, 5, 3, 5, 3, 3, (1, 1), (0, 0, 0, 0), (1, 1), 1, (0, 0), False),
    "k2-s3": (1, 4, 3, 4, 4, 2, 2, (3, 3), (0, 0, 0, 0), (1, 1), 1, (2, 1), True),
    "k3-s2-asym": (1, 5, 5, 4, 3, 3, 3, (2, 1), (0, 2, 1, 0), (1, 1), 1, (1, 0), True),
    "k3-dil2": (1, 5, 5, 3, 4, 3, 3, (2, 2), (1, 1, 1, 1), (2, 2), 1, (1, 1), True),
    "g2": (1, 5, 5, 8, 6, 3, 3, (2, 2), (1, 1, 1, 1), (1, 1), 2, (1, 1), True),
    "depthwise": (1, 5, 5, 4, 4, 3, 3, (2, 2), (1, 1, 1, 1), (1, 1), 4, (0, 0), False),
}


@pytest.mark.parametrize("case", DECONV_CASES.values(), ids=DECONV_CASES.keys())
def test_conv_transpose2d(rng, case) -> None:
    n, h, w, cin, cout, kh, kw, stride, pads, dil, groups, opad, bias = case
    x = randn(rng, n, h, w, cin)
    wt = randn(rng, kh, kw, cin, cout // groups)
    b = randn(rng, cout)
    attrs = conv_attrs(stride, pads, dil, groups)
    attrs.update(output_pad_height=opad[0], output_pad_width=opad[1])
    got = run_kernel("ConvTranspose2d", [x, wt] + ([b] if bias else []), attrs)[0]
    oh = (h - 1) * stride[0] - pads[0] - pads[1] + dil[0] * (kh - 1) + 1 + opad[0]
    ow = (w - 1) * stride[1] - pads[2] - pads[3] + dil[1] * (kw - 1) + 1 + opad[1]
    assert got.shape == (n, oh, ow, cout)
    node = helper.make_node(
        "ConvTranspose", ["x", "w"] + (["b"] if bias else []), ["y"],
        kernel_shape=[kh, kw], strides=list(stride), pads=[pads[0], pads[2], pads[1], pads[3]],
        dilations=list(dil), group=groups, output_padding=list(opad),
    )  # fmt: skip
    inits = {"w": np.ascontiguousarray(wt.transpose(2, 3, 0, 1))}
    if bias:
        inits["b"] = b
    (ref,) = run_onnx([node], {"x": nchw(x)}, ["y"], inits)
    assert_close(got, nhwc(ref))


# --------------------------------------------------------------------------- Matmul

MATMUL_CASES = {
    "2d": ((4, 5), (5, 3), False, False, False),
    "bias": ((4, 5), (5, 3), False, False, True),
    "batch-bcast-b": ((2, 3, 4, 5), (5, 6), False, False, True),
    "batch-bcast-1": ((1, 4, 5), (3, 5, 6), False, False, False),
    "batch-bcast-both": ((2, 1, 4, 5), (1, 3, 5, 2), False, False, False),
    "ta": ((5, 4), (5, 3), True, False, False),
    "tb": ((2, 4, 5), (3, 5), False, True, True),
    "ta-tb-batch": ((3, 5, 4), (3, 6, 5), True, True, True),
    "vector-b": ((3, 4, 5), (5,), False, False, False),
}


@pytest.mark.parametrize("case", MATMUL_CASES.values(), ids=MATMUL_CASES.keys())
def test_matmul(rng, case) -> None:
    a_shape, b_shape, ta, tb, bias = case
    a, b = randn(rng, *a_shape), randn(rng, *b_shape)
    ins = [a, b]
    n_out = (b_shape if not tb else b_shape[:-2] + b_shape[-1:] + b_shape[-2:-1])[-1]
    if bias:
        ins.append(randn(rng, n_out))
    got = run_kernel("Matmul", ins, {"transpose_a": ta, "transpose_b": tb})[0]
    feeds = {
        "a": np.ascontiguousarray(np.swapaxes(a, -1, -2) if ta else a),
        "b": np.ascontiguousarray(np.swapaxes(b, -1, -2) if tb else b),
    }
    nodes = [helper.make_node("MatMul", ["a", "b"], ["m" if bias else "y"])]
    inits = {}
    if bias:
        nodes.append(helper.make_node("Add", ["m", "bias"], ["y"]))
        inits["bias"] = ins[2]
    (ref,) = run_onnx(nodes, feeds, ["y"], inits)
    assert_close(got, ref)


# --------------------------------------------------------------------------- element-wise


@pytest.mark.parametrize("op, onnx_op", [("Add", "Add"), ("Sub", "Sub"), ("Multiply", "Mul")])
@pytest.mark.parametrize(
    "shapes", [((2, 3, 4, 5), (2, 3, 4, 5)), ((2, 3, 4, 5), (5,)), ((1, 3, 1, 5), (2, 1, 4, 1))]
)
def test_elementwise(rng, op, onnx_op, shapes) -> None:
    a, b = randn(rng, *shapes[0]), randn(rng, *shapes[1])
    got = run_kernel(op, [a, b], {})[0]
    (ref,) = run_onnx([helper.make_node(onnx_op, ["a", "b"], ["y"])], {"a": a, "b": b}, ["y"])
    assert_close(got, ref)


# --------------------------------------------------------------------------- activations


def activation_input(rng) -> np.ndarray:
    x = randn(rng, 2, 5, 6, 7, scale=4.0)
    x.flat[:4] = [-200.0, 200.0, 0.0, -3.0]  # saturating values must not warn
    return x


RELU_CASES = {
    "relu": ({}, [("Relu", {})]),
    "leaky": ({"alpha": 0.1}, [("LeakyRelu", {"alpha": 0.1})]),
    "relu6": ({"max_value": 6.0}, [("Relu", {}), ("Clip", {})]),
    "leaky-clip": ({"alpha": 0.2, "max_value": 3.0}, [("LeakyRelu", {"alpha": 0.2}), ("Clip", {})]),
    "thresholded": ({"threshold": 1.5}, [("ThresholdedRelu", {"alpha": 1.5})]),
}


@pytest.mark.parametrize("case", RELU_CASES.values(), ids=RELU_CASES.keys())
def test_relu(rng, case) -> None:
    attrs, chain = case
    x = activation_input(rng)
    got = run_kernel("Relu", [x], attrs)[0]
    nodes, inits, cur = [], {}, "x"
    for i, (op, kw) in enumerate(chain):
        out = f"t{i}"
        if op == "Clip":
            inits.update(lo=np.float32(-np.inf), hi=np.float32(attrs["max_value"]))
            nodes.append(helper.make_node("Clip", [cur, "lo", "hi"], [out]))
        else:
            nodes.append(helper.make_node(op, [cur], [out], **kw))
        cur = out
    (ref,) = run_onnx(nodes, {"x": x}, [cur], inits)
    assert_close(got, ref)


def test_relu_threshold_with_alpha(rng) -> None:
    """No ONNX twin: y = x if x >= t else alpha*(x - t), then min(y, max_value)."""
    x = activation_input(rng)
    attrs = {"alpha": 0.25, "threshold": -1.0, "max_value": 4.0}
    got = run_kernel("Relu", [x], attrs)[0]
    ref = np.minimum(np.where(x >= -1.0, x, 0.25 * (x + 1.0)), 4.0).astype(np.float32)
    assert_close(got, ref)


# Folded activations (act, act_alpha, act_max) on Conv2d, ConvTranspose2d, Matmul and Add.
FOLDED_ACTS = {
    "none": {"act": "none"},
    "relu": {"act": "relu"},
    "relu6": {"act": "relu", "act_max": 6.0},
    "leaky": {"act": "relu", "act_alpha": 0.1},
    "leaky-clip": {"act": "relu", "act_alpha": 0.2, "act_max": 1.5},
}


def onnx_act(act: dict, src: str, out: str) -> tuple[list, dict]:
    """ONNX nodes for a folded activation: (Leaky)Relu then Clip, ending in ``out``."""
    if act.get("act", "none") == "none":
        return [helper.make_node("Identity", [src], [out])], {}
    alpha, hi = act.get("act_alpha", 0.0), act.get("act_max", np.inf)
    relu = helper.make_node("LeakyRelu", [src], ["r"], alpha=alpha) if alpha else (
        helper.make_node("Relu", [src], ["r"]))  # fmt: skip
    clip = helper.make_node("Clip", ["r", "lo", "hi"], [out])
    return [relu, clip], {"lo": np.float32(-np.inf), "hi": np.float32(hi)}


@pytest.mark.parametrize("act", FOLDED_ACTS.values(), ids=FOLDED_ACTS.keys())
@pytest.mark.parametrize("op", ["Conv2d", "ConvTranspose2d", "Matmul", "Add"])
def test_folded_activation(rng, op, act) -> None:
    """The op followed by (Leaky)Relu and Clip in ONNX equals the op with its act folded in."""
    attrs, post = {}, (lambda y: y)
    if op in ("Conv2d", "ConvTranspose2d"):
        x, w, b = randn(rng, 1, 6, 6, 4), randn(rng, 3, 3, 4, 6), randn(rng, 6)
        ins, feeds, post = [x, w, b], {"x": nchw(x)}, nhwc
        attrs = conv_attrs((2, 2), (1, 1, 1, 1), (1, 1), 1)
        perm = (3, 2, 0, 1) if op == "Conv2d" else (2, 3, 0, 1)
        inits = {"w": np.ascontiguousarray(w.transpose(perm)), "b": b}
        nodes = [
            helper.make_node(
                "Conv" if op == "Conv2d" else "ConvTranspose", ["x", "w", "b"], ["y0"],
                kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4,
            )
        ]  # fmt: skip
    elif op == "Matmul":
        a, bm, bias = randn(rng, 2, 4, 5), randn(rng, 5, 3), randn(rng, 3)
        ins, feeds, inits = [a, bm, bias], {"a": a, "b": bm}, {"bias": bias}
        nodes = [
            helper.make_node("MatMul", ["a", "b"], ["m"]),
            helper.make_node("Add", ["m", "bias"], ["y0"]),
        ]
    else:
        a, bb = randn(rng, 2, 3, 4), randn(rng, 4)
        ins, feeds, inits = [a, bb], {"a": a, "b": bb}, {}
        nodes = [helper.make_node("Add", ["a", "b"], ["y0"])]
    got = run_kernel(op, ins, attrs | act)[0]
    act_nodes, act_inits = onnx_act(act, "y0", "y")
    (ref,) = run_onnx(nodes + act_nodes, feeds, ["y"], inits | act_inits)
    assert_close(got, post(ref))


def test_folded_activation_rejects_unknown(rng) -> None:
    with pytest.raises(ValueError, match="act"):
        FLOAT_KERNELS["Add"]([randn(rng, 3), randn(rng, 3)], {"act": "sigmoid"})


@pytest.mark.parametrize("op", ["Sigmoid", "Tanh", "Silu", "Hardswish"])
def test_pointwise_activations(rng, op) -> None:
    x = activation_input(rng)
    got = run_kernel(op, [x], {})[0]
    if op == "Silu":
        nodes = [
            helper.make_node("Sigmoid", ["x"], ["s"]),
            helper.make_node("Mul", ["x", "s"], ["y"]),
        ]
    else:
        nodes = [helper.make_node("HardSwish" if op == "Hardswish" else op, ["x"], ["y"])]
    (ref,) = run_onnx(nodes, {"x": x}, ["y"])
    assert_close(got, ref)


@pytest.mark.parametrize("power", [-0.75, 0.5, 3.0])
def test_power(rng, power) -> None:
    """Caffe's Power layer against onnxruntime's Pow of the affine (a positive base)."""
    x = np.abs(randn(rng, 2, 3, 4, 5)) + np.float32(0.1)
    got = run_kernel("Power", [x], {"power": power, "scale": 0.5, "shift": 0.25})[0]
    nodes = [helper.make_node("Mul", ["x", "a"], ["m"]), helper.make_node("Add", ["m", "b"], ["t"]),
             helper.make_node("Pow", ["t", "p"], ["y"])]
    consts = {"a": np.float32(0.5), "b": np.float32(0.25), "p": np.float32(power)}
    (ref,) = run_onnx(nodes, {"x": x}, ["y"], consts)
    assert_close(got, ref)


@pytest.mark.parametrize("axis", [-1, 0, 1, 2, -2])
def test_softmax(rng, axis) -> None:
    x = randn(rng, 2, 3, 4, 5, scale=5.0)
    got = run_kernel("Softmax", [x], {"axis": axis})[0]
    (ref,) = run_onnx([helper.make_node("Softmax", ["x"], ["y"], axis=axis)], {"x": x}, ["y"])
    assert_close(got, ref)


def test_softmax_default_axis(rng) -> None:
    x = randn(rng, 3, 7)
    got = run_kernel("Softmax", [x], {})[0]
    np.testing.assert_allclose(got.sum(axis=-1), 1.0, rtol=1e-6)


# --------------------------------------------------------------------------- pools

# (h, w, (kh, kw), (sh, sw), (pt, pb, pl, pr), ceil_mode, extra)
POOL_CASES = {
    "k3-s2-p1": (12, 12, (3, 3), (2, 2), (1, 1, 1, 1), False),
    "k2-s2": (8, 10, (2, 2), (2, 2), (0, 0, 0, 0), False),
    "k3-s1-asym": (7, 9, (3, 3), (1, 1), (0, 2, 1, 0), False),
    "k3-s2-ceil": (8, 9, (3, 3), (2, 2), (0, 0, 0, 0), True),
    "k3-s2-p1-ceil": (10, 7, (3, 3), (2, 2), (1, 1, 1, 1), True),
    "k2-s3-ceil": (10, 11, (2, 2), (3, 3), (1, 0, 0, 1), True),
    "k3x2-s21": (9, 8, (3, 2), (2, 1), (1, 0, 1, 1), False),
}


def pool_attrs(k, s, pads, ceil) -> dict:
    return {
        "pool_height": k[0], "pool_width": k[1], "stride_height": s[0], "stride_width": s[1],
        "pad_top": pads[0], "pad_bottom": pads[1], "pad_left": pads[2], "pad_right": pads[3],
        "ceil_mode": ceil,
    }  # fmt: skip


def onnx_pool_kwargs(k, s, pads, ceil) -> dict:
    return {
        "kernel_shape": list(k), "strides": list(s), "pads": [pads[0], pads[2], pads[1], pads[3]],
        "ceil_mode": int(ceil),
    }  # fmt: skip


@pytest.mark.parametrize("dilation", [1, 2])
@pytest.mark.parametrize("case", POOL_CASES.values(), ids=POOL_CASES.keys())
def test_max_pool2d(rng, case, dilation) -> None:
    h, w, k, s, pads, ceil = case
    x = randn(rng, 2, h, w, 5)
    attrs = pool_attrs(k, s, pads, ceil) | {"dilation_height": dilation, "dilation_width": dilation}
    got = run_kernel("MaxPool2d", [x], attrs)[0]
    node = helper.make_node(
        "MaxPool",
        ["x"],
        ["y"],
        dilations=[dilation, dilation],
        **onnx_pool_kwargs(k, s, pads, ceil),
    )
    (ref,) = run_onnx([node], {"x": nchw(x)}, ["y"])
    assert_close(got, nhwc(ref))


@pytest.mark.parametrize("include_pad", [False, True])
@pytest.mark.parametrize("case", POOL_CASES.values(), ids=POOL_CASES.keys())
def test_avg_pool2d(rng, case, include_pad) -> None:
    h, w, k, s, pads, ceil = case
    x = randn(rng, 2, h, w, 5)
    attrs = pool_attrs(k, s, pads, ceil) | {"count_include_pad": include_pad}
    got = run_kernel("AvgPool2d", [x], attrs)[0]
    node = helper.make_node(
        "AveragePool", ["x"], ["y"], count_include_pad=int(include_pad),
        **onnx_pool_kwargs(k, s, pads, ceil),
    )  # fmt: skip
    (ref,) = run_onnx([node], {"x": nchw(x)}, ["y"])
    assert_close(got, nhwc(ref))


def test_global_avg_pool2d(rng) -> None:
    x = randn(rng, 2, 7, 9, 6)
    got = run_kernel("AvgPool2d", [x], {"is_global": True})[0]
    (ref,) = run_onnx([helper.make_node("GlobalAveragePool", ["x"], ["y"])], {"x": nchw(x)}, ["y"])
    assert got.shape == (2, 1, 1, 6)
    assert_close(got, nhwc(ref))


# --------------------------------------------------------------------------- shape ops


def i64(values) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


@pytest.mark.parametrize("axis", [0, 1, -1, 3])
def test_concat(rng, axis) -> None:
    shapes = [[2, 3, 4, 5] for _ in range(3)]
    for i, extra in enumerate((1, 2, 3)):
        shapes[i][axis] = extra
    xs = [randn(rng, *sh) for sh in shapes]
    got = run_kernel("Concat", xs, {"axis": axis})[0]
    names = [f"x{i}" for i in range(3)]
    node = helper.make_node("Concat", names, ["y"], axis=axis)
    (ref,) = run_onnx([node], dict(zip(names, xs)), ["y"])
    assert_close(got, ref)


@pytest.mark.parametrize("axis, sections", [(-1, [2, 3, 1]), (1, [4, 1]), (0, [1, 1])])
def test_split(rng, axis, sections) -> None:
    shape = [2, 5, 3, 6]
    shape[axis] = sum(sections)
    x = randn(rng, *shape)
    got = run_kernel("Split", [x], {"axis": axis, "sections": sections})
    outs = [f"y{i}" for i in range(len(sections))]
    node = helper.make_node("Split", ["x", "split"], outs, axis=axis)
    ref = run_onnx([node], {"x": x}, outs, {"split": i64(sections)})
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        assert_close(g, r)


SLICE_CASES = {
    "plain": ([0, 1, 2], [2, 4, 5], [1, 1, 1]),
    "negative": ([-2, -4, 1], [2, -1, -1], [1, 1, 1]),
    "stepped": ([0, 0, 1, 0], [2, 6, 6, 7], [1, 2, 3, 2]),
    "reverse": ([1, -1, 4], [-3, -100, 0], [-1, -2, -1]),
    "clamped": ([0, -100, 2], [100, 100, 2**31], [1, 1, 2]),
}


@pytest.mark.parametrize("case", SLICE_CASES.values(), ids=SLICE_CASES.keys())
def test_slice(rng, case) -> None:
    begin, end, step = case
    x = randn(rng, 2, 6, 6, 7)
    got = run_kernel("Slice", [x], {"begin": begin, "end": end, "step": step})[0]
    node = helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["y"])
    inits = {
        "starts": i64(begin),
        "ends": i64(end),
        "axes": i64(range(len(begin))),
        "steps": i64(step),
    }
    (ref,) = run_onnx([node], {"x": x}, ["y"], inits)
    assert_close(got, ref)


def test_slice_default_step(rng) -> None:
    x = randn(rng, 4, 5)
    got = run_kernel("Slice", [x], {"begin": [1, -3], "end": [3, 5]})[0]
    np.testing.assert_array_equal(got, x[1:3, -3:5])


@pytest.mark.parametrize("shape", [[0, -1], [2, 0, 20, 1], [-1], [6, 20]])
def test_reshape(rng, shape) -> None:
    x = randn(rng, 2, 3, 4, 5)
    got = run_kernel("Reshape", [x], {"shape": shape})[0]
    node = helper.make_node("Reshape", ["x", "shape"], ["y"])
    (ref,) = run_onnx([node], {"x": x}, ["y"], {"shape": i64(shape)})
    assert_close(got, ref)


@pytest.mark.parametrize("perm", [[0, 3, 1, 2], [0, 2, 3, 1], [3, 2, 1, 0], [1, 0, 2, 3]])
def test_transpose(rng, perm) -> None:
    x = randn(rng, 2, 3, 4, 5)
    got = run_kernel("Transpose", [x], {"perm": perm})[0]
    (ref,) = run_onnx([helper.make_node("Transpose", ["x"], ["y"], perm=perm)], {"x": x}, ["y"])
    assert_close(got, ref)


@pytest.mark.parametrize("shape", [(1, 3, 5, 7), (2, 3, 4, 4), (2, 5, 3, 2), (1, 1, 2, 3)])
@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.float16, np.float64, np.bool_])
def test_transpose_nchw_to_nhwc(rng, shape, dtype) -> None:
    """The NCHW -> NHWC copy of image inputs (its own kernel: RGB and other channel counts),
    bit for bit in every dtype (float16 has no Numba type: moved as 16-bit words)."""
    x = (rng.standard_normal(shape) * 50).astype(dtype)
    got = FLOAT_KERNELS["Transpose"]([x], {"perm": [0, 2, 3, 1]})[0]  # int8: the integer path
    np.testing.assert_array_equal(got, np.transpose(x, (0, 2, 3, 1)))
    assert got.dtype == dtype and got.flags.c_contiguous and not np.shares_memory(got, x)


@pytest.mark.parametrize("axes", [[1], [-1], [1, 3], []])
def test_squeeze(rng, axes) -> None:
    x = randn(rng, 2, 1, 3, 1)
    got = run_kernel("Squeeze", [x], {"axes": axes})[0]
    ins = ["x", "axes"] if axes else ["x"]
    inits = {"axes": i64(axes)} if axes else {}
    (ref,) = run_onnx([helper.make_node("Squeeze", ins, ["y"])], {"x": x}, ["y"], inits)
    assert_close(got, ref)


@pytest.mark.parametrize("axes", [[0], [-1], [1, 3], [0, -1]])
def test_unsqueeze(rng, axes) -> None:
    x = randn(rng, 2, 3)
    got = run_kernel("Unsqueeze", [x], {"axes": axes})[0]
    node = helper.make_node("Unsqueeze", ["x", "axes"], ["y"])
    (ref,) = run_onnx([node], {"x": x}, ["y"], {"axes": i64(axes)})
    assert_close(got, ref)


PAD_CASES = {
    "constant": ([0, 1, 2, 0], [0, 2, 1, 3], "constant", 1.5),
    "constant-default": ([1, 0, 0, 1], [0, 0, 2, 0], "constant", None),
    "reflect": ([0, 2, 1, 0], [0, 1, 3, 0], "reflect", None),
    "edge": ([1, 2, 0, 1], [0, 3, 1, 2], "edge", None),
    "negative": ([0, -1, 2, 0], [0, 1, -2, 0], "constant", 0.0),
}


@pytest.mark.parametrize("case", PAD_CASES.values(), ids=PAD_CASES.keys())
def test_pad(rng, case) -> None:
    before, after, mode, value = case
    x = randn(rng, 2, 5, 6, 3)
    attrs = {"pad_before": before, "pad_after": after, "mode": mode}
    if value is not None:
        attrs["value"] = value
    got = run_kernel("Pad", [x], attrs)[0]
    inits = {"pads": i64(before + after), "value": np.float32(value or 0.0)}
    node = helper.make_node("Pad", ["x", "pads", "value"], ["y"], mode=mode)
    (ref,) = run_onnx([node], {"x": x}, ["y"], inits)
    assert_close(got, ref)


# --------------------------------------------------------------------------- Resize / Upsample

COORDINATE_MODES = ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"]
NEAREST_MODES = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
# name -> (input NHWC shape, (out_height, out_width))
RESIZE_CASES = {
    "up2": ((2, 5, 7, 3), (10, 14)),
    "up-odd": ((2, 5, 7, 3), (11, 9)),
    "down2": ((2, 5, 7, 3), (3, 4)),
    "down-odd": ((2, 5, 7, 3), (2, 5)),
    "to1": ((2, 5, 7, 3), (1, 3)),
    # 7 -> 2 and 14 -> 1 put source coordinates on float32 near-ties (3.4999998, 6.4999995).
    "near-ties": ((1, 7, 14, 2), (2, 1)),
    "up-12-from-10": ((1, 10, 10, 2), (12, 12)),
    "exact-tie": ((1, 14, 14, 2), (19, 19)),  # 9.5 * 14/19 - 0.5 = 6.5 exactly
}


def run_onnx_resize(x: np.ndarray, size: tuple[int, int], **kwargs) -> np.ndarray:
    sizes = i64([x.shape[0], x.shape[3], *size])
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], **kwargs)
    (ref,) = run_onnx([node], {"x": nchw(x)}, ["y"], {"sizes": sizes})
    return nhwc(ref)


@pytest.mark.parametrize("case", RESIZE_CASES.values(), ids=RESIZE_CASES.keys())
@pytest.mark.parametrize("coord, nearest", list(itertools.product(COORDINATE_MODES, NEAREST_MODES)))
def test_resize_nearest(rng, case, coord, nearest) -> None:
    shape, size = case
    x = randn(rng, *shape)
    attrs = {
        "out_height": size[0], "out_width": size[1], "mode": "nearest",
        "coordinate_mode": coord, "nearest_mode": nearest,
    }  # fmt: skip
    got = run_kernel("Resize", [x], attrs)[0]
    ref = run_onnx_resize(
        x, size, mode="nearest", coordinate_transformation_mode=coord, nearest_mode=nearest
    )
    assert_close(got, ref)


@pytest.mark.parametrize("case", RESIZE_CASES.values(), ids=RESIZE_CASES.keys())
@pytest.mark.parametrize("coord", COORDINATE_MODES)
def test_resize_bilinear(rng, case, coord) -> None:
    shape, size = case
    x = randn(rng, *shape)
    attrs = {
        "out_height": size[0],
        "out_width": size[1],
        "mode": "bilinear",
        "coordinate_mode": coord,
    }
    got = run_kernel("Resize", [x], attrs)[0]
    ref = run_onnx_resize(x, size, mode="linear", coordinate_transformation_mode=coord)
    assert_close(got, ref)


def bilinear_half_pixel_reference(x: np.ndarray, oh: int, ow: int) -> np.ndarray:
    """Direct per-pixel bilinear interpolation, half-pixel centres, edges clamped."""
    n, h, w, c = x.shape
    y = np.zeros((n, oh, ow, c), dtype=np.float64)
    for i in range(oh):
        sy = min(max((i + 0.5) * h / oh - 0.5, 0.0), h - 1)
        y0 = int(np.floor(sy))
        y1, fy = min(y0 + 1, h - 1), sy - y0
        for j in range(ow):
            sx = min(max((j + 0.5) * w / ow - 0.5, 0.0), w - 1)
            x0 = int(np.floor(sx))
            x1, fx = min(x0 + 1, w - 1), sx - x0
            y[:, i, j] = (
                x[:, y0, x0] * (1 - fy) * (1 - fx) + x[:, y0, x1] * (1 - fy) * fx
                + x[:, y1, x0] * fy * (1 - fx) + x[:, y1, x1] * fy * fx
            )  # fmt: skip
    return y.astype(np.float32)


@pytest.mark.parametrize("scales", [(2, 2), (3, 1), (1, 4), (2, 3)])
@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
def test_upsample(rng, scales, mode) -> None:
    x = randn(rng, 2, 4, 5, 3)
    got = run_kernel(
        "Upsample", [x], {"scale_height": scales[0], "scale_width": scales[1], "mode": mode}
    )[0]
    oh, ow = 4 * scales[0], 5 * scales[1]
    if mode == "nearest":
        ref = x[:, np.arange(oh) // scales[0]][:, :, np.arange(ow) // scales[1]]
    else:
        ref = bilinear_half_pixel_reference(x, oh, ow)
    assert_close(got, ref)


def test_upsample_defaults(rng) -> None:
    x = randn(rng, 1, 3, 3, 2)
    got = run_kernel("Upsample", [x], {})[0]
    np.testing.assert_array_equal(got, x.repeat(2, axis=1).repeat(2, axis=2))


# --------------------------------------------------------------------------- BatchNorm2d


@pytest.mark.parametrize("epsilon", [None, 1e-3])
def test_batch_norm2d(rng, epsilon) -> None:
    c = 6
    x = randn(rng, 2, 5, 4, c, scale=3.0)
    scale, bias, mean = randn(rng, c), randn(rng, c), randn(rng, c)
    var = (rng.random(c) + 0.1).astype(np.float32)
    attrs = {} if epsilon is None else {"epsilon": epsilon}
    got = run_kernel("BatchNorm2d", [x, scale, bias, mean, var], attrs)[0]
    node = helper.make_node(
        "BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=epsilon or 1e-5
    )
    inits = {"s": scale, "b": bias, "m": mean, "v": var}
    (ref,) = run_onnx([node], {"x": nchw(x)}, ["y"], inits)
    assert_close(got, nhwc(ref))


# --------------------------------------------------------------------------- LayerNorm


@pytest.mark.parametrize("shape, axis, pshape, bias, eps", [
    ((2, 7, 16), -1, (16,), True, None),        # transformer tokens
    ((2, 3, 4, 5), 1, (3, 4, 5), True, 1e-3),   # over C, H, W
    ((2, 3, 4, 5), -2, (1, 5), False, None),    # scale broadcast from the right
    ((4, 6), 0, (4, 6), True, None),            # every axis
])
def test_layer_norm(rng, shape, axis, pshape, bias, eps) -> None:
    x = randn(rng, *shape, scale=3.0) + 1.5
    scale = randn(rng, *pshape)
    b = randn(rng, *pshape)
    attrs = {"axis": axis, "stats": True} | ({} if eps is None else {"epsilon": eps})
    inputs = [x, scale] + ([b] if bias else [])
    got = run_kernel("LayerNorm", inputs, attrs)
    node = helper.make_node("LayerNormalization", ["x", "s"] + (["b"] if bias else []),
                            ["y", "mean", "inv"], axis=axis, epsilon=eps or 1e-5)
    inits = {"s": scale} | ({"b": b} if bias else {})
    ref = run_onnx([node], {"x": x}, ["y", "mean", "inv"], inits)
    for g, r in zip(got, ref):
        assert_close(g, r)
    plain = run_kernel("LayerNorm", inputs, {"axis": axis} | ({} if eps is None
                                                             else {"epsilon": eps}))
    assert len(plain) == 1  # without stats: the one-pass kernel
    assert_close(plain[0], ref[0])


def test_layer_norm_rows_with_zero_mean_and_odd_length() -> None:
    """The one-pass kernel on rows whose mean is exactly 0 and whose length is not a multiple
    of its four partial sums: the same as the two-pass statistics."""
    x = np.zeros((3, 9), np.float32)
    x[0] = [1, -1, 2, -2, 3, -3, 0, 0, 0]
    x[1] = np.arange(9)
    scale = np.linspace(0.5, 2, 9).astype(np.float32)
    got = run_kernel("LayerNorm", [x, scale], {"axis": -1})[0]
    ref = run_kernel("LayerNorm", [x, scale], {"axis": -1, "stats": True})[0]
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)
    assert np.abs(got[0]).max() > 1.0  # normalized by the standard deviation, not by ~0


# --------------------------------------------------------------------------- GroupNorm / LRN


@pytest.mark.parametrize("groups", [1, 2, 6])
def test_group_norm(rng, groups) -> None:
    x = randn(rng, 2, 5, 4, 6, scale=2.0) + 0.5
    scale, bias = randn(rng, 6), randn(rng, 6)
    (got,) = run_kernel("GroupNorm", [x, scale, bias], {"num_groups": groups, "epsilon": 1e-4})
    if groups == 6:
        node = helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-4)
    else:
        node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], epsilon=1e-4,
                                num_groups=groups)
    (ref,) = run_onnx([node], {"x": nchw(x)}, ["y"], {"s": scale, "b": bias}, opset=21)
    assert_close(got, nhwc(ref))


@pytest.mark.parametrize("size", [1, 3, 4, 5])
def test_lrn(rng, size) -> None:
    """Against onnxruntime; an even window (which onnxruntime refuses) against the ONNX
    spec's formula written here (onnx.reference's LRN loops over the batch axis)."""
    x = randn(rng, 1, 4, 5, 7, scale=3.0)
    attrs = {"size": size, "alpha": 1e-3, "beta": 0.75, "bias": 2.0}
    (got,) = run_kernel("LRN", [x], attrs)
    node = helper.make_node("LRN", ["x"], ["y"], **attrs)
    if size % 2:
        (ref,) = run_onnx([node], {"x": nchw(x)}, ["y"], {})
    else:
        xc = nchw(x).astype(np.float64)
        sq = np.zeros_like(xc)
        for c in range(xc.shape[1]):  # max(0, c - floor((size-1)/2)) <= i <= c + ceil(..)
            lo, hi = max(0, c - (size - 1) // 2), min(xc.shape[1] - 1, c + -(-(size - 1) // 2))
            sq[:, c] = np.square(xc[:, lo:hi + 1]).sum(axis=1)
        ref = xc / (attrs["bias"] + attrs["alpha"] / size * sq) ** attrs["beta"]
    assert_close(got, nhwc(ref))


# --------------------------------------------------------------------------- AlignAxis / PruneAxis


@pytest.mark.parametrize(
    "shape, axis, unit", [((1, 4, 4, 3), -1, 16), ((1, 4, 4, 32), -1, 16), ((2, 5, 3), 1, 4),
                          ((2, 5, 3), 0, 3), ((1, 2, 2, 17), 3, 8)]
)  # fmt: skip
def test_align_axis(rng, shape, axis, unit) -> None:
    x = randn(rng, *shape)
    got = run_kernel("AlignAxis", [x], {"axis": axis, "align_unit": unit})[0]
    size = shape[axis]
    widths = [(0, 0)] * len(shape)
    widths[axis] = (0, (-size) % unit)
    np.testing.assert_array_equal(got, np.pad(x, widths))
    assert got.shape[axis] % unit == 0


def test_align_axis_defaults(rng) -> None:
    x = randn(rng, 1, 2, 2, 20)
    got = run_kernel("AlignAxis", [x], {})[0]
    assert got.shape == (1, 2, 2, 32)
    np.testing.assert_array_equal(got[..., :20], x)
    assert not got[..., 20:].any()


@pytest.mark.parametrize("axis, size", [(-1, 3), (3, 16), (1, 1), (0, 1), (-1, 0)])
def test_prune_axis(rng, axis, size) -> None:
    x = randn(rng, 2, 4, 4, 16)
    got = run_kernel("PruneAxis", [x], {"axis": axis, "size": size})[0]
    np.testing.assert_array_equal(got, np.take(x, np.arange(size), axis=axis))


def test_align_then_prune_round_trips(rng) -> None:
    x = randn(rng, 1, 3, 3, 5)
    aligned = run_kernel("AlignAxis", [x], {"align_unit": 16})[0]
    pruned = run_kernel("PruneAxis", [aligned], {"size": 5})[0]
    np.testing.assert_array_equal(pruned, x)


# --------------------------------------------------------------------------- errors


def test_conv2d_rejects_mismatched_groups(rng) -> None:
    with pytest.raises(ValueError, match="groups"):
        FLOAT_KERNELS["Conv2d"]([randn(rng, 1, 4, 4, 6), randn(rng, 3, 3, 4, 4)], {"groups": 2})


def test_pool_requires_window(rng) -> None:
    with pytest.raises(KeyError, match="pool_height"):
        FLOAT_KERNELS["MaxPool2d"]([randn(rng, 1, 4, 4, 2)], {})


def test_split_rejects_bad_sections(rng) -> None:
    with pytest.raises(ValueError, match="sections"):
        FLOAT_KERNELS["Split"]([randn(rng, 2, 5)], {"sections": [2, 2]})


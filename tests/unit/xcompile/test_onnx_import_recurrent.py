"""Importing recurrent networks and 1-D convolutions as exporters write them, each compared
against onnxruntime float.

- a CRNN text-recognizer head as torch.onnx writes it (opset 12): conv stack to height 1,
  Squeeze, Transpose to (T, N, C), two bidirectional LSTM layers whose initial states come
  from the Shape -> Gather -> Unsqueeze -> Concat -> ConstantOfShape chain, the [T, 2, N, H]
  output turned into [T, N, 2H] by Transpose + Reshape, a Linear and LogSoftmax;
- a GRU keyword spotter as tf2onnx writes a Keras model: batch-major input, Conv1D as
  Transpose -> Conv (rank 3, auto_pad SAME) -> Transpose, the GRU (linear_before_reset) time
  major behind a Transpose, Y_h squeezed into a Dense + Softmax;
- keras2onnx's STFT front end: a Conv on the rank-3 waveform with fixed DFT kernels, NWC
  Transposes, power, a clip by Max, Log, an NHWC image for a Conv2d;
- a 1-D CNN over every 1-D conv and pool form.

Each test also asserts where the work went: the recurrences are LSTMRecurrence /
GRURecurrence ops behind one Matmul, the 1-D convolutions and pools are Conv2d / pools, and
no OnnxGraph carries any of them.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402
from recurrent_nets import (  # noqa: E402
    Graph,
    cnn1d,
    crnn_head,
    keras_masked_bilstm,
    keras_stft,
    kws_gru,
    rnn_weights,
)

from xcompile.frontend import import_onnx  # noqa: E402

MINE = {"Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool", "GlobalAveragePool",
        "GlobalMaxPool", "LSTM", "GRU", "RNN"}


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _host(net, feeds: list[np.ndarray]) -> list[np.ndarray]:
    from host_backend import HostBackend
    from xrt import HostDevice, Session, Tensor

    sess = Session.Create([HostBackend], net.view(0), [HostDevice.Default()])
    sess.apply()
    return [np.asarray(t) for t in sess.forward([Tensor(np.ascontiguousarray(a))
                                                 for a in feeds])]


def _check(model, feeds: dict[str, np.ndarray], rtol=1e-4, atol=2e-5):
    """Import, run on the HostBackend, compare with onnxruntime; returns the network."""
    net = import_onnx(model)
    want = _ort(model, feeds)
    got = _host(net, list(feeds.values()))
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, f"output {k}: {g.shape} != {w.shape}"
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"output {k}")
    carried = {t for op in net.ops if op.op_type == "OnnxGraph" for t in op.onnx_ops}
    assert not carried & MINE, f"carried by OnnxGraph instead of native ops: {carried & MINE}"
    return net


def _count(net, op_type: str) -> int:
    return sum(op.op_type == op_type for op in net.ops)


def test_crnn_head_torch_export():
    model = crnn_head()
    img = np.random.default_rng(1).standard_normal((1, 1, 32, 64)).astype(np.float32)
    net = _check(model, {"image": img}, atol=5e-5)
    lstms = [op for op in net.ops if op.op_type == "LSTMRecurrence"]
    assert len(lstms) == 2 and _count(net, "Conv2d") == 3
    for op in lstms:
        # the Shape -> ... -> ConstantOfShape chains folded: the states are constants
        assert op.inputs[3].is_params and op.inputs[4].is_params
        assert not np.any(op.inputs[3].data)
        # the projection of every timestep and both directions is one Matmul by a constant
        proj = next(o for o in net.ops if op.inputs[0] in o.outputs)
        assert proj.op_type == "Matmul" and proj.inputs[1].is_params
        assert tuple(proj.inputs[1].shape)[1] == 2 * 4 * op.hidden_size
    carried = {t for op in net.ops if op.op_type == "OnnxGraph" for t in op.onnx_ops}
    assert not carried & {"Shape", "Gather", "Unsqueeze", "Concat", "ConstantOfShape"}


def test_gru_keyword_spotter_tf2onnx():
    model = kws_gru()
    mfcc = np.random.default_rng(2).standard_normal((1, 49, 10)).astype(np.float32)
    net = _check(model, {"mfcc": mfcc}, atol=1e-6)
    assert _count(net, "GRURecurrence") == 1 and _count(net, "Conv2d") == 1
    op = next(o for o in net.ops if o.op_type == "GRURecurrence")
    assert op.linear_before_reset and op.hidden_size == 20
    conv = next(o for o in net.ops if o.op_type == "Conv2d")
    # SAME_UPPER on the 1-D axis: 49 -> 25 with stride 2, the pad on the W axis only
    assert tuple(conv.outputs[0].shape) == (1, 1, 25, 16)
    assert conv.pad_top == conv.pad_bottom == 0 and conv.pad_left + conv.pad_right == 2


def test_keras_masking_bidirectional_lstm():
    """Sequence lengths computed from the input at run time (Keras Masking): the padded steps
    of the short item give zeros in Y, as onnxruntime's."""
    model = keras_masked_bilstm()
    x = np.random.default_rng(4).standard_normal((2, 8, 5)).astype(np.float32)
    x[1, 5:] = 0.0  # item 1 is 5 steps long
    net = _check(model, {"x": x})
    op = next(o for o in net.ops if o.op_type == "LSTMRecurrence")
    assert not op.inputs[6].is_params  # the lengths are computed, not folded
    assert op.inputs[3].is_params      # the zero states fold


def test_keras_stft_conv1d_idiom():
    model = keras_stft()
    t = np.arange(1024) / 16000
    audio = (np.sin(2 * np.pi * 440 * t) + 0.3 * np.sin(2 * np.pi * 3100 * t))
    audio = audio.astype(np.float32).reshape(1, 1024, 1)
    net = _check(model, {"audio": audio}, rtol=1e-4, atol=1e-4)
    convs = [op for op in net.ops if op.op_type == "Conv2d"]
    assert len(convs) == 2
    stft = next(op for op in convs if tuple(op.inputs[1].shape) == (1, 64, 1, 66))
    assert stft.stride_width == 32 and stft.stride_height == 1
    assert tuple(stft.outputs[0].shape) == (1, 1, 31, 66)


def test_every_1d_conv_and_pool():
    model = cnn1d()
    x = np.random.default_rng(3).standard_normal((2, 4, 40)).astype(np.float32)
    net = _check(model, {"x": x})
    assert _count(net, "Conv2d") == 2 and _count(net, "ConvTranspose2d") == 1
    assert _count(net, "MaxPool2d") == 2 and _count(net, "AvgPool2d") == 3
    # a chain of 1-D ops transposes once in and once per ONNX-order graph output
    assert _count(net, "Transpose") <= 4


@pytest.mark.parametrize("op,attrs", [
    ("ConvTranspose", dict(strides=[3], output_shape=[20])),
    ("ConvTranspose", dict(strides=[2], auto_pad="SAME_UPPER", dilations=[2])),
    ("Conv", dict(strides=[2], auto_pad="SAME_LOWER")),
    ("Conv", dict(pads=[2, 3], dilations=[3])),
    ("Conv", dict(auto_pad="VALID")),
])
def test_1d_conv_forms_with_weights_fed_at_run_time(op, attrs):
    """1-D Conv / ConvTranspose with output_shape or auto_pad, the weights a graph input:
    they reach the Conv2d through Reshape + Transpose."""
    g = Graph(14)
    y = g(op, ["x", "w"], **attrs)
    wshape = [6, 4, 3] if op == "Conv" else [4, 6, 3]
    model = g.model({"x": [1, 4, 7], "w": wshape}, [y], 13)
    rng = np.random.default_rng(15)
    feeds = {"x": rng.standard_normal((1, 4, 7)).astype(np.float32),
             "w": rng.standard_normal(wshape).astype(np.float32)}
    net = _check(model, feeds)
    assert _count(net, op + "2d") == 1


@pytest.mark.parametrize("rank,p,attrs", [
    (3, 3, dict(kernel_shape=[3], strides=[2], pads=[2, 1])),
    (3, 1, dict(kernel_shape=[2], auto_pad="SAME_UPPER")),
    (4, 2, dict(kernel_shape=[2, 3], strides=[2, 1], pads=[1, 1, 0, 1])),
    (4, 4, dict(kernel_shape=[3, 3])),
])
def test_lppool(rank, p, attrs):
    """LpPool as x * x, a Power (x * x)^(p/2) for p != 2, an AvgPool2d counting the pads and
    a Power (k * mean)^(1/p): every p > 0, 1-D and 2-D."""
    g = Graph(12)
    y = g("LpPool", ["x"], p=p, **attrs)
    shape = [2, 3, 11] if rank == 3 else [1, 3, 7, 9]
    model = g.model({"x": shape}, [y], 18)
    x = np.random.default_rng(13).standard_normal(shape).astype(np.float32)
    net = _check(model, {"x": x}, rtol=2e-5, atol=2e-6)
    assert _count(net, "AvgPool2d") == 1 and _count(net, "Power") == (1 if p == 2 else 2)


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_runtime_states_and_lengths_batch_major(kind):
    """Layout 1 (opset 14), sequence_lens and initial states fed at run time, every output a
    graph output."""
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[kind]
    g = Graph(4)
    w, r, b = rnn_weights(g, gates, 2, 5, 3)
    ins = ["x", w, r, b, "lens", "h0"] + (["c0"] if kind == "LSTM" else [])
    outs = g.node(kind, ins, 3 if kind == "LSTM" else 2, hidden_size=5,
                  direction="bidirectional", layout=1)
    shapes = {"x": [3, 6, 3], "lens": [3], "h0": [3, 2, 5]}
    if kind == "LSTM":
        shapes["c0"] = [3, 2, 5]
    model = g.model(shapes, outs, 14, in_types={"lens": TensorProto.INT32})
    rng = np.random.default_rng(5)
    feeds = {"x": rng.standard_normal((3, 6, 3)).astype(np.float32),
             "lens": np.array([6, 2, 4], np.int32),
             "h0": rng.standard_normal((3, 2, 5)).astype(np.float32)}
    if kind == "LSTM":
        feeds["c0"] = rng.standard_normal((3, 2, 5)).astype(np.float32)
    net = import_onnx(model)
    want = _ort_layout1(kind, model, feeds)
    got = _host(net, list(feeds.values()))
    for k, (a, e) in enumerate(zip(got, want)):
        np.testing.assert_allclose(a, e, rtol=1e-4, atol=2e-5, err_msg=f"output {k}")


def _ort_layout1(kind, model, feeds):
    """onnxruntime has no layout 1: the same node at layout 0 on transposed inputs."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    node = m.graph.node[0]
    for a in list(node.attribute):
        if a.name == "layout":
            node.attribute.remove(a)
    for vi in m.graph.input:
        if vi.name in ("x", "h0", "c0"):
            d = vi.type.tensor_type.shape.dim
            d[0].dim_value, d[1].dim_value = d[1].dim_value, d[0].dim_value
    swapped = {n: (a.transpose(1, 0, 2) if n in ("x", "h0", "c0") else a)
               for n, a in feeds.items()}
    outs = _ort(m, swapped)
    return [outs[0].transpose(2, 0, 1, 3)] + [o.transpose(1, 0, 2) for o in outs[1:]]


def test_runtime_weights_import_as_a_transposed_matmul():
    """W fed at run time (the ONNX node tests do): the projection reads it transposed."""
    g = Graph(6)
    _, r, b = rnn_weights(g, 1, 1, 4, 3)
    y, _ = g.node("RNN", ["x", "w", r, b], 2, hidden_size=4, activations=["Relu"])
    model = g.model({"x": [5, 2, 3], "w": [1, 4, 3]}, [y], 13)
    rng = np.random.default_rng(7)
    feeds = {"x": rng.standard_normal((5, 2, 3)).astype(np.float32),
             "w": rng.standard_normal((1, 4, 3)).astype(np.float32)}
    net = _check(model, feeds)
    mm = next(op for op in net.ops if op.op_type == "Matmul")
    assert mm.transpose_b and not mm.inputs[1].is_params


def test_omitted_outputs_and_bias_folding():
    """Only Y_c read: the op still computes all three, the importer maps the one read. A
    constant B folds into the projection Matmul; the recurrence's own bias is zeros."""
    g = Graph(8)
    w, r, b = rnn_weights(g, 4, 1, 6, 3)
    _, _, yc = g.node("LSTM", ["x", w, r, b], 3, hidden_size=6)
    model = g.model({"x": [4, 1, 3]}, [yc], 13)
    model.graph.node[0].output[0] = ""
    model.graph.node[0].output[1] = ""
    x = np.random.default_rng(9).standard_normal((4, 1, 3)).astype(np.float32)
    net = _check(model, {"x": x})
    op = next(o for o in net.ops if o.op_type == "LSTMRecurrence")
    mm = next(o for o in net.ops if op.inputs[0] in o.outputs)
    assert len(mm.inputs) == 3 and not np.any(op.inputs[2].data)


def test_gru_linear_before_reset_keeps_the_h_recurrent_bias():
    g = Graph(10)
    w, r, b = rnn_weights(g, 3, 2, 4, 3)
    y, _ = g.node("GRU", ["x", w, r, b], 2, hidden_size=4, direction="bidirectional",
                  linear_before_reset=1, clip=1.5)
    model = g.model({"x": [6, 2, 3]}, [y], 13)
    x = (np.random.default_rng(11).standard_normal((6, 2, 3)) * 3).astype(np.float32)
    net = _check(model, {"x": x})
    op = next(o for o in net.ops if o.op_type == "GRURecurrence")
    rest = op.inputs[2].data
    assert not np.any(rest[:, :3 * 4 + 2 * 4]) and np.all(rest[:, -4:] != 0)


def test_mismatched_weights_are_refused_with_reason():
    """W that does not fit hidden_size: the native handler refuses, naming the shapes (the
    node may still be carried whole by the generic fallback, which runs it as ONNX does)."""
    from xcompile.frontend.onnx_import.handlers.recurrent import _recurrent
    from xcompile.frontend.onnx_import.registry import _Unsupported
    from xcompile.frontend.onnx_import.tensor import _T

    ins = [_T.constant(np.zeros(s, np.float32)) for s in ((5, 1, 3), (1, 8, 3), (1, 8, 4))]
    node = helper.make_node("RNN", ["x", "w", "r"], ["y"], hidden_size=4)
    with pytest.raises(_Unsupported, match="do not fit"):
        _recurrent(None, node, {"hidden_size": 4}, ins)


def test_3d_pooling_refusal_names_the_rank():
    from xcompile.frontend.onnx_import.handlers.conv_pool import _maxpool
    from xcompile.frontend.onnx_import.registry import _Unsupported
    from xcompile.frontend.onnx_import.tensor import _T

    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2, 2])
    with pytest.raises(_Unsupported, match=r"rank-5 tensor \(3-D; only 1-D N,C,L and 2-D"):
        _maxpool(None, node, {"kernel_shape": [2, 2, 2]}, [_T((1, 2, 4, 4, 4))])

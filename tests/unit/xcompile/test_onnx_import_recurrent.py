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
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from xcompile.frontend import import_onnx  # noqa: E402

MINE = {"Conv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool",
        "GlobalMaxPool", "LSTM", "GRU", "RNN"}


class _Graph:
    """A small onnx.helper graph builder with random, trained-looking initialisers."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: list = []
        self.n = 0

    def const(self, array, name: str | None = None) -> str:
        name = name or f"k{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(self, *shape, scale: float | None = None) -> str:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        s = scale if scale is not None else 1.0 / np.sqrt(max(fan_in, 1))
        return self.const((self.rng.uniform(-1, 1, shape) * s).astype(np.float32))

    def node(self, op: str, inputs: list[str], n_out: int = 1, **attrs) -> list[str]:
        self.n += 1
        outs = [f"{op.lower()}{self.n}_{k}" for k in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=f"{op}_{self.n}", **attrs))
        return outs

    def __call__(self, op: str, inputs: list[str], **attrs) -> str:
        return self.node(op, inputs, **attrs)[0]

    def model(self, inputs: dict[str, list[int]], outputs: list[str], opset: int,
              in_types: dict[str, int] | None = None) -> onnx.ModelProto:
        vis = [helper.make_tensor_value_info(n, (in_types or {}).get(n, TensorProto.FLOAT), s)
               for n, s in inputs.items()]
        outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs]
        graph = helper.make_graph(self.nodes, "g", vis, outs, self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 8
        return m


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


# --------------------------------------------------------------------------- exporter idioms

def _torch_zero_state(g: _Graph, seq: str, dirs: int, hidden: int) -> str:
    """torch.onnx's `torch.zeros(dirs, x.size(1), hidden)`: Shape -> Gather -> Unsqueeze ->
    Concat -> ConstantOfShape (opset 12: Unsqueeze takes axes as an attribute)."""
    shape = g("Shape", [seq])
    batch = g("Gather", [shape, g.const(np.array(1, np.int64))], axis=0)
    batch = g("Unsqueeze", [batch], axes=[0])
    dims = g("Concat", [g.const(np.array([dirs], np.int64)), batch,
                        g.const(np.array([hidden], np.int64))], axis=0)
    return g("ConstantOfShape", [dims], value=helper.make_tensor("v", TensorProto.FLOAT, [1],
                                                                  [0.0]))


def _rnn_weights(g: _Graph, gates: int, dirs: int, hidden: int, cin: int):
    k = 1 / np.sqrt(hidden)
    w = g.weight(dirs, gates * hidden, cin, scale=k)
    r = g.weight(dirs, gates * hidden, hidden, scale=k)
    b = g.weight(dirs, 2 * gates * hidden, scale=k)
    return w, r, b


def _torch_bilstm(g: _Graph, x: str, cin: int, hidden: int) -> str:
    """One torch nn.LSTM(bidirectional=True) layer: [T, N, C] -> [T, N, 2H]."""
    w, r, b = _rnn_weights(g, 4, 2, hidden, cin)
    h0 = _torch_zero_state(g, x, 2, hidden)
    c0 = _torch_zero_state(g, x, 2, hidden)
    y, _, _ = g.node("LSTM", [x, w, r, b, "", h0, c0], 3, hidden_size=hidden,
                     direction="bidirectional")
    y = g("Transpose", [y], perm=[0, 2, 1, 3])                   # [T, N, 2, H]
    return g("Reshape", [y, g.const(np.array([0, 0, -1], np.int64))])


def crnn_head(seed: int = 0) -> onnx.ModelProto:
    g = _Graph(seed)
    x = g("Conv", ["image", g.weight(8, 1, 3, 3), g.weight(8)], pads=[1, 1, 1, 1])
    x = g("MaxPool", [g("Relu", [x])], kernel_shape=[2, 2], strides=[2, 2])   # 8 x 16 x 32
    x = g("Conv", [x, g.weight(16, 8, 3, 3), g.weight(16)], pads=[1, 1, 1, 1])
    x = g("BatchNormalization", [x, g.const(np.full(16, 1.1, np.float32)), g.weight(16),
                                 g.weight(16), g.const(np.full(16, 0.9, np.float32))])
    x = g("MaxPool", [g("Relu", [x])], kernel_shape=[2, 1], strides=[2, 1])   # 16 x 8 x 32
    x = g("Relu", [g("Conv", [x, g.weight(16, 16, 8, 1), g.weight(16)])])      # 16 x 1 x 32
    x = g("Squeeze", [x], axes=[2])                                          # [N, C, T]
    seq = g("Transpose", [x], perm=[2, 0, 1])                                # [T, N, C]
    seq = _torch_bilstm(g, seq, 16, 24)
    seq = _torch_bilstm(g, seq, 48, 16)
    logits = g("Add", [g("MatMul", [seq, g.weight(32, 11)]), g.weight(11)])
    out = g("LogSoftmax", [logits], axis=2)
    return g.model({"image": [1, 1, 32, 64]}, [out], 12)


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


def kws_gru(seed: int = 0) -> onnx.ModelProto:
    """tf2onnx's form of a Keras Conv1D + GRU(reset_after=True) + Dense keyword spotter."""
    g = _Graph(seed)
    x = g("Transpose", ["mfcc"], perm=[0, 2, 1])                             # [N, F, T]
    x = g("Conv", [x, g.weight(16, 10, 3), g.weight(16)], auto_pad="SAME_UPPER",
          strides=[2])
    x = g("Transpose", [g("Relu", [x])], perm=[0, 2, 1])                      # [N, T', 16]
    x = g("Transpose", [x], perm=[1, 0, 2])                                  # [T', N, 16]
    w, r, b = _rnn_weights(g, 3, 1, 20, 16)
    h0 = g.const(np.zeros((1, 1, 20), np.float32))
    _, yh = g.node("GRU", [x, w, r, b, "", h0], 2, hidden_size=20, linear_before_reset=1)
    feat = g("Squeeze", [yh, g.const(np.array([0], np.int64))])              # [N, 20]
    logits = g("Add", [g("MatMul", [feat, g.weight(20, 12)]), g.weight(12)])
    return g.model({"mfcc": [1, 49, 10]}, [g("Softmax", [logits], axis=-1)], 13)


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


def _dft_kernels(n_fft: int) -> np.ndarray:
    """Hann-windowed DFT kernels (2 * bins, 1, n_fft): real parts, then imaginary parts."""
    bins = n_fft // 2 + 1
    n = np.arange(n_fft)
    win = 0.5 - 0.5 * np.cos(2 * np.pi * n / n_fft)
    ang = 2 * np.pi * np.outer(np.arange(bins), n) / n_fft
    k = np.concatenate([np.cos(ang) * win, -np.sin(ang) * win])
    return k[:, None, :].astype(np.float32)


def keras_stft(seed: int = 0, n_fft: int = 64, hop: int = 32) -> onnx.ModelProto:
    """keras2onnx's STFT: NWC audio, Transpose, Conv on the rank-3 tensor with fixed DFT
    kernels, Transpose back, power, Max(1e-6) as a clip, Log, then an NHWC image for a 2-D
    conv (NHWC Transposes around it) and a max over time and frequency."""
    g = _Graph(seed)
    bins = n_fft // 2 + 1
    x = g("Transpose", ["audio"], perm=[0, 2, 1])                            # [N, 1, S]
    x = g("Conv", [x, g.const(_dft_kernels(n_fft))], strides=[hop])           # [N, 2F, T]
    x = g("Transpose", [x], perm=[0, 2, 1])                                  # [N, T, 2F]
    re, im = g.node("Split", [x, g.const(np.array([bins, bins], np.int64))], 2, axis=2)
    power = g("Add", [g("Mul", [re, re]), g("Mul", [im, im])])
    mag = g("Sqrt", [g("Max", [power, g.const(np.array(1e-6, np.float32))])])
    logmag = g("Log", [g("Max", [mag, g.const(np.array(1e-6, np.float32))])])
    img = g("Unsqueeze", [logmag, g.const(np.array([3], np.int64))])          # NHWC [N,T,F,1]
    x = g("Transpose", [img], perm=[0, 3, 1, 2])
    x = g("Conv", [x, g.weight(4, 1, 3, 3), g.weight(4)], pads=[1, 1, 1, 1])
    x = g("Transpose", [g("Relu", [x])], perm=[0, 2, 3, 1])                   # NHWC
    out = g("ReduceMax", [x], axes=[1, 2], keepdims=0)
    return g.model({"audio": [1, 1024, 1]}, [out], 13)


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


def cnn1d(seed: int = 0) -> onnx.ModelProto:
    """Every 1-D form: Conv (pads, dilation), grouped Conv with SAME_LOWER, MaxPool (ceil),
    AveragePool (pads, count_include_pad), ConvTranspose (stride, output_padding), global
    pools on rank 3."""
    g = _Graph(seed)
    x = g("Conv", ["x", g.weight(8, 4, 5), g.weight(8)], pads=[4, 4], dilations=[2])
    x = g("MaxPool", [g("Relu", [x])], kernel_shape=[3], strides=[2], ceil_mode=1)
    x = g("Conv", [x, g.weight(8, 2, 3)], group=4, auto_pad="SAME_LOWER")
    x = g("AveragePool", [x], kernel_shape=[3], strides=[2], pads=[1, 1],
          count_include_pad=1)
    up = g("ConvTranspose", [x, g.weight(8, 6, 4), g.weight(6)], strides=[2], pads=[1, 1],
           output_padding=[1])
    gap = g("GlobalAveragePool", [up])                                        # [N, 6, 1]
    gmp = g("GlobalMaxPool", [x])                                             # [N, 8, 1]
    return g.model({"x": [2, 4, 40]}, [up, gap, gmp], 13)


def test_every_1d_conv_and_pool():
    model = cnn1d()
    x = np.random.default_rng(3).standard_normal((2, 4, 40)).astype(np.float32)
    net = _check(model, {"x": x})
    assert _count(net, "Conv2d") == 2 and _count(net, "ConvTranspose2d") == 1
    assert _count(net, "MaxPool2d") == 2 and _count(net, "AvgPool2d") == 2
    # a chain of 1-D ops transposes once in and once per ONNX-order graph output
    assert _count(net, "Transpose") <= 4


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_runtime_states_and_lengths_batch_major(kind):
    """Layout 1 (opset 14), sequence_lens and initial states fed at run time, every output a
    graph output."""
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[kind]
    g = _Graph(4)
    w, r, b = _rnn_weights(g, gates, 2, 5, 3)
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
    g = _Graph(6)
    _, r, b = _rnn_weights(g, 1, 1, 4, 3)
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
    g = _Graph(8)
    w, r, b = _rnn_weights(g, 4, 1, 6, 3)
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
    g = _Graph(10)
    w, r, b = _rnn_weights(g, 3, 2, 4, 3)
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

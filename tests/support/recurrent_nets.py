"""Recurrent and 1-D convolutional networks as exporters write them, built with onnx.helper
(nothing committed but this code): a torch.onnx CRNN text-recognizer head, a tf2onnx GRU keyword
spotter, keras2onnx's STFT front end (a Conv on the rank-3 waveform) and a 1-D CNN over every
1-D conv and pool form. Used by tests/unit/xcompile/test_onnx_import_recurrent.py (import
against onnxruntime) and tests/corpus/test_recurrent_on_chip.py (compiled for the chips)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class Graph:
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


def _torch_zero_state(g: Graph, seq: str, dirs: int, hidden: int) -> str:
    """torch.onnx's `torch.zeros(dirs, x.size(1), hidden)`: Shape -> Gather -> Unsqueeze ->
    Concat -> ConstantOfShape (opset 12: Unsqueeze takes axes as an attribute)."""
    shape = g("Shape", [seq])
    batch = g("Gather", [shape, g.const(np.array(1, np.int64))], axis=0)
    batch = g("Unsqueeze", [batch], axes=[0])
    dims = g("Concat", [g.const(np.array([dirs], np.int64)), batch,
                        g.const(np.array([hidden], np.int64))], axis=0)
    return g("ConstantOfShape", [dims], value=helper.make_tensor("v", TensorProto.FLOAT, [1],
                                                                  [0.0]))


def rnn_weights(g: Graph, gates: int, dirs: int, hidden: int, cin: int):
    k = 1 / np.sqrt(hidden)
    w = g.weight(dirs, gates * hidden, cin, scale=k)
    r = g.weight(dirs, gates * hidden, hidden, scale=k)
    b = g.weight(dirs, 2 * gates * hidden, scale=k)
    return w, r, b


def _torch_bilstm(g: Graph, x: str, cin: int, hidden: int) -> str:
    """One torch nn.LSTM(bidirectional=True) layer: [T, N, C] -> [T, N, 2H]."""
    w, r, b = rnn_weights(g, 4, 2, hidden, cin)
    h0 = _torch_zero_state(g, x, 2, hidden)
    c0 = _torch_zero_state(g, x, 2, hidden)
    y, _, _ = g.node("LSTM", [x, w, r, b, "", h0, c0], 3, hidden_size=hidden,
                     direction="bidirectional")
    y = g("Transpose", [y], perm=[0, 2, 1, 3])                   # [T, N, 2, H]
    return g("Reshape", [y, g.const(np.array([0, 0, -1], np.int64))])


def crnn_head(seed: int = 0) -> onnx.ModelProto:
    g = Graph(seed)
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


def kws_gru(seed: int = 0) -> onnx.ModelProto:
    """tf2onnx's form of a Keras Conv1D + GRU(reset_after=True) + Dense keyword spotter."""
    g = Graph(seed)
    x = g("Transpose", ["mfcc"], perm=[0, 2, 1])                             # [N, F, T]
    x = g("Conv", [x, g.weight(16, 10, 3), g.weight(16)], auto_pad="SAME_UPPER",
          strides=[2])
    x = g("Transpose", [g("Relu", [x])], perm=[0, 2, 1])                      # [N, T', 16]
    x = g("Transpose", [x], perm=[1, 0, 2])                                  # [T', N, 16]
    w, r, b = rnn_weights(g, 3, 1, 20, 16)
    h0 = g.const(np.zeros((1, 1, 20), np.float32))
    _, yh = g.node("GRU", [x, w, r, b, "", h0], 2, hidden_size=20, linear_before_reset=1)
    feat = g("Squeeze", [yh, g.const(np.array([0], np.int64))])              # [N, 20]
    logits = g("Add", [g("MatMul", [feat, g.weight(20, 12)]), g.weight(12)])
    return g.model({"mfcc": [1, 49, 10]}, [g("Softmax", [logits], axis=-1)], 13)


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
    g = Graph(seed)
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


def cnn1d(seed: int = 0) -> onnx.ModelProto:
    """Every 1-D form: Conv (pads, dilation), grouped Conv with SAME_LOWER, MaxPool (ceil),
    LpPool (p = 2, a pad), AveragePool (pads, count_include_pad), ConvTranspose (stride,
    output_padding), global pools on rank 3."""
    g = Graph(seed)
    x = g("Conv", ["x", g.weight(8, 4, 5), g.weight(8)], pads=[4, 4], dilations=[2])
    x = g("MaxPool", [g("Relu", [x])], kernel_shape=[3], strides=[2], ceil_mode=1)
    x = g("LpPool", [x], kernel_shape=[2], pads=[1, 0], p=2)
    x = g("Conv", [x, g.weight(8, 2, 3)], group=4, auto_pad="SAME_LOWER")
    x = g("AveragePool", [x], kernel_shape=[3], strides=[2], pads=[1, 1],
          count_include_pad=1)
    up = g("ConvTranspose", [x, g.weight(8, 6, 4), g.weight(6)], strides=[2], pads=[1, 1],
           output_padding=[1])
    gap = g("GlobalAveragePool", [up])                                        # [N, 6, 1]
    gmp = g("GlobalMaxPool", [x])                                             # [N, 8, 1]
    return g.model({"x": [2, 4, 40]}, [up, gap, gmp], 13)


def keras_masked_bilstm(seed: int = 0) -> onnx.ModelProto:
    """keras2onnx's Masking -> Bidirectional(LSTM(return_sequences=True)) -> TimeDistributed
    Dense: the sequence lengths computed from the input (a step is masked when all its
    features are 0), the batch-major input transposed to time-major, the zero states from the
    Shape chain, the [T, 2, N, H] output as [N, T, 2H] by Transpose [2, 0, 1, 3] + Reshape."""
    g = Graph(seed)
    zero = g.const(np.array(0.0, np.float32))
    live = g("Cast", [g("Not", [g("Equal", ["x", zero])])], to=TensorProto.FLOAT)
    step = g("ReduceMax", [live], axes=[2], keepdims=0)                       # [N, T]
    lens = g("Cast", [g("ReduceSum", [step, g.const(np.array([1], np.int64))], keepdims=0)],
             to=TensorProto.INT32)
    seq = g("Transpose", ["x"], perm=[1, 0, 2])                               # [T, N, F]
    shape = g("Shape", ["x"])
    batch = g("Unsqueeze", [g("Gather", [shape, g.const(np.array(0, np.int64))], axis=0),
                            g.const(np.array([0], np.int64))])
    dims = g("Concat", [g.const(np.array([2], np.int64)), batch,
                        g.const(np.array([7], np.int64))], axis=0)
    h0 = g("ConstantOfShape", [dims], value=helper.make_tensor("v", TensorProto.FLOAT, [1],
                                                                [0.0]))
    w, r, b = rnn_weights(g, 4, 2, 7, 5)
    y, _, _ = g.node("LSTM", [seq, w, r, b, lens, h0, h0], 3, hidden_size=7,
                     direction="bidirectional")
    y = g("Transpose", [y], perm=[2, 0, 1, 3])                                # [N, T, 2, H]
    y = g("Reshape", [y, g.const(np.array([0, 0, -1], np.int64))])
    out = g("Add", [g("MatMul", [y, g.weight(14, 3)]), g.weight(3)])
    return g.model({"x": [2, 8, 5]}, [out], 13)

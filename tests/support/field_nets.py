"""Networks from other fields (OCR, speech, audio, control flow, segmentation, super-resolution,
vision transformers, mobile CNNs, pre-quantized QDQ), written the way their exporters write
them (torch.onnx, tf2onnx, keras2onnx, onnxruntime's quantizer), reproduced with onnx.helper.

Weights are seeded but shaped like trained ones: He-normal convolutions with per-channel gains
(trained filters differ in norm by 2-3x across channels), BatchNorm statistics near identity,
recurrent weights in torch's `U(-1/sqrt(H), 1/sqrt(H))` range, small biases. Nothing large is
committed: every model is built at test time in well under a second.

`FIELD_NETS[name] = FieldNet(build, shape, inputs, slow)`: `build(rng)` returns the ModelProto
(its one input is named "x"), `shape` the input shape it is compiled for, `inputs(count, seed)`
realistic inputs for calibration and checks (images, text lines, audio), `slow` whether the
case belongs to the slow run. `qdq_model` makes a pre-quantized model of any of them with
onnxruntime's own `quantize_static` (QDQ format), as a user would bring one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class FieldNet:
    build: Callable[[np.random.Generator], Any]
    shape: tuple[int, ...]
    inputs: Callable[[int, int], list[np.ndarray]]
    slow: bool = False


FIELD_NETS: dict[str, FieldNet] = {}


def _net(name: str, shape: tuple[int, ...], inputs: str, slow: bool = False):
    def deco(fn):
        FIELD_NETS[name] = FieldNet(fn, shape, lambda n, seed: _INPUTS[inputs](shape, n, seed),
                                    slow)
        return fn
    return deco


# --- inputs ---------------------------------------------------------------------------------

def _images(shape: tuple[int, ...], count: int, seed: int) -> list[np.ndarray]:
    from corpus import images

    return images(shape, count, seed)


def _text(shape: tuple[int, ...], count: int, seed: int) -> list[np.ndarray]:
    from corpus import text_images

    n, c, h, w = shape
    return [np.ascontiguousarray(t[:, :c]) for t in text_images((n, 3, h, w), count, seed)]


def audio(n_samples: int, count: int, seed: int) -> list[np.ndarray]:
    """Speech-like waveforms at 16 kHz: a few harmonics of a gliding pitch under a syllable
    envelope, plus background noise, peak near 0.5 (as float PCM)."""
    rng = np.random.default_rng(seed)
    t = np.arange(n_samples) / 16000.0
    out = []
    for _ in range(count):
        f0 = rng.uniform(100, 250) * (1 + 0.2 * np.sin(2 * np.pi * rng.uniform(2, 6) * t))
        phase = 2 * np.pi * np.cumsum(f0) / 16000.0
        voice = sum(rng.uniform(0.2, 1.0) / k * np.sin(k * phase) for k in range(1, 8))
        env = np.clip(np.sin(2 * np.pi * rng.uniform(3, 8) * t + rng.uniform(0, 6)), 0, None)
        y = voice * env + rng.normal(0, 0.02, n_samples)
        out.append((0.5 * y / np.abs(y).max()).astype(np.float32))
    return out


def _audio_ncw(shape: tuple[int, ...], count: int, seed: int) -> list[np.ndarray]:
    return [a.reshape(shape) for a in audio(int(np.prod(shape)), count, seed)]


def _features(shape: tuple[int, ...], count: int, seed: int) -> list[np.ndarray]:
    """Log-mel-like features (N, 1, F, T): smooth over frequency, bursts over time, about
    zero-mean unit-variance as a keyword spotter's normalised input."""
    rng = np.random.default_rng(seed)
    n, c, f, t = shape
    out = []
    for _ in range(count):
        spec = np.cumsum(rng.normal(0, 0.3, (n, c, f, t)), axis=2)
        spec += np.sin(np.linspace(0, rng.uniform(2, 6), t))[None, None, None, :] * 1.5
        spec = (spec - spec.mean()) / (spec.std() + 1e-6)
        out.append(spec.astype(np.float32))
    return out


_INPUTS = {"images": _images, "text": _text, "audio": _audio_ncw, "features": _features}


# --- the graph builder -----------------------------------------------------------------------

class Builder:
    """A small graph builder over onnx.helper with trained-like weight initialisers."""

    def __init__(self, rng: np.random.Generator, prefix: str = "") -> None:
        self.rng, self.nodes, self.inits, self.n, self.prefix = rng, [], [], 0, prefix

    def name(self, base: str) -> str:
        self.n += 1
        return f"{self.prefix}{base}_{self.n}"

    def const(self, arr: Any, dtype: Any = np.float32) -> str:
        from onnx import numpy_helper

        n = self.name("c")
        self.inits.append(numpy_helper.from_array(np.asarray(arr, dtype), n))
        return n

    def ints(self, values: Any) -> str:
        return self.const(values, np.int64)

    def op(self, op_type: str, ins: list[str], n_out: int = 1, **attrs) -> Any:
        from onnx import helper

        outs = [self.name(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, ins, outs, name=outs[0], **attrs))
        return outs[0] if n_out == 1 else outs

    # weights
    def conv_w(self, cout: int, cin: int, *k: int) -> np.ndarray:
        fan_in = cin * int(np.prod(k))
        gain = self.rng.uniform(0.5, 1.5, (cout,) + (1,) * (1 + len(k)))
        return self.rng.normal(0, np.sqrt(2.0 / fan_in), (cout, cin) + k) * gain

    def conv(self, x: str, cin: int, cout: int, k: int | tuple = 3, stride: int | tuple = 1,
             group: int = 1, pad: int | tuple | None = None, bias: bool = True) -> str:
        ks = (k, k) if isinstance(k, int) else tuple(k)
        st = (stride,) * len(ks) if isinstance(stride, int) else tuple(stride)
        p = tuple(kk // 2 for kk in ks) if pad is None else \
            ((pad,) * len(ks) if isinstance(pad, int) else tuple(pad))
        ins = [x, self.const(self.conv_w(cout, cin // group, *ks))]
        if bias:
            ins.append(self.const(self.rng.normal(0, 0.05, cout)))
        return self.op("Conv", ins, kernel_shape=list(ks), strides=list(st), pads=list(p) * 2,
                       group=group)

    def bn(self, x: str, c: int) -> str:
        r = self.rng
        return self.op("BatchNormalization", [x, self.const(r.uniform(0.8, 1.2, c)),
                                              self.const(r.normal(0, 0.1, c)),
                                              self.const(r.normal(0, 0.1, c)),
                                              self.const(r.uniform(0.5, 1.5, c))])

    def linear(self, x: str, cin: int, cout: int, gain: float = 1.0) -> str:
        """nn.Linear on a rank > 2 input, as torch.onnx writes it: MatMul + Add."""
        w = self.rng.normal(0, gain * np.sqrt(1.0 / cin), (cin, cout))
        return self.op("Add", [self.op("MatMul", [x, self.const(w)]),
                               self.const(self.rng.normal(0, 0.05, cout))])

    def swish(self, x: str) -> str:
        return self.op("Mul", [x, self.op("Sigmoid", [x])])

    def model(self, x_shape: list, y: str, opset: int = 13, ir: int = 8) -> Any:
        from onnx import TensorProto, checker, helper, shape_inference

        graph = helper.make_graph(self.nodes, "net",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                 x_shape)],
                                  [helper.make_tensor_value_info(y, TensorProto.FLOAT, None)],
                                  self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = ir
        # the output typed as the exporter types it: by shape inference
        inferred = shape_inference.infer_shapes(m).graph.output[0]
        if inferred.type.tensor_type.HasField("shape"):
            m.graph.output[0].CopyFrom(inferred)
        checker.check_model(m)
        return m


def _rnn_weights(rng: np.random.Generator, dirs: int, gates: int, hidden: int, cin: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """W, R, B of an ONNX LSTM/GRU in torch's initialisation range."""
    k = 1.0 / np.sqrt(hidden)
    w = rng.uniform(-k, k, (dirs, gates * hidden, cin))
    r = rng.uniform(-k, k, (dirs, gates * hidden, hidden))
    b = rng.uniform(-k, k, (dirs, 2 * gates * hidden))
    return w, r, b


def _zeros_state(g: Builder, seq: str, dirs: int, hidden: int, opset: int) -> str:
    """torch.onnx's initial state for `torch.zeros(dirs, x.size(1), hidden)`:
    Shape -> Gather -> Unsqueeze -> Concat -> ConstantOfShape."""
    from onnx import TensorProto, helper

    batch = g.op("Gather", [g.op("Shape", [seq]), g.ints(1)], axis=0)
    if opset >= 13:
        ub = g.op("Unsqueeze", [batch, g.ints([0])])
    else:
        ub = g.op("Unsqueeze", [batch], axes=[0])
    dims = g.op("Concat", [g.ints([dirs]), ub, g.ints([hidden])], axis=0)
    return g.op("ConstantOfShape", [dims],
                value=helper.make_tensor("value", TensorProto.FLOAT, [1], [0.0]))


# --- OCR and speech ---------------------------------------------------------------------------

@_net("torch_crnn_ocr", (1, 1, 32, 64), "text")
def crnn(rng):
    """A CRNN text recognizer (torch.onnx, opset 12): conv stack to height 1, Squeeze,
    Permute to (T, N, C), a bidirectional LSTM fed zero states made by the exporter's
    Shape chain, Transpose/Reshape of its (T, 2, N, H) output, Linear, LogSoftmax."""
    g, opset, hid, classes = Builder(rng), 12, 24, 20
    y = g.op("Relu", [g.bn(g.conv("x", 1, 16), 16)])
    y = g.op("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])           # 16 x 32
    y = g.op("Relu", [g.bn(g.conv(y, 16, 32), 32)])
    y = g.op("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])           # 8 x 16
    y = g.op("Relu", [g.bn(g.conv(y, 32, 32), 32)])
    y = g.op("MaxPool", [y], kernel_shape=[2, 1], strides=[2, 1])           # 4 x 16
    y = g.op("Relu", [g.bn(g.conv(y, 32, 32, k=(4, 1), pad=0), 32)])         # 1 x 16
    seq = g.op("Transpose", [g.op("Squeeze", [y], axes=[2])], perm=[2, 0, 1])  # (T, N, C)
    w, r, b = _rnn_weights(rng, 2, 4, hid, 32)
    h0 = _zeros_state(g, seq, 2, hid, opset)
    c0 = _zeros_state(g, seq, 2, hid, opset)
    out = g.op("LSTM", [seq, g.const(w), g.const(r), g.const(b), "", h0, c0], n_out=3,
               hidden_size=hid, direction="bidirectional")
    yt = g.op("Transpose", [out[0]], perm=[0, 2, 1, 3])                     # (T, N, 2, H)
    yt = g.op("Reshape", [yt, g.ints([16, 1, 2 * hid])])
    logits = g.linear(yt, 2 * hid, classes, gain=4.0)  # a trained head: peaked posteriors
    return g.model([1, 1, 32, 64], g.op("LogSoftmax", [logits], axis=2), opset=opset)


@_net("torch_gru_kws", (1, 1, 20, 32), "features")
def gru_kws(rng):
    """A GRU keyword spotter (torch.onnx, opset 13) on a (N, 1, F, T) feature map: a conv
    front end, Reshape/Transpose to (T, N, C), a GRU (linear_before_reset, as torch writes
    it, no initial state), its last state Y_h, Linear, Softmax over 12 keywords."""
    g, hid = Builder(rng), 32
    y = g.op("Relu", [g.bn(g.conv("x", 1, 8, stride=(2, 1)), 8)])            # (1, 8, 10, 32)
    y = g.op("Relu", [g.bn(g.conv(y, 8, 8), 8)])
    seq = g.op("Transpose", [g.op("Reshape", [y, g.ints([1, 80, 32])])], perm=[2, 0, 1])
    w, r, b = _rnn_weights(rng, 1, 3, hid, 80)
    out = g.op("GRU", [seq, g.const(w), g.const(r), g.const(b)], n_out=2, hidden_size=hid,
               linear_before_reset=1)
    last = g.op("Squeeze", [out[1], g.ints([0])])                            # (N, H)
    logits = g.op("Gemm", [last, g.const(rng.normal(0, 4 * np.sqrt(1 / hid), (12, hid))),
                           g.const(rng.normal(0, 0.05, 12))], transB=1)
    return g.model([1, 1, 20, 32], g.op("Softmax", [logits], axis=1))


# --- audio ----------------------------------------------------------------------------------

def _mel_matrix(n_freq: int, n_mels: int, sr: float = 16000.0) -> np.ndarray:
    """A Slaney-style triangular mel filterbank (n_freq, n_mels), as torchaudio builds it."""
    def mel(f):
        return 2595.0 * np.log10(1.0 + f / 700.0)

    def hz(m):
        return 700.0 * (10 ** (m / 2595.0) - 1.0)

    freqs = np.linspace(0, sr / 2, n_freq)
    pts = hz(np.linspace(mel(0.0), mel(sr / 2), n_mels + 2))
    fb = np.zeros((n_freq, n_mels))
    for m in range(n_mels):
        lo, c, hi = pts[m], pts[m + 1], pts[m + 2]
        fb[:, m] = np.clip(np.minimum((freqs - lo) / (c - lo), (hi - freqs) / (hi - c)), 0, None)
    return fb


def _stft_kernels(n_fft: int) -> tuple[np.ndarray, np.ndarray]:
    """Hann-windowed DFT kernels (n_fft // 2 + 1, 1, n_fft): STFT as Conv1d (nnAudio,
    torch-stft, keras STFT layers)."""
    n = np.arange(n_fft)
    k = np.arange(n_fft // 2 + 1)[:, None]
    win = 0.5 - 0.5 * np.cos(2 * np.pi * n / n_fft)
    ang = 2 * np.pi * k * n / n_fft
    return (np.cos(ang) * win)[:, None, :], (-np.sin(ang) * win)[:, None, :]


@_net("torch_melspec", (1, 1, 1024), "audio")
def melspec(rng):
    """A mel-spectrogram front end (torch.onnx, opset 13): STFT as two Conv1d with fixed
    cos/sin kernels (n_fft 64, hop 16), power = re**2 + im**2 (`Pow`), Transpose, MatMul with a
    constant mel matrix, `Clip(min=1e-5)`, `Log`, then normalised to its maximum
    (`ReduceMax`, `Sub`) and a small conv classifier on the log-mel image."""
    g, n_fft, hop, mels = Builder(rng), 64, 16, 16
    kc, ks = _stft_kernels(n_fft)
    re = g.op("Conv", ["x", g.const(kc)], kernel_shape=[n_fft], strides=[hop], pads=[32, 32])
    im = g.op("Conv", ["x", g.const(ks)], kernel_shape=[n_fft], strides=[hop], pads=[32, 32])
    two = g.const(np.array(2.0))
    power = g.op("Add", [g.op("Pow", [re, two]), g.op("Pow", [im, two])])  # (1, 33, 65)
    spec = g.op("MatMul", [g.op("Transpose", [power], perm=[0, 2, 1]),
                           g.const(_mel_matrix(n_fft // 2 + 1, mels))])    # (1, 65, 16)
    logmel = g.op("Log", [g.op("Clip", [spec, g.const(np.array(1e-5)), ""])])
    top = g.op("ReduceMax", [logmel], axes=[1, 2], keepdims=1)
    norm = g.op("Sub", [logmel, top])
    img = g.op("Unsqueeze", [g.op("Transpose", [norm], perm=[0, 2, 1]), g.ints([1])])
    y = g.op("Relu", [g.bn(g.conv(img, 1, 8, stride=2), 8)])               # (1, 8, 8, 33)
    y = g.op("GlobalAveragePool", [g.op("Relu", [g.conv(y, 8, 16, stride=2)])])
    y = g.op("Flatten", [y], axis=1)
    y = g.op("Gemm", [y, g.const(rng.normal(0, 0.25, (10, 16))),
                      g.const(rng.normal(0, 0.05, 10))], transB=1)
    return g.model([1, 1, 1024], y, opset=13)


@_net("keras_audio_cnn", (1, 1024, 1), "audio")
def audio_cnn(rng):
    """An audio CNN as keras2onnx / tf2onnx write Keras models (opset 13): NWC input, each
    Conv1D as Transpose -> Conv on a rank-3 tensor -> Transpose, a learned STFT magnitude
    (`Mul` by itself, `Max` with a constant floor, `Sqrt`), `LeakyRelu`, an element-wise
    `Max` with a constant (a clip), global pooling over time (`ReduceMean`), Dense."""
    g = Builder(rng)

    def conv1d_nwc(x, cin, cout, k, stride):
        t = g.op("Transpose", [x], perm=[0, 2, 1])
        c = g.conv(t, cin, cout, k=(k,), stride=(stride,), pad=(k // 2,))
        return g.op("Transpose", [c], perm=[0, 2, 1])

    y = conv1d_nwc("x", 1, 16, 32, 8)                                          # (1, 129, 16)
    mag = g.op("Sqrt", [g.op("Max", [g.op("Mul", [y, y]), g.const(np.array(1e-6))])])
    y = g.op("LeakyRelu", [conv1d_nwc(mag, 16, 24, 5, 2)], alpha=0.2)          # (1, 65, 24)
    y = g.op("Max", [conv1d_nwc(y, 24, 24, 3, 1), g.const(np.array(-1.0))])
    y = g.op("LeakyRelu", [y], alpha=0.1)
    y = g.op("ReduceMean", [y], axes=[1], keepdims=0)                          # (1, 24)
    y = g.op("MatMul", [y, g.const(rng.normal(0, np.sqrt(1 / 24), (24, 8)))])
    return g.model([1, 1024, 1], g.op("Add", [y, g.const(rng.normal(0, 0.05, 8))]),
                   opset=13)


@_net("onnx_vad_if_loop", (1, 1, 512), "audio")
def vad(rng):
    """A voice-activity detector with control flow (opset 13): an `If` on `Equal` of the
    input's length picks the front end (a strided Conv1d holding branch), and a `Loop` over
    the frames accumulates a smoothed energy (s = 0.8 s + 0.2 energy[i]) whose square root
    gates a Linear of the features; a Sigmoid gives a speech probability per feature."""
    return _vad(rng, scan=False)


@_net("onnx_vad_loop_scan", (1, 1, 512), "audio")
def vad_scan(rng):
    """The same detector whose `Loop` also emits every step's state as a scan output (8, 1):
    one probability per frame."""
    return _vad(rng, scan=True)


def _vad(rng, scan: bool):
    from onnx import TensorProto, helper

    g = Builder(rng)
    n = g.op("Gather", [g.op("Shape", ["x"]), g.ints(2)], axis=0)
    cond = g.op("Equal", [n, g.ints(512)])

    def branch(stride: int, tag: str):
        b = Builder(rng, prefix=f"{tag}_")
        y = b.op("Relu", [b.conv("x", 1, 8, k=(16,), stride=(stride,), pad=(0,))])
        y = b.op("Relu", [b.conv(y, 8, 8, k=(3,), stride=(1,), pad=(1,))])
        y = b.op("ReduceMean", [y], axes=[2], keepdims=0)                          # (1, 8)
        out = helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, 8])
        # branch constants as Constant nodes (exporters put subgraph weights there)
        consts = [helper.make_node("Constant", [], [i.name], value=i) for i in b.inits]
        return helper.make_graph(consts + b.nodes, f"{tag}_branch", [], [out])

    feat = g.op("If", [cond], then_branch=branch(8, "then"), else_branch=branch(4, "else"))
    frames = g.op("Reshape", ["x", g.ints([8, 64])])                              # (8, 64)
    energy = g.op("ReduceMean", [g.op("Mul", [frames, frames])], axes=[1], keepdims=0)
    # Loop: for i in range(8): s = 0.8 * s + 0.2 * energy[i]
    body_in = [helper.make_tensor_value_info("i", TensorProto.INT64, []),
               helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
               helper.make_tensor_value_info("s_in", TensorProto.FLOAT, [1])]
    body_nodes = [
        helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        helper.make_node("Gather", [energy, "i"], ["e_i"], axis=0),
        helper.make_node("Constant", [], ["k_s"],
                         value=helper.make_tensor("k_s", TensorProto.FLOAT, [], [0.8])),
        helper.make_node("Constant", [], ["k_e"],
                         value=helper.make_tensor("k_e", TensorProto.FLOAT, [], [0.2])),
        helper.make_node("Mul", ["s_in", "k_s"], ["a"]),
        helper.make_node("Mul", ["e_i", "k_e"], ["b"]),
        helper.make_node("Add", ["a", "b"], ["s_out"]),
    ] + ([helper.make_node("Identity", ["s_out"], ["s_scan"])] if scan else [])
    body_out = [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
                helper.make_tensor_value_info("s_out", TensorProto.FLOAT, [1])]
    if scan:
        body_out.append(helper.make_tensor_value_info("s_scan", TensorProto.FLOAT, [1]))
    body = helper.make_graph(body_nodes, "accumulate", body_in, body_out)
    loop = g.op("Loop", [g.ints(8), "", g.const(np.zeros(1))], n_out=1 + scan, body=body)
    states = loop[1] if scan else loop                                           # (8, 1) / (1,)
    level = g.op("Reshape", [g.op("Sqrt", [states]), g.ints([1, 8 if scan else 1])])
    proj = g.op("Gemm", [feat, g.const(rng.normal(0, 2.0, (8, 8))),
                         g.const(rng.normal(0, 0.1, 8))], transB=1)             # (1, 8)
    y = g.op("Sub", [g.op("Mul", [proj, g.op("Mul", [level, g.const(np.array(40.0))])]),
                     g.const(np.array(0.5))])
    return g.model([1, 1, 512], g.op("Sigmoid", [y]), opset=13)


# --- vision from other fields -------------------------------------------------------------------

@_net("torch_unet", (1, 3, 32, 32), "images")
def unet(rng):
    """A two-level U-Net (torch.onnx): conv-BN-ReLU pairs, MaxPool down, ConvTranspose
    (k 2, s 2) up, skip Concats, a 1x1 conv to 2 classes."""
    g = Builder(rng)

    def block(x, cin, cout):
        y = g.op("Relu", [g.bn(g.conv(x, cin, cout, bias=False), cout)])
        return g.op("Relu", [g.bn(g.conv(y, cout, cout, bias=False), cout)])

    def up(x, cin, cout):
        w = g.conv_w(cin, cout, 2, 2)  # ConvTranspose weights are (Cin, Cout, kh, kw)
        return g.op("ConvTranspose", [x, g.const(w), g.const(rng.normal(0, 0.05, cout))],
                    kernel_shape=[2, 2], strides=[2, 2])

    e1 = block("x", 3, 8)                                                     # 32
    e2 = block(g.op("MaxPool", [e1], kernel_shape=[2, 2], strides=[2, 2]), 8, 16)   # 16
    mid = block(g.op("MaxPool", [e2], kernel_shape=[2, 2], strides=[2, 2]), 16, 32)  # 8
    d2 = block(g.op("Concat", [up(mid, 32, 16), e2], axis=1), 32, 16)
    d1 = block(g.op("Concat", [up(d2, 16, 8), e1], axis=1), 16, 8)
    return g.model([1, 3, 32, 32], g.conv(d1, 8, 2, k=1), opset=13)


@_net("torch_espcn_sr", (1, 1, 16, 16), "images")
def espcn(rng):
    """ESPCN super-resolution x2 (torch.onnx, opset 13): 5x5 and 3x3 convs with Tanh, a conv
    to r*r channels, PixelShuffle as DepthToSpace (mode CRD)."""
    g = Builder(rng)
    y = g.op("Tanh", [g.conv("x", 1, 16, k=5)])
    y = g.op("Tanh", [g.conv(y, 16, 8)])
    y = g.op("DepthToSpace", [g.conv(y, 8, 4)], blocksize=2, mode="CRD")
    return g.model([1, 1, 16, 16], y, opset=13)


@_net("torch_vit_tiny_block", (1, 3, 32, 32), "images", slow=True)
def vit_block(rng):
    """A ViT-tiny encoder block with patch embedding (torch.onnx, opset 17): Conv with stride =
    patch (8), Flatten/Transpose to tokens, a class token (Expand to the batch, Concat), position
    embedding, LayerNormalization, 2-head attention as MatMul/Softmax with the qkv
    Reshape/Transpose/Gather idiom, GELU (Erf) MLP, residual Adds, and a head on the class
    token."""
    g, d, heads, n_tok = Builder(rng), 32, 2, 17
    dh = d // heads
    p = g.op("Reshape", [g.conv("x", 3, d, k=8, stride=8, pad=0), g.ints([1, d, 16])])
    tok = g.op("Transpose", [p], perm=[0, 2, 1])                                # (1, 16, d)
    batch = g.op("Gather", [g.op("Shape", [tok]), g.ints(0)], axis=0)
    bshape = g.op("Concat", [g.op("Unsqueeze", [batch, g.ints([0])]), g.ints([1, d])], axis=0)
    cls = g.op("Expand", [g.const(rng.normal(0, 0.02, (1, 1, d))), bshape])
    x = g.op("Add", [g.op("Concat", [cls, tok], axis=1),
                     g.const(rng.normal(0, 0.1, (1, n_tok, d)))])

    def ln(v):
        return g.op("LayerNormalization", [v, g.const(rng.uniform(0.8, 1.2, d)),
                                           g.const(rng.normal(0, 0.05, d))], axis=-1,
                    epsilon=1e-6)

    qkv = g.op("Reshape", [g.linear(ln(x), d, 3 * d), g.ints([1, n_tok, 3, heads, dh])])
    qkv = g.op("Transpose", [qkv], perm=[2, 0, 3, 1, 4])                      # (3, N, h, T, dh)
    q, k, v = (g.op("Gather", [qkv, g.ints(i)], axis=0) for i in range(3))
    s = g.op("Mul", [g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 1, 3, 2])]),
                     g.const(np.array(dh ** -0.5))])
    a = g.op("MatMul", [g.op("Softmax", [s], axis=-1), v])                   # (N, h, T, dh)
    a = g.op("Reshape", [g.op("Transpose", [a], perm=[0, 2, 1, 3]), g.ints([1, n_tok, d])])
    x = g.op("Add", [x, g.linear(a, d, d)])
    h = g.linear(ln(x), d, 4 * d)
    h = g.op("Mul", [g.op("Mul", [h, g.op("Add", [g.op("Erf", [
        g.op("Div", [h, g.const(np.array(2 ** 0.5))])]), g.const(np.array(1.0))])]),
        g.const(np.array(0.5))])
    x = g.op("Add", [x, g.linear(h, 4 * d, d)])
    c = g.op("Gather", [ln(x), g.ints(0)], axis=1)                              # (1, d)
    return g.model([1, 3, 32, 32], g.linear(c, d, 10), opset=17)


@_net("torch_efficientnet_swish_se", (1, 3, 32, 32), "images")
def effnet(rng):
    """An EfficientNet block (torch.onnx, opset 13): stem conv + BN + Swish written as
    x * Sigmoid(x), an MBConv (1x1 expand, 3x3 depthwise, squeeze-excite with Swish and a
    Sigmoid gate, 1x1 project, residual), head conv, global pool, classifier."""
    g = Builder(rng)
    y = g.swish(g.bn(g.conv("x", 3, 16, stride=2, bias=False), 16))          # (1, 16, 16, 16)
    e = g.swish(g.bn(g.conv(y, 16, 64, k=1, bias=False), 64))
    e = g.swish(g.bn(g.conv(e, 64, 64, group=64, bias=False), 64))
    s = g.op("GlobalAveragePool", [e])
    s = g.op("Sigmoid", [g.conv(g.swish(g.conv(s, 64, 4, k=1)), 4, 64, k=1)])
    e = g.op("Mul", [e, s])
    y = g.op("Add", [y, g.bn(g.conv(e, 64, 16, k=1, bias=False), 16)])
    y = g.swish(g.bn(g.conv(y, 16, 32, k=1, bias=False), 32))
    y = g.op("Flatten", [g.op("GlobalAveragePool", [y])], axis=1)
    y = g.op("Gemm", [y, g.const(rng.normal(0, np.sqrt(1 / 32), (10, 32))),
                      g.const(rng.normal(0, 0.05, 10))], transB=1)
    return g.model([1, 3, 32, 32], y, opset=13)


# --- pre-quantized --------------------------------------------------------------------------

def qdq_model(model: Any, samples: list[np.ndarray], *, symmetric: bool = True,
              per_channel: bool = True) -> Any:
    """`model` pre-quantized by onnxruntime's `quantize_static` in the QDQ format, calibrated
    on `samples` (arrays for the input "x"), as a user brings a pre-quantized model: int8
    weights (per channel by default) behind DequantizeLinear, QuantizeLinear/DequantizeLinear
    pairs on the activations (int8 with zero point 0 when `symmetric`, else onnxruntime's
    default uint8 with zero points, which removes Relus into the pairs' ranges)."""
    import os
    import tempfile

    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class _Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._it = iter([{"x": s} for s in samples])

        def get_next(self) -> dict | None:
            return next(self._it, None)

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "float.onnx"), os.path.join(tmp, "qdq.onnx")
        onnx.save(model, src)
        quantize_static(src, dst, _Reader(), quant_format=QuantFormat.QDQ,
                        per_channel=per_channel,
                        activation_type=QuantType.QInt8 if symmetric else QuantType.QUInt8,
                        weight_type=QuantType.QInt8,
                        extra_options={"ActivationSymmetric": symmetric,
                                       "WeightSymmetric": True})
        return onnx.load(dst)

"""The recurrence kernels (LSTM/GRU/RNN after the input projection) against onnxruntime's
LSTM/GRU/RNN nodes on random weights: every direction, sequence_lens, initial states,
peepholes, activations with alpha/beta, clip, input_forget, linear_before_reset, both layouts.

Our side gets what the importer gives it: the projection ``X @ W^T`` computed here with numpy
(the Matmul's job), R and B as ONNX writes them, zeros / T for omitted inputs.
"""

from __future__ import annotations

import numpy as np
import pytest

from host_backend.ops import FLOAT_KERNELS

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

from xrt.errors import InvalidArgumentError  # noqa: E402

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
KERNEL = {"LSTM": "LSTMRecurrence", "GRU": "GRURecurrence", "RNN": "RNNRecurrence"}
TOL = dict(rtol=2e-4, atol=2e-5)  # onnxruntime's sigmoid/tanh are rational approximations


def _case(kind: str, *, t=5, b=3, i=4, h=6, direction="forward", layout=0, seq=False,
          init=False, peep=False, bias=True, seed=0):
    """Random inputs of one ONNX recurrent node: dict name -> array (None when omitted)."""
    r = np.random.default_rng(seed)
    d = 2 if direction == "bidirectional" else 1
    g = GATES[kind]
    x_shape = (t, b, i) if layout == 0 else (b, t, i)
    st_shape = (d, b, h) if layout == 0 else (b, d, h)
    f = np.float32
    return {
        "X": r.standard_normal(x_shape).astype(f),
        "W": (r.standard_normal((d, g * h, i)) * 0.5).astype(f),
        "R": (r.standard_normal((d, g * h, h)) * 0.5).astype(f),
        "B": (r.standard_normal((d, 2 * g * h)) * 0.3).astype(f) if bias else None,
        "sequence_lens": r.integers(1, t + 1, b).astype(np.int32) if seq else None,
        "initial_h": r.standard_normal(st_shape).astype(f) if init else None,
        "initial_c": r.standard_normal(st_shape).astype(f) if init and kind == "LSTM" else None,
        "P": (r.standard_normal((d, 3 * h)) * 0.3).astype(f) if peep else None,
    }


_ORDER = {"LSTM": ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"],
          "GRU": ["X", "W", "R", "B", "sequence_lens", "initial_h"],
          "RNN": ["X", "W", "R", "B", "sequence_lens", "initial_h"]}


def _ort(kind: str, data: dict, attrs: dict) -> list[np.ndarray]:
    """onnxruntime's outputs. It has no layout 1 (batch-major): that runs as layout 0 on
    transposed inputs, the outputs transposed back."""
    if attrs.get("layout", 0) == 1:
        swap = {n: (a.transpose(1, 0, 2) if n in ("X", "initial_h", "initial_c") and
                    a is not None else a) for n, a in data.items()}
        outs = _ort(kind, swap, {k: v for k, v in attrs.items() if k != "layout"})
        return [outs[0].transpose(2, 0, 1, 3)] + [o.transpose(1, 0, 2) for o in outs[1:]]
    names = _ORDER[kind]
    last = max(k for k, n in enumerate(names) if data.get(n) is not None)
    ins = [n if data.get(n) is not None else "" for n in names[:last + 1]]
    outs = ["Y", "Y_h"] + (["Y_c"] if kind == "LSTM" else [])
    node = helper.make_node(kind, ins, outs, **attrs)
    feeds = {n: data[n] for n in ins if n}
    graph = helper.make_graph(
        [node], "rnn",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for n, a in feeds.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    return sess.run(outs, feeds)


def _ours(kind: str, data: dict, attrs: dict) -> list[np.ndarray]:
    """The kernel fed as the importer feeds it."""
    x, w = data["X"], data["W"]
    h = attrs["hidden_size"]
    d, g = w.shape[0], GATES[kind]
    layout = attrs.get("layout", 0)
    t, b = (x.shape[0], x.shape[1]) if layout == 0 else (x.shape[1], x.shape[0])
    xw = (x @ w.reshape(d * g * h, -1).T).astype(np.float32)
    bias = data["B"] if data["B"] is not None else np.zeros((d, 2 * g * h), np.float32)
    st = (d, b, h) if layout == 0 else (b, d, h)
    h0 = data["initial_h"] if data["initial_h"] is not None else np.zeros(st, np.float32)
    lens = data["sequence_lens"] if data["sequence_lens"] is not None else \
        np.full(b, t, np.int32)
    if kind == "LSTM":
        c0 = data["initial_c"] if data["initial_c"] is not None else np.zeros(st, np.float32)
        p = data["P"] if data["P"] is not None else np.zeros((d, 3 * h), np.float32)
        ins = [xw, data["R"], bias, h0, c0, p, lens]
    else:
        ins = [xw, data["R"], bias, h0, lens]
    saved = [np.array(a, copy=True) for a in ins]
    outs = FLOAT_KERNELS[KERNEL[kind]](ins, attrs)
    for a, s in zip(ins, saved):
        np.testing.assert_array_equal(a, s)  # inputs untouched
    return outs


def _compare(kind, data, attrs):
    want = _ort(kind, data, attrs)
    got = _ours(kind, data, attrs)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, f"output {k}: {g.shape} != {w.shape}"
        np.testing.assert_allclose(g, w, **TOL, err_msg=f"{kind} output {k}")


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_directions_layouts(kind, direction, layout):
    data = _case(kind, direction=direction, layout=layout, seed=layout)
    _compare(kind, data, {"hidden_size": 6, "direction": direction, "layout": layout})


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_sequence_lens_and_initial_state(kind, direction, layout):
    data = _case(kind, t=7, b=4, direction=direction, layout=layout, seq=True, init=True,
                 seed=3)
    data["sequence_lens"] = np.array([7, 1, 4, 6], np.int32)  # the full length and shorter
    _compare(kind, data, {"hidden_size": 6, "direction": direction, "layout": layout})


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_zero_length_items(kind):
    """An item of length 0: Y and the final states are zeros (not its initial state)."""
    data = _case(kind, t=4, b=3, direction="bidirectional", seq=True, init=True, seed=1)
    data["sequence_lens"] = np.array([0, 4, 2], np.int32)
    _compare(kind, data, {"hidden_size": 6, "direction": "bidirectional"})


def test_sequence_lens_padding_is_zero_and_state_is_last_valid():
    """A short sequence: Y is zero past its length, Y_h is the state at its last step (the
    first step for the reverse direction)."""
    data = _case("GRU", t=6, b=2, direction="bidirectional", seq=True, seed=5)
    data["sequence_lens"] = np.array([2, 6], np.int32)
    y, yh = _ours("GRU", data, {"hidden_size": 6, "direction": "bidirectional"})
    assert np.all(y[2:, :, 0] == 0) and np.any(y[:2, :, 0] != 0)
    np.testing.assert_array_equal(yh[0, 0], y[1, 0, 0])   # forward: last valid step
    np.testing.assert_array_equal(yh[1, 0], y[0, 1, 0])   # reverse: timestep 0


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_lstm_peepholes(direction):
    data = _case("LSTM", direction=direction, peep=True, init=True, seed=7)
    _compare("LSTM", data, {"hidden_size": 6, "direction": direction})


def test_lstm_input_forget():
    data = _case("LSTM", peep=True, init=True, seed=8)
    _compare("LSTM", data, {"hidden_size": 6, "input_forget": 1})


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_clip(kind):
    data = _case(kind, direction="bidirectional", peep=kind == "LSTM", init=True, seed=9)
    data["X"] *= 4
    _compare(kind, data, {"hidden_size": 6, "direction": "bidirectional", "clip": 0.7})


def test_lstm_clip_bounds_gate_inputs_not_the_cell_state():
    """A large initial cell state keeps |C| > clip: onnxruntime applies h() to C unclipped."""
    data = _case("LSTM", t=4, peep=True, init=True, seed=9)
    data["X"] *= 4
    data["initial_c"] = np.full_like(data["initial_c"], 6.0)
    want = _ort("LSTM", data, {"hidden_size": 6, "clip": 0.7})
    assert np.abs(want[2]).max() > 2 * 0.7
    _compare("LSTM", data, {"hidden_size": 6, "clip": 0.7})


def test_gru_linear_before_reset():
    for direction in ("forward", "bidirectional"):
        data = _case("GRU", direction=direction, init=True, seq=True, seed=10)
        _compare("GRU", data, {"hidden_size": 6, "direction": direction,
                               "linear_before_reset": 1})


def test_without_bias():
    for kind in GATES:
        _compare(kind, _case(kind, bias=False, seed=11), {"hidden_size": 6})


# every activation, each with its alpha/beta where it takes them (consumed in order)
_ACT_SETS = [
    (["Relu"], [], []),
    (["Affine"], [0.7], [0.1]),
    (["LeakyRelu"], [0.2], []),
    (["ThresholdedRelu"], [0.3], []),
    (["ScaledTanh"], [1.5], [0.6]),
    (["HardSigmoid"], [0.3], [0.4]),
    (["HardSigmoid"], [], []),        # defaults 0.2 / 0.5
    (["Elu"], [0.8], []),
    (["Softsign"], [], []),
    (["Softplus"], [], []),
    (["Sigmoid"], [], []),
]


@pytest.mark.parametrize("names,alpha,beta", _ACT_SETS, ids=[a[0][0] + str(len(a[1]))
                                                             for a in _ACT_SETS])
def test_rnn_every_activation(names, alpha, beta):
    data = _case("RNN", direction="bidirectional", init=True, seed=12)
    attrs = {"hidden_size": 6, "direction": "bidirectional", "activations": names * 2}
    if alpha:
        attrs["activation_alpha"] = alpha * 2
    if beta:
        attrs["activation_beta"] = beta * 2
    _compare("RNN", data, attrs)


def test_lstm_mixed_activations_per_direction():
    """Forward and backward directions with different activations; alpha/beta consumed by
    the activations that take them, in order."""
    data = _case("LSTM", direction="bidirectional", init=True, seed=13)
    attrs = {"hidden_size": 6, "direction": "bidirectional",
             "activations": ["HardSigmoid", "LeakyRelu", "Softsign",
                             "Sigmoid", "ScaledTanh", "Elu"],
             "activation_alpha": [0.25, 0.1, 0.9, 0.7], "activation_beta": [0.45, 1.2]}
    _compare("LSTM", data, attrs)


def test_gru_custom_activations():
    data = _case("GRU", direction="reverse", init=True, seed=14)
    attrs = {"hidden_size": 6, "direction": "reverse", "activations": ["HardSigmoid", "Relu"],
             "activation_alpha": [0.3], "activation_beta": [0.6]}
    _compare("GRU", data, attrs)


def test_float64_computes_in_float64():
    data = _case("RNN", seed=15)
    xw = (data["X"].astype(np.float64) @ data["W"][0].T.astype(np.float64))
    lens = np.full(3, 5, np.int64)
    h0 = np.zeros((1, 3, 6))
    y, yh = FLOAT_KERNELS["RNNRecurrence"](
        [xw, data["R"].astype(np.float64), data["B"].astype(np.float64), h0, lens],
        {"hidden_size": 6})
    assert y.dtype == np.float64 and yh.dtype == np.float64


@pytest.mark.parametrize("lens", [[0, 9, 1], [6, 1]])
def test_bad_sequence_lens(lens):
    """Lengths out of 0..T or of the wrong count: a clear runtime error, not an IndexError."""
    data = _case("RNN", seed=16)
    bad = dict(data, sequence_lens=np.array(lens, np.int32))
    with pytest.raises(InvalidArgumentError, match="sequence_lens"):
        _ours("RNN", bad, {"hidden_size": 6})


_ACT_NAMES = ["Sigmoid", "Tanh", "Relu", "Affine", "LeakyRelu", "ThresholdedRelu", "ScaledTanh",
              "HardSigmoid", "Elu", "Softsign", "Softplus"]


@pytest.mark.parametrize("block", range(4))
def test_random_configurations(block):
    """Random cells, directions, sizes, lengths (0 included), states, peepholes, activation
    lists with alpha/beta lists of any length, clip, linear_before_reset, input_forget and
    layout: 25 configurations per block, each against onnxruntime."""
    rng = np.random.default_rng(100 + block)
    for i in range(25):
        kind = str(rng.choice(list(GATES)))
        direction = str(rng.choice(["forward", "reverse", "bidirectional"]))
        t, b, i_, h = (int(v) for v in rng.integers(1, [7, 4, 5, 5]))
        data = _case(kind, t=t, b=b, i=i_, h=h, direction=direction, seq=bool(rng.integers(2)),
                     init=bool(rng.integers(2)), peep=kind == "LSTM" and bool(rng.integers(2)),
                     bias=bool(rng.integers(2)), seed=1000 * block + i)
        if data["sequence_lens"] is not None:
            data["sequence_lens"] = rng.integers(0, t + 1, b).astype(np.int32)
        attrs: dict = {"hidden_size": h, "direction": direction}
        if rng.integers(2):
            n = {"LSTM": 3, "GRU": 2, "RNN": 1}[kind] * (2 if direction == "bidirectional" else 1)
            attrs["activations"] = [str(a) for a in rng.choice(_ACT_NAMES, n)]
            for key in ("activation_alpha", "activation_beta"):
                k = int(rng.integers(0, 2 * n + 1))
                if k:
                    attrs[key] = [float(v) for v in rng.uniform(0.1, 1.5, k)]
        if rng.integers(3) == 0:
            attrs["clip"] = float(rng.uniform(0.3, 3))
        if kind == "GRU" and rng.integers(2):
            attrs["linear_before_reset"] = 1
        if kind == "LSTM" and rng.integers(4) == 0:
            attrs["input_forget"] = 1
        if rng.integers(3) == 0:
            attrs["layout"] = 1
            data = {k: v.transpose(1, 0, 2) if k in ("X", "initial_h", "initial_c") and
                    v is not None else v for k, v in data.items()}
        _compare(kind, data, attrs)

"""xir.ops.recurrent: the LSTM/GRU/RNN recurrence ops' shapes, attribute checks, activation
table and json + raw round trip; run on the HostBackend through a Session."""

from __future__ import annotations

import numpy as np
import pytest

import xir
from xir.errors import FieldTypeError, MissingFieldError, ShapeMismatchError
from xir.ops.recurrent import resolve_activations
from xir.serialize import load_network, save_network

T, B, H = 5, 2, 3


def _lstm_net(direction="forward", layout=0, **attrs) -> xir.Network:
    """Input xw -> LSTMRecurrence -> Output (Y, Y_h, Y_c), random parameters."""
    r = np.random.default_rng(0)
    d = 2 if direction == "bidirectional" else 1
    b = xir.NetworkBuilder("lstm")
    xw = b.input([T, B, d * 4 * H] if layout == 0 else [B, T, d * 4 * H], name="xw")
    state = (d, B, H) if layout == 0 else (B, d, H)
    f = np.float32
    outs = b.op("LSTMRecurrence", [
        xw, r.standard_normal((d, 4 * H, H)).astype(f),
        r.standard_normal((d, 8 * H)).astype(f), np.zeros(state, f), np.zeros(state, f),
        r.standard_normal((d, 3 * H)).astype(f), np.array([T, 2], np.int32)[:B]],
        hidden_size=H, direction=direction, layout=layout, **attrs)
    b.output(*outs)
    return b.build()


@pytest.mark.parametrize("direction,layout,y,yh", [
    ("forward", 0, (T, 1, B, H), (1, B, H)),
    ("bidirectional", 0, (T, 2, B, H), (2, B, H)),
    ("reverse", 1, (B, T, 1, H), (B, 1, H)),
    ("bidirectional", 1, (B, T, 2, H), (B, 2, H)),
])
def test_lstm_shapes(direction, layout, y, yh):
    net = _lstm_net(direction, layout)
    op = next(o for o in net.ops if o.op_type == "LSTMRecurrence")
    assert [tuple(v.shape) for v in op.outputs] == [y, yh, yh]


def test_gru_and_rnn_shapes():
    b = xir.NetworkBuilder("gru")
    xw = b.input([T, B, 2 * 3 * H])
    z = np.zeros
    y, yh = b.op("GRURecurrence", [xw, z((2, 3 * H, H), np.float32), z((2, 6 * H), np.float32),
                                   z((2, B, H), np.float32), np.full(B, T, np.int32)],
                 hidden_size=H, direction="bidirectional", linear_before_reset=True)
    assert (tuple(y.shape), tuple(yh.shape)) == ((T, 2, B, H), (2, B, H))
    xr = b.input([B, T, H])
    y, yh = b.op("RNNRecurrence", [xr, z((1, H, H), np.float32), z((1, 2 * H), np.float32),
                                   z((B, 1, H), np.float32), np.full(B, T, np.int32)],
                 hidden_size=H, layout=1)
    assert (tuple(y.shape), tuple(yh.shape)) == ((B, T, 1, H), (B, 1, H))


def _rnn_inputs(b, xw_shape=(T, B, H), r=(1, H, H), bias=(1, 2 * H), h0=(1, B, H), lens=(B,)):
    z = np.zeros
    return [b.input(list(xw_shape)), z(r, np.float32), z(bias, np.float32),
            z(h0, np.float32), np.full(lens, T, np.int32)]


@pytest.mark.parametrize("field,kw,match", [
    ("xw", dict(xw_shape=(T, B, 2 * H)), "xw must be"),
    ("r", dict(r=(1, H, H + 1)), "r must have shape"),
    ("b", dict(bias=(1, H)), "b must have shape"),
    ("h0", dict(h0=(1, B + 1, H)), "initial_h must have shape"),
    ("lens", dict(lens=(B + 1,)), "sequence_lens must have shape"),
])
def test_input_shapes_are_checked(field, kw, match):
    b = xir.NetworkBuilder("bad")
    with pytest.raises(ShapeMismatchError, match=match):
        b.op("RNNRecurrence", _rnn_inputs(b, **kw), hidden_size=H)


def test_arity_is_checked():
    b = xir.NetworkBuilder("bad")
    with pytest.raises(ShapeMismatchError, match="takes 5 inputs"):
        b.op("RNNRecurrence", _rnn_inputs(b)[:4], hidden_size=H)


@pytest.mark.parametrize("attrs,error,match", [
    ({}, MissingFieldError, "hidden_size"),
    ({"hidden_size": 0}, ShapeMismatchError, "hidden_size must be >= 1"),
    ({"hidden_size": H, "direction": "sideways"}, FieldTypeError, "direction must be one of"),
    ({"hidden_size": H, "layout": 2}, FieldTypeError, "layout must be one of"),
    ({"hidden_size": H, "clip": 0.0}, ShapeMismatchError, "clip must be > 0"),
    ({"hidden_size": H, "activations": ["Tanh", "Tanh"]}, ShapeMismatchError,
     "activations needs 1 names"),
    ({"hidden_size": H, "activations": ["Swish"]}, FieldTypeError, "unknown activation"),
])
def test_attributes_are_checked(attrs, error, match):
    b = xir.NetworkBuilder("bad")
    with pytest.raises(error, match=match):
        b.op("RNNRecurrence", _rnn_inputs(b), **attrs)


def test_resolve_activations_consumes_alpha_beta_in_order():
    """onnxruntime's rule: alpha/beta go to the activations that take them, in order; the
    defaults fill in once the lists run out (HardSigmoid 0.2/0.5, LeakyRelu 0.01, Elu 1)."""
    got = resolve_activations(["Sigmoid", "LeakyRelu", "HardSigmoid", "Elu", "ScaledTanh"],
                              [0.5, 0.3], [0.7])
    assert got == [("sigmoid", 0.0, 0.0), ("leakyrelu", 0.5, 0.0), ("hardsigmoid", 0.3, 0.7),
                   ("elu", 1.0, 0.0), ("scaledtanh", 0.0, 0.0)]
    assert resolve_activations(["hardsigmoid"], [], [])[0] == ("hardsigmoid", 0.2, 0.5)


def test_activation_table_per_direction():
    b = xir.NetworkBuilder("t")
    ins = _rnn_inputs(b, xw_shape=(T, B, 2 * H), r=(2, H, H), bias=(2, 2 * H), h0=(2, B, H))
    b.op("RNNRecurrence", ins, hidden_size=H, direction="bidirectional",
         activations=["Relu", "Affine"], activation_alpha=[2.0], activation_beta=[1.0])
    op = b.net.ops[-1]
    assert op.activation_table() == [[("relu", 0.0, 0.0)], [("affine", 2.0, 1.0)]]


def test_json_raw_round_trip_and_host_run(tmp_path):
    """The op (list-of-string and list-of-float attributes, int Params) survives json + raw,
    and the loaded network runs on the HostBackend to the same outputs."""
    from host_backend import HostBackend
    from xrt import HostDevice, Session, Tensor

    net = _lstm_net("bidirectional", 0, activations=["HardSigmoid", "Tanh", "Softsign"] * 2,
                    activation_alpha=[0.25, 0.3], activation_beta=[0.55, 0.4], clip=3.0,
                    input_forget=True)
    save_network(net, tmp_path / "lstm.json")
    loaded = load_network(tmp_path / "lstm.json")
    op = next(o for o in loaded.ops if o.op_type == "LSTMRecurrence")
    assert op.activations == ["HardSigmoid", "Tanh", "Softsign"] * 2
    assert op.activation_alpha == [0.25, 0.3] and op.clip == 3.0 and op.input_forget is True
    x = np.random.default_rng(1).standard_normal((T, B, 2 * 4 * H)).astype(np.float32)

    def run(n):
        sess = Session.Create([HostBackend], n.view(0), [HostDevice.Default()])
        sess.apply()
        return [np.asarray(t) for t in sess.forward([Tensor(x)])]

    first, second = run(net), run(loaded)
    assert [a.shape for a in first] == [(T, 2, B, H), (2, B, H), (2, B, H)]
    for a, c in zip(first, second):
        np.testing.assert_array_equal(a, c)
    # batch item 1 has length 2: its forward outputs past step 2 are zero
    assert np.all(first[0][2:, 0, 1] == 0) and np.any(first[0][:2, 0, 1] != 0)

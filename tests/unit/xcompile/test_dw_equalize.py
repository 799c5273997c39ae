"""Channel ranges evened out in front of depthwise convolutions (`xcompile.quant.dw_equalize`,
docs/quantization.md section 8): a PP-LCNetV3 block as paddle2onnx writes it (a 1x1 convolution
with channels far apart in range, then a 3x3 depthwise convolution with zero padding), the
float function unchanged against onnxruntime, every channel carried to the map's range, and
the int8 network closer to onnxruntime's float run."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from conv_graph import ConvGraph

from xcompile.frontend.onnx_import import import_onnx
from xcompile.passes import optimize
from xcompile.quant.calibrate import load_calibration
from xcompile.quant.dw_equalize import MAX_GAIN, depthwise_pairs, equalize_depthwise_inputs
from xcompile.quant.quantize import quantize_network
from xcompile.quant.report import cosine
from xcompile.runner import HostRunner


def _model():
    g = ConvGraph(11)
    x = g.conv("x", 3, 16, 3, "stem")
    g.node("Relu", [x], ["r"])
    x = g.conv("r", 16, 16, 1, "pw", gain=np.geomspace(0.1, 8.0, 16))  # folded BatchNorms
    x = g.conv(x, 16, 16, 3, "dw", groups=16)
    g.conv(x, 16, 8, 1, "y")
    return g.model("dw_pair", {"x": [1, 3, 16, 16]}, {"y": [1, 8, 16, 16]})


def _images(n, seed):
    r = np.random.default_rng(seed)
    return [r.uniform(-1, 1, (1, 3, 16, 16)).astype(np.float32) for _ in range(n)]


@pytest.fixture(scope="module")
def case():
    model = _model()
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    held = _images(4, 21)
    return import_onnx(model), _images(6, 2), held, [sess.run(None, {"x": x})[0] for x in held]


def _ranges(net, xs, vid):
    out = []
    HostRunner().run(net, [[x] for x in xs],
                     lambda v, a: out.append(np.abs(a).reshape(-1, a.shape[-1]).max(0))
                     if v.v_id == vid else None)
    return np.max(out, axis=0)


def test_same_function_every_channel_at_the_maps_range(case):
    net, cal, held, want = case
    opt = optimize(net)
    (writer, reader), = depthwise_pairs(opt)
    assert writer.name == "pw" and reader.name == "dw"
    vid = writer.outputs[0].v_id
    before = _ranges(opt, cal, vid)
    assert before.max() / before.min() > 20
    assert equalize_depthwise_inputs(opt, load_calibration(cal, opt)) == 1
    after = _ranges(opt, cal, vid)
    want_ranges = np.minimum(before.max(), before * MAX_GAIN)
    np.testing.assert_allclose(after, want_ranges, rtol=1e-4)
    got = HostRunner().run(opt, [[x] for x in held], lambda v, a: None)
    for g, w in zip(got, want):  # the float network still computes onnxruntime's function
        np.testing.assert_allclose(g[0], w, rtol=1e-4, atol=1e-4)


def test_int8_closer_to_onnxruntime(case):
    net, cal, held, want = case
    runner = HostRunner()
    err = {}
    for flag in (False, True):
        q = quantize_network(net, cal, depthwise_equalize=flag, activation_bias=False)
        assert q.tags["quantization"]["depthwise_equalized"] == int(flag)
        got = runner.run(q, [[x] for x in held], lambda v, a: None)
        err[flag] = np.mean([1.0 - cosine(g[0], w) for g, w in zip(got, want)])
    assert err[True] < 0.7 * err[False], err


def test_pairs_need_a_linear_writer_and_a_depthwise_reader(case):
    net, _, _, _ = case
    opt = optimize(net)
    names = {(w.name, r.name) for w, r in depthwise_pairs(opt)}
    assert ("stem", "pw") not in names  # a ReLU between, and pw is no depthwise conv
    assert ("dw", "y") not in names  # y is a pointwise conv


def test_maps_stored_in_16_bits_left_as_they_are(case):
    """At 16 bits a quiet channel keeps hundreds of steps: evening the map out buys nothing
    and spends the carried channels' headroom (PP-OCRv4's recognizer, every op in int16: a
    held-out line saturated a map whose channel 411 was carried 8.8x up). The map is left as
    it is where it is stored in 16 bits (its depthwise reader raised, or bits=16), evened out
    where it is int8."""
    net, cal, held, want = case
    opt = optimize(net)
    (writer, _), = depthwise_pairs(opt)
    vid = writer.outputs[0].v_id
    w = np.asarray(writer.inputs[1].data).copy()
    assert equalize_depthwise_inputs(opt, load_calibration(cal, opt), wide={vid}) == 0
    np.testing.assert_array_equal(np.asarray(writer.inputs[1].data), w)
    runner = HostRunner()
    for kw in ({"op_bits": {"dw": 16}}, {"bits": 16}):
        q = quantize_network(net, cal, activation_bias=False, **kw)
        assert q.tags["quantization"]["depthwise_equalized"] == 0, kw
        got = runner.run(q, [[x] for x in held], lambda v, a: None)
        assert min(cosine(g[0], w) for g, w in zip(got, want)) > 0.999, kw
    q = quantize_network(net, cal, op_bits={"y": 16}, activation_bias=False)
    assert q.tags["quantization"]["depthwise_equalized"] == 1  # the map itself stays int8

"""Activation bias correction (`xcompile.quant.act_bias`, docs/quantization.md section 8): a
PP-LCNetV3 stem as paddle2onnx writes it (hard-swish spelled out as Add/Clip/Mul/Div, the
learnable affine block as a scalar Mul and Add, a depthwise convolution, channels far apart in
range), quantized int8 with and without the correction and compared with onnxruntime's float
run on held-out inputs."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from conv_graph import ConvGraph

from xcompile.frontend.onnx_import import import_onnx
from xcompile.passes import optimize
from xcompile.quant.act_bias import activation_bias_shifts, apply_bias_shifts, correctable
from xcompile.quant.calibrate import load_calibration
from xcompile.quant.capability import integer_ops
from xcompile.quant.quantize import _rounding, quantize_network
from xcompile.quant.report import cosine


def _model():
    g = ConvGraph(3, bias_std=0.5, name_nodes=False)

    def hardswish_lab(x, name):
        """x * clip(x + 3, 0, 6) / 6, then PP-LCNetV3's affine block 0.6 * h - 0.5."""
        h = g.hardswish(x, name + ".h")
        lab = g.node("Mul", [h, g.const(name + ".s", 0.6)], [name + ".l"])
        return g.node("Add", [lab, g.const(name + ".t", -0.5)], [name])

    gains = np.exp(g.rng.uniform(np.log(0.3), np.log(15.0), 16))
    x = g.conv("x", 3, 16, 3, "stem", stride=2)
    x = hardswish_lab(x, "act0")
    x = g.conv(x, 16, 16, 1, "pw0", gain=gains, bias=-1.0)
    x = hardswish_lab(x, "act1")
    x = g.conv(x, 16, 16, 3, "dw1", groups=16)
    x = g.conv(x, 16, 24, 1, "pw1")
    x = hardswish_lab(x, "act2")
    g.conv(x, 24, 8, 3, "y")
    return g.model("lcnet_stem", {"x": [1, 3, 32, 32]}, {"y": [1, 8, 16, 16]}, opset=13)


def _images(n, seed):
    """Smooth images with edges (text-like strokes), as the stem of a text detector sees."""
    r = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:32, 0:32] / 32.0
    out = []
    for _ in range(n):
        img = np.stack([np.sin(xx * r.uniform(2, 9) + r.uniform(0, 6)) *
                        np.cos(yy * r.uniform(2, 9)) for _ in range(3)])
        img += (r.random((3, 32, 32)) > 0.9) * r.uniform(-2, 2)
        out.append(img[None].astype(np.float32))
    return out


@pytest.fixture(scope="module")
def case():
    model = _model()
    net = import_onnx(model)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    held = _images(6, 99)
    return net, _images(8, 1), held, [sess.run(None, {"x": x})[0] for x in held]


def _run(net, xs):
    from host_backend import HostBackend
    from xrt import HostDevice, Session, Tensor

    s = Session.Create([HostBackend], net.view(0), [HostDevice.Default()])
    try:
        s.apply()
        return [np.asarray(s.forward([Tensor(x)])[0]).copy() for x in xs]
    finally:
        s.close()


def test_correction_lowers_the_error_against_onnxruntime(case):
    net, cal, held, want = case
    # the depthwise-input equalisation (on by default) evens out dw1's input: off in both,
    # so that the correction's own gain shows
    plain = quantize_network(net, cal, activation_bias=False, depthwise_equalize=False)
    fixed = quantize_network(net, cal, depthwise_equalize=False)
    assert plain.tags["quantization"]["activation_bias_corrected"] == 0
    # every convolution without a folded activation is corrected (the stem's Hardswish, the
    # affine block folded into a 1x1 depthwise convolution, pw0, dw1, pw1, y)
    assert fixed.tags["quantization"]["activation_bias_corrected"] >= 4
    err = lambda q: [1.0 - cosine(g, w) for g, w in zip(_run(q, held), want)]  # noqa: E731
    before, after = err(plain), err(fixed)
    assert np.mean(after) < 0.8 * np.mean(before), (before, after)
    assert min(1.0 - e for e in after) > 0.99


def _means(net, xs):
    """{float v_id: per-channel mean} of every 4-D value of `net` over `xs` (codes read back)."""
    from xcompile.runner import HostRunner

    sums = {}

    def keep(v, a):
        el = v.dtype.element_dtype
        if len(v.shape) != 4:
            return
        real = np.asarray(a, np.float64) * (float(el.scale[0]) if getattr(
            el, "is_quantized", False) else 1.0)
        fid = int(v.tags.get("float_v_id", v.v_id))
        sums.setdefault(fid, []).append(real.reshape(-1, real.shape[-1]).mean(axis=0))

    HostRunner().run(net, [[x] for x in xs], keep)
    return {k: np.mean(v, axis=0) for k, v in sums.items()}


def test_integer_means_come_back_to_the_float_ones(case):
    """On the calibration samples the integer network's convolution outputs have the float
    network's per-channel means once corrected (to within a fraction of a step); uncorrected
    some channel is off by more than half a step."""
    net, cal, _, _ = case
    opt = optimize(net)
    ints = integer_ops(opt)
    convs = {op.outputs[0].v_id for op in opt.ops if correctable(op, ints)}
    ref = _means(opt, cal)
    off = {}
    for flag in (False, True):
        q = quantize_network(net, cal, activation_bias=flag, depthwise_equalize=False)
        steps = {int(v.tags["float_v_id"]): float(v.dtype.element_dtype.scale[0])
                 for op in q.ops for v in op.outputs
                 if getattr(v.dtype.element_dtype, "is_quantized", False)}
        got = _means(q, cal)
        off[flag] = max(np.abs(got[v] - ref[v]).max() / steps[v] for v in convs)
    assert off[False] > 0.5
    assert off[True] < 0.5 * off[False], off


def test_shifts_are_measured_on_every_correctable_convolution(case):
    net, cal, _, _ = case
    opt = optimize(net)
    q = quantize_network(net, cal, activation_bias=False, depthwise_equalize=False)
    scales = {int(v.tags["float_v_id"]): float(v.dtype.element_dtype.scale[0])
              for op in q.ops for v in op.outputs
              if getattr(v.dtype.element_dtype, "is_quantized", False)}
    ints = integer_ops(opt)
    rounding = _rounding(opt, ints, scales, lambda vid: 8)
    data = load_calibration(cal, opt)
    shifts = activation_bias_shifts(opt, data, ints, rounding)
    assert set(shifts) == {op.op_id for op in opt.ops if correctable(op, ints)}
    before = {i: np.asarray(opt.getOpById(i).inputs[2].data, np.float64).copy() for i in shifts}
    assert apply_bias_shifts(opt, shifts) == len(shifts)
    for i, m in shifts.items():
        np.testing.assert_allclose(opt.getOpById(i).inputs[2].data, before[i] - m, rtol=1e-5,
                                   atol=1e-6)


def test_folded_activations_and_float_ops_are_not_corrected(case):
    net, _, _, _ = case
    opt = optimize(net)
    ints = integer_ops(opt)
    for op in opt.ops:
        if op.op_type == "Conv2d" and op.attrs.get("act", "none") != "none":
            assert not correctable(op, ints)
    conv = next(op for op in opt.ops if correctable(op, ints))
    assert not correctable(conv, ints - {conv.op_id})

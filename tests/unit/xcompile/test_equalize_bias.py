"""Cross-layer equalisation keeps the float function and evens the channel ranges; bias
correction's shift is the mean output error the rounded weights cause; the quantizer applies
both where they pay (docs/quantization.md) and records what it did."""

from __future__ import annotations

import numpy as np
import pytest

import xcompile.zoo as zoo
import xir
from host_backend import HostBackend
from xcompile.passes import optimize
from xcompile.quant.bias_correction import weight_error_shift
from xcompile.quant.equalize import equalize
from xcompile.quant.quantize import quantize_network
from xrt import HostDevice, Session, Tensor


def _run(net, x):
    s = Session.Create([HostBackend], net.view(0), [HostDevice.Default()])
    s.apply()
    out = np.asarray(s.forward([Tensor(x)])[0]).copy()
    s.close()
    return out


@pytest.mark.parametrize("depthwise", [False, True])
def test_equalisation_keeps_the_function_and_evens_the_ranges(depthwise):
    rng = np.random.default_rng(2)
    loud = np.geomspace(0.01, 10, 6).astype(np.float32)  # very unequal output channels
    b = xir.NetworkBuilder("pair")
    x = b.input([1, 7, 7, 3], layout="NHWC")
    y = b.relu(b.conv2d(x, rng.normal(0, 1, (3, 3, 3, 6)).astype(np.float32) * loud,
                        rng.normal(0, 1, 6).astype(np.float32), pad_top=1, pad_bottom=1,
                        pad_left=1, pad_right=1))
    w2 = rng.normal(0, 1, (3, 3, 1, 6) if depthwise else (1, 1, 6, 4)).astype(np.float32)
    b.output(b.conv2d(y, w2, groups=6 if depthwise else 1))
    net = optimize(b.build())
    xs = rng.normal(0, 1, (1, 7, 7, 3)).astype(np.float32)
    want = _run(net, xs)
    assert equalize(net) == 1
    np.testing.assert_allclose(_run(net, xs), want, rtol=1e-4, atol=1e-4)
    convs = [op for op in net.ops if op.op_type == "Conv2d"]
    r1 = np.abs(convs[0].inputs[1].data).max(axis=(0, 1, 2))
    r2 = np.abs(convs[1].inputs[1].data).max(axis=(0, 1, 2) if depthwise else (0, 1, 3))
    np.testing.assert_allclose(r1, r2, rtol=1e-3)
    assert r1.max() / r1.min() < loud.max() / loud.min() / 10


@pytest.mark.parametrize("groups", [1, 2])
def test_bias_shift_is_the_mean_error_of_the_rounded_weights(groups):
    """On an input constant per channel (no border), the shift is exactly the output error."""
    rng = np.random.default_rng(4)
    w = rng.normal(0, 1, (3, 3, 4 // groups, 6))
    dw = rng.normal(0, 0.01, w.shape)
    mean = rng.normal(0, 1, 4)
    x = np.broadcast_to(mean, (1, 5, 5, 4)).astype(np.float64)

    def conv(weights):
        from host_backend.ops import FLOAT_KERNELS

        return FLOAT_KERNELS["Conv2d"]([x.astype(np.float32), weights.astype(np.float32)],
                                       {"groups": groups})[0].astype(np.float64)

    err = (conv(w + dw) - conv(w))[0, 1, 1]
    shift = weight_error_shift("Conv2d", {"groups": groups}, dw, mean)
    np.testing.assert_allclose(shift, err, rtol=1e-3, atol=1e-4)
    m = rng.normal(0, 1, (4, 5))
    np.testing.assert_allclose(weight_error_shift("Matmul", {}, m, mean), mean @ m)
    np.testing.assert_allclose(weight_error_shift("Matmul", {"transpose_b": True}, m.T, mean),
                               mean @ m)
    assert weight_error_shift("Matmul", {}, m, np.ones(3)) is None


def test_quantizer_corrects_and_equalises_where_they_pay():
    """Defaults: GPTQ-rounded layers are not corrected; nearest-rounded ones are; per-tensor
    weights are equalised first. Each choice is in the quantization tag."""
    net = zoo.build("tiny_cnn")
    cal = zoo.calibration_set("tiny_cnn", 2)
    gptq = quantize_network(net, cal, bits=8)
    near = quantize_network(net, cal, bits=8, weight_rounding="nearest")
    off = quantize_network(net, cal, bits=8, weight_rounding="nearest", bias_correction=False)
    tensor = quantize_network(net, cal, bits=8, per_channel=False)
    assert gptq.tags["quantization"]["bias_corrected"] == 0
    assert near.tags["quantization"]["bias_corrected"] > 0
    assert off.tags["quantization"]["bias_corrected"] == 0
    assert tensor.tags["quantization"]["equalized_pairs"] > 0
    assert near.tags["quantization"]["equalized_pairs"] == 0
    b_near = {op.name: op.inputs[2].data for op in near.ops if op.op_type == "Conv2d"}
    b_off = {op.name: op.inputs[2].data for op in off.ops if op.op_type == "Conv2d"}
    assert any(not np.array_equal(b_near[k], b_off[k]) for k in b_near)

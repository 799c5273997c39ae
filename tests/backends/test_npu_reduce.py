"""Reductions on the chips (docs/zg330-lowering.md, docs/quantization.md "Reductions"): ReduceMax
/ ReduceMin pick codes, so the quantizer makes them integer ops sharing their input's scale (as
MaxPool2d); ReduceMax runs on the chip over channels (COPY PERMUTE + POOL MAX 1 x C) and over H
or W (POOL MAX), ReduceMin as the max of the code complements, ReduceMean by POOL AVG or (over
channels and space) one CONV of ones, bit-exact against the integer reference and close to
onnxruntime's float result. Networks as torch.onnx writes them (opset 13: axes an attribute;
opset 18: an input)."""

from __future__ import annotations

import numpy as np
import pytest
from exporter_nets import _G
from npu_chip_lib import assert_bit_exact, compile_onnx, hard_kinds

CHIPS = ["zg330", "buyi"]
SHAPE = (1, 8, 12, 10)


def _cosine(a, b):
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _net(op: str, axes: list[int], keep: int, opset: int, batch: object = 1):
    """conv 3x3 -> ReLU -> Reduce{op} over `axes` -> conv 1x1 where the result is still a map
    (the reduced value feeds a chip op), else the network output."""
    g = _G(np.random.default_rng(4))
    y = g.op("Relu", [g.conv("x", 8, 16)])
    if opset >= 18:
        ax = g.name("axes")
        from onnx import numpy_helper

        g.inits.append(numpy_helper.from_array(np.array(axes, np.int64), ax))
        r = g.op(op, [y, ax], keepdims=keep)
    else:
        r = g.op(op, [y], axes=axes, keepdims=keep)
    if keep:
        c = 1 if 1 in axes else 16
        r = g.conv(r, c, 4, k=1)
    return g.model([batch, *SHAPE[1:]], r, opset=opset)


def _check(model, target, n: int = 1):
    import onnxruntime as ort

    shape = (n, *SHAPE[1:])
    c = compile_onnx(model, shape, target)
    x = np.random.default_rng(9).normal(0, 1, shape).astype(np.float32)
    (got,) = assert_bit_exact(c, [x])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = sess.run(None, {"x": x})
    assert got.shape == want.shape
    assert _cosine(got, want) >= 0.99
    return c


def _reduce_op(c):
    (red,) = [op for op in c.quantized.ops if op.op_type == "Reduce"]
    return red


def _scale(v):
    el = v.dtype.element_dtype
    assert not el.is_float(), v
    return list(el.scale)


@pytest.mark.parametrize("target", CHIPS)
@pytest.mark.parametrize("axes,keep,opset,kinds", [
    ([1], 1, 13, ["copy", "maxpool", "copy"]),  # over the channels, kept as one channel
    ([1], 0, 18, ["copy", "maxpool"]),  # over the channels, dropped: written as the rows
    ([2], 1, 13, ["maxpool"]),  # over H
    ([3], 0, 18, ["maxpool"]),  # over W, dropped
])
def test_reduce_max_on_the_chip(target, axes, keep, opset, kinds):
    c = _check(_net("ReduceMax", axes, keep, opset), target)
    red = _reduce_op(c)
    # an integer op at its input's scale: it only picks codes
    (x,), (y,) = red.inputs, red.outputs
    assert _scale(y) == _scale(x)
    assert "Reduce" in c.on_chip() and "Reduce" not in c.host_types(), c.host_ops
    got = [k for ks in hard_kinds(c.lowered, "Reduce", c.adapted) for k in ks]
    assert got == kinds, got


@pytest.mark.parametrize("target", CHIPS)
def test_reduce_min_runs_on_the_chip(target):
    """ReduceMin has no POOL MIN on the chips: an integer op at its input's scale, it runs as
    the max of the code complements (ELTW, COPY PERMUTE + POOL MAX 1 x C, ELTW), bit-exact
    (test_npu_reduce_forms.py covers its geometries)."""
    c = _check(_net("ReduceMin", [1], 1, 13), target)
    red = _reduce_op(c)
    assert _scale(red.outputs[0]) == _scale(red.inputs[0])
    assert "Reduce" in c.on_chip() and "Reduce" not in c.host_types(), c.host_ops
    got = [k for ks in hard_kinds(c.lowered, "Reduce", c.adapted) for k in ks]
    assert got == ["eltw", "copy", "maxpool", "copy", "eltw"], got


@pytest.mark.parametrize("target", CHIPS)
@pytest.mark.parametrize("axes,keep,opset,kinds", [
    ([1], 1, 13, ["copy", "avgpool", "copy"]),  # over the channels: COPY PERMUTE, POOL AVG 1 x C
    ([1], 0, 18, ["copy", "avgpool"]),
    ([2], 1, 13, ["avgpool"]),  # over H: POOL AVG H x 1
    ([3], 0, 18, ["avgpool"]),  # over W, dropped
])
def test_reduce_mean_on_the_chip(target, axes, keep, opset, kinds):
    """ReduceMean as an integer op (the exact sum of the n codes requantized with
    requant_multiplier(s_in, 1 / n, s_out), as AvgPool2d): POOL AVG with a window of n codes."""
    c = _check(_net("ReduceMean", axes, keep, opset), target)
    red = _reduce_op(c)
    assert red.attrs["func"] == "mean"
    _scale(red.inputs[0]), _scale(red.outputs[0])  # both integer, each its own scale
    assert "Reduce" in c.on_chip() and "Reduce" not in c.host_types(), c.host_ops
    got = [k for ks in hard_kinds(c.lowered, "Reduce", c.adapted) for k in ks]
    assert got == kinds, got


@pytest.mark.parametrize("target", CHIPS)
def test_reduce_mean_over_channels_and_space_runs_as_one_conv(target):
    """A mean over the channels and space would round twice as two pools: it runs as one CONV
    of ones over the whole map (the exact sum, one requantization, as the reference)."""
    c = _check(_net("ReduceMean", [1, 2, 3], 1, 13), target)
    _scale(_reduce_op(c).outputs[0])
    assert "Reduce" in c.on_chip() and "Reduce" not in c.host_types(), c.host_ops
    got = [k for ks in hard_kinds(c.lowered, "Reduce", c.adapted) for k in ks]
    assert got == ["conv"], got


def test_reduce_mean_integer_kernel():
    """The host reference: int64 sum of the codes, requantized by 1 / n (round half up), within
    half an output code (and the multiplier's rounding) of the float mean of the dequantized
    codes; int16 too."""
    from host_backend.ops.reduce import INT_KERNELS
    from xir.quant.fixed_point import requant_multiplier, requantize
    from xir.types import INT8, INT16, QuantizedType, TensorType

    rng = np.random.default_rng(2)
    for el, np_dt in ((INT8, np.int8), (INT16, np.int16)):
        info = np.iinfo(np_dt)
        q = rng.integers(info.min, info.max + 1, (2, 5, 7, 3)).astype(np_dt)
        t_in = TensorType(QuantizedType(el, 0.02), list(q.shape), None)
        t_out = TensorType(QuantizedType(el, 0.013), [2, 1, 7, 1], None)
        (y,) = INT_KERNELS["Reduce"]([q], {"func": "mean", "axes": [1, 3], "keepdims": True},
                                     [t_in], [t_out])
        assert y.dtype == np_dt and y.shape == (2, 1, 7, 1)
        acc = q.astype(np.int64).sum(axis=(1, 3), keepdims=True)
        m, s = requant_multiplier(0.02, 1.0 / 15, 0.013)
        assert np.array_equal(y, requantize(acc, m, s, out_dtype=np_dt))
        want = np.clip(q.astype(np.float64).mean(axis=(1, 3), keepdims=True) * 0.02 / 0.013,
                       info.min, info.max)
        # half a code, plus the multiplier's own rounding (QM keeps 15 bits: up to
        # |want| * 2**-15 more, about 0.4 of a code at int16's 13,000)
        assert np.all(np.abs(y - want) <= 0.5 + np.abs(want) * 2.0 ** -15 + 1e-9)


@pytest.mark.parametrize("target", CHIPS)
@pytest.mark.parametrize("op,axes,keep", [("ReduceMax", [1], 1), ("ReduceMean", [1], 0),
                                          ("ReduceMean", [2], 1), ("ReduceMax", [3], 0)])
def test_reduce_on_the_chip_for_a_batch(target, op, axes, keep):
    """A dynamic-batch network compiled for 3 items: every item reduced on the chip, bit-exact
    (docs/zg330-lowering.md, "Batches"); the batch axis itself is never reduced."""
    c = _check(_net(op, axes, keep, 13, batch="N"), target, n=3)
    assert "Reduce" in c.on_chip() and "Reduce" not in c.host_types(), c.host_ops

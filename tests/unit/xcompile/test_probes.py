"""`xcompile.quant.probes.Probes`: what the compile's accuracy checks (the mixed-precision
search, the 16-bit rules `widening` measures) measure a quantized network on, and that the
figure is the lowest over every probe sample (docs/quantization.md section 10, step 1): the
calibration samples themselves and a mirrored or half-rolled variant of each image sample.
PaddleOCR's SVTR recognizer read about 0.992 on the variants alone for every count of 85-135
raised ops; with the calibration images among the probes the search kept 135 and held out
0.9998+."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from xcompile import zoo
from xcompile.frontend import import_onnx
from xcompile.passes import optimize
from xcompile.quant.probes import Probes, part_cosines, worst_part
from xcompile.quant.quantize import quantize_network
from xcompile.runner import HostRunner


class _Recording:
    """A HostRunner that records the samples each network ran on and, for the network
    `spoil`, replaces the outputs of the probe samples numbered in `spoil_at` by noise (a
    quantized network wrong on those inputs only)."""

    def __init__(self) -> None:
        self.inner = HostRunner()
        self.seen: list[tuple[object, list[list[np.ndarray]]]] = []
        self.spoil: object = None
        self.spoil_at: set[int] = set()

    def run(self, net, samples, on_value):
        samples = list(samples)
        self.seen.append((net, samples))
        outs = self.inner.run(net, samples, on_value)
        if net is self.spoil:
            rng = np.random.default_rng(7)
            for k in self.spoil_at:
                outs[k] = [rng.normal(size=o.shape).astype(o.dtype) for o in outs[k]]
        return outs

    def run_op(self, op, inputs):
        return self.inner.run_op(op, inputs)


@pytest.fixture(scope="module")
def tiny():
    net = optimize(zoo.build("tiny_cnn"))
    cal = zoo.calibration_set("tiny_cnn", 3)
    return net, cal, quantize_network(net, cal, bits=8, method="minmax")


def test_image_probes_are_the_calibration_samples_then_a_variant_of_each(tiny):
    net, cal, _q = tiny
    runner = _Recording()
    probes = Probes(net, cal, runner)
    (ran, samples), = runner.seen
    assert ran is net and len(samples) == len(probes.data) == 2 * len(cal)
    for k, s in enumerate(cal):  # the calibration samples themselves, first
        np.testing.assert_array_equal(samples[k][0], s[0])
    x = [s[0] for s in cal]
    np.testing.assert_array_equal(samples[3][0], x[0][..., ::-1])  # mirrored along W
    np.testing.assert_array_equal(samples[4][0], x[1][..., ::-1, :])  # along H
    np.testing.assert_array_equal(samples[5][0], np.roll(x[2], x[2].shape[-1] // 2, -1))
    assert len(probes.reference) == 6


def test_a_network_without_image_inputs_is_measured_on_its_calibration_samples():
    rng = np.random.default_rng(0)
    w = rng.normal(size=(6, 4)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Gemm", ["x", "W", "B"], ["y"], transB=1)], "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6])],
        [numpy_helper.from_array(w, "W"),
         numpy_helper.from_array(rng.normal(size=(6,)).astype(np.float32), "B")])
    net = optimize(import_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])))
    cal = [[rng.normal(size=(2, 4)).astype(np.float32)] for _ in range(3)]
    runner = _Recording()
    probes = Probes(net, cal, runner)
    (_net, samples), = runner.seen
    assert len(samples) == 3
    for got, want in zip(samples, cal):
        np.testing.assert_array_equal(got[0], want[0])
    q = quantize_network(net, cal, bits=8, method="minmax")
    assert worst_part(probes.measure(q))[1] > 0.99


def test_the_figure_is_the_lowest_over_every_probe_sample(tiny):
    net, cal, q = tiny
    runner = _Recording()
    probes = Probes(net, cal, runner)
    clean = probes.measure(q)
    assert worst_part(clean)[1] > 0.9
    # the same figure, sample by sample: the lowest of the per-sample figures
    got = runner.seen[-1][1]
    assert len(got) == 6
    per_sample = [part_cosines(q, [probes.reference[k]], [runner.inner.run(q, [s], lambda v,
                                                                            a: None)[0]],
                               probes.parts) for k, s in enumerate(got)]
    for part, figure in clean.items():
        assert figure == pytest.approx(min(p[part] for p in per_sample), abs=1e-12)
    # a network wrong on one calibration sample only (the variants fine) is caught; so is
    # one wrong on one variant only
    for k in (1, 4):
        runner.spoil, runner.spoil_at = q, {k}
        spoiled = probes.measure(q)
        assert worst_part(spoiled)[1] < 0.5, k
        assert all(spoiled[p] <= clean[p] for p in clean)


def test_captured_values_are_real_numbers_and_the_float_ones_run_once(tiny):
    """`capture` gives a quantized network's values as real numbers (codes times scale, per
    channel where the value is), on every probe sample, beside its outputs; `float_values`
    runs the float network once for the values first asked for and not again."""
    net, cal, q = tiny
    runner = _Recording()
    probes = Probes(net, cal, runner)
    conv = next(op for op in q.ops if op.op_type == "Conv2d")
    x, y = conv.feature_inputs()[0], conv.outputs[0]
    codes = []
    q_outs = runner.inner.run(q, probes.data, lambda v, a: codes.append(np.array(a))
                              if v.v_id == y.v_id else None)
    outs, kept = probes.capture(q, {y.v_id})
    assert set(kept) == {y.v_id} and len(kept[y.v_id]) == len(probes.data)
    scale = float(y.dtype.element_dtype.scale[0])
    for got, c in zip(kept[y.v_id], codes):
        assert got.dtype == np.float32 and np.issubdtype(c.dtype, np.integer)
        np.testing.assert_allclose(got, c * scale, rtol=1e-6)
    for a, b in zip(outs, q_outs):
        np.testing.assert_array_equal(a[0], b[0])
    runs = len(runner.seen)
    # the convolution's input is the quantizer's Cast of the image: not a float value
    assert x.producer.op_type == "Cast"
    first = probes.float_values({x.v_id, y.v_id})
    assert len(runner.seen) == runs + 1 and runner.seen[-1][0] is net
    assert set(first) == {y.v_id}
    again = probes.float_values({y.v_id})
    assert len(runner.seen) == runs + 1 and again[y.v_id] is first[y.v_id]
    assert first[y.v_id][0].dtype == np.float32 and first[y.v_id][0].shape == tuple(y.shape)

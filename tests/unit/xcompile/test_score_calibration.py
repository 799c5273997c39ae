"""Score logits recalibrated after quantization (`xcompile.quant.score_calibration`,
`xcompile.quant.head_refit`, docs/quantization.md section 8): a PicoDet head as paddle2onnx
writes it (a convolution whose output is Split into class logits and a box distribution, a
Sigmoid on the classes, Reshape and Transpose to [1, anchors, classes]) found in the quantized
network; a pointwise head's class channels refit by weighted least squares from the integer
network's input to the float logits and quantized again; any other head's per-class lines
fitted from the integer logits to the float ones and folded into the convolution's weight
scales and bias so that the integer network computes the line."""

from __future__ import annotations

import numpy as np
import pytest
from conv_graph import ConvGraph

from xcompile.frontend.onnx_import import import_onnx
from xcompile.passes import optimize
from xcompile.quant.probes import Probes
from xcompile.quant.quantize import quantize_network
from xcompile.quant.score_calibration import (
    ALPHA_RANGE,
    MIN_ANCHORS,
    fit_heads,
    fold_lines,
    recalibrate_scores,
    score_heads,
)
from xcompile.runner import HostRunner

CLASSES, BINS, HW = 6, 8, 8


def _model(head_kernel=1):
    g = ConvGraph(21, bias=-1.0)
    x = g.conv("x", 3, 16, 3, "stem")
    g.node("Relu", [x], ["r"])
    x = g.conv("r", 16, CLASSES + BINS, head_kernel, "head")
    g.node("Split", [x, g.const("sections", [CLASSES, BINS], np.int64)], ["cls", "reg"],
           axis=1)
    g.node("Sigmoid", ["cls"], ["p"])
    g.node("Reshape", ["p", g.const("s1", [1, CLASSES, HW * HW], np.int64)], ["pr"])
    g.node("Transpose", ["pr"], ["scores"], perm=[0, 2, 1])
    g.node("Reshape", ["reg", g.const("s2", [1, BINS, HW * HW], np.int64)], ["rr"])
    g.node("Transpose", ["rr"], ["dist"], perm=[0, 2, 1])
    return g.model("picodet_head", {"x": [1, 3, HW, HW]},
                   {"scores": [1, HW * HW, CLASSES], "dist": [1, HW * HW, BINS]})


def _images(n, seed):
    r = np.random.default_rng(seed)
    return [r.uniform(-1, 1, (1, 3, HW, HW)).astype(np.float32) for _ in range(n)]


@pytest.fixture(scope="module")
def case():
    net = import_onnx(_model())
    cal = _images(6, 0)
    return optimize(net), quantize_network(net, cal), cal


@pytest.fixture(scope="module")
def case3x3():
    net = optimize(import_onnx(_model(head_kernel=3)))
    cal = _images(6, 0)
    return net, cal


def _logit(p):
    p = np.clip(np.asarray(p, np.float64), 1e-6, 1 - 1e-6)
    return np.log(p / (1 - p))


def test_the_score_head_is_found_through_split_and_reshape(case):
    _, q, _ = case
    (head,) = score_heads(q)
    names = [v.name for v in q.outputs()]
    assert names[head.output] == "scores" and head.conv.name == "head"
    assert (head.offset, head.channels) == (0, CLASSES)


def test_a_line_is_fitted_per_class_where_enough_anchors_score():
    """Integer logits that read (z - beta) / alpha for float logits z: the fit returns alpha
    and beta per channel; a channel with too few scoring anchors, or whose line is out of
    bounds, stays (1, 0)."""
    from xcompile.quant.score_calibration import ScoreHead

    r = np.random.default_rng(4)
    z = r.uniform(-3, 3, (2, 200, 3))
    alpha, beta = np.array([1.3, 0.8, 1.0]), np.array([0.7, -0.2, 0.0])
    zq = (z - beta) / alpha
    zq[:, :, 2] = -8.0  # channel 2 never scores in the integer network
    zq[:, : MIN_ANCHORS // 4, 2] = 2.0  # scores on too few anchors to fit
    z[:, : MIN_ANCHORS // 4, 2] = 2.0
    sig = lambda a: (1 / (1 + np.exp(-a))).astype(np.float32)  # noqa: E731
    ref = [[sig(z[s][None])] for s in range(2)]
    got = [[sig(zq[s][None])] for s in range(2)]
    fits = fit_heads([ScoreHead(0, None, 0, 3)], ref, got)[0]
    np.testing.assert_allclose(fits[:2, 0], alpha[:2], rtol=1e-3)
    np.testing.assert_allclose(fits[:2, 1], beta[:2], atol=1e-3)
    assert tuple(fits[2]) == (1.0, 0.0)
    far = [[sig((z[s] * 5.0)[None])] for s in range(2)]  # a slope of 5: out of bounds
    assert 5.0 > ALPHA_RANGE[1]
    assert (fit_heads([ScoreHead(0, None, 0, 3)], far, ref)[0][:2] == [1.0, 0.0]).all()


def test_the_line_folds_into_the_convolution(case):
    """After folding alpha and beta into the head convolution's class channels the integer
    network's class logits read alpha * z + beta (to the rounding of its codes, and where the
    line does not carry them past the output's range); the weight codes and the box channels
    are untouched."""
    opt, q, cal = case
    (head,) = score_heads(q)
    runner = HostRunner()
    data = [[x] for x in _images(2, 9)]
    before = runner.run(q, data, lambda v, a: None)
    w_codes = np.asarray(head.conv.inputs[1].data).copy()
    alpha = np.linspace(0.8, 1.4, CLASSES)
    beta = np.linspace(-0.5, 0.8, CLASSES)
    fold_lines(head, np.stack([alpha, beta], 1))
    q.relink()
    after = runner.run(q, data, lambda v, a: None)
    np.testing.assert_array_equal(np.asarray(head.conv.inputs[1].data), w_codes)
    for b, a in zip(before, after):
        pb, pa = np.asarray(b[0]), np.asarray(a[0])
        mid = (pb > 0.1) & (pb < 0.9) & (pa > 0.1) & (pa < 0.9)
        assert mid.sum() > 20
        want = (alpha * _logit(pb) + beta)[mid]
        # the rounding of the codes, and the logits the line carries past the output's
        # calibrated range clip
        assert np.percentile(np.abs(_logit(pa)[mid] - want), 95) < 0.1
        np.testing.assert_array_equal(b[1], a[1])  # the box distribution as it was


def test_the_refit_brings_a_pointwise_heads_logits_to_the_float_ones(case):
    """Inputs whose float logits follow other weights than the quantized head's: after the
    refit the integer head's class logits (codes times scales) on new inputs of the same kind
    follow them to int8's rounding, far closer than before; the weights stay int8 codes, and the
    box channels' codes and scales are untouched."""
    from xcompile.quant.head_refit import pointwise, refit_head

    _, q, _ = case
    (head,) = score_heads(q)
    assert pointwise(head.conv)
    w, b = head.conv.inputs[1], head.conv.inputs[2]
    r = np.random.default_rng(7)
    cin = int(w.shape[2])
    real_w = np.asarray(w.data, np.float64).reshape(cin, -1) * w.dtype.element_dtype.scale
    real_b = np.asarray(b.data, np.float64) * b.dtype.element_dtype.scale
    true_w = real_w[:, :CLASSES] * r.uniform(0.6, 1.5, (cin, CLASSES))
    true_b = real_b[:CLASSES] + r.uniform(-1, 1, CLASSES)

    def sample(n):
        x = r.uniform(0, 2, (n, 1, HW, HW, cin))
        t = np.concatenate([x @ true_w + true_b, np.zeros(x.shape[:-1] + (BINS,))], -1)
        return list(x), list(t)

    x, t = sample(8)
    box_codes, box_scale = np.asarray(w.data)[..., CLASSES:].copy(), \
        w.dtype.element_dtype.scale[CLASSES:].copy()

    def logits(xs):
        ww, bb = head.conv.inputs[1], head.conv.inputs[2]
        real = np.asarray(ww.data, np.float64).reshape(cin, -1) * ww.dtype.element_dtype.scale
        return np.concatenate(xs) @ real[:, :CLASSES] + \
            (np.asarray(bb.data, np.float64) * bb.dtype.element_dtype.scale)[:CLASSES]

    xn, tn = sample(4)
    want = np.concatenate(tn)[..., :CLASSES]
    before = np.abs(logits(xn) - want).mean()
    rec = refit_head(head, x, t)
    after = np.abs(logits(xn) - want).mean()
    assert rec["error_after"] < rec["error_before"] / 10
    assert after < before / 10 and after < 0.05
    el = head.conv.inputs[1].dtype.element_dtype
    assert (el.storage, el.axis) == (w.dtype.element_dtype.storage, w.dtype.element_dtype.axis)
    assert np.asarray(head.conv.inputs[1].data).dtype == np.int8
    np.testing.assert_array_equal(np.asarray(head.conv.inputs[1].data)[..., CLASSES:], box_codes)
    np.testing.assert_array_equal(head.conv.inputs[1].dtype.element_dtype.scale[CLASSES:],
                                  box_scale)


def test_the_refit_leaves_a_head_without_scoring_anchors():
    """Probes on which no class scores above `FIT_FROM` in either network: nothing to fit the
    threshold's side of the logits on, the head stays as it is."""
    from xcompile.quant.head_refit import refit_head, with_scale

    net = import_onnx(_model())
    q = quantize_network(net, _images(6, 0))
    (head,) = score_heads(q)
    w, b = head.conv.inputs[1], head.conv.inputs[2]
    cin = int(w.shape[2])
    # every class logit -12 on the zero inputs below, in the integer head too
    el = b.dtype.element_dtype
    head.conv.inputs[2] = with_scale(b, el.scale, np.rint(-12.0 / el.scale).astype(np.int32))
    x = [np.zeros((1, HW, HW, cin))] * 2
    t = [np.full((1, HW, HW, CLASSES + BINS), -12.0)] * 2
    codes = np.asarray(w.data).copy()
    assert refit_head(head, x, t) is None
    np.testing.assert_array_equal(np.asarray(head.conv.inputs[1].data), codes)


def test_recalibration_refits_a_pointwise_head_and_keeps_a_faithful_one(case):
    """On probes where the integer head already matches float, the pointwise head is refit
    (recorded with its errors, which do not grow) and the scores do not move away from
    float."""
    opt, _, cal = case
    q = quantize_network(opt, cal)
    probes = Probes(opt, cal)
    before = probes.measure(q)
    rec = recalibrate_scores(q, probes)
    assert set(rec) == {"scores"} and q.tags["quantization"]["score_calibration"] == rec
    fit = rec["scores"]["refit"]
    assert fit["anchors"] >= 20 and fit["error_after"] <= fit["error_before"]
    after = probes.measure(q)
    assert after["scores"] >= before["scores"] - 0.002


def test_recalibration_folds_lines_into_a_head_that_is_not_pointwise(case3x3):
    """A 3x3 head convolution is not refit: its per-class lines are fitted and folded, near
    (1, 0) where the integer head already matches float."""
    opt, cal = case3x3
    q = quantize_network(opt, cal)
    probes = Probes(opt, cal)
    before = probes.measure(q)
    rec = recalibrate_scores(q, probes)
    assert set(rec) == {"scores"} and q.tags["quantization"]["score_calibration"] == rec
    assert np.allclose(rec["scores"]["alpha"], 1.0, atol=0.15)
    assert np.allclose(rec["scores"]["beta"], 0.0, atol=0.3)
    after = probes.measure(q)
    assert after["scores"] >= before["scores"] - 0.002


def test_refits_in_chunks_and_of_two_heads_on_one_convolution_both_stay(monkeypatch):
    """The normal equations accumulated in chunks of 7 positions solve to the same codes as
    in one; two heads on one convolution (its class channels 0-2 and 3-5), refit one after
    the other, each keep their refit channels, and the box channels stay."""
    from xcompile.quant import head_refit
    from xcompile.quant.score_calibration import ScoreHead

    def refit(chunk, halves):
        monkeypatch.setattr(head_refit, "CHUNK", chunk)
        q = quantize_network(import_onnx(_model()), _images(6, 0))
        (head,) = score_heads(q)
        cin = int(head.conv.inputs[1].shape[2])
        r = np.random.default_rng(3)
        x = [r.uniform(0, 2, (1, HW, HW, cin)) for _ in range(4)]
        t = [np.concatenate([a @ r.normal(0, 0.5, (cin, CLASSES)) - 1.0,
                             np.zeros((1, HW, HW, BINS))], -1) for a in x]
        box = np.asarray(head.conv.inputs[1].data)[..., CLASSES:].copy()
        heads = [ScoreHead(0, head.conv, 0, 3), ScoreHead(0, head.conv, 3, 3)] if halves \
            else [head]
        fits = [head_refit.HeadRefit(h) for h in heads]
        for f in fits:
            for a, b in zip(x, t):
                f.add(a, b)
        assert all(f.apply() is not None for f in fits)
        np.testing.assert_array_equal(np.asarray(head.conv.inputs[1].data)[..., CLASSES:], box)
        return np.asarray(head.conv.inputs[1].data).copy()

    whole = refit(1 << 14, False)
    np.testing.assert_array_equal(refit(7, False), whole)
    halves = refit(1 << 14, True)
    # each half was solved on its own channels: the same as the whole to the rounding
    assert np.abs(halves[..., :CLASSES].astype(int) - whole[..., :CLASSES]).max() <= 1

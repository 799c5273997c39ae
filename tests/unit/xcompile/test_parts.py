"""Per-part output accuracy (xcompile.quant.parts): the check a whole-tensor cosine cannot fool."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from xcompile.frontend.onnx_import import import_onnx
from xcompile.quant.parts import (
    Part,
    collapse_message,
    collapsed_parts,
    compare_parts,
    compare_samples,
    format_parts,
    output_parts,
    worst,
    worst_part,
)
from xir.errors import QuantizationError


def _detector_output(rng: np.random.Generator, n: int = 400) -> np.ndarray:
    """[1, 84, n]: 4 box coordinates in pixels (0-320) and 80 sigmoid class scores."""
    boxes = rng.uniform(0, 320, (1, 4, n))
    logits = rng.normal(-6.0, 2.0, (1, 80, n))
    logits[0, rng.integers(0, 80, 30), rng.integers(0, n, 30)] = 3.0  # a few confident anchors
    return np.concatenate([boxes, 1 / (1 + np.exp(-logits))], axis=1).astype(np.float32)


PARTS = [Part("out.box", 0, 1, 0, 4, "value"), Part("out.cls", 0, 1, 4, 84, "score", 1)]


def test_zeroed_scores_collapse_though_the_whole_cosine_is_high():
    ref = _detector_output(np.random.default_rng(0))
    got = ref.copy()
    got[:, 4:] = 0.0  # every probability rounded to 0, as one int8 scale of ~2.5 does
    got[:, :4] += np.random.default_rng(1).normal(0, 0.5, got[:, :4].shape)
    whole = compare_parts([ref], [got], [Part("out", 0, None, 0, 0)])[0]
    assert whole.cosine > 0.999 and not whole.collapsed  # what fooled the old check
    res = compare_parts([ref], [got], PARTS)
    box, cls = res
    assert not box.collapsed and box.cosine > 0.999
    assert cls.collapsed and "no score above 0.01" in cls.reason
    assert cls.kept_ref >= 25 and cls.kept_got == 0 and cls.kept_recall == 0.0
    assert cls.topk < 0.3
    assert [r.part.name for r in collapsed_parts(res)] == ["out.cls"]
    assert worst(res) == 0.0 and worst_part(res) is cls
    assert "COLLAPSED" in format_parts(res)
    assert collapse_message(res).startswith("output part 'out.cls [axis 1: 4:84] score' "
                                            "collapsed: no score above 0.01")
    assert collapse_message([box]) is None


def test_accurate_parts_pass_and_score_loss_is_seen():
    rng = np.random.default_rng(2)
    ref = _detector_output(rng)
    got = ref + rng.normal(0, 1e-3, ref.shape).astype(np.float32)
    res = compare_parts([ref], [got], PARTS)
    assert not collapsed_parts(res) and worst(res) > 0.99
    assert res[1].kept_recall > 0.9 and res[1].topk > 0.6
    # scores halved: cosine stays at 1.0 (a scale), but most kept anchors fall below 0.25
    half = ref.copy()
    half[:, 4:] *= 0.2
    res = compare_parts([ref], [half], PARTS)
    assert res[1].cosine > 0.99 and res[1].collapsed and "keeps" in res[1].reason
    assert worst(res) <= 0.0


def test_scores_that_decide_nothing_do_not_collapse():
    """An image without objects: every reference score below 1%, the result's all 0. Nothing
    is lost (no kept anchor either way): not collapsed, figure 1.0, though the raw cosine is 0;
    and a value part that only carries float noise on a constant is not either."""
    rng = np.random.default_rng(4)
    ref = _detector_output(rng)
    ref[:, 4:] = rng.uniform(0, 0.005, ref[:, 4:].shape)
    got = ref.copy()
    got[:, 4:] = 0.0
    box, cls = compare_parts([ref], [got], PARTS)
    assert cls.cosine == 0.0 and cls.score_cosine == 1.0 and not cls.collapsed
    assert cls.figure == 1.0 and worst([box, cls]) > 0.999
    flat = np.full((1, 4, 50), 5.0) + rng.normal(0, 1e-7, (1, 4, 50))
    assert not compare_parts([flat], [np.full_like(flat, 5.0)], [Part("c", 0, None, 0, 0)])[0] \
        .collapsed


def test_constant_and_nan_results_collapse():
    ref = np.linspace(-1, 1, 64, dtype=np.float32).reshape(1, 64)
    res = compare_parts([ref], [np.full_like(ref, 0.3)], [Part("y", 0, None, 0, 0)])[0]
    assert res.collapsed and res.figure == 0.0
    bad = ref.copy()
    bad[0, 3] = np.nan
    assert compare_parts([ref], [bad], [Part("y", 0, None, 0, 0)])[0].collapsed


def test_compare_samples_stacks_samples():
    rng = np.random.default_rng(3)
    refs = [[_detector_output(rng, 50)] for _ in range(3)]
    gots = [[r[0].copy()] for r in refs]
    gots[1][0][:, 4:] = 0.0
    res = compare_samples(refs, gots, [PARTS])
    assert res[0].part is PARTS[0] and not res[0].collapsed
    assert res[1].kept_ref == sum(int((r[0][:, 4:] > 0.25).sum()) for r in refs)
    assert 0.0 < res[1].kept_recall < 1.0


def test_a_borderline_flip_is_no_collapse():
    """A classifier's top probability 0.27 read as 0.24: one kept entry fewer, not a collapse;
    read as 0.1: collapsed."""
    ref = np.full((1, 10), 0.73 / 9, np.float32)
    ref[0, 3] = 0.27
    part = [Part("p", 0, None, 0, 0, "score", 1)]
    near = ref.copy()
    near[0, 3] = 0.24
    r = compare_parts([ref], [near], part)[0]
    assert r.kept_ref == 1 and r.kept_both == 0 and not r.collapsed
    far = ref.copy()
    far[0, 3] = 0.1
    assert compare_parts([ref], [far], part)[0].collapsed


def test_bad_arguments_are_named():
    with pytest.raises(QuantizationError, match="out.box"):
        compare_parts([], [], PARTS)
    with pytest.raises(QuantizationError, match="axis 1"):
        Part("p", 0, 1, 0, 90).take(np.zeros((1, 84, 3)))


def _yolo_like_onnx() -> onnx.ModelProto:
    """Box branch (Mul) and class branch (Sigmoid) concatenated on the channel axis, then
    transposed, as exporters write a detector's output."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 7])
    w = np.random.default_rng(0).normal(0, 0.3, (7, 8, 1, 1)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("Reshape", ["c", "shp"], ["r"]),
        helper.make_node("Split", ["r", "sec"], ["box", "cls"], axis=1),
        helper.make_node("Mul", ["box", "k"], ["pix"]),
        helper.make_node("Sigmoid", ["cls"], ["sc"]),
        helper.make_node("Concat", ["pix", "sc"], ["cat"], axis=1),
        helper.make_node("Transpose", ["cat"], ["y"], perm=[0, 2, 1]),
    ]
    inits = [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.ravel()),
             helper.make_tensor("shp", TensorProto.INT64, [3], [1, 7, 16]),
             helper.make_tensor("sec", TensorProto.INT64, [2], [3, 4]),
             helper.make_tensor("k", TensorProto.FLOAT, [], [32.0])]
    g = helper.make_graph(nodes, "yolo_like", [x], [y], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_output_parts_follow_the_concat_through_a_transpose():
    net = import_onnx(_yolo_like_onnx())
    (parts,) = output_parts(net)
    assert [(p.axis, p.start, p.stop, p.kind) for p in parts] == \
        [(2, 0, 3, "value"), (2, 3, 7, "score")]
    assert parts[1].class_axis == 2
    assert parts[0].name.startswith(net.outputs()[0].name)


def test_plain_outputs_are_one_part_or_channel_groups():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 4, 4])
    w = np.ones((8, 3, 1, 1), np.float32)
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"])], "plain", [x], [y],
                          [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.ravel())])
    net = import_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    (parts,) = output_parts(net)
    assert len(parts) == 1 and parts[0].axis is None
    (groups,) = output_parts(net, channel_groups=2)
    assert [(p.axis, p.start, p.stop) for p in groups] == [(1, 0, 4), (1, 4, 8)]


def test_channel_groups_see_a_convolution_that_loses_its_small_channels():
    """One 1x1 conv writing 32 channels of range ~100 and 32 of range ~0.1 at one int8 scale:
    the whole output reads 0.9999, the automatic channel groups find the small half gone."""
    from xcompile.quant.quantize import quantize_network
    from xcompile.quant.report import accuracy_report

    rng = np.random.default_rng(0)
    w = rng.normal(0, 1, (64, 8, 1, 1)).astype(np.float32)
    w[:32] *= 50.0
    w[32:] *= 0.05
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 6, 6])
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"])], "wide", [x], [y],
                          [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.ravel())])
    net = import_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    cal = [rng.normal(0, 1, (1, 8, 6, 6)).astype(np.float32) for _ in range(3)]
    q = quantize_network(net, cal, weight_rounding="nearest")
    (auto,) = output_parts(q, channel_groups=None)
    assert [(p.axis, p.start, p.stop) for p in auto] == [(1, 16 * k, 16 * k + 16)
                                                        for k in range(4)]
    whole = accuracy_report(net, q, cal)
    assert whole.outputs[0]["cosine"] > 0.999 and not whole.collapsed()
    rep = accuracy_report(net, q, cal, channel_groups=None)
    assert [r.part.name for r in rep.collapsed()] == ["y.ch32-47", "y.ch48-63"]
    assert not rep.verdict()[0] and "y.ch32-47" in rep.verdict()[1]

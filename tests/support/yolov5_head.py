"""YOLOv5's Detect head as its export writes it (`export.py --include onnx`, opset 17), with
onnx.helper: per level (strides 8, 16, 32) a 1x1 Conv to 3 x (5 + 80) channels, Reshape
[1, 3, 85, h, w], Transpose to [1, 3, h, w, 85], Sigmoid, Split [2, 2, 81] on the last axis,
xy = (xy * 2 + grid) * stride, wh = (wh * 2) ** 2 * anchor_grid, Concat([xy, wh, conf], -1),
Reshape [1, 3 h w, 85]; the three levels joined on the anchor axis: "output0" [1, N, 85], box
centre and size in pixels beside objectness and class probabilities. The backbone and the
trained-like weights are those of `yolov8_head`."""

from __future__ import annotations

import numpy as np
from yolov8_head import _G, STRIDES

NC = 80
ANCHORS = ((10, 13, 16, 30, 33, 23), (30, 61, 62, 45, 59, 119), (116, 90, 156, 198, 373, 326))


def build(size: int = 64, seed: int = 0, width: int = 16):
    from onnx import TensorProto, helper

    g = _G(np.random.default_rng(seed))
    x, c, feats = "images", 3, []
    for i, cout in enumerate((width, width * 2, width * 2, width * 4, width * 4)):
        x = g.conv_silu(x, c, cout, 3, 2)
        c = cout
        if i >= 2:
            feats.append((x, c))
    heads = []
    no = 5 + NC
    for (x, c), s, anc in zip(feats, STRIDES, ANCHORS):
        h = w = size // s
        bias = np.tile(np.concatenate([[0.0] * 4, [-1.0], g.rng.normal(-5.0, 1.0, NC)]), 3)
        y = g.conv(x, c, 3 * no, 1, gain=2.0, bias=bias)
        y = g.op("Reshape", [y, g.const(np.array([1, 3, no, h, w]), np.int64)])
        y = g.op("Sigmoid", [g.op("Transpose", [y], perm=[0, 1, 3, 4, 2])])
        xy, wh, conf = g.op("Split", [y, g.const(np.array([2, 2, no - 4]), np.int64)], 3,
                            axis=4)
        gy, gx = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
        grid = (np.stack([gx, gy], -1)[None, None] - 0.5).astype(np.float32)
        xy = g.op("Mul", [g.op("Add", [g.op("Mul", [xy, g.const(np.array(2.0))]),
                                       g.const(grid)]), g.const(np.array(float(s)))])
        agrid = np.array(anc, np.float32).reshape(1, 3, 1, 1, 2)
        wh = g.op("Mul", [g.op("Pow", [g.op("Mul", [wh, g.const(np.array(2.0))]),
                                       g.const(np.array(2.0))]), g.const(agrid)])
        y = g.op("Concat", [xy, wh, conf], axis=4)
        heads.append(g.op("Reshape", [y, g.const(np.array([1, 3 * h * w, no]), np.int64)]))
    g.nodes.append(helper.make_node("Concat", heads, ["output0"], name="/Concat_heads", axis=1))
    n = sum(3 * (size // s) ** 2 for s in STRIDES)
    graph = helper.make_graph(
        g.nodes, "yolov5_head",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, n, no])], g.inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def detections(out: np.ndarray, threshold: float = 0.25
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(anchor indices, class ids, boxes [k, 4] cx cy w h) of the anchors whose objectness x
    best class probability is above `threshold`, from one [1, N, 85] output."""
    o = np.asarray(out, np.float64)[0]
    sc = o[:, 5:] * o[:, 4:5]
    keep = np.nonzero(sc.max(1) > threshold)[0]
    return keep, sc[keep].argmax(1), o[keep, :4]

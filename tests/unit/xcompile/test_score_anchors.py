"""A detector's score part judged by its anchor cosine (xcompile.quant.parts.anchor_cosine,
issue 27): the cosine of the class vectors at the anchors where either side's best score
reaches ANCHOR_FLOOR. Over all the scores (even those above SCORE_FLOOR) a probe image without
objects reads rounding noise, and the noise decides which of two quantizations the search
keeps; the anchor cosine reads what changes detections."""

from __future__ import annotations

import numpy as np
import pytest

from xcompile.quant.mixed import part_cosines, worst_part
from xcompile.quant.parts import (
    ANCHOR_FLOOR,
    SCORE_FLOOR,
    Part,
    anchor_cosine,
    compare_parts,
    compare_samples,
    format_parts,
)

N, C = 2100, 18  # YOLOv8n at 320 x 320: 2100 anchors, NudeNet's 18 classes
PARTS = [Part("output0.boxes", 0, 1, 0, 4, "value"),
         Part("output0.scores", 0, 1, 4, 4 + C, "score", 1)]


def _image(rng: np.random.Generator, objects: int) -> np.ndarray:
    """[1, 4 + C, N]: box pixels and sigmoid class scores; `objects` anchors with a confident
    class (0.6-0.9), the rest of the scores below 0.04 (a trained detector's background)."""
    boxes = rng.uniform(0, 320, (1, 4, N))
    scores = rng.uniform(0.0, 0.04, (1, C, N)) ** 2 / 0.04
    at = rng.choice(N, objects, replace=False)
    scores[0, rng.integers(0, C, objects), at] = rng.uniform(0.6, 0.9, objects)
    return np.concatenate([boxes, scores], axis=1)


def _noisy(ref: np.ndarray, rng: np.random.Generator, background: float) -> np.ndarray:
    """`ref` with int8-like rounding noise of `background` on the scores below ANCHOR_FLOOR
    (what an int8 class branch does to the background) and a small one on the boxes."""
    got = ref.copy()
    got[:, :4] += rng.normal(0, 0.2, got[:, :4].shape)
    s = got[:, 4:]
    low = s < ANCHOR_FLOOR
    s[low] = np.clip(s[low] + rng.normal(0, background, low.sum()), 0.0, ANCHOR_FLOOR * 0.5)
    return got


def test_the_score_cosine_is_noise_on_an_image_without_objects_the_anchor_cosine_is_not():
    """Two quantizations of one detector, on two probe images (one with objects, one without):
    A keeps every detection with a noisier background, B loses one of three objects (0.8 ->
    0.12) with a quieter background. The score cosine (over the scores above SCORE_FLOOR) is
    decided by the empty image's background and prefers B; the anchor cosine prefers A, and
    on the empty image reads 1.0 for both (no anchor reaches the floor)."""
    rng = np.random.default_rng(0)
    with_objects, empty = _image(rng, 3), _image(rng, 0)
    a = [_noisy(with_objects, rng, 0.012), _noisy(empty, rng, 0.012)]
    b = [_noisy(with_objects, rng, 0.004), _noisy(empty, rng, 0.004)]
    lost = np.argwhere(with_objects[0, 4:] > 0.5)[0]
    b[0][0, 4 + lost[0], lost[1]] = 0.12
    ref = [with_objects, empty]

    def per_image(got):
        return [compare_parts([r], [g], PARTS)[1] for r, g in zip(ref, got)]

    ra, rb = per_image(a), per_image(b)
    # the score cosine: the empty image decides, and it ranks by background noise
    assert min(r.score_cosine for r in ra) < min(r.score_cosine for r in rb) < 0.97
    assert ra[1].score_cosine == min(r.score_cosine for r in ra)
    # the anchor cosine: the empty image has no anchor on either side, the lost object counts
    assert ra[1].anchors == rb[1].anchors == 0 and ra[1].anchor_cosine == 1.0
    assert ra[0].anchors == 3 and ra[0].anchor_cosine > 0.99
    assert rb[0].anchors == 3 and rb[0].anchor_cosine < 0.95
    # what the search compares: the worst part over the probe samples
    fa = part_cosines(None, [[r] for r in ref], [[g] for g in a], PARTS)
    fb = part_cosines(None, [[r] for r in ref], [[g] for g in b], PARTS)
    assert worst_part(fa)[1] > 0.99 and worst_part(fb)[1] < 0.95
    assert worst_part(fb)[0] == "output0.scores"


def test_a_false_detection_on_an_empty_image_is_seen():
    """Either side counts: a result that invents an object where the float run sees none (the
    trained YOLOv8n's blurred 2 x 2 face tile: a face at 0.51 where float reads 0.07) has an
    anchor above the floor, and its class vector disagrees."""
    rng = np.random.default_rng(1)
    ref = _image(rng, 0)
    got = ref.copy()
    got[0, 4 + 12, 777] = 0.51  # a face the float run reads at 0.03 at most
    (r,) = compare_parts([ref], [got], PARTS[1:])
    assert r.anchors == 1 and r.anchor_cosine < 0.5
    assert r.figure == r.anchor_cosine
    assert r.score_cosine > 0.95  # one invented anchor among 37,800 scores: no figure sees it


def test_anchor_cosine_by_hand():
    ref = np.array([[0.9, 0.0, 0.05], [0.1, 0.02, 0.0]])  # classes x anchors
    got = np.array([[0.6, 0.0, 0.2], [0.3, 0.02, 0.0]])
    cos, n = anchor_cosine(ref, got, 0)
    keep_r, keep_g = ref[:, [0, 2]].ravel(), got[:, [0, 2]].ravel()
    want = keep_r @ keep_g / np.linalg.norm(keep_r) / np.linalg.norm(keep_g)
    assert n == 2 and cos == pytest.approx(want)
    assert anchor_cosine(ref * 0.01, got * 0.01, 0) == (1.0, 0)
    assert anchor_cosine(ref.T, got.T, -1) == (cos, n)  # class axis last


def test_classifiers_and_one_channel_maps_keep_the_score_cosine():
    """A classifier's one probability vector and a one-channel probability map (PP-OCR's
    text map) are no detector's anchors: their figure stays the cosine above SCORE_FLOOR."""
    rng = np.random.default_rng(2)
    probs = rng.dirichlet(np.ones(100) * 0.05, 1)
    (r,) = compare_parts([probs], [probs * 0.9], [Part("prob", 0, None, 0, 0, "score", 1)])
    assert r.anchor_cosine is None and r.figure == r.score_cosine
    heat = rng.uniform(0, 1, (1, 1, 8, 8))
    (r,) = compare_parts([heat], [heat], [Part("map", 0, None, 0, 0, "score", 1)])
    assert r.anchor_cosine is None and r.figure == pytest.approx(1.0)


def test_samples_stacked_and_reported():
    rng = np.random.default_rng(3)
    ref = [[_image(rng, 2)], [_image(rng, 1)]]
    got = [[_noisy(s[0], rng, 0.004)] for s in ref]
    box, cls = compare_samples(ref, got, PARTS)
    assert cls.anchors == 3 and cls.anchor_cosine > 0.999
    assert cls.as_dict()["anchors"] == 3 and "anchor_cosine" in cls.as_dict()
    assert f"anchors {cls.anchor_cosine:.5f} (3 >= {ANCHOR_FLOOR:g})" in format_parts([cls])
    assert box.anchor_cosine is None and SCORE_FLOOR < ANCHOR_FLOOR

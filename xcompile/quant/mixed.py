"""Automatic mixed precision: raise the layers whose own int8 rounding costs most to int16
until the network's outputs reach a cosine target on the calibration samples.

Some trained networks lose too much in int8 wherever the calibration is set: PaddleOCR's SVTR
recognizer keeps a 0.85 output cosine with every observer (onnxruntime's own int8: 0.81), and
1.0 all in int16. A few layers carry most of that loss, and the integer report
(`xcompile.quant.report`) measures each one *alone* (its float inputs, its own rounding). So the
compile raises the worst of them to 16 bits (both chips compute mixed int8/int16 networks,
docs/quantization.md section 10), re-quantizes, measures again, and doubles the count each
round: a handful of rounds at most, each a quantization and a report.

The calibration samples flatter the network they calibrated: the recognizer reached 0.997 on
every one of its eight and 0.92 on one held-out text image of eight. So the cosine that decides
is measured on the calibration samples *and* on a mirror image or half-roll of each
(`probe_samples`): inputs the calibration never saw, with the same statistics (there the same
network measured 0.962); and the rounds aim halfway between `min_cosine` and 1 (`aim`): 0.995
for the default 0.99. A last round raises every remaining 8-bit layer when the doubling rounds
end short of the aim.
"""

from __future__ import annotations

import ctypes
import gc
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .report import accuracy_report, cosine

log = logging.getLogger(__name__)

__all__ = ["MixedPrecision", "raise_until"]

#: calibration samples the per-round report runs on (enough to rank layers, cheap to run);
#: the cosine that decides is measured on all of them
REPORT_SAMPLES = 4


@dataclass
class MixedPrecision:
    """What `raise_until` chose: the op_bits it quantized with and the output cosine (lowest
    over the outputs and the calibration samples) after each round, the 8-bit start first."""

    op_bits: dict[int, int] = field(default_factory=dict)
    cosines: list[float] = field(default_factory=list)

    @property
    def reached(self) -> float:
        return max(self.cosines) if self.cosines else 0.0


def _release() -> None:
    """Give the memory of dropped networks back: a network is a graph of cycles (ops <->
    values), so only the cycle collector frees one, and glibc keeps freed arrays below its
    (self-raising) mmap threshold in the heap, resident, unless asked to trim."""
    gc.collect()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def aim(min_cosine: float) -> float:
    """The calibration-sample cosine the rounds stop at, so held-out inputs reach
    `min_cosine`."""
    return min_cosine + (1.0 - min_cosine) / 2.0


def probe_samples(samples: list[list[np.ndarray]]) -> list[list[np.ndarray]]:
    """The samples, then each once more with its image inputs (4-D) mirrored along the last
    axis, the one before it, or rolled by half the last one (in turn): new inputs with the
    calibration set's statistics, on which the accuracy check sees what held-out inputs will
    see. Samples without a 4-D input are not varied."""
    variants = (lambda a: np.flip(a, -1), lambda a: np.flip(a, -2),
                lambda a: np.roll(a, a.shape[-1] // 2, -1))
    out = list(samples)
    for k, s in enumerate(samples):
        if any(np.ndim(a) == 4 for a in s):
            vary = variants[k % len(variants)]
            out.append([np.ascontiguousarray(vary(a)) if np.ndim(a) == 4 else a for a in s])
    return out


def outputs_cosine(float_net: Any, quantized: Any, samples: list, runner: Any = None) -> float:
    """The lowest cosine between `quantized`'s and `float_net`'s outputs, over every output and
    every one of `samples` (per sample, not pooled: a pooled cosine is carried by the samples
    with the largest outputs and hides the one image a network gets wrong). Outputs only, no
    per-layer capture: two forwards per sample."""
    from ..runner import default_runner
    from .calibrate import load_calibration, run_float

    runner = runner or default_runner()
    data = load_calibration(samples, float_net)
    f = run_float(float_net, data, lambda v, a: None, runner, what="accuracy check, float")
    q = run_float(quantized, data, lambda v, a: None, runner, what="accuracy check, integer")
    return min((cosine(np.asarray(qs[k], np.float64).ravel(),
                       np.asarray(fs[k], np.float64).ravel())
                for qs, fs in zip(q, f) for k in range(len(fs))), default=1.0)


def raise_until(float_net: Any, quantized: Any, quantize: Callable[[dict[int, int]], Any],
                samples: list, min_cosine: float, *, op_bits: dict | None = None,
                runner: Any = None, max_rounds: int = 5) -> tuple[Any, MixedPrecision]:
    """The quantized network (`quantized`, or one `quantize(op_bits)` made with more ops at 16
    bits) whose outputs come closest to `float_net`'s, stopping as soon as the lowest output
    cosine over the calibration samples and their variants (`probe_samples`) reaches
    `aim(min_cosine)`; and what was chosen. `op_bits` are the user's own choices, kept in every
    round. The caller should hold no other reference to `quantized`: a worse network is
    dropped as soon as a better one exists."""
    from .calibrate import load_calibration

    data = load_calibration(samples, float_net)
    sub = data[:REPORT_SAMPLES]
    probe = probe_samples(data)
    target = aim(min_cosine)
    chosen: dict[Any, int] = dict(op_bits or {})
    cos = outputs_cosine(float_net, quantized, probe, runner)
    result = MixedPrecision(dict(chosen), [cos])
    if cos >= target:
        return quantized, result
    rep = accuracy_report(float_net, quantized, sub, runner)
    # at most two quantized networks alive at once (the best so far and the one being made):
    # a vgg19's are 0.35 GB each
    best, best_cos = quantized, cos
    del quantized
    _release()
    n = max(2, len(rep.raisable()) // 32)
    for k in range(max_rounds + 1):
        if best_cos >= target:
            break
        # the last round raises whatever is left
        cands = rep.raisable(skip=chosen)[:n if k < max_rounds else None]
        if not cands:
            break
        chosen.update({r.op_id: 16 for r in cands})
        q = quantize(dict(chosen))
        if k < max_rounds:
            rep = accuracy_report(float_net, q, sub, runner)
        cos = outputs_cosine(float_net, q, probe, runner)
        result.cosines.append(cos)
        log.info("mixed precision: %d ops at 16 bits, output cosine %.4f", len(chosen), cos)
        if cos > best_cos:
            best, best_cos, result.op_bits = q, cos, dict(chosen)
        del q
        _release()
        n *= 2
    return best, result

"""The inputs the compile's accuracy checks measure on (docs/quantization.md section 10, step
1): the calibration samples and a variant of each that the calibration never saw, and the float
network's outputs on them, computed once for every quantized network a compile measures (the
mixed-precision search's attempts, the 16-bit rules `widening` measures)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["Probes", "part_cosines", "probe_samples", "worst_part"]


def _real(v: Any, a: np.ndarray) -> np.ndarray:
    """The real numbers array `a` of value `v` holds (codes dequantized)."""
    el = v.dtype.element_dtype
    if not getattr(el, "is_quantized", False):
        return np.array(a, np.float32)
    scale = np.asarray(el.scale, np.float32)
    zero = np.asarray(el.zero_point, np.float32)
    if el.axis is not None and scale.size > 1:  # per channel along `axis`
        shape = [1] * np.ndim(a)
        shape[el.axis] = -1
        scale, zero = scale.reshape(shape), zero.reshape(shape)
    return (np.asarray(a, np.float32) - zero) * scale


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


def part_cosines(net: Any, reference: list[list[np.ndarray]], got: list[list[np.ndarray]],
                 parts: Any = None) -> dict[str, float]:
    """`{part: figure}`, each the lowest over the samples (per sample, not pooled: a pooled
    cosine is carried by the samples with the largest outputs and hides the one image a
    network gets wrong). `reference`/`got`: the float and quantized outputs, per sample. The
    parts are `xcompile.quant.parts.output_parts(net)` (`parts`, when given): a Concat
    output's branches, score parts measured by their kept entries too; a part's figure is its
    cosine, 0 where it collapsed (`parts.PartResult.figure`)."""
    from .parts import compare_parts, output_parts

    if parts is None:
        parts = output_parts(net, reference=reference[0] if reference else None)
    out: dict[str, float] = {}
    for fs, qs in zip(reference, got):
        for r in compare_parts(fs, qs, parts):
            out[r.part.name] = min(out.get(r.part.name, 1.0), float(r.figure))
    return out


def worst_part(parts: dict[str, float]) -> tuple[str, float]:
    """(name, cosine) of the lowest part; ("", 1.0) without parts."""
    return min(parts.items(), key=lambda kv: kv[1], default=("", 1.0))


class Probes:
    """The probe samples (`probe_samples`: the calibration samples, then a mirrored or
    half-rolled variant of each image sample; a network without image inputs is measured on
    its calibration samples) and the float network's outputs on them, computed once;
    `measure(q)`: a quantized network's cosine per output part, the lowest over the samples,
    one integer forward per sample. `what` names the check in the progress line.

    The calibration samples are measured too: a figure that is the minimum over more samples
    can only be stricter. On the variants alone PaddleOCR's SVTR recognizer read about 0.992
    for every count of 85-135 raised ops, so the search kept a count that was noise (0.9547 on
    a held-out image); with the calibration images among the probes it kept 135 and read
    0.9998+ held out (docs/quantization.md section 10)."""

    def __init__(self, float_net: Any, samples: Any, runner: Any = None,
                 what: str = "accuracy check") -> None:
        from ..runner import default_runner
        from .calibrate import load_calibration, run_float
        from .parts import output_parts

        self.runner = runner or default_runner()
        self.what = what
        self.float_net = float_net
        #: v_id -> the float network's value on each probe sample (`float_values`)
        self._float_values: dict[int, list[np.ndarray]] = {}
        data = load_calibration(samples, float_net)
        self.data = probe_samples(data)
        self.reference = run_float(float_net, self.data, lambda v, a: None, self.runner,
                                   what=f"{what}, float")
        self.parts = output_parts(float_net, reference=self.reference[0])

    def outputs(self, quantized: Any) -> list[list[np.ndarray]]:
        """`quantized`'s outputs on the probe samples, per sample."""
        return self.capture(quantized, set())[0]

    def capture(self, net: Any, v_ids: set[int], what: str = "integer", each: Any = None
                ) -> tuple[list[list[np.ndarray]], dict[int, list[np.ndarray]]]:
        """`net`'s outputs on the probe samples, per sample, and the values `v_ids` it
        computes on each (real numbers: a quantized value's codes times its scale, less its
        zero point), in one forward per sample. With `each`, the values are handed to
        `each(v_id, sample_index, array)` as they come and not kept."""
        from .calibrate import run_float

        kept: dict[int, list[np.ndarray]] = {v: [] for v in v_ids}
        seen = dict.fromkeys(v_ids, 0)

        def keep(v: Any, a: np.ndarray) -> None:
            if v.v_id not in kept:
                return
            if each is None:
                kept[v.v_id].append(_real(v, a))
            else:
                each(v.v_id, seen[v.v_id], _real(v, a))
            seen[v.v_id] += 1

        outs = run_float(net, self.data, keep, self.runner, what=f"{self.what}, {what}")
        return outs, kept

    def float_values(self, v_ids: set[int]) -> dict[int, list[np.ndarray]]:
        """The float network's values among `v_ids` on each probe sample (one more float
        forward for those not asked for before); a value the float network does not compute
        (one the quantizer added) is left out."""
        missing = set(v_ids) - set(self._float_values)
        if missing:
            self._float_values.update(self.capture(self.float_net, missing, "float")[1])
        return {v: self._float_values[v] for v in v_ids if self._float_values[v]}

    def measure(self, quantized: Any) -> dict[str, float]:
        return part_cosines(quantized, self.reference, self.outputs(quantized), self.parts)

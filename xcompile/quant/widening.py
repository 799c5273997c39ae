"""Whether the Concats stored in 16 bits for their far branches pay, measured
(docs/quantization.md section 11, "int16" form; section 10, "Why int16").

`concats.concat_plan` stores a Concat whose branch lies more than `BRANCH_SPREAD` (16x) below
the others in 16 bits, so that branch keeps its codes, and every reader of the Concat computes
in 16 bits. Where the readers mix all channels (1x1 and 3x3 convolutions after an Inception
block), the quiet branch's int8 rounding adds no more to their outputs than any other
channel's, and the widening buys nothing at the network's outputs: the onnx light model
inception_v2 (seeded) kept 15 of its 99 HardOps (4.6% of the MACs) in 16 bits for two such
Concats, with its output at cosine 1.0000 either way (logits 0.999994 both; the Concats'
own outputs 0.99994 in 16 bits, 0.99988 in 8). Elsewhere it is what keeps the branch (a
per-channel reader, a branch with a large gain after it). So the compile measures it:
`measure_widening` quantizes the network once more without the widening
(`quantize_network(widen_concats=False)`) and keeps that when every output part still
reaches the target and the worst is within `WIDEN_MARGIN` of the widened network's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["WIDEN_MARGIN", "measure_widening", "widened_concats"]

#: how much lower (worst output part cosine on the probes) the network with int8 Concats may
#: read than the widened one and still be kept: well below the 0.005 a probe figure moves by
#: with changes that mean nothing (docs/quantization.md section 10), so a real loss keeps the
#: widening
WIDEN_MARGIN = 0.002


def widened_concats(net: Any) -> list[str]:
    """Names of the Concats `net` (quantized) stores in 16 bits for far branches (form
    "int16" in `tags["quantization"]["concats"]`)."""
    rec = net.tags.get("quantization", {}).get("concats", {})
    return [c.get("name") or k for k, c in rec.items() if c.get("form") == "int16"]


def measure_widening(float_net: Any, quantized: Any, narrow: Callable[[], Any],
                     samples: Any, min_cosine: float, runner: Any = None
                     ) -> tuple[Any, dict[str, Any] | None]:
    """(the network to keep, the record for `tags["quantization"]["concat_widening"]`, None
    when `quantized` widens no Concat). `narrow()` quantizes the same network (same op_bits,
    thresholds and weight rounding) without widening; both are measured on the probe
    variants of `samples` (`mixed.probe_samples`), per output part, as the mixed-precision
    check measures; the narrow one is kept when its worst part reaches `min_cosine` and is
    within `WIDEN_MARGIN` of the widened one's. The caller holds no other reference to
    `quantized`."""
    from xcompile.quant.calibrate import load_calibration, run_float
    from xcompile.quant.mixed import part_cosines, probe_samples, worst_part
    from xcompile.quant.parts import output_parts
    from xcompile.runner import default_runner

    wide = widened_concats(quantized)
    if not wide:
        return quantized, None
    runner = runner or default_runner()
    data = load_calibration(samples, float_net)
    probes = probe_samples(data)[len(data):] or data
    ref = run_float(float_net, probes, lambda v, a: None, runner,
                    what="Concat widening, float")
    parts = output_parts(float_net, reference=ref[0])

    def measure(q: Any) -> dict[str, float]:
        got = run_float(q, probes, lambda v, a: None, runner,
                        what="Concat widening, integer")
        return part_cosines(q, ref, got, parts)

    with_wide = measure(quantized)
    other = narrow()
    without = measure(other)
    (wn, wc), (nn, nc) = worst_part(with_wide), worst_part(without)
    keep_narrow = nc >= min_cosine and nc >= wc - WIDEN_MARGIN
    record = {"concats": wide, "cosine_int16": {k: round(v, 6) for k, v in with_wide.items()},
              "cosine_int8": {k: round(v, 6) for k, v in without.items()},
              "worst_int16": [wn, round(wc, 6)], "worst_int8": [nn, round(nc, 6)],
              "kept": "int8" if keep_narrow else "int16", "margin": WIDEN_MARGIN}
    log.info("%d Concat(s) of far-apart branches: worst part %s %.4f in 16 bits, %s %.4f "
             "in 8: %s kept", len(wide), wn, wc, nn, nc, record["kept"])
    if keep_narrow:
        del quantized
        return other, record
    del other
    return quantized, record

"""Whether a 16-bit rule pays on this network, measured (docs/quantization.md section 10,
"Why int16", and section 11, "int16" form).

Two of the quantizer's rules put ops in 16 bits whatever the search measures:

- **Concats of far-apart branches** (`concats.concat_plan`, form "int16"): a Concat whose
  branch lies more than `BRANCH_SPREAD` (16x) below the others is stored in 16 bits so that
  branch keeps its codes, and every reader of the Concat computes in 16 bits. Where the readers
  mix all channels (the convolutions after an Inception block) the quiet branch's int8
  rounding adds no more to their outputs than any other channel's: the onnx light model
  inception_v2 (seeded) kept 15 of its 99 HardOps (4.6% of the MACs) in 16 bits for two such
  Concats, with its output at cosine 1.0000 either way (logits 0.999994 both).
- **The residual stream** (`bits.stream_bits`): the Adds writing a LayerNorm's input and the
  stream they carry. On the field corpus ViT block it is what keeps the class token's row
  (0.906 -> 0.998); on the spectrum's transformer block (no small row) it turned 10 of 15
  HardOps to 16 bits for 0.9997 -> 0.9998.

So the compile (`xcompile.pipeline`), when it has a target, quantizes the network once more
without the rule (`quantize_network(widen_concats=False)`, `residual_stream=False`) and keeps
that when every output part still reaches the target and the worst is within `WIDEN_MARGIN`
of the network with the rule (`measure_without`); the figures go to the tags and the printout.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from .probes import Probes, worst_part

log = logging.getLogger(__name__)

__all__ = ["WIDEN_ERROR_FLOOR", "WIDEN_ERROR_GROWTH", "WIDEN_MARGIN", "measure_without",
           "stream_ops", "widened_concats"]

#: how much lower (worst output part cosine on the probes) the network without a rule may read
#: than the one with it and still be kept: well below the 0.005 a probe figure moves by with
#: changes that mean nothing (docs/quantization.md section 10), so a real loss keeps the rule
WIDEN_MARGIN = 0.002
#: and by how much its error (1 - worst part) may grow: a loss inside `WIDEN_MARGIN` is no
#: noise where the network with the rule is that much closer than the margin. PP-OCRv4's
#: recognizer, every op in int16: its residual stream read 0.9996 with, 0.9982 without on the
#: probes, held out 0.9998-1.0000 with, 0.9750 / 0.9880 without (images 13 / 12); the spectrum
#: transformer block's 0.9998 -> 0.9997 is still dropped
WIDEN_ERROR_GROWTH = 2.0
#: errors below this (1 - cosine) count as equal whatever their ratio
WIDEN_ERROR_FLOOR = 1e-4


def widened_concats(net: Any) -> list[str]:
    """Names of the Concats `net` (quantized) stores in 16 bits for far branches (form
    "int16" in `tags["quantization"]["concats"]`)."""
    rec = net.tags.get("quantization", {}).get("concats", {})
    return [c.get("name") or k for k, c in rec.items() if c.get("form") == "int16"]


def stream_ops(net: Any) -> list[str]:
    """Names of the ops of `net` (quantized) the residual-stream rule puts in 16 bits (reason
    "stream" in `tags["quantization"]["int16"]`)."""
    rows = net.tags.get("quantization", {}).get("int16", {}).get("ops", [])
    return [r["name"] for r in rows if r["reason"] == "stream"]


def measure_without(probes: Probes, quantized: Any, narrow: Callable[[], Any],
                    min_cosine: float, rule: str, names: list[str]
                    ) -> tuple[Any, dict[str, Any]]:
    """(the network to keep, its record): `quantized` (made with the 16-bit `rule`, which
    raised `names`) and `narrow()` (the same without it) measured on `probes`; the narrow one
    is kept when its worst part reaches `min_cosine`, is within `WIDEN_MARGIN` of the
    other's and its error (1 - worst part) at most `WIDEN_ERROR_GROWTH` times the other's
    (plus `WIDEN_ERROR_FLOOR`). The caller holds no other reference to `quantized`."""
    with_rule = probes.measure(quantized)
    other = narrow()
    without = probes.measure(other)
    (wn, wc), (nn, nc) = worst_part(with_rule), worst_part(without)
    drop = nc >= min_cosine and nc >= wc - WIDEN_MARGIN and \
        1.0 - nc <= WIDEN_ERROR_GROWTH * (1.0 - wc) + WIDEN_ERROR_FLOOR
    record = {"rule": rule, "ops": names,
              "cosine_with": {k: round(v, 6) for k, v in with_rule.items()},
              "cosine_without": {k: round(v, 6) for k, v in without.items()},
              "worst_with": [wn, round(wc, 6)], "worst_without": [nn, round(nc, 6)],
              "kept": not drop, "margin": WIDEN_MARGIN}
    log.info("%s (%d ops): worst part %s %.4f with it, %s %.4f without: %s", rule, len(names),
             wn, wc, nn, nc, "kept" if not drop else "dropped")
    if drop:
        del quantized
        return other, record
    del other
    return quantized, record

"""How one sample's outputs compare with the reference's: pure functions of numpy arrays.

Besides the whole-output cosine, each output is measured per part (`xcompile.quant.parts`): a
Concat output per input branch (a detector's boxes and class scores), score parts with their
top-5 agreement and kept entries above 0.25. A row names the parts that collapsed: a cosine of
0.999 over box pixels says nothing about class scores that all rounded to 0."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

#: the per-sample figures `--metric` may rank and plot by
METRICS = ("cosine", "max_error", "top1", "worst_part_cosine")


def _flat(arrays: Sequence[Any]) -> np.ndarray:
    return np.concatenate([np.asarray(a, np.float64).ravel() for a in arrays]) if arrays else \
        np.zeros(0)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity of two flat vectors; 1.0 when both are zero, 0.0 when one is."""
    from xcompile.quant.parts import cosine as _cosine

    return _cosine(a, b)


def is_class_vector(arr: Any) -> bool:
    """A single output with one axis of more than one entry once size-1 axes are gone."""
    a = np.asarray(arr)
    return a.size > 1 and sum(d > 1 for d in a.shape) == 1


def compare(outputs: Sequence[Any], reference: Sequence[Any], parts: Any = None
            ) -> dict[str, Any]:
    """cosine, max_error (largest absolute difference) and, where the first output is a class
    vector, top1 (1 when the arg-max classes agree, else 0; None otherwise). With `parts`
    (`xcompile.quant.parts.output_parts` of the reference network) also `parts` (per part:
    cosine, max_abs, top-k and kept entries for score parts, collapsed), `worst_part`,
    `worst_part_cosine` (0.0 where it collapsed) and `collapsed` (the collapsed parts' names)."""
    if len(outputs) != len(reference):
        raise ValueError(f"{len(outputs)} outputs against {len(reference)} reference outputs")
    for k, (o, r) in enumerate(zip(outputs, reference)):
        if np.asarray(o).size != np.asarray(r).size:
            raise ValueError(f"output {k} has {np.asarray(o).size} elements, the reference "
                             f"{np.asarray(r).size}")
    a, b = _flat(outputs), _flat(reference)
    top1 = None
    if outputs and is_class_vector(outputs[0]) and is_class_vector(reference[0]):
        top1 = int(np.argmax(np.asarray(outputs[0]).ravel()) ==
                   np.argmax(np.asarray(reference[0]).ravel()))
    row = {"cosine": cosine(a, b),
           "max_error": float(np.max(np.abs(a - b))) if a.size else 0.0,
           "top1": top1}
    if parts:
        row.update(part_figures(outputs, reference, parts))
    return row


def part_figures(outputs: Sequence[Any], reference: Sequence[Any], parts: Any
                 ) -> dict[str, Any]:
    """The per-part fields of `compare` (outputs reshaped to the reference's shapes: `compare`
    compares them in flat order)."""
    from xcompile.quant.parts import compare_parts, worst, worst_part

    got = [np.asarray(o).reshape(np.shape(r)) for o, r in zip(outputs, reference)]
    res = compare_parts(list(reference), got, parts)
    out = {}
    for r in res:
        d = {k: v for k, v in r.as_dict().items()
             if k in ("kind", "cosine", "score_cosine", "max_abs", "topk", "kept_ref",
                      "kept_got", "kept_both", "collapsed", "reason")}
        out[r.part.name] = d
    w = worst_part(res)
    return {"parts": out, "worst_part": None if w is None else w.part.name,
            "worst_part_cosine": float(worst(res)),
            "collapsed": [r.part.name for r in res if r.collapsed]}

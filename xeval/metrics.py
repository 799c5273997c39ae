"""How one sample's outputs compare with the reference's: pure functions of numpy arrays."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

#: the per-sample figures `--metric` may rank and plot by
METRICS = ("cosine", "max_error", "top1")


def _flat(arrays: Sequence[Any]) -> np.ndarray:
    return np.concatenate([np.asarray(a, np.float64).ravel() for a in arrays]) if arrays else \
        np.zeros(0)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity of two flat vectors; 1.0 when both are zero, 0.0 when one is."""
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 and nb == 0.0:
        return 1.0
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(np.dot(a, b) / (na * nb))


def is_class_vector(arr: Any) -> bool:
    """A single output with one axis of more than one entry once size-1 axes are gone."""
    a = np.asarray(arr)
    return a.size > 1 and sum(d > 1 for d in a.shape) == 1


def compare(outputs: Sequence[Any], reference: Sequence[Any]) -> dict[str, Any]:
    """cosine, max_error (largest absolute difference) and, where the first output is a class
    vector, top1 (1 when the arg-max classes agree, else 0; None otherwise)."""
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
    return {"cosine": cosine(a, b),
            "max_error": float(np.max(np.abs(a - b))) if a.size else 0.0,
            "top1": top1}

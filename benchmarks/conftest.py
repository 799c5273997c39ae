"""Benchmarks run single-threaded: `helpers` caps BLAS, Numba and onnxruntime pools together
when imported, before any benchmark module loads numpy's pools."""

import helpers  # noqa: F401 - sets the thread caps first
import numpy as np
import pytest


@pytest.fixture
def rng():
    return np.random.default_rng(0)

"""The HostBackend's one-pass float kernels (Relu, BatchNorm2d) give numpy's own bits."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from host_backend.ops import FLOAT_KERNELS


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 9), st.integers(1, 70), st.integers(0, 2**31))
def test_relu_and_batch_norm_are_numpys_bits(rows, c, seed) -> None:
    """The one-pass Relu and BatchNorm2d kernels give numpy's bits: np.maximum(x, 0) (NaN passes,
    -0.0 becomes 0.0); (x * a) + b rounded after each float32 operation (no FMA)."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((1, rows, 3, c)) * 10).astype(np.float32)
    x.reshape(-1)[: min(4, x.size)] = np.array([np.nan, -0.0, np.inf, -np.inf],
                                               np.float32)[: min(4, x.size)]
    (y,) = FLOAT_KERNELS["Relu"]([x], {})
    np.testing.assert_array_equal(y.view(np.uint32), np.maximum(x, np.float32(0)).view(np.uint32))
    scale, bias, mean = (rng.standard_normal(c) for _ in range(3))
    var = rng.uniform(0.1, 2.0, c)
    (z,) = FLOAT_KERNELS["BatchNorm2d"]([x, scale, bias, mean, var], {"epsilon": 1e-5})
    a = scale / np.sqrt(var + 1e-5)
    want = x * a.astype(np.float32)
    want += (bias - mean * a).astype(np.float32)
    np.testing.assert_array_equal(z.view(np.uint32), want.view(np.uint32))

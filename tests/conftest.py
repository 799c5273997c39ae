"""Shared fixtures: small networks built with the builder, seeded data."""

from __future__ import annotations

import numpy as np
import pytest

import xir


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


def small_cnn(seed: int = 0) -> xir.Network:
    """Input -> conv -> relu -> maxpool -> (split, concat) -> avgpool(global) -> reshape
    -> Output."""
    r = np.random.default_rng(seed)
    b = xir.NetworkBuilder("small_cnn")
    x = b.input([1, 8, 8, 3], layout="NHWC", name="image")
    w = r.standard_normal((3, 3, 3, 4)).astype(np.float32)
    y = b.conv2d(x, w, r.standard_normal(4).astype(np.float32), pad_top=1, pad_bottom=1,
                 pad_left=1, pad_right=1, name="conv")
    y = b.relu(y, name="relu")
    p = b.max_pool2d(y, pool_height=2, pool_width=2, stride_height=2, stride_width=2)
    a, c = b.split(p, axis=-1, sections=[1, 3])
    z = b.concat(c, a, axis=-1)
    g = b.avg_pool2d(z, is_global=True)
    b.output(b.reshape(g, shape=[1, -1]))
    return b.build()


@pytest.fixture
def cnn() -> xir.Network:
    return small_cnn()

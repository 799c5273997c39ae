"""`quantize_scalar_nb` takes the quotient as a product with ``1 / scale`` where the bounds are
int8 / int16 ones and redoes a pass with the divide where any element lies near a half-integer:
the bytes are the divide's on random maps, on exact halves and their float neighbours (float32
and float64), at the saturation bounds, for +-0, +-inf, huge and subnormal inputs, over scales
from 1e-6 to 1e3; int32 bounds and extreme scales take the divide; a NaN is still refused."""

from __future__ import annotations

import numpy as np
import pytest

from xir.quant.fixed_point import quantize_scalar_nb

BOUNDS = {8: (-128.0, 127.0), 16: (-32768.0, 32767.0), 32: (-2147483648.0, 2147483520.0)}


def _divide(x: np.ndarray, scale: float, lo: float, hi: float) -> np.ndarray:
    """round half away from zero of clip(x / scale), spelt out in numpy float64."""
    v = np.clip(x.astype(np.float64) / scale, lo, hi)
    a = np.abs(v)
    fl = np.floor(a)
    return np.copysign(fl + (a - fl >= 0.5), v)


def _inputs(rng: np.random.Generator, scale: float, hi: float, dt) -> np.ndarray:
    k = rng.integers(-int(min(hi, 40000)) - 2, int(min(hi, 40000)) + 2, 3000)
    halves = ((k + 0.5) * scale).astype(dt)
    near = np.concatenate([halves, np.nextafter(halves, dt(np.inf)),
                           np.nextafter(halves, dt(-np.inf)),
                           (k * scale).astype(dt)])
    rand = (rng.normal(0, 1, 20000) * scale * rng.choice([3, 100, 3e4], 20000)).astype(dt)
    tiny = np.finfo(dt).smallest_subnormal
    edge = np.array([0.0, -0.0, np.inf, -np.inf, 1e30, -1e30, tiny, -tiny,
                     hi * scale, (hi + 0.5) * scale, -(hi + 1.5) * scale], dtype=dt)
    return np.concatenate([near, rand, edge])


SCALES = [1e-6, 2.0**-10, 0.00026, 0.0323, 0.1, 1 / 3, 1.0, 7.77, 1e3] + \
    list(np.exp(np.random.default_rng(0).uniform(np.log(1e-6), np.log(1e3), 24)))


@pytest.mark.parametrize("bits", [8, 16, 32])
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_the_bytes_are_the_divides(bits, dt):
    lo, hi = BOUNDS[bits]
    rng = np.random.default_rng(bits)
    for scale in SCALES:
        x = _inputs(rng, float(scale), hi, dt)
        out = np.empty(x.size, np.float64)
        assert quantize_scalar_nb(x, float(scale), lo, hi, out)
        np.testing.assert_array_equal(out, _divide(x, float(scale), lo, hi))
        # the same map without its near-half elements: a pass the product alone finishes
        v = np.abs(x.astype(np.float64) * (1.0 / scale))
        with np.errstate(invalid="ignore"):  # inf - inf
            keep = ~(np.abs(v - np.floor(v) - 0.5) <= 1e-6)
        out2 = np.empty(int(keep.sum()), np.float64)
        assert quantize_scalar_nb(x[keep], float(scale), lo, hi, out2)
        np.testing.assert_array_equal(out2, _divide(x[keep], float(scale), lo, hi))


@pytest.mark.parametrize("scale", [1e-310, 2.0**-1001, 2.0**1001, 1e305])
def test_extreme_scales_take_the_divide(scale):
    x = np.array([0.0, 1e-300, -3e-308, 5e-324, 1e300, -np.inf, 2.5 * scale, 1.0], np.float64)
    out = np.empty(x.size, np.float64)
    assert quantize_scalar_nb(x, scale, -32768.0, 32767.0, out)
    with np.errstate(over="ignore", divide="ignore"):
        np.testing.assert_array_equal(out, _divide(x, scale, -32768.0, 32767.0))


def test_a_nan_is_refused():
    x = np.linspace(-5, 5, 1000).astype(np.float32)
    x[517] = np.nan
    out = np.empty(x.size, np.int16)
    assert not quantize_scalar_nb(x, 0.01, -32768.0, 32767.0, out)

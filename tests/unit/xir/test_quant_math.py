"""xir.quant: fixed-point requantization, lookup tables and calibration observers."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xcompile.quant.observers import (
    MIN_SCALE,
    KLObserver,
    MinMaxObserver,
    PercentileObserver,
    make_observer,
    weight_scales,
)
from xir.quant.fixed_point import (
    MAX_SHIFT,
    clip_bounds,
    dequantize,
    fake_requantize,
    quantize,
    quantize_bias,
    quantize_multiplier,
    requant_multiplier,
    requantize,
    requantize_nb,
)
from xir.quant.lut import apply_lut, build_lut

INT32 = st.integers(-(2**31), 2**31 - 1)
MULT15 = st.integers(0, 2**15 - 1)
SHIFT = st.integers(0, MAX_SHIFT)
OUT_DTYPES = st.sampled_from([np.int8, np.int16, np.int32])


def ref_requant(acc: int, mult: int, shift: int, lo: int, hi: int) -> int:
    """Round half up of the exact rational acc * mult / 2**shift, then clamp."""
    v = Fraction(acc * mult, 2**shift)
    r = math.floor(v + Fraction(1, 2))
    return min(max(r, lo), hi)


# ------------------------------------------------------------------ requantize vs Fraction


@given(st.lists(INT32, min_size=1, max_size=20), MULT15, SHIFT, OUT_DTYPES)
def test_requantize_matches_fraction_reference(accs, mult, shift, out_dtype):
    lo, hi = int(np.iinfo(out_dtype).min), int(np.iinfo(out_dtype).max)
    got = requantize(np.array(accs, dtype=np.int32), mult, shift, out_dtype=out_dtype)
    assert got.dtype == np.dtype(out_dtype)
    assert [int(g) for g in got] == [ref_requant(a, mult, shift, lo, hi) for a in accs]


@given(
    st.lists(st.integers(-(2**47), 2**47), min_size=1, max_size=10), MULT15, SHIFT, OUT_DTYPES
)
def test_requantize_int64_accumulator_matches_fraction(accs, mult, shift, out_dtype):
    lo, hi = int(np.iinfo(out_dtype).min), int(np.iinfo(out_dtype).max)
    got = requantize(np.array(accs, dtype=np.int64), mult, shift, out_dtype=out_dtype)
    assert [int(g) for g in got] == [ref_requant(a, mult, shift, lo, hi) for a in accs]


@given(st.integers(1, 15), st.integers(-50, 50))
def test_requantize_ties_round_half_up(shift, k):
    # acc * mult = (2k + 1) * 2**(shift - 1): exactly halfway between k and k + 1
    mult = 2 ** (shift - 1)
    acc = 2 * k + 1
    got = int(requantize(np.array([acc]), mult, shift, out_dtype=np.int32)[0])
    assert got == k + 1
    assert got == ref_requant(acc, mult, shift, -(2**31), 2**31 - 1)


def test_requantize_negative_ties_explicit():
    acc = np.array([-5, -3, -1, 1, 3, 5])  # / 2 -> -2.5 -1.5 -0.5 0.5 1.5 2.5
    assert requantize(acc, 1, 1).tolist() == [-2, -1, 0, 1, 2, 3]


def test_requantize_shift_zero_and_max():
    acc = np.array([-(2**31), -7, 0, 7, 2**31 - 1])
    assert requantize(acc, 1, 0, out_dtype=np.int32).tolist() == acc.tolist()
    assert requantize(acc, 2**15 - 1, 63, out_dtype=np.int32).tolist() == [0, 0, 0, 0, 0]


def test_requantize_saturates():
    acc = np.array([-(10**6), -1000, 1000, 10**6], dtype=np.int32)
    assert requantize(acc, 1, 0).tolist() == [-128, -128, 127, 127]
    assert requantize(acc, 1, 0, out_dtype=np.int16).tolist() == [-32768, -1000, 1000, 32767]


def test_requantize_rejects_bad_input():
    with pytest.raises(TypeError):
        requantize(np.array([1.0]), 1, 0)
    with pytest.raises(ValueError):
        requantize(np.array([1]), 1, 64)
    with pytest.raises(ValueError):
        requantize(np.array([1]), 1, -1)
    with pytest.raises(OverflowError):
        requantize(np.array([2**48]), 2**15 - 1, 10)
    with pytest.raises(ValueError):
        requantize(np.array([1]), 1, 0, relu=True, leaky=(1, 0))
    with pytest.raises(ValueError):
        requantize(np.zeros((2, 3), np.int32), [1, 2], 0, axis=1)
    with pytest.raises(ValueError):
        requantize(np.zeros((2, 3), np.int32), [1, 2, 3], 0)  # vector without axis
    with pytest.raises(TypeError):
        requantize(np.array([1]), 1, 0, out_dtype=np.uint8)


# ------------------------------------------------------------------ multipliers


@given(
    st.floats(1e-12, 3.0e4, allow_nan=False, allow_infinity=False),
    st.integers(8, 31),
)
def test_quantize_multiplier_error_bound(real, mult_bits):
    m, s = quantize_multiplier(real, mult_bits)
    m, s = int(m), int(s)
    if real >= 2.0**mult_bits - 0.5:
        assert (m, s) == (2**mult_bits - 1, 0)
        return
    assert 0 <= s <= MAX_SHIFT
    approx = Fraction(m, 2**s)
    if s == MAX_SHIFT and m < 2 ** (mult_bits - 1):
        # too small to normalise within the shift range: absolute error of half an LSB
        assert abs(approx - Fraction(real)) <= Fraction(1, 2 ** (MAX_SHIFT + 1))
        return
    rel = abs(approx - Fraction(real)) / Fraction(real)
    assert rel < Fraction(1, 2 ** (mult_bits - 1))
    if s < MAX_SHIFT:
        assert 2 ** (mult_bits - 1) <= m < 2**mult_bits


def test_quantize_multiplier_edges_and_vectors():
    m, s = quantize_multiplier(np.array([0.0, 1e-30, 0.5, 1.0, 4e4, np.inf, -0.25]))
    assert m.dtype == np.int32 and s.dtype == np.int32
    assert m.tolist() == [0, 0, 2**14, 2**14, 2**15 - 1, 2**15 - 1, -(2**14)]
    assert s.tolist() == [0, 0, 15, 14, 0, 0, 16]
    m, s = quantize_multiplier(2.0**-55)  # denormal at the shift cap
    assert int(s) == MAX_SHIFT and int(m) == 2**8
    # rounding up to 2**mult_bits renormalises
    m, s = quantize_multiplier(1.0 - 2.0**-20)
    assert (int(m), int(s)) == (2**14, 14)
    with pytest.raises(ValueError):
        quantize_multiplier(float("nan"))
    with pytest.raises(ValueError):
        quantize_multiplier(0.5, mult_bits=32)


def test_requant_multiplier_evaluation_order():
    s_in, s_w, s_out = 0.1, np.array([0.003, 0.2]), 0.07
    m, s = requant_multiplier(s_in, s_w, s_out)
    m2, s2 = quantize_multiplier((s_in * s_w) / s_out)
    assert m.tolist() == m2.tolist() and s.tolist() == s2.tolist()


# ------------------------------------------------------------------ per-axis broadcasting


@given(st.integers(0, 2**32 - 1), st.sampled_from([0, 1, 2, -1]))
def test_requantize_per_axis_equals_per_channel_loop(seed, axis):
    rng = np.random.default_rng(seed)
    acc = rng.integers(-(2**20), 2**20, size=(3, 4, 5), dtype=np.int32)
    c = acc.shape[axis]
    mult = rng.integers(2**14, 2**15, size=c)
    shift = rng.integers(10, 30, size=c)
    got = requantize(acc, mult, shift, axis=axis, out_dtype=np.int16)
    moved = np.moveaxis(acc, axis, 0)
    want = np.stack(
        [requantize(moved[i], mult[i], shift[i], out_dtype=np.int16) for i in range(c)]
    )
    assert np.array_equal(np.moveaxis(got, axis, 0), want)
    # a scalar with an axis broadcasts to every channel
    assert np.array_equal(
        requantize(acc, mult[0], shift[0], axis=axis), requantize(acc, mult[0], shift[0])
    )


# ------------------------------------------------------------------ folded activations


@given(
    st.integers(0, 2**32 - 1),
    st.floats(1e-4, 0.5),
    st.floats(0.01, 0.3),
    st.sampled_from(["relu", "relu6", "leaky"]),
)
def test_folded_activations_within_one_lsb_of_float(seed, real, alpha, act):
    rng = np.random.default_rng(seed)
    acc = rng.integers(-(2**16), 2**16, size=200, dtype=np.int32)
    m, s = quantize_multiplier(real)
    y = acc.astype(np.float64) * real
    kw: dict = {}
    if act == "relu":
        kw = {"relu": True}
        y = np.maximum(y, 0)
    elif act == "relu6":
        q6 = int(rng.integers(1, 127))
        kw = {"relu": True, "relu6_q": q6}
        y = np.clip(y, 0, q6)
    else:
        kw = {"leaky": quantize_multiplier(alpha * real)}
        y = np.where(y >= 0, y, alpha * y)
    want = np.clip(np.round(y), -128, 127)
    got = requantize(acc, m, s, **kw)
    assert np.max(np.abs(got.astype(np.int64) - want)) <= 1
    # relu / relu6 are exactly a clamp of the plain integer result
    if act != "leaky":
        plain = requantize(acc, m, s).astype(np.int64)
        lo, hi = clip_bounds(np.int8, relu=True, relu6_q=kw.get("relu6_q"))
        assert np.array_equal(got, np.clip(plain, lo, hi))


def test_leaky_pair_used_only_for_negative_acc():
    acc = np.array([-400, -1, 0, 1, 400])
    got = requantize(acc, 2**14, 15, leaky=(2**14, 17))  # 0.5 and 0.125
    want = [ref_requant(a, 2**14, 17 if a < 0 else 15, -128, 127) for a in acc.tolist()]
    assert got.tolist() == want


def test_relu6_clip_validation():
    assert clip_bounds(np.int8, relu=True, relu6_q=300) == (0, 127)
    with pytest.raises(ValueError):
        clip_bounds(np.int8, relu=True, relu6_q=-1)


# ------------------------------------------------------------------ numba twin


@settings(deadline=None, max_examples=30)
@given(st.integers(0, 2**32 - 1), st.booleans(), st.booleans())
def test_numba_twin_equals_numpy(seed, relu, leaky):
    rng = np.random.default_rng(seed)
    acc = rng.integers(-(2**31), 2**31 - 1, size=(7, 6), dtype=np.int64)
    mult = rng.integers(0, 2**15, size=6)
    shift = rng.integers(0, 64, size=6)
    mn, sn = (rng.integers(0, 2**15, size=6), rng.integers(0, 64, size=6)) if leaky else (
        mult,
        shift,
    )
    relu = relu and not leaky
    lo, hi = clip_bounds(np.int8, relu=relu, relu6_q=100)
    out = np.empty(acc.shape, np.int64)
    requantize_nb(acc, mult, shift, mn, sn, lo, hi, out)
    want = requantize(
        acc, mult, shift, axis=1, relu=relu, relu6_q=100, leaky=(mn, sn) if leaky else None
    )
    assert np.array_equal(out, want)


# ------------------------------------------------------------------ fakeQf


@given(st.lists(INT32, min_size=1, max_size=20), MULT15, st.integers(0, 20))
def test_fake_requantize_exact_and_unsaturated(accs, mult, shift):
    acc = np.array(accs, dtype=np.int32)
    fake = fake_requantize(acc, mult, shift)
    assert fake.dtype == np.float64
    for a, f in zip(accs, fake.tolist()):
        exact = Fraction(a * mult, 2**shift)
        assert abs(Fraction(f) - exact) <= abs(exact) * Fraction(1, 2**52)
    real = requantize(acc, mult, shift).astype(np.float64)
    inside = (fake >= -128.5) & (fake < 127.5)
    assert np.all(np.abs(real[inside] - fake[inside]) <= 0.5)  # rounding loss only


def test_fake_requantize_has_no_saturation():
    acc = np.array([-(10**6), 10**6], dtype=np.int32)
    assert fake_requantize(acc, 1, 0).tolist() == [-1e6, 1e6]
    assert fake_requantize(acc, 1, 1, relu=True, relu6_q=1000).tolist() == [0.0, 1000.0]
    assert fake_requantize(acc, 2**14, 14, leaky=(2**14, 16)).tolist() == [-250000.0, 1e6]


# ------------------------------------------------------------------ quantize / dequantize


def test_quantize_rounds_half_away_and_saturates():
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 1e9, -1e9, np.inf])
    assert quantize(x, 1.0, np.int8).tolist() == [-3, -2, -1, 1, 2, 3, 127, -128, 127]
    assert quantize(x, 1.0, np.int8, narrow_range=True).tolist()[7] == -127
    assert quantize(np.array([0.49999999999999994]), 1.0).tolist() == [0]
    with pytest.raises(ValueError):
        quantize(np.array([np.nan]), 1.0)
    with pytest.raises(ValueError):
        quantize(np.array([1.0]), 0.0)


@pytest.mark.parametrize("src", [np.float32, np.float64])
@pytest.mark.parametrize("dst", [np.int8, np.int16, np.int32])
def test_quantize_fused_path_equals_numpy_path(src, dst):
    """Arrays above 4096 elements take the fused Numba kernel: same codes as the numpy form
    (ties, saturation, +-inf, -0.0, values just below a half), and NaN still raises."""
    rng = np.random.default_rng(7)
    scale = 0.0173
    ties = (np.arange(-300, 300) + 0.5) * scale
    special = np.array([0.0, -0.0, np.inf, -np.inf, 1e30, -1e30,
                        np.nextafter(0.5, 0.0) * scale, -np.nextafter(0.5, 0.0) * scale])
    x = np.concatenate([ties, special, rng.normal(0, 3, 20000) * scale * 100]).astype(src)
    fused = quantize(x, scale, dst)
    chunks = np.concatenate([quantize(x[i:i + 4096], scale, dst)
                             for i in range(0, x.size, 4096)])
    assert x.size > 4096 and fused.dtype == dst
    np.testing.assert_array_equal(fused, chunks)
    x[12345] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        quantize(x, scale, dst)


def test_quantize_per_axis_and_dequantize_roundtrip():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((3, 3, 4, 8))
    s = weight_scales(w, -1, np.int8)
    q = quantize(w, s, np.int8, axis=-1)
    assert q.dtype == np.int8 and np.abs(q).max() == 127
    back = dequantize(q, s, axis=-1, dtype=np.float64)
    assert np.all(np.abs(back - w) <= s / 2 + 1e-12)
    assert dequantize(q, s, axis=-1).dtype == np.float32


def test_quantize_bias_per_channel():
    b = np.array([1.0, -2.0, 0.0])
    got = quantize_bias(b, 0.1, np.array([0.01, 0.02, 0.5]))
    assert got.dtype == np.int32 and got.tolist() == [1000, -1000, 0]
    assert quantize_bias(np.array([1e30]), 1e-3, 1e-3).tolist() == [2**31 - 1]


def test_weight_scales_guard_zero_channels():
    w = np.zeros((2, 2, 3))
    w[..., 0] = 2.54
    w[0, 0, 2] = -3.2767
    s = weight_scales(w, axis=2, dtype=np.int16)
    assert np.allclose(s, [2.54 / 32767, MIN_SCALE, 3.2767 / 32767])
    assert weight_scales(w, axis=2)[0] == pytest.approx(2.54 / 127)


# ------------------------------------------------------------------ lookup tables


def _direct(fn_name: str, x: float) -> float:
    if fn_name == "sigmoid":
        return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))
    if fn_name == "silu":
        return x * _direct("sigmoid", x)
    if fn_name == "hardswish":
        return x * min(max(x + 3.0, 0.0), 6.0) / 6.0
    if fn_name == "tanh":
        return math.tanh(x)
    if fn_name == "exp":
        return math.exp(min(x, 709.0))
    raise AssertionError(fn_name)


def _round_sat(v: float, lo: int, hi: int) -> int:
    if v >= hi:
        return hi
    if v <= lo:
        return lo
    f = Fraction(v)
    r = math.floor(abs(f) + Fraction(1, 2))
    return r if f >= 0 else -r


@pytest.mark.parametrize("fn_name", ["sigmoid", "silu", "hardswish", "tanh", "exp"])
@pytest.mark.parametrize("scales", [(0.05, 1 / 127), (0.02, 0.03), (0.1, 0.5)])
def test_lut_int8_exact_and_monotonic(fn_name, scales):
    s_in, s_out = scales
    lut = build_lut(fn_name, s_in, s_out, np.int8)
    assert lut.shape == (256,) and lut.dtype == np.int8
    want = [_round_sat(_direct(fn_name, q * s_in) / s_out, -128, 127) for q in range(-128, 128)]
    assert lut.tolist() == want
    d = np.diff(lut.astype(np.int64))
    if fn_name in ("sigmoid", "tanh", "exp"):
        assert np.all(d >= 0)
    else:  # silu / hardswish are monotonic from their minimum on (x >= 0 suffices)
        assert np.all(d[128:] >= 0)
    q = np.arange(-128, 128, dtype=np.int8)
    assert np.array_equal(apply_lut(q, lut), np.array(want, dtype=np.int8))


def test_lut_int16_and_indexing():
    lut = build_lut("sigmoid", 8.0 / 32768, 1.0 / 32767, np.int16)
    assert lut.shape == (65536,) and lut.dtype == np.int16
    codes = np.array([-32768, -1, 0, 1, 32767], dtype=np.int16)
    want = [_round_sat(_direct("sigmoid", int(c) * 8.0 / 32768) * 32767, -32768, 32767)
            for c in codes]
    assert apply_lut(codes, lut).tolist() == want
    assert lut[32768] == want[2]  # index = q - qmin: code 0 sits at 2**15
    assert np.all(np.diff(lut.astype(np.int64)) >= 0)
    mixed = build_lut("silu", 0.01, 0.01, np.int8, np.int16)
    assert mixed.dtype == np.int16 and mixed.shape == (256,)
    with pytest.raises(ValueError):
        apply_lut(np.array([0], np.int8), lut)  # int16 table addressed by int8 codes
    with pytest.raises(ValueError):
        build_lut("softplusplus", 0.1, 0.1)


# ------------------------------------------------------------------ observers


def _batches(x: np.ndarray, n: int) -> list[np.ndarray]:
    return np.array_split(x, n)


def test_minmax_observer_exact():
    rng = np.random.default_rng(2)
    x = rng.standard_normal(10_000) * 3
    o = MinMaxObserver()
    assert o.amax() == 0.0 and o.scale() == MIN_SCALE
    for b in _batches(x, 9):
        o.update(b.reshape(-1, 1))
    assert o.amax() == float(np.abs(x).max())
    assert o.scale(np.int16) == float(np.abs(x).max()) / 32767
    with pytest.raises(ValueError):
        o.update(np.array([np.nan]))


@given(st.integers(0, 2**32 - 1), st.sampled_from([99.0, 99.9, 99.99, 50.0, 100.0]))
@settings(max_examples=25)
def test_percentile_observer_within_one_bin(seed, pct):
    rng = np.random.default_rng(seed)
    # growing batch ranges exercise the exact re-binning
    parts = [rng.standard_normal(3000) * (1 + 2 * i) for i in range(5)]
    o = PercentileObserver(pct, bins=512)
    for p in parts:
        o.update(p)
    x = np.abs(np.concatenate(parts))
    assert o.hist.total == x.size
    assert abs(o.amax() - np.percentile(x, pct)) < o.hist.width
    assert o.hist.top < 2 * x.max() or o.hist.top == np.abs(parts[0]).max()


def test_percentile_observer_zeros_first():
    o = PercentileObserver(50.0, bins=16)
    o.update(np.zeros(10))
    assert o.amax() == 0.0
    o.update(np.ones(4))
    assert o.hist.total == 14 and o.amax() < o.hist.width


def test_kl_observer_gaussian_with_outliers():
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.standard_normal(200_000), [20.0, -18.0, 15.0, -16.0]])
    kl, mm = KLObserver(), MinMaxObserver()
    for b in _batches(rng.permutation(x), 8):
        kl.update(b)
        mm.update(b)
    t = kl.amax()
    assert 3.5 < t < 6.0  # clips the outliers, keeps the Gaussian body (|x| < 3.5 w.p. 0.9995)
    assert t < mm.amax() / 3
    assert np.isfinite(kl.divergences).all()
    assert kl.scale() == pytest.approx(t / 127)


def test_kl_observer_int16_parameters_and_factory():
    o = KLObserver(bins=131072, dtype=np.int16, stride=4096)
    assert o.levels == 32768 and o.start_bin == 32768
    o.update(np.random.default_rng(5).standard_normal(20_000))
    assert 0 < o.amax() <= o.hist.top
    with pytest.raises(ValueError):
        KLObserver(bins=1024, dtype=np.int16)  # fewer bins than quantized levels
    small = KLObserver(bins=1024, levels=256, stride=16)
    small.update(np.random.default_rng(4).standard_normal(5000))
    assert 0 < small.amax() <= small.hist.top
    assert isinstance(make_observer("minmax"), MinMaxObserver)
    assert make_observer("percentile", percentile=99.9).percentile == 99.9
    assert isinstance(make_observer("KL", bins=4096), KLObserver)
    with pytest.raises(ValueError, match="unknown calibration method"):
        make_observer("entropy2")

"""A big Cast at a network's edge runs in parts on the host's threads (`host_backend.ops.parts`)
and gives the bytes of one pass: quantize and dequantize, int8/int16, float32/float64, a NaN
still refused, and the map really cut (which thread takes which part is the scheduler's)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from host_backend.ops import cast as cast_mod
from host_backend.ops import parts
from xir.quant.fixed_point import dequantize, quantize
from xir.types import QuantizedType, ScalarType, TensorType


def _qtype(bits: int, scale: float, shape) -> TensorType:
    return TensorType(QuantizedType(ScalarType("sint", bits), scale=scale), shape)


def _ftype(bits: int, shape) -> TensorType:
    return TensorType(ScalarType("fp", bits), shape)


@pytest.fixture
def four_parts(monkeypatch):
    """Four threads and small parts, whatever the machine and NUMBA_NUM_THREADS."""
    monkeypatch.setattr(parts, "get_num_threads", lambda: 4)
    monkeypatch.setattr(parts, "PART_MIN", 1000)  # 57951 // 1000 >= 16 parts
    seen = []
    real = parts.run_parts

    def spy(n, fn):
        def part(lo, hi):
            seen.append((lo, hi))
            fn(lo, hi)
        real(n, part)

    monkeypatch.setattr(cast_mod, "run_parts", spy)
    return seen


@pytest.mark.parametrize("bits", [8, 16])
@pytest.mark.parametrize("fbits", [32, 64])
def test_cast_in_parts_gives_the_bytes_of_one_pass(bits, fbits, four_parts):
    rng = np.random.default_rng(bits + fbits)
    shape = (1, 3, 137, 141)  # 57951 elements: parts of odd sizes
    fdt = np.float32 if fbits == 32 else np.float64
    scale = 0.0297 if bits == 8 else 0.00013
    x = (rng.normal(0, 2, shape) * (1 if bits == 8 else 1.5)).astype(fdt)
    x.reshape(-1)[:6] = [np.inf, -np.inf, 0.5 * scale, -0.5 * scale, 1e30, -0.0]
    qt, ft = _qtype(bits, scale, shape), _ftype(fbits, shape)
    (q,) = cast_mod.cast([x], {}, [ft], [qt])
    assert np.array_equal(q, quantize(x, np.array([scale]), q.dtype))
    (back,) = cast_mod.cast([q], {}, [qt], [ft])
    assert back.dtype == fdt
    assert np.array_equal(back, dequantize(q, np.array([scale]), dtype=fdt))
    assert len(four_parts) == 16 * 2  # both Casts cut into 4 parts per thread (four threads)


def test_a_nan_in_any_part_is_refused(four_parts):
    shape = (1, 8, 32, 32)
    x = np.zeros(shape, np.float32)
    x.reshape(-1)[-3] = np.nan  # in the last part
    with pytest.raises(ValueError, match="NaN"):
        cast_mod.cast([x], {}, [_ftype(32, shape)], [_qtype(8, 0.1, shape)])


def test_small_maps_stay_on_the_calling_thread():
    assert parts.count(parts.PART_MIN - 1) == 1
    calls = []
    parts.run_parts(10, lambda lo, hi: calls.append((lo, hi, threading.get_ident())))
    assert calls == [(0, 10, threading.get_ident())]


@pytest.mark.parametrize("shape", [(1, 5, 7), (1, 64, 128), (2, 3, 40, 41)])
@pytest.mark.parametrize("bits", [8, 16, 32])
def test_edge_casts_give_the_general_kernels_bytes(shape, bits):
    """The one-scale edge Casts (`cast._edge_cast`) against `quantize` / `dequantize`: maps of
    35 elements (the general path), 8K (inline) and 10K; a transposed (non-contiguous) input,
    float16 (the general path), a NaN refused."""
    rng = np.random.default_rng(bits)
    scale = {8: 0.031, 16: 0.0002, 32: 1e-6}[bits]
    for fdt in (np.float32, np.float64, np.float16):
        x = (rng.normal(0, 3, shape)).astype(fdt)
        qt, ft = _qtype(bits, scale, shape), _ftype(np.dtype(fdt).itemsize * 8, shape)
        (q,) = cast_mod.cast([x], {}, [ft], [qt])
        assert q.shape == shape and q.flags.c_contiguous
        assert np.array_equal(q, quantize(x, np.array([scale]), q.dtype))
        (back,) = cast_mod.cast([q], {}, [qt], [ft])
        assert back.dtype == fdt
        assert np.array_equal(back, dequantize(q, np.array([scale]), dtype=fdt))
    xt = rng.normal(0, 3, shape[::-1]).astype(np.float32).T  # not C-contiguous
    qt, ft = _qtype(bits, scale, shape), _ftype(32, shape)
    (q,) = cast_mod.cast([xt], {}, [ft], [qt])
    assert np.array_equal(q, quantize(xt, np.array([scale]), q.dtype))
    x = np.zeros(shape, np.float32)
    x.reshape(-1)[-1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        cast_mod.cast([x], {}, [ft], [qt])

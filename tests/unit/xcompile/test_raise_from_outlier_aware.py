"""The mixed-precision search again from the int8 network with outlier-aware thresholds
(`xcompile.pipeline.raise_from_outlier_aware`): where the search's raises from the first
thresholds miss and it falls back on the outlier-aware int8, which misses too, the layers are
ranked on that network and raised with its thresholds (ddddocr's YOLOX text detector: probe
0.9825 -> 0.9900 with 14 ops, 5.1% of the MACs). Small ONNX networks written with
onnx.helper (tests/unit/xcompile/test_mixed_precision.py's three convolutions)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from xcompile import pipeline
from xcompile.pipeline import DEFAULTS, quantize_stage, raise_from_outlier_aware
from xcompile.quant.mixed import choose_bits, worst_part
from xcompile.quant.quantize import quantize_network

sys.path.insert(0, str(Path(__file__).parent))
from test_mixed_precision import _setup  # noqa: E402


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    monkeypatch.setenv("XRT_PROGRESS", "0")


def _quantizers(tmp_path):
    """(float network, samples, `good`, `clipped`): conv_b writes one channel 30x the others
    that conv_c does not read; `good` (min-max thresholds) reads about 0.987 in int8 and
    0.9999 with conv_c raised; `clipped` (each threshold at the median of |x|, 16-bit values
    too) stands for thresholds whose clipping no raise repairs."""
    _, opt, cal, good = _setup(tmp_path, outlier=30.0)

    def clipped(op_bits):
        return quantize_network(opt, cal, bits=8, method="percentile", percentile=50.0,
                                weight_rounding="nearest", op_bits=op_bits)

    return opt, cal, good, clipped


def _conv_c(opt) -> int:
    return next(op.op_id for op in opt.ops if op.op_type == "Conv2d" and op.name == "conv_c")


def test_the_search_raises_from_the_outlier_aware_int8_it_fell_back_on(tmp_path):
    opt, cal, good, clipped = _quantizers(tmp_path)
    kept, mp = choose_bits(opt, clipped(None), clipped, cal, 0.99,
                           outlier_aware={"stand-in": good})
    assert mp.outlier_aware_kept and not mp.reached and not mp.op_bits  # the fallback, short
    first = len(mp.attempts)
    assert first and all(a.worst < 0.99 for a in mp.attempts)  # raising from `clipped` missed
    short = worst_part(mp.after)[1]
    best, mp = raise_from_outlier_aware(opt, kept, mp, good, cal, 0.99)
    assert mp.reached and mp.warning is None
    assert mp.names == ["conv_c"] and mp.op_bits == {_conv_c(opt): 16}
    assert _conv_c(opt) in {int(k) for k in best.tags["quantization"]["op_bits"]}
    assert best.tags["quantization"]["method"] == "minmax"  # `good`'s thresholds, raised
    assert worst_part(mp.after)[1] >= 0.99 > short
    assert len(mp.attempts) > first and 0 < mp.share_after <= 0.1
    assert mp.outlier_aware_kept and mp.to_tag()["raised"] == ["conv_c"]


def test_a_raise_from_it_beyond_the_cap_keeps_the_outlier_aware_int8_and_says_so(tmp_path):
    opt, cal, good, clipped = _quantizers(tmp_path)
    kept, mp = choose_bits(opt, clipped(None), clipped, cal, 0.99, max_int16=0.01,
                           outlier_aware={"stand-in": good})
    assert mp.outlier_aware_kept and not mp.reached
    short = dict(mp.after)
    best, mp = raise_from_outlier_aware(opt, kept, mp, good, cal, 0.99, max_int16=0.01)
    assert not mp.reached and not mp.op_bits and mp.after == short  # conv_c (3.9%) > 1%
    assert best.tags["quantization"]["op_bits"] == {}
    assert "raising from the outlier-aware thresholds" in mp.warning and "1%" in mp.warning


def test_the_quantize_stage_records_the_raise_from_the_outlier_aware_int8(tmp_path,
                                                                         monkeypatch):
    opt, cal, good, clipped = _quantizers(tmp_path)
    monkeypatch.setattr(pipeline, "_quantizer", lambda *a, **k: clipped)
    monkeypatch.setattr(pipeline, "_outlier_aware", lambda *a, **k: {"stand-in": good})
    q = quantize_stage(opt, cal, dict(DEFAULTS), None, "three convs")
    mp = q.tags["quantization"]["mixed_precision"]
    assert mp["reached"] and mp["raised"] == ["conv_c"] and mp["warning"] is None
    assert mp["outlier_aware"]["kept"] and mp["outlier_aware"]["raise_from"]
    assert mp["outlier_aware"]["weights"] == "stand-in"
    assert mp["worst_after"][1] >= 0.99 > mp["worst_before"][1]

"""Outlier-aware activation thresholds (`MSEObserver(power=3)`, the 8-bit default) and table
inputs clipped where the table saturates (`xcompile.quant.saturation`): docs/quantization.md
section 8."""

from __future__ import annotations

import numpy as np
import pytest

import xir
from xcompile.quant.mixed import outputs_cosine
from xcompile.quant.observers import MSEObserver, lp_errors, mse_errors
from xcompile.quant.quantize import MSE_POWER, quantize_network
from xcompile.quant.saturation import saturation_point
from xir.quant.lut import lut_function


def _brute(counts: np.ndarray, qmax: int, power: int, cands: np.ndarray) -> np.ndarray:
    u = np.arange(len(counts)) + 0.5
    i = cands.astype(np.float64)[:, None]
    half = i / (2 * qmax)
    cost = (np.where(u > i, (u - i) ** power, 0.0) + np.where(u < half, u ** power, 0.0)
            + np.where((u <= i) & (u >= half), half ** power / (power + 1), 0.0))
    return cost @ counts.astype(np.float64)


@pytest.mark.parametrize("power", [3, 4])
def test_lp_errors_match_the_direct_sum(power):
    rng = np.random.default_rng(power)
    counts = rng.integers(0, 5000, 2048) * (rng.random(2048) < 0.4)
    got, cands = lp_errors(counts, 2048, 127, power)
    pick = np.arange(0, len(cands), 37)
    want = _brute(counts, 127, power, cands[pick])
    np.testing.assert_allclose(got[pick], want, rtol=1e-12)


def test_lp_errors_of_power_two_are_mse_errors():
    rng = np.random.default_rng(0)
    counts = rng.integers(0, 100, 512)
    a, ca = lp_errors(counts, 512, 127, 2)
    b, cb = mse_errors(counts, 512, 127)
    assert np.array_equal(ca, cb)
    np.testing.assert_allclose(a, b, rtol=1e-12)


def test_a_higher_power_keeps_a_rare_cluster_of_large_values():
    """A detector's objects: most of a feature map near 0, a few positions large. Squared
    errors clip them (few values, small total); the cubic error keeps more of their range."""
    rng = np.random.default_rng(1)
    x = np.concatenate([np.abs(rng.normal(0, 1, 200_000)), rng.uniform(6, 10, 60)])
    two, three = MSEObserver(), MSEObserver(power=3)
    two.update(x)
    three.update(x)
    assert two.amax() < 0.9 * x.max()
    assert three.amax() > 1.05 * two.amax()
    big = x[-60:]  # the cluster's own error: clipped less, rounded about as finely
    err = lambda t: np.abs(np.clip(np.round(big / (t / 127)), -127, 127) * (t / 127) - big)  # noqa: E731
    assert err(three.amax()).mean() < 0.5 * err(two.amax()).mean()
    assert MSE_POWER == 3


def test_power_is_checked():
    with pytest.raises(ValueError, match="power"):
        MSEObserver(power=5)


def test_saturation_point_of_sigmoid_and_silu():
    sig = lut_function("sigmoid")
    step = 1.0 / 127
    t = saturation_point(sig, 20.0, step)
    # beyond t the sigmoid is within half an output step of its end values
    assert 5.3 < t < 5.8  # sigmoid(-t) = 1/254: half an output step
    assert abs(sig(np.array([t]))[0] - sig(np.array([20.0]))[0]) <= step / 2 + 1e-3
    # SiLU grows without bound on the positive side: its range is never clipped
    assert saturation_point(lut_function("silu"), 20.0, 20.0 / 127) == 20.0
    assert 2.8 < saturation_point(sig, 3.0, step) <= 3.0  # little flat within this range


def _logit_net(rng) -> xir.Network:
    """conv -> Sigmoid, the logits mostly far negative (background), a few near 0."""
    b = xir.NetworkBuilder("objectness")
    x = b.input([1, 16, 16, 8])
    w = np.full((1, 1, 8, 1), 0.25, np.float32)
    y = b.conv2d(x, w, np.array([-12.0], np.float32))
    b.output(b.sigmoid(y))
    return b.build()


def _objects(rng) -> np.ndarray:
    """Background (logits about -12) with 5% of the positions objects (logits about 0)."""
    return (rng.normal(0, 1, (1, 16, 16, 8)) + 6 * (rng.random((1, 16, 16, 1)) < 0.05)
            ).astype(np.float32)


def test_sigmoid_logits_are_clipped_where_the_table_is_flat():
    rng = np.random.default_rng(4)
    net = _logit_net(rng)
    samples = [[_objects(rng)] for _ in range(4)]
    plain = quantize_network(net, samples, weight_rounding="nearest")
    assert plain.tags["quantization"]["table_inputs_clipped"] == 0  # only when asked
    q = quantize_network(net, samples, weight_rounding="nearest", outlier_aware=True)
    assert q.tags["quantization"]["table_inputs_clipped"] == 1
    assert q.tags["quantization"]["outlier_aware"]
    conv = next(op for op in q.ops if op.op_type == "Conv2d")
    amax = float(conv.outputs[0].dtype.element_dtype.scale[0]) * 127
    assert amax < 7.0  # the logits reach -15; the sigmoid is flat below about -5.8
    held = [[_objects(rng)] for _ in range(2)]
    assert outputs_cosine(net, q, held) >= 0.99


def test_the_search_falls_back_on_outlier_aware_int8_when_it_misses(tmp_path, monkeypatch):
    """When no raise within the cap reaches the target, `choose_bits` measures the int8
    network the `outlier_aware` quantizer makes and keeps it where it beats what would be
    kept (here a stand-in that beats it: conv_c's input in 16 bits, which the 1% cap refused
    to the search), and says so; one that does not beat it is measured and dropped."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from test_mixed_precision import _setup

    from xcompile.quant.mixed import choose_bits, worst_part

    monkeypatch.setenv("XRT_PROGRESS", "0")
    _, opt, cal, quantize = _setup(tmp_path, outlier=1000.0)
    conv_c = next(op.op_id for op in opt.ops if op.op_type == "Conv2d" and op.name == "conv_c")
    better = lambda op_bits: quantize({conv_c: 16})  # noqa: E731
    best, mp = choose_bits(opt, quantize(None), quantize, cal, 0.99, max_int16=0.01,
                           outlier_aware={"worse": quantize, "stand-in": better})
    assert mp.outlier_aware_kept and mp.outlier_aware
    assert worst_part(mp.after)[1] > worst_part(mp.before)[1]
    assert best.tags["quantization"]["op_bits"]  # the stand-in's network is the one kept
    tag = mp.to_tag()["outlier_aware"]
    assert tag["kept"] and tag["worst"][1] == pytest.approx(worst_part(mp.after)[1])
    assert tag["weights"] == "stand-in"  # the best of the quantizers given
    assert mp.reached and mp.warning is None  # it reaches the target: no warning
    same, mp = choose_bits(opt, quantize(None), quantize, cal, 0.99, max_int16=0.01,
                           outlier_aware={"gptq": quantize})
    assert mp.outlier_aware and not mp.outlier_aware_kept  # measured, not better: int8 kept
    assert same.tags["quantization"]["op_bits"] == {} and "int8 network is kept" in mp.warning
    assert "outlier-aware thresholds reaches" in mp.warning


def test_quantizations_in_one_search_share_the_float_statistics(tmp_path, monkeypatch):
    """Within `reuse_float_statistics` the float network runs once for calibration and once
    for GPTQ, however many quantizations follow (int8, a raise, the outlier-aware int8), and
    each is the network a fresh quantization makes."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from test_mixed_precision import _setup

    import xcompile.quant.calibrate as calibrate_mod
    from xcompile.quant.quantize import reuse_float_statistics

    monkeypatch.setenv("XRT_PROGRESS", "0")
    _, opt, cal, _ = _setup(tmp_path, outlier=30.0)
    conv_c = next(op.op_id for op in opt.ops if op.op_type == "Conv2d" and op.name == "conv_c")
    runs = [(), {conv_c: 16}, ()]
    fresh = [quantize_network(opt, cal, op_bits=ob or None, outlier_aware=(k == 2))
             for k, ob in enumerate(runs)]
    calls = []
    real = calibrate_mod.run_float
    monkeypatch.setattr(calibrate_mod, "run_float",
                        lambda *a, **k: calls.append(k.get("what")) or real(*a, **k))
    with reuse_float_statistics():
        shared = [quantize_network(opt, cal, op_bits=ob or None, outlier_aware=(k == 2))
                  for k, ob in enumerate(runs)]
    assert calls.count("calibration") == 1 and calls.count("GPTQ statistics") == 1

    def codes(q):
        return [(v.v_id, str(v.dtype), None if not v.is_params else np.asarray(v.data).tobytes())
                for op in q.ops for v in op.inputs + op.outputs]

    assert all(codes(a) == codes(b) for a, b in zip(fresh, shared))
    assert shared[2].tags["quantization"]["outlier_aware"]

"""A network output of a few values (a regression head's scores) keeps twice its calibrated
range at 8 bits (`xcompile.quant.quantize.OUTPUT_HEADROOM`, docs/quantization.md section 8):
four calibration samples' largest score underestimates the next input's, and a saturated score
is silently wrong (DNSMOS's SIG 4.14 read 3.875 at cosine 0.9997)."""

from __future__ import annotations

import numpy as np
import pytest

import xcompile.quant.quantize as quantize_mod
from xcompile.quant.calibrate import run_float
from xcompile.quant.quantize import quantize_network


def _head(rng: np.random.Generator):
    """x (1, 8) -> MatMul (8, 3) -> Add: three scores, as a dense head exports."""
    from onnx import TensorProto, helper, numpy_helper

    w = np.abs(rng.normal(0, 1, (8, 3))).astype(np.float32)
    b = np.array([3.0, 2.5, 2.0], np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])],
        "head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), w, b


@pytest.mark.parametrize("headroom", [True, False])
def test_a_score_beyond_the_calibrated_range_is_not_saturated(tmp_path, monkeypatch,
                                                               headroom):
    from xcompile.quant.qdq import import_qdq

    model, w, b = _head(np.random.default_rng(3))
    path = tmp_path / "head.onnx"
    path.write_bytes(model.SerializeToString())
    net = import_qdq(str(path), {"x": [1, 8]})
    rng = np.random.default_rng(4)
    cal = [[rng.uniform(-1, 1, (1, 8)).astype(np.float32)] for _ in range(4)]
    top = max(float(np.abs(s[0] @ w + b).max()) for s in cal)
    x = np.ones((1, 8), np.float32)  # inside the input's range, its scores above every seen
    want = (x @ w + b).ravel()
    assert want.max() > 1.2 * top
    if not headroom:
        monkeypatch.setattr(quantize_mod, "OUTPUT_HEADROOM", 1.0)
    q = quantize_network(net, cal, weight_rounding="nearest")
    out = next(v for v in q.outputs())
    assert q.tags["quantization"]["output_headroom"] == [out.tags["float_v_id"]]
    got = np.asarray(run_float(q, [[x]], lambda v, a: None)[0][0], np.float64).ravel()
    if headroom:
        assert np.abs(got - want).max() < 0.05 * want.max(), (got, want)
    else:  # the largest score saturates at the calibrated range
        assert got.max() < 0.9 * want.max(), (got, want)

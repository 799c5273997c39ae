"""A dense head's few values per input (its features and scores) keep twice their calibrated
range at 8 bits (`xcompile.quant.head_range`, docs/quantization.md section 8): four
calibration samples' largest score underestimates the next input's, and a saturated score is
silently wrong (DNSMOS's SIG 4.14 read 3.875 at cosine 0.9997)."""

from __future__ import annotations

import numpy as np
import pytest

import xcompile.quant.head_range as head_range
from xcompile.quant.calibrate import run_float
from xcompile.quant.head_range import head_values
from xcompile.quant.quantize import quantize_network


def _head(rng: np.random.Generator):
    """x (1, 8) -> dense 16 + Relu -> dense 3: three scores, as a dense head exports; the
    head as one (8, 3) matrix and bias (the features are positive: w1 and b1 are)."""
    from onnx import TensorProto, helper, numpy_helper

    w1 = np.abs(rng.normal(0, 0.5, (8, 16))).astype(np.float32)
    b1 = np.full(16, 0.1, np.float32)
    w2 = np.abs(rng.normal(0, 0.5, (16, 3))).astype(np.float32)
    b2 = np.array([3.0, 2.5, 2.0], np.float32)
    n = helper.make_node
    graph = helper.make_graph(
        [n("MatMul", ["x", "w1"], ["m1"]), n("Add", ["m1", "b1"], ["a1"]),
         n("Relu", ["a1"], ["h"]), n("MatMul", ["h", "w2"], ["m2"]), n("Add", ["m2", "b2"], ["y"])],
        "head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
        [numpy_helper.from_array(v, k) for k, v in
         {"w1": w1, "b1": b1, "w2": w2, "b2": b2}.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), w1, b1, \
        w2, b2


@pytest.mark.parametrize("headroom", [True, False])
def test_a_score_beyond_the_calibrated_range_is_not_saturated(tmp_path, monkeypatch,
                                                               headroom):
    from xcompile.quant.qdq import import_qdq

    model, w1, b1, w2, b2 = _head(np.random.default_rng(3))
    path = tmp_path / "head.onnx"
    path.write_bytes(model.SerializeToString())
    net = import_qdq(str(path), {"x": [1, 8]})
    rng = np.random.default_rng(4)
    cal = [[rng.uniform(-1, 1, (1, 8)).astype(np.float32)] for _ in range(4)]
    def run(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        h = np.maximum(x @ w1 + b1, 0)
        return h, (h @ w2 + b2).ravel()

    top = max(float(run(s[0])[1].max()) for s in cal)
    features = max(float(run(s[0])[0].max()) for s in cal)
    # inside the input's range, its features 1.5x and its scores above every one seen
    x = np.full((1, 8), 1.5 * (features - 0.1) / float((np.ones(8) @ w1).max()), np.float32)
    assert float(np.abs(x).max()) <= 1.0
    want = run(x)[1]
    assert want.max() > 1.2 * top
    if not headroom:
        monkeypatch.setattr(head_range, "OUTPUT_HEADROOM", 1.0)
    q = quantize_network(net, cal, weight_rounding="nearest")
    out = next(v for v in q.outputs())
    widened = q.tags["quantization"]["head_headroom"]
    assert len(widened) == 2 and out.tags["float_v_id"] in widened  # the features too
    got = np.asarray(run_float(q, [[x]], lambda v, a: None)[0][0], np.float64).ravel()
    if headroom:
        assert np.abs(got - want).max() < 0.05 * want.max(), (got, want)
    else:  # the largest score saturates at the calibrated range
        assert got.max() < 0.9 * want.max(), (got, want)


def test_the_head_stops_at_a_map_and_at_a_shared_scale(tmp_path):
    """The head is the small values back from a small output through rescaling ops: a dense
    layer's features count, the global max feeding them (it shares its map's scale group)
    and the feature map do not."""
    import sys

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    from test_log_power import SAMPLES, dnsmos_like

    from xcompile.passes import optimize
    from xcompile.quant.qdq import import_qdq

    path = tmp_path / "m.onnx"
    path.write_bytes(dnsmos_like(np.random.default_rng(5)).SerializeToString())
    opt = optimize(import_qdq(str(path), {"x": [1, SAMPLES]}))
    head = head_values(opt)
    by_vid = {v.v_id: op for op in opt.ops for v in op.outputs}
    assert [by_vid[v].op_type for v in head] == ["Matmul"]
    assert [tuple(opt.outputs()[0].shape)] == [(1, 3)] and set(head) == {opt.outputs()[0].v_id}

"""Outputs several heads write: YOLOv5's export (tests/support/yolov5_head.py) joins, per head,
box pixels and sigmoid confidences on the last axis, then the three heads on the anchor axis.
Each head's Concat reaches the output through the heads' Concat, so it joins floats at the host
edge; the parts are the inner branches across all heads (xy, wh, confidences) and each head."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import yolov5_head as V
import yolov8_head as Y

import xcompile.quant.concats as concats_mod
from xcompile.frontend.onnx_import import import_onnx
from xcompile.quant.parts import collapsed_parts, compare_samples, output_parts
from xcompile.quant.quantize import quantize_network

SIZE = 64


def _host(net, x):
    from host_backend import HostBackend
    from xrt import HostDevice, Session

    s = Session.Create([HostBackend], net.view(0), [HostDevice.Default()])
    try:
        s.apply()
        return [np.asarray(t).copy() for t in s.forward([x])]
    finally:
        s.close()


@pytest.fixture(scope="module")
def head():
    model = V.build(SIZE)
    net = import_onnx(model)
    q = quantize_network(net, Y.images(4, SIZE, seed=1), weight_rounding="nearest")
    tests = Y.images(2, SIZE, seed=7)
    sess = ort.InferenceSession(model.SerializeToString())
    return net, q, tests, [sess.run(None, {"images": x}) for x in tests]


def _recall(ref, got):
    kr, cr, _ = V.detections(ref[0])
    kg, cg, _ = V.detections(got[0])
    common, ir, ig = np.intersect1d(kr, kg, return_indices=True)
    assert np.array_equal(cr[ir], cg[ig])
    return len(common) / max(len(kr), 1), len(kr), len(kg)


def test_heads_keep_their_confidences(head):
    _, q, tests, ref = head
    concats = q.tags["quantization"]["concats"]
    inner = [c for c in concats.values() if len(c["spread"]) == 3]
    assert len(inner) == 3 and all(c["form"] == "float" and c["at_output"] for c in inner)
    (parts,) = output_parts(q)
    assert [(p.axis, p.start, p.stop, p.kind) for p in parts[:3]] == \
        [(2, 0, 2, "value"), (2, 2, 4, "value"), (2, 4, 85, "score")]
    assert [(p.axis, p.start, p.stop) for p in parts[3:]] == [(1, 0, 192), (1, 192, 240),
                                                            (1, 240, 252)]
    got = [_host(q, x) for x in tests]
    res = compare_samples(ref, got, [parts])
    assert not collapsed_parts(res) and res[2].kept_recall > 0.9 and res[2].topk > 0.8
    for r, g in zip(ref, got):
        recall, kept, n = _recall(r, g)
        assert kept >= 5 and recall >= 0.9 and n <= 1.2 * kept + 2


def test_shared_scale_loses_the_confidences_and_is_flagged(head):
    net, _, tests, ref = head
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(concats_mod, "OUTPUT_SPREAD", float("inf"))
        mp.setattr(concats_mod, "BRANCH_SPREAD", float("inf"))
        shared = quantize_network(net, Y.images(4, SIZE, seed=1), weight_rounding="nearest")
    got = [_host(shared, x) for x in tests]
    res = compare_samples(ref, got, output_parts(shared))
    bad = {r.part.name for r in collapsed_parts(res)}
    # one group from the Sigmoid through the Split to the heads' Concat: the Sigmoid writes at
    # the boxes' scale (~4 px a code), the confidences are 0 and so is every wh
    assert {p.name for p in output_parts(shared)[0] if p.kind == "score"} <= bad
    assert all(_recall(r, g)[0] < 0.5 for r, g in zip(ref, got))


@pytest.mark.parametrize("target", ["zg330", "buyi"])
def test_heads_on_the_chip_bit_exact(head, target):
    from host_backend import HostBackend
    from xrt import Device, HostDevice, Session

    _, q, tests, ref = head
    if target == "zg330":
        from zg330backend import ZG330Backend as B
        from zg330backend.lowering import adapt, lower
    else:
        from buyibackend import BuyiBackend as B
        from buyibackend.lowering import adapt, lower
    low = lower(adapt(q))
    names = {op.op_id: op.name for op in q.ops}
    hard = [op for op in low.ops if op.op_type == "HardOp"]
    on_chip = {names.get(i) for op in hard for i in op.attrs["origin_ops_id"]}
    convs = [op.name for op in q.ops if op.op_type == "Conv2d"]
    assert len(convs) == 8 and set(convs) <= on_chip  # the 5-D decode runs on the host
    dev = Device.Open(f"sim://{target}")
    s = Session.Create([B, HostBackend], low.view(0), [dev, HostDevice.Default()])
    try:
        s.apply()
        bound = s.backendBindings()
        got = [[np.asarray(t).copy() for t in s.forward([x])] for x in tests]
    finally:
        s.close()
        dev.close()
    assert all(isinstance(bound[op.op_id], B) for op in hard)
    for x, g in zip(tests, got):
        assert np.array_equal(_host(q, x)[0], g[0])
    assert not collapsed_parts(compare_samples(ref, got, output_parts(q)))

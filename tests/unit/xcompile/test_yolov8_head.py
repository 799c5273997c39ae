"""The YOLOv8 head as ultralytics exports it (tests/support/yolov8_head.py): box pixels and sigmoid
class scores concatenated into one [1, 84, N] output. One int8 scale for both rounds every
probability to 0 (a step of ~0.5 px for boxes up to 60 px is ~0.5 for probabilities), while the
whole-tensor cosine stays at 0.999: the detector finds nothing and a whole-output check cannot
see it. These tests hold the quantizer to keeping each branch's range (the output Concat at the
host edge, in float) and the per-part check to seeing the collapse, on the HostBackend and on
both simulated chips, against onnxruntime's float run."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import yolov8_head as Y

import xcompile.quant.concats as concats_mod
from xcompile.frontend.onnx_import import import_onnx
from xcompile.quant.parts import (
    Part,
    collapsed_parts,
    compare_parts,
    compare_samples,
    format_parts,
    output_parts,
    worst,
)
from xcompile.quant.quantize import quantize_network

SIZE = 64
THRESHOLD = 0.25


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
    """(onnx model, float network, int8 network, test images, onnxruntime's outputs)."""
    model = Y.build(SIZE)
    net = import_onnx(model)
    q = quantize_network(net, Y.images(4, SIZE, seed=1), weight_rounding="nearest")
    tests = Y.images(2, SIZE, seed=7)
    sess = ort.InferenceSession(model.SerializeToString())
    ref = [sess.run(None, {"images": x}) for x in tests]
    return model, net, q, tests, ref


def _iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of matching rows of two [k, 4] cx cy w h box arrays."""
    a1, a2 = a[:, :2] - a[:, 2:] / 2, a[:, :2] + a[:, 2:] / 2
    b1, b2 = b[:, :2] - b[:, 2:] / 2, b[:, :2] + b[:, 2:] / 2
    inter = np.prod(np.clip(np.minimum(a2, b2) - np.maximum(a1, b1), 0, None), 1)
    return inter / (np.prod(a[:, 2:], 1) + np.prod(b[:, 2:], 1) - inter)


@pytest.fixture(scope="module")
def shared(head):
    """The pre-fix quantizer: one scale for every Concat, whatever its branches' ranges."""
    _, net, _, _, _ = head
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(concats_mod, "OUTPUT_SPREAD", float("inf"))
        mp.setattr(concats_mod, "BRANCH_SPREAD", float("inf"))
        return quantize_network(net, Y.images(4, SIZE, seed=1), weight_rounding="nearest")


def _agree(ref: np.ndarray, got: np.ndarray, size: int = SIZE) -> dict:
    """Detections above THRESHOLD of `got` against onnxruntime's `ref` (one output each): the
    share of its kept anchors kept, class ids, the largest box coordinate error in grid cells
    of the anchor's level (the DFL's unit: 0..15 cells) and the smallest IoU."""
    kr, cr, br = Y.detections(ref, THRESHOLD)
    kg, cg, bg = Y.detections(got, THRESHOLD)
    common, ir, ig = np.intersect1d(kr, kg, return_indices=True)
    stride = Y.anchors(size)[1][0, common]
    return {"kept": len(kr), "got": len(kg), "recall": len(common) / max(len(kr), 1),
            "classes": bool(np.array_equal(cr[ir], cg[ig])),
            "cells": float((np.abs(br[ir] - bg[ig]).max(1, initial=0.0) / stride)
                           .max(initial=0.0)),
            "iou": float(_iou(br[ir], bg[ig]).min(initial=1.0))}


def _assert_detections(ref_outs, got_outs, size: int = SIZE):
    """>= 90% of onnxruntime's kept anchors kept, not many more, the same classes, box
    coordinates within 0.4 grid cells (at stride 8: 3 px) and IoU >= 0.75 (measured: 0.29
    cells, IoU 0.83 at 96 x 96)."""
    for ref, got in zip(ref_outs, got_outs):
        a = _agree(ref[0], got[0], size)
        assert a["kept"] >= 5, a  # the head detects something to agree on
        assert a["recall"] >= 0.9 and a["got"] <= 1.2 * a["kept"] + 2, a
        assert a["classes"] and a["cells"] <= 0.4 and a["iou"] >= 0.75, a


def test_int8_head_keeps_the_scores_and_detects_what_onnxruntime_does(head):
    _, _, q, tests, ref = head
    concats = q.tags["quantization"]["concats"]
    out_cat = next(c for c in concats.values() if c["at_output"])
    assert out_cat["form"] == "float" and max(out_cat["spread"]) > 100  # pixels vs 0..1
    assert all(c["form"] == "shared" for c in concats.values() if not c["at_output"])
    (parts,) = output_parts(q)
    assert [(p.axis, p.start, p.stop, p.kind) for p in parts] == \
        [(1, 0, 4, "value"), (1, 4, 84, "score")]
    got = [_host(q, x) for x in tests]
    res = compare_samples(ref, got, [parts], threshold=THRESHOLD)
    assert not collapsed_parts(res), res
    assert worst(res) > 0.99 and res[1].topk > 0.8 and res[1].kept_recall > 0.9
    _assert_detections(ref, got)


def test_one_shared_scale_collapses_and_the_check_names_the_part(head, shared):
    """The pre-fix quantizer (one scale for the output Concat): the whole-output cosine is
    0.999+, the class scores lose most of what they keep, and compare_parts says so."""
    _, _, _, tests, ref = head
    assert next(c for c in shared.tags["quantization"]["concats"].values()
                if c["at_output"])["form"] == "shared"
    got = [_host(shared, x) for x in tests]
    whole = compare_parts(ref[0], got[0], [Part("output0", 0, None, 0, 0)])[0]
    assert whole.cosine > 0.999 and not whole.collapsed  # what fooled the old check
    res = compare_samples(ref, got, output_parts(shared), threshold=THRESHOLD)
    bad = collapsed_parts(res)
    assert [r.part.name for r in bad] == [r.part.name for r in res if r.part.kind == "score"]
    assert "sigmoid" in bad[0].part.name and bad[0].kept_recall < 0.5
    assert worst(res) <= 0.0
    assert "COLLAPSED" in format_parts(res)
    # boxes up to ~60 px: a step of ~0.5, probabilities below it are 0 (the 320 px
    # boxes: a step of 2.5, every probability 0); a third or more of the detections are lost
    assert np.mean([_agree(r[0], g[0])["recall"] for r, g in zip(ref, got)]) < 0.7


def _chip(target: str):
    if target == "zg330":
        from zg330backend import ZG330Backend as B
        from zg330backend.lowering import adapt, lower
    else:
        from buyibackend import BuyiBackend as B
        from buyibackend.lowering import adapt, lower
    return B, adapt, lower


@pytest.mark.parametrize("target", ["zg330", "buyi"])
def test_head_on_the_chip_is_bit_exact_and_detects_what_onnxruntime_does(head, target):
    from host_backend import HostBackend
    from xrt import Device, HostDevice, Session

    _, _, q, tests, ref = head
    backend, adapt, lower = _chip(target)
    low = lower(adapt(q))
    names = {op.op_id: op.name for op in q.ops}
    on_chip = {names.get(i) for op in low.ops if op.op_type == "HardOp"
               for i in op.attrs["origin_ops_id"]}
    assert "/sigmoid_141" in on_chip and "/mul_140" in on_chip  # both branches on the NPU
    out_cat = next(op for op in low.ops if op.name == "/Concat_out")
    assert not out_cat.is_quantized()  # the output Concat joins floats at the host edge
    dev = Device.Open(f"sim://{target}")
    s = Session.Create([backend, HostBackend], low.view(0), [dev, HostDevice.Default()])
    try:
        s.apply()
        bound = s.backendBindings()
        got = [[np.asarray(t).copy() for t in s.forward([x])] for x in tests]
    finally:
        s.close()
        dev.close()
    hard = [op for op in low.ops if op.op_type == "HardOp"]
    assert hard and all(isinstance(bound[op.op_id], backend) for op in hard)
    for x, g in zip(tests, got):  # bit-exact against the HostBackend's integer reference
        assert np.array_equal(_host(q, x)[0], g[0])
    res = compare_samples(ref, got, output_parts(q), threshold=THRESHOLD)
    assert not collapsed_parts(res) and worst(res) > 0.99
    _assert_detections(ref, got)


@pytest.mark.slow
def test_larger_head_with_default_options(head):
    """96 x 96 (189 anchors), the default quantization (mse thresholds, GPTQ weights)."""
    model = Y.build(96)
    q = quantize_network(import_onnx(model), Y.images(4, 96, seed=1))
    sess = ort.InferenceSession(model.SerializeToString())
    tests = Y.images(3, 96, seed=7)
    ref = [sess.run(None, {"images": x}) for x in tests]
    got = [_host(q, x) for x in tests]
    res = compare_samples(ref, got, output_parts(q), threshold=THRESHOLD)
    assert not collapsed_parts(res)
    _assert_detections(ref, got, 96)


def test_quant_report_names_the_collapsed_part(head, shared, tmp_path, capsys):
    """`xrt quant-report` on the shared-scale network: the class-score part is reported
    collapsed (table, verdict, json) and the command exits 1; on the fixed one it exits 0."""
    import json

    from xcompile.passes import optimize
    from xrt.cli import main

    model, net, q, _, _ = head
    (tmp_path / "head.onnx").write_bytes(model.SerializeToString())
    cal = tmp_path / "cal"
    cal.mkdir()
    for k, x in enumerate(Y.images(2, SIZE, seed=7)):
        np.save(cal / f"{k}.npy", x)
    optimize(net).save(tmp_path / "f.json")
    for name, qn, rc in (("shared", shared, 1), ("kept", q, 0)):
        qn.save(tmp_path / f"{name}.json")
        out = tmp_path / f"{name}.report.json"
        ort = ["--onnx", str(tmp_path / "head.onnx")] if rc == 0 else []
        assert main(["quant-report", str(tmp_path / "f.json"), str(tmp_path / f"{name}.json"),
                     "--calib", str(cal), "--json", str(out), *ort]) == rc
        text = capsys.readouterr().out
        data = json.loads(out.read_text())
        assert [p["kind"] for p in data["parts"]] == ["value", "score"]
        assert data["verdict"]["accurate"] is (rc == 0)
        if rc:
            assert data["collapsed"] == ["output0./sigmoid_141"]
            assert "accurate: NO" in text and "sigmoid_141" in text.split("accurate: NO")[1]
            assert data["outputs"][0]["cosine"] > 0.999  # the whole output looks fine
        else:
            assert data["collapsed"] == [] and data["parts"][1]["kept_both"] > 0
            # onnxruntime's own int8 of the same model, per part, beside ours
            assert all(-1.0 <= p["onnxruntime_int8"] <= 1.0 for p in data["parts"])
            assert "onnxruntime int8" in text

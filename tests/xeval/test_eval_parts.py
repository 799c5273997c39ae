"""`xrt eval` measures each output per part: the YOLOv8 head (tests/support/yolov8_head.py) on
the simulated ZG330 against its ONNX float model, with the output Concat's branches kept
(no collapse) and with one shared scale (the class scores collapse: named in every row and
in the summary, though the whole-output cosine is 0.999)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yolov8_head as Y

import xcompile.quant.concats as concats_mod
from xeval import evaluate
from xeval.report import eval_summary, print_eval

SIZE = 64


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    from xcompile.frontend.onnx_import import import_onnx
    from xcompile.quant.quantize import quantize_network
    from zg330backend.lowering import adapt, lower

    root = tmp_path_factory.mktemp("head")
    model = Y.build(SIZE)
    (root / "head.onnx").write_bytes(model.SerializeToString())
    net = import_onnx(model)
    cal = Y.images(4, SIZE, seed=1)
    kept = quantize_network(net, cal, weight_rounding="nearest")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(concats_mod, "OUTPUT_SPREAD", float("inf"))
        mp.setattr(concats_mod, "BRANCH_SPREAD", float("inf"))
        shared = quantize_network(net, cal, weight_rounding="nearest")
    for name, q in (("kept", kept), ("shared", shared)):
        lower(adapt(q)).save(root / f"{name}_ZG.json", root / f"{name}_ZG.raw")
    data = root / "data"
    data.mkdir()
    for k, x in enumerate(Y.images(2, SIZE, seed=7)):
        np.save(data / f"s{k}.npy", x)
    return root


def _rows(root, name):
    out = root / f"{name}.jsonl"
    rows = evaluate(str(root / f"{name}_ZG.json"), str(root / "data"),
                    reference=str(root / "head.onnx"), workers=0, out=str(out),
                    progress=False)
    assert [json.loads(line) for line in out.read_text().splitlines()] == \
        [dict(r) for r in rows]  # the JSON lines carry the parts too
    return rows


def test_rows_and_summary_name_the_collapsed_part(head):
    rows = _rows(head, "shared")
    assert len(rows) == 2 and not any("error" in r for r in rows)
    for r in rows:
        assert r["cosine"] > 0.999  # the whole output looks fine
        assert list(r["parts"]) == ["output0./mul_140", "output0./sigmoid_141"]
        cls = r["parts"]["output0./sigmoid_141"]
        assert cls["kind"] == "score" and cls["collapsed"] and cls["topk"] < 0.5
        assert r["collapsed"] == ["output0./sigmoid_141"] and r["worst_part_cosine"] <= 0.0
        assert not r["parts"]["output0./mul_140"]["collapsed"]
    s = eval_summary(rows)
    assert s["collapsed_samples"] == 2 and s["part output0./sigmoid_141 collapsed"] == 2
    assert s["part output0./sigmoid_141 kept_recall"] < 0.5
    from rich.console import Console

    console = Console(record=True, width=200)
    print_eval(rows, "shared", console)
    assert "COLLAPSED: output part output0./sigmoid_141 in 2 of 2" in console.export_text()


def test_kept_branches_agree_per_part(head):
    rows = _rows(head, "kept")
    for r in rows:
        assert r["collapsed"] == [] and r["worst_part_cosine"] > 0.99
        cls = r["parts"]["output0./sigmoid_141"]
        assert cls["topk"] > 0.8 and cls["kept_both"] >= 0.9 * cls["kept_ref"] > 0
    s = eval_summary(rows)
    assert s["collapsed_samples"] == 0 and s["part output0./sigmoid_141 top5_agreement"] > 0.8

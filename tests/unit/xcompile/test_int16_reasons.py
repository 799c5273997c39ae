"""Why each op computes or stores in 16 bits (xcompile.quant.int16_reasons): the quantizer
records, from its own decisions (`bits.value_bits`' `Why`), one reason per op of a closed set;
the compile tells the search's raises from the user's, counts the HardOps holding 16-bit
values and prints a summary."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import xcompile.zoo as zoo
from xcompile.frontend.onnx_import import import_onnx
from xcompile.passes import optimize
from xcompile.quant.bits import Why, value_bits
from xcompile.quant.capability import integer_ops
from xcompile.quant.int16_reasons import (
    REASONS,
    ROOTS,
    explain,
    hardop_record,
    int16_record,
    summary_lines,
    table_lines,
)
from xcompile.quant.quantize import quantize_network
from xcompile.quant.scale_groups import scale_groups

FAST = dict(bits=8, method="minmax", weight_rounding="nearest", activation_bias=False)


@pytest.fixture(scope="module")
def tiny():
    return zoo.build("tiny_cnn"), zoo.calibration_set("tiny_cnn", 4)


def _rows(q) -> dict[str, dict]:
    return {r["name"]: r for r in q.tags["quantization"]["int16"]["ops"]}


def _bits(v) -> int:
    el = v.dtype.element_dtype
    return el.storage.bits if getattr(el, "is_quantized", False) else 32


def assert_explained(q) -> None:
    """Every op of `q` holding a 16-bit value has a row with a reason of the closed set;
    the rows computing in 16 bits are the ops the quantizer put at 16 (its `op_bits` tag,
    plus far-branch Concats, whose first input is the far branch)."""
    rec = q.tags["quantization"]["int16"]
    rows = {r["op_id"]: r for r in rec["ops"]}
    for op in q.ops:
        if op.op_type in ("Input", "Output"):
            continue
        if any(_bits(v) == 16 for v in op.inputs + op.outputs if not v.is_params):
            assert op.op_id in rows, f"{op.op_type} {op.name} holds int16 without a reason"
    for r in rows.values():
        assert r["reason"] in REASONS and r["root"] in ROOTS, r
    computes = {oid for oid, r in rows.items() if r["computes"] == 16}
    tagged = {int(k) for k in q.tags["quantization"]["op_bits"]}
    concats = {oid for oid, r in rows.items() if r["reason"] == "concat"}
    assert computes - concats == tagged - concats and tagged <= computes


def test_int8_network_has_no_int16_rows(tiny):
    net, cal = tiny
    q = quantize_network(net, cal, **FAST)
    assert q.tags["quantization"]["int16"]["ops"] == []
    assert summary_lines(q.tags["quantization"]["int16"]) == [
        "int16: none (every integer op computes and stores in int8)"]


def test_input_bits_is_the_stems_reason(tiny):
    net, cal = tiny
    q = quantize_network(net, cal, input_bits=16, **FAST)
    rows = _rows(q)
    assert rows["stem.conv"]["reason"] == "input_bits" and rows["stem.conv"]["computes"] == 16
    casts = [r for r in rows.values() if r["type"] == "Cast"]
    assert casts and all(r["reason"] == "converts_16bit" and r["root"] == "input_bits"
                         for r in casts)
    assert_explained(q)


def test_op_bits_spread_through_groups_and_readers(tiny):
    net, cal = tiny
    q = quantize_network(net, cal, op_bits={"branch1.conv": 16}, **FAST)
    rows = _rows(q)
    assert rows["branch1.conv"]["reason"] == "op_bits"
    # the MaxPool branch1 reads shares its input's scale and dtype
    assert rows["pool"]["reason"] == "scale_group" and rows["pool"]["via"] == "branch1.conv"
    # a sibling reader of the pool's 16-bit output computes at its widest input
    assert rows["branch2.conv"]["reason"] == "widest_input"
    assert rows["branch2.conv"]["via"] == "pool"
    # the Add writing the pool's input computes in int8 and writes int16
    assert rows["res"]["reason"] == "writes_16bit" and rows["res"]["computes"] == 8
    assert {r["root"] for r in rows.values()} == {"op_bits"}
    assert {r["root_op"] for r in rows.values()} == {"branch1.conv"}
    assert_explained(q)
    # the compile tells a raise of the search from the user's
    rec = explain(q.tags["quantization"]["int16"], {rows["branch1.conv"]["op_id"]: 16},
                  {str(rows["branch1.conv"]["op_id"]): {"output_loss": 0.0123, "alone": 0.98}})
    done = {r["name"]: r for r in rec["ops"]}
    assert done["branch1.conv"]["reason"] == "search"
    assert {r["root"] for r in rec["ops"]} == {"search"}
    assert rec["counts"] == {"search": len(rows)}
    assert rec["int16_ops"] == sum(r["computes"] == 16 for r in rows.values())
    assert 0.0 < rec["mac_share"] < 1.0
    text = summary_lines(rec)
    assert text[1].startswith("  raised by the search: 1 op (branch1.conv output loss 0.012)")
    assert "sharing a scale group" in text[1] and "reading a 16-bit input" in text[1]
    assert any("branch1.conv" in line and "search" in line for line in table_lines(rec))


def _transformer():
    import sys

    sys.path.insert(0, "tests/support")
    from spectrum_nets import SPECTRUM

    build, shape = SPECTRUM["transformer_block_64x128"]
    net = import_onnx(build(np.random.default_rng(7)))
    rng = np.random.default_rng(9)
    return net, [[rng.normal(0, 1, shape).astype(np.float32)] for _ in range(2)]


def test_logits_and_residual_stream_rules():
    net, cal = _transformer()
    q = quantize_network(net, cal, **FAST)
    rows = list(q.tags["quantization"]["int16"]["ops"])
    by = {r["type"]: [x for x in rows if x["type"] == r["type"]] for r in rows}
    # the softmax's logits: the op computing them and the softmax itself
    assert {r["reason"] for r in by["Softmax"]} == {"logits"}
    assert any(r["reason"] == "logits" and r["type"] != "Softmax" for r in rows)
    # the residual Adds and the LayerNorms they feed
    assert {r["root"] for r in by["Add"]} == {"stream"}
    assert {r["root"] for r in by["LayerNorm"]} == {"stream"}
    # the projections writing 16-bit values compute in int8: no MAC in int16
    assert {r["reason"] for r in by["Matmul"]} == {"writes_16bit"}
    assert explain(q.tags["quantization"]["int16"])["mac_share"] == 0.0
    assert_explained(q)


def _far_concat(own_reader: bool = False, small_gain: float = 1.0):
    return import_onnx(_far_concat_model(own_reader, small_gain))


def _far_concat_model(own_reader: bool = False, small_gain: float = 1.0):
    """x -> conv (range ~100) and conv -> Sigmoid -> x0.05, concatenated and read by a conv;
    with `own_reader` the small branch is read by a conv of its own too (output "z");
    `small_gain` multiplies the reader's weights of the small branch's channels."""
    r = np.random.default_rng(0)
    inits, nodes = [], []

    def const(name, a):
        inits.append(numpy_helper.from_array(np.asarray(a, np.float32), name))
        return name

    def conv(x, cin, cout, name, gain=1.0):
        w = r.normal(0, np.sqrt(2 / (cin * 9)), (cout, cin, 3, 3)) * gain
        nodes.append(helper.make_node("Conv", [x, const(name + ".w", w),
                                               const(name + ".b", r.normal(0, 0.1, cout))],
                                      [name], pads=[1, 1, 1, 1]))
        return name

    big = conv("x", 3, 8, "big", gain=40.0)
    nodes.append(helper.make_node("Sigmoid", [conv("x", 3, 8, "small_pre")], ["sig"]))
    nodes.append(helper.make_node("Mul", ["sig", const("k", 0.05)], ["small"]))
    nodes.append(helper.make_node("Concat", [big, "small"], ["cat"], axis=1))
    w = r.normal(0, np.sqrt(2 / (16 * 9)), (8, 16, 3, 3))
    w[:, 8:] *= small_gain
    nodes.append(helper.make_node("Conv", ["cat", const("y.w", w),
                                           const("y.b", r.normal(0, 0.1, 8))],
                                  ["y"], pads=[1, 1, 1, 1]))
    outs = [("x", [1, 3, 16, 16]), ("y", [1, 8, 16, 16])]
    if own_reader:
        conv("small", 8, 4, "z", gain=50.0)
        outs.append(("z", [1, 4, 16, 16]))
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outs]
    g = helper.make_graph(nodes, "far_concat", vi[:1], vi[1:], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_far_concat_reason():
    net = _far_concat()
    rng = np.random.default_rng(1)
    q = quantize_network(net, [[rng.uniform(0, 1, (1, 3, 16, 16)).astype(np.float32)]
                               for _ in range(3)], **FAST)
    rows = _rows(q)
    (cat,) = [r for r in rows.values() if r["type"] == "Concat"]
    assert cat["reason"] == "concat" and cat["computes"] == 16 and cat["root"] == "concat"
    reader = [r for r in rows.values() if r["type"] == "Conv2d" and r["computes"] == 16]
    assert reader and all(r["reason"] == "widest_input" and r["via"] == cat["name"]
                          for r in reader)
    # the far branch's requantizing Cast, q -> q into the 16-bit Concat
    casts = [r for r in rows.values() if r["type"] == "Cast"
             and r["reason"] == "converts_16bit" and r["root_op"] == cat["name"]]
    assert casts
    assert_explained(q)


def test_value_bits_why_names_the_first_rule(tiny):
    net, _ = tiny
    opt = optimize(net)
    ints = integer_ops(opt)
    ops = {op.name: op for op in opt.ops}
    why: dict = {}
    conv = ops["branch1.conv"]
    vb = value_bits(opt, ints, scale_groups(opt, ints), 8, {conv.op_id: 16}, 16, why=why)
    assert set(why) == set(vb)
    assert why[conv.feature_inputs()[0].v_id] == Why("op_bits", conv.op_id)
    assert all(w.kind == "input_bits" for vid, w in why.items()
               if vid in {v.v_id for v in opt.inputs()})
    # spread values name where their bits came from, a value already raised
    assert all(w.value in vb for w in why.values() if w.kind in ("group", "input"))
    # without `why` the bits are the same
    assert vb == value_bits(opt, ints, scale_groups(opt, ints), 8, {conv.op_id: 16}, 16)


def test_compile_counts_the_hardops_with_their_reasons(tiny, tmp_path):
    import json

    from corpus import load_stage

    from xcompile.pipeline import DEFAULTS, compile_model

    written = compile_model(dict(DEFAULTS, model="tiny_cnn", target="zg330", calib_count=4,
                                 op_bits={"branch1.conv": 16}, output=str(tmp_path)))
    net = load_stage(written["ZG"])
    rec = int16_record(net)
    hard = rec["hardops"]
    with open(written["ZG"]) as fh:  # as bench_spectrum counts them
        doc = json.load(fh)
    ops = [op for op in doc["ops"] if op.get("_type_key", "").endswith("::HardOp")]
    assert hard["hardops"] == len(ops)
    assert hard["int16"] == sum("@sint(16)" in json.dumps(op) for op in ops) > 0
    assert "unexplained" not in hard["counts"]
    assert sum(hard["counts"].values()) == hard["int16"]
    assert set(hard["counts"]) == {"op_bits"}  # the user's, not the search's
    assert hardop_record(net, rec) == hard
    text = summary_lines(rec)
    assert text[0].startswith(f"int16: {hard['int16']} of {hard['hardops']} HardOps")
    if hard["share"] > 0.10:
        assert any("above 10%" in line and "raised by --op-bits" in line for line in text)


def test_summary_names_the_share_above_ten_percent():
    rec = {"ops": [{"op_id": 1, "name": "a", "type": "Add", "computes": 16, "macs": 0,
                    "reason": "stream", "via": None, "root": "stream", "root_op": "a"},
                   {"op_id": 2, "name": "m", "type": "Matmul", "computes": 8, "macs": 10,
                    "reason": "writes_16bit", "via": "a", "root": "stream", "root_op": "a"}],
           "values": {}, "macs": 100, "integer_ops": 5,
           "hardops": {"hardops": 4, "int16": 2, "share": 0.5, "counts": {"stream": 2},
                       "list": []}}
    text = summary_lines(rec)
    assert text[0] == ("int16: 2 of 4 HardOps hold a 16-bit value, 1 of 5 integer ops compute "
                       "in int16 (0.0% of MACs); 1 more ops write or convert a 16-bit value:")
    assert text[1].startswith("  residual-stream rule: 1 op (a); through them 1 writing")
    assert text[-1] == ("  50% of the HardOps hold 16-bit values (above 10%): "
                        "residual-stream rule 2")


def test_the_search_raises_are_told_apart_from_the_rules(tmp_path):
    """A compile whose search raises layers (a target only int16 reaches): the raised ops read
    "search", the logits and the spread from them keep their own rules, every HardOp holding
    16-bit values is counted under one, and the printout names the search."""
    import sys

    sys.path.insert(0, "tests/support")
    from corpus import load_stage
    from exporter_nets import NETS

    from xcompile.pipeline import DEFAULTS, compile_model

    build, shape = NETS["torch_attention"]
    rng = np.random.default_rng(3)
    path = tmp_path / "attn.onnx"
    path.write_bytes(build(rng).SerializeToString())
    (tmp_path / "cal").mkdir()
    for k in range(4):
        np.save(tmp_path / "cal" / f"{k}.npy", rng.normal(0, 1, shape).astype(np.float32))
    written = compile_model(dict(DEFAULTS, model=str(path), target="zg330",
                                 calib=str(tmp_path / "cal"), name="attn", min_cosine=0.99999,
                                 max_int16=1.0, input_shape={"x": list(shape)},
                                 output=str(tmp_path / "out")))
    q = load_stage(written["quantized"])
    mp = q.tags["quantization"]["mixed_precision"]
    assert mp["op_bits"], "the search raised nothing: the test needs a raise"
    rec = mp["int16"]
    rows = {r["op_id"]: r for r in rec["ops"]}
    for oid in map(int, mp["op_bits"]):
        if rows[oid]["reason"] != "search":  # raised anyway by a rule met first
            assert rows[oid]["reason"] in ("logits", "stream", "scale_group", "widest_input")
    assert any(r["reason"] == "search" for r in rows.values())
    assert "op_bits" not in {r["root"] for r in rows.values()}  # the user raised nothing
    hard = int16_record(load_stage(written["ZG"]))["hardops"]
    assert hard["counts"].get("search", 0) > 0 and "unexplained" not in hard["counts"]
    assert any(line.startswith("  raised by the search: ") for line in summary_lines(rec))


@pytest.mark.parametrize("own_reader", [False, True], ids=["concat_only", "own_reader"])
def test_concat_plan_without_widening(own_reader):
    """`concat_plan(widen=False)` stores no Concat in 16 bits: a far branch the Concat alone
    reads shares its scale (its own would serve no one), one with a reader of its own keeps
    its scale and is requantized into the Concat's int8 one."""
    from xcompile.quant.calibrate import calibrate
    from xcompile.quant.concats import concat_plan

    opt = optimize(_far_concat(own_reader))
    rng = np.random.default_rng(1)
    data = [[rng.uniform(0, 1, (1, 3, 16, 16)).astype(np.float32)] for _ in range(3)]
    ints = integer_ops(opt)
    amax = calibrate(opt, data, "minmax")
    _, requant, _, record, wide = concat_plan(opt, ints, amax)
    (form,) = [c["form"] for c in record.values()]
    assert form == "int16" and wide and requant
    uf, requant, _, record, wide = concat_plan(opt, ints, amax, widen=False)
    (form,) = [c["form"] for c in record.values()]
    assert not wide
    cat = next(op for op in opt.ops if op.op_type == "Concat")
    small = cat.feature_inputs()[1]
    if own_reader:
        assert form == "requantized" and requant == {(cat.op_id, 1)}
        assert uf.find(small.v_id) != uf.find(cat.outputs[0].v_id)
    else:
        assert form == "shared" and not requant
        assert uf.find(small.v_id) == uf.find(cat.outputs[0].v_id)


@pytest.mark.parametrize("small_gain,kept", [(1.0, "int8"), (2000.0, "int16")],
                         ids=["reader_ignores_it", "reader_amplifies_it"])
def test_the_compile_measures_whether_widening_a_concat_pays(tmp_path, small_gain, kept):
    """A Concat of a branch ~2000x below the other, read by a convolution: where the reader
    weighs both alike, the quiet branch's int8 rounding costs its output nothing and the
    compile keeps the Concat in int8 (no int16 op left); where the reader amplifies the quiet
    branch 2000x, int8 loses it and the 16-bit Concat is kept, with the measurement in the
    record and the printout."""
    from corpus import load_stage

    from xcompile.pipeline import DEFAULTS, compile_model

    model = _far_concat_model(small_gain=small_gain)
    path = tmp_path / "cat.onnx"
    path.write_bytes(model.SerializeToString())
    (tmp_path / "cal").mkdir()
    rng = np.random.default_rng(1)
    for k in range(3):
        np.save(tmp_path / "cal" / f"{k}.npy",
                rng.uniform(0, 1, (1, 3, 16, 16)).astype(np.float32))
    written = compile_model(dict(DEFAULTS, model=str(path), target="zg330",
                                 calib=str(tmp_path / "cal"), output=str(tmp_path / "out")))
    q = load_stage(written["quantized"])
    wid = q.tags["quantization"]["measured_rules"]["concat"]
    assert wid["kept"] == (kept == "int16") and len(wid["ops"]) == 1
    (form,) = [c["form"] for c in q.tags["quantization"]["concats"].values()]
    rec = int16_record(load_stage(written["ZG"]))
    if kept == "int8":
        assert form == "shared" and wid["worst_without"][1] >= 0.99
        assert wid["worst_without"][1] >= wid["worst_with"][1] - 0.002
        assert rec["ops"] == [] and rec["hardops"]["int16"] == 0
        assert "without: dropped, int8" in summary_lines(rec)[1]
    else:
        assert form == "int16" and wid["worst_with"][1] > wid["worst_without"][1] + 0.002
        assert rec["hardops"]["counts"].get("concat", 0) > 0
        assert any("measured" in line and line.endswith(": kept")
                   for line in summary_lines(rec))


def test_the_compile_measures_the_residual_stream_rule(tmp_path):
    """The spectrum's transformer block (no row far below the others): without the stream
    rule its outputs read as well, so the compile drops it (10 -> 3 of 15 HardOps holding
    16-bit values: the softmax logits); the ViT block keeps it (its class token's row needs
    it: docs/quantization.md section 10)."""
    import sys

    from corpus import load_stage

    from xcompile.pipeline import DEFAULTS, compile_model

    sys.path.insert(0, "tests/support")
    from spectrum_nets import SPECTRUM

    _, cal = _transformer()
    (tmp_path / "cal").mkdir()
    for k, (x,) in enumerate(cal):
        np.save(tmp_path / "cal" / f"{k}.npy", x)
    build, shape = SPECTRUM["transformer_block_64x128"]
    path = tmp_path / "block.onnx"
    path.write_bytes(build(np.random.default_rng(7)).SerializeToString())
    written = compile_model(dict(DEFAULTS, model=str(path), target="zg330",
                                 calib=str(tmp_path / "cal"), output=str(tmp_path / "out"),
                                 input_shape={"x": list(shape)}))
    q = load_stage(written["quantized"])
    m = q.tags["quantization"]["measured_rules"]["stream"]
    assert not m["kept"] and m["worst_without"][1] >= 0.99
    assert m["worst_without"][1] >= m["worst_with"][1] - 0.002
    rec = int16_record(load_stage(written["ZG"]))
    assert {r["root"] for r in rec["ops"]} == {"logits"}
    assert rec["hardops"]["int16"] < 10
    assert any("residual-stream rule measured" in line and "dropped" in line
               for line in summary_lines(rec))


def test_log_domain_rule_is_its_own_reason():
    """The ops of a log-power chain compute in 16 bits by their own rule
    (`log_domain.log_domain_bits`, merged into `bits.rule_bits`): their reason is
    "log_domain", not the user's op_bits, and the STFT convolutions writing their 16-bit
    inputs say so."""
    import tempfile
    from pathlib import Path

    from test_log_power import SAMPLES, _speech, dnsmos_like

    from xcompile.quant.log_domain import LOG_POWER
    from xcompile.quant.qdq import import_qdq

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "dnsmos_like.onnx"
        path.write_bytes(dnsmos_like(np.random.default_rng(5)).SerializeToString())
        net = import_qdq(str(path), {"x": [1, SAMPLES]}, name="dnsmos_like")
    q = quantize_network(net, [[x] for x in _speech(2, 0)], **FAST)
    rows = q.tags["quantization"]["int16"]["ops"]
    chain = {op.op_id for op in q.ops if op.tags.get("decomposed") == LOG_POWER}
    assert chain and chain <= {r["op_id"] for r in rows}
    assert {r["root"] for r in rows if r["op_id"] in chain} == {"log_domain"}
    assert "op_bits" not in {r["root"] for r in rows}
    assert any(r["type"] == "Conv2d" and r["reason"] == "writes_16bit"
               and r["root"] == "log_domain" for r in rows)
    assert_explained(q)


def test_xrt_compile_and_quant_report_print_the_reasons(tmp_path, capsys):
    """`xrt compile` prints the summary after its mixed-precision lines; `xrt quant-report`
    prints it with one line per op and writes the record in its json."""
    import json

    from xrt.cli import main

    out = tmp_path / "out"
    assert main(["compile", "tiny_cnn", "--target", "zg330", "-o", str(out), "--op-bits",
                 "branch1.conv=16"]) == 0
    text = capsys.readouterr().out
    head = next(line for line in text.splitlines() if line.startswith("int16: "))
    assert "HardOps hold a 16-bit value" in head and "integer ops compute in int16" in head
    assert "  raised by --op-bits: 1 op (branch1.conv)" in text
    report = tmp_path / "report.json"
    main(["quant-report", str(out / "tiny_cnn_optimized.json"),
          str(out / "tiny_cnn_quantized.json"), "--json", str(report)])
    text = capsys.readouterr().out
    assert "  raised by --op-bits: 1 op (branch1.conv)" in text
    line = next(x for x in text.splitlines() if x.strip().startswith("pool "))
    assert "scale_group (branch1.conv)" in line and "from op_bits branch1.conv" in line
    data = json.loads(report.read_text())
    assert {r["name"] for r in data["int16"]["ops"]} >= {"branch1.conv", "pool"}


def test_the_vit_block_keeps_the_residual_stream_rule(tmp_path):
    """The field corpus ViT block: its class token's row needs the 16-bit stream, so the
    compile measures the rule and keeps it (docs/quantization.md section 10)."""
    from corpus import load_stage
    from field_nets import FIELD_NETS

    from xcompile.pipeline import DEFAULTS, compile_model

    fn = FIELD_NETS["torch_vit_tiny_block"]
    path = tmp_path / "vit.onnx"
    path.write_bytes(fn.build(np.random.default_rng(7)).SerializeToString())
    (tmp_path / "cal").mkdir()
    for k, x in enumerate(fn.inputs(4, 0)):
        np.save(tmp_path / "cal" / f"{k}.npy", x)
    written = compile_model(dict(DEFAULTS, model=str(path), target="zg330",
                                 calib=str(tmp_path / "cal"), output=str(tmp_path / "out"),
                                 input_shape={"x": list(fn.shape)}))
    q = load_stage(written["quantized"])
    m = q.tags["quantization"]["measured_rules"]["stream"]
    assert m["kept"] and m["worst_with"][1] > m["worst_without"][1] + 0.002
    assert "stream" in int16_record(q)["counts"]


@pytest.mark.parametrize("case", ["op_bits", "rules"])
def test_planned_int16_agrees_with_the_quantizers_record(tiny, case):
    """`mixed.planned_int16` (what the search's cap counts, without quantizing) and the
    quantizer's record name the same ops computing in 16 bits: both come from
    `bits.logit_bits` / `value_bits`. (A Concat the calibration finds far apart is the one
    thing the plan cannot see: it has no ranges.)"""
    from xcompile.quant.mixed import planned_int16

    if case == "op_bits":
        net, cal = tiny
        opt = optimize(net)
        conv = next(op for op in opt.ops if op.name == "branch1.conv")
        op_bits = {conv.op_id: 16}
    else:
        net, cal = _transformer()
        opt, op_bits = optimize(net), {}
    q = quantize_network(net, cal, op_bits=op_bits, **FAST)
    rows = q.tags["quantization"]["int16"]["ops"]
    assert planned_int16(opt, op_bits) == {r["op_id"] for r in rows if r["computes"] == 16}

"""Every op and HardOp the default compile leaves in 16 bits says why (issue 27: "no corpus
network leaves the default compile with more than 10% of its HardOps in int16 unless the report
says why"; xcompile.quant.int16_reasons). Over the networks as exporters write them
(tests/support/exporter_nets.py), the speed spectrum's generated networks
(tests/support/spectrum_nets.py) and the onnx light models, compiled for the ZG330 with the
defaults from ONNX: each HardOp holding a 16-bit value (counted as bench_spectrum counts them)
has a reason from the closed set, none "unexplained"; each op of the quantized network holding
a 16-bit value has a row; the rows computing in 16 bits are the quantizer's; and where more
than 10% of the HardOps hold 16-bit values the printed summary says so with the rules behind
them. The big networks are slow."""

from __future__ import annotations

import json

import numpy as np
import pytest
from corpus import LIGHT, images, light_model, load_stage
from exporter_nets import NETS
from spectrum_nets import SPECTRUM

from xcompile.pipeline import DEFAULTS, compile_model
from xcompile.quant.int16_reasons import REASONS, ROOTS, int16_record, summary_lines

#: spectrum and light networks small enough for the default run (a few seconds a compile)
FAST = {"transformer_block_64x128", "squeezenet"}


def _cases():
    for name in sorted(NETS):
        yield pytest.param("exporter", name, id=name)
    for name in sorted(SPECTRUM):
        yield pytest.param("spectrum", name, id=name,
                           marks=[] if name in FAST else [pytest.mark.slow])
    for name in ("inception_v2", "resnet50", "squeezenet", "vgg19"):
        assert name in LIGHT
        yield pytest.param("light", name, id=name,
                           marks=[] if name in FAST else [pytest.mark.slow])


def _compile(kind: str, name: str, tmp_path) -> dict[str, str]:
    if kind == "light":
        model = light_model(name)
        shape = tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)
        cal = images(shape, 4)
    else:
        build, shape = (NETS if kind == "exporter" else SPECTRUM)[name]
        model = build(np.random.default_rng(7))
        rng = np.random.default_rng(9)
        cal = [rng.normal(0, 1, shape).astype(np.float32) for _ in range(4)]
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(model.SerializeToString())
    (tmp_path / "cal").mkdir()
    for k, x in enumerate(cal):
        np.save(tmp_path / "cal" / f"{k}.npy", x)
    return compile_model(dict(DEFAULTS, model=str(path), target="zg330",
                              calib=str(tmp_path / "cal"), output=str(tmp_path / "out"),
                              name=name,
                              input_shape={model.graph.input[0].name: list(shape)}))


@pytest.mark.parametrize("kind,name", list(_cases()))
def test_every_int16_hardop_has_a_reason(kind, name, tmp_path):
    written = _compile(kind, name, tmp_path)
    net = load_stage(written["ZG"])
    rec = int16_record(net)
    assert rec, "the compile recorded no int16 reasons"
    hard = rec["hardops"]
    with open(written["ZG"]) as fh:  # bench_spectrum's count: any value read or written
        doc = json.load(fh)
    ops = [op for op in doc["ops"] if op.get("_type_key", "").endswith("::HardOp")]
    assert hard["hardops"] == len(ops)
    assert hard["int16"] == sum("@sint(16)" in json.dumps(op) for op in ops)
    assert "unexplained" not in hard["counts"], [r for r in hard["list"]
                                                 if r["root"] == "unexplained"]
    assert sum(hard["counts"].values()) == hard["int16"]
    assert all(r["reason"] in REASONS and r["root"] in ROOTS for r in rec["ops"])

    q = load_stage(written["quantized"])
    rows = {r["op_id"] for r in rec["ops"]}
    for op in q.ops:
        wide = [v for v in op.inputs + op.outputs if not v.is_params
                and getattr(v.dtype.element_dtype, "is_quantized", False)
                and v.dtype.element_dtype.storage.bits == 16]
        assert not wide or op.op_id in rows or op.op_type in ("Input", "Output"), \
            f"{op.op_type} {op.name} holds int16 without a reason"
    tagged = {int(k) for k in q.tags["quantization"]["op_bits"]}
    assert tagged <= {r["op_id"] for r in rec["ops"] if r["computes"] == 16}

    text = summary_lines(rec)
    assert text[0].startswith(f"int16: {hard['int16']} of {hard['hardops']} HardOps") \
        if hard["int16"] else text[0].startswith("int16: none")
    if hard["share"] > 0.10:  # the share is reported with its reasons
        (note,) = [line for line in text if "above 10%" in line]
        assert all(ROOTS[root] in note for root in hard["counts"])

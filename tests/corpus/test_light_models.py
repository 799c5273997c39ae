"""Real architectures, as the onnx package ships them (`onnx/backend/test/data/light`), with
seeded weights (`tests/support/corpus.py`): each compiles for both chips, deploys, runs
bit-exactly against the integer reference (the adapted network on the HostBackend), and stays
within a cosine of 0.99 of onnxruntime's float run and no more than 0.005 below onnxruntime's
own int8 (`quantize_static`, QDQ, per-channel weights, the same calibration images). Every op
of the compiled network is a HardOp bound to the chip's backend or a host op with the reason it
stays there.

squeezenet runs in the default suite; the others (densenet121: 246 HardOps, alexnet/zfnet512
with LRN, ...) are slow.
"""

from __future__ import annotations

import numpy as np
import pytest
from corpus import LIGHT, images, light_model, load_stage, run_on_chip, run_reference

from xcompile.pipeline import DEFAULTS, compile_model
from xcompile.placement import placement
from xcompile.quant.onnxruntime_int8 import quantize_static_int8
from xcompile.quant.report import cosine

pytest.importorskip("onnxruntime")

FAST = {"squeezenet"}
CHIPS = {"zg330": ("ZG330", "ZG"), "buyi": ("Buyi", "BY")}


@pytest.mark.parametrize("target", sorted(CHIPS))
@pytest.mark.parametrize("name", [pytest.param(n, marks=[] if n in FAST else [pytest.mark.slow])
                                  for n in LIGHT])
def test_light_model_compiles_deploys_and_runs_on_the_chip(name, target, tmp_path):
    import onnx
    import onnxruntime as ort

    model = light_model(name)
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    shape = tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)
    cal = tmp_path / "cal"
    cal.mkdir()
    for k, im in enumerate(images(shape, 4)):
        np.save(cal / f"{k}.npy", im)
    written = compile_model(dict(DEFAULTS, model=str(path), target=target, calib=str(cal),
                                 output=str(tmp_path / "out"), name=name))
    backend_name, suffix = CHIPS[target]
    net = load_stage(written[suffix])

    # placement: HardOps for the chip, every host op with its reason
    where = placement(net, target)
    reasons = net.tags[target]["host_ops"]
    for op in net.ops:
        if op.op_type not in ("HardOp", "Input", "Output"):
            assert str(op.op_id) in reasons, f"host op {op.op_id} {op.op_type} has no reason"
    assert where.hardops > 0 and where.npu_ops >= where.hardops
    assert not {"Conv2d", "Concat", "ChannelShuffle", "Relu", "Add", "Multiply"} & \
        {t for c in where.host.values() for t in c}

    x = images(shape, 1, seed=9)[0]
    got, bound, npu = run_on_chip(net, backend_name, target, x)
    assert all(isinstance(bound[op.op_id], npu) for op in net.ops if op.op_type == "HardOp")
    # bit-exact against the integer reference
    assert got.tobytes() == run_reference(written["adapted"], x).tobytes()
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    ours = cosine(got, want)
    assert ours >= 0.99
    # side by side with onnxruntime's own int8 (QDQ, per-channel, the same calibration set)
    qdq = quantize_static_int8(str(path), [[np.load(cal / f"{k}.npy")] for k in range(4)],
                               str(tmp_path / "int8.onnx"))
    qs = ort.InferenceSession(qdq, providers=["CPUExecutionProvider"])
    theirs = cosine(qs.run(None, {qs.get_inputs()[0].name: x})[0], want)
    assert ours >= theirs - 0.005, f"int8 cosine {ours:.4f}, onnxruntime's {theirs:.4f}"

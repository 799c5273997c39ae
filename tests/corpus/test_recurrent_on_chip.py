"""Recurrent and 1-D networks (tests/support/recurrent_nets.py) compiled for the chips: the
LSTM/GRU input projections (one Matmul per layer) and the 1-D convolutions and pools run inside
HardOps on the chip, the recurrences stay on the host with their reason; the whole network runs
bit-exactly against the integer reference and within a cosine of 0.99 of onnxruntime float."""

from __future__ import annotations

import numpy as np
import pytest
from corpus import load_stage, run_on_chip, run_reference

pytest.importorskip("onnxruntime")
from recurrent_nets import cnn1d, crnn_head, kws_gru  # noqa: E402

from xcompile.pipeline import DEFAULTS, compile_model  # noqa: E402
from xcompile.quant.report import cosine  # noqa: E402

CHIPS = {"zg330": ("ZG330", "ZG"), "buyi": ("Buyi", "BY")}
NETS = {  # name: (builder, input name, input shape, target, op types that must run on chip)
    "crnn": (crnn_head, "image", (1, 1, 32, 64), "zg330", {"Conv2d", "MaxPool2d", "Matmul"}),
    "kws_gru": (kws_gru, "mfcc", (1, 49, 10), "buyi", {"Conv2d", "Matmul"}),
    "cnn1d": (cnn1d, "x", (2, 4, 40), "zg330", {"Conv2d", "ConvTranspose2d", "MaxPool2d",
                                                 "AvgPool2d", "Multiply", "Power"}),
}


@pytest.mark.parametrize("name", sorted(NETS))
def test_recurrent_and_1d_networks_on_the_chip(name, tmp_path):
    import onnxruntime as ort

    build, input_name, shape, target, on_chip = NETS[name]
    rng = np.random.default_rng(11)
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(build().SerializeToString())
    cal = tmp_path / "cal"
    cal.mkdir()
    for k in range(4):
        np.save(cal / f"{k}.npy", rng.normal(0, 1, shape).astype(np.float32))
    written = compile_model(dict(DEFAULTS, model=str(path), target=target, calib=str(cal),
                                 output=str(tmp_path / "out"), name=name))
    backend_name, suffix = CHIPS[target]
    net = load_stage(written[suffix])
    adapted = {op.op_id: op.op_type for op in load_stage(written["adapted"]).ops}
    hard = [op for op in net.ops if op.op_type == "HardOp"]
    fused = {adapted[i] for op in hard for i in op.attrs["origin_ops_id"] if i in adapted}
    assert on_chip <= fused, f"not inside a HardOp: {on_chip - fused}"
    host = [op for op in net.ops if op.op_type not in ("HardOp", "Input", "Output")]
    reasons = net.tags[target]["host_ops"]
    assert all(str(op.op_id) in reasons for op in host)
    assert not on_chip & {op.op_type for op in host}
    recurrences = [op for op in host if op.op_type.endswith("Recurrence")]
    assert len(recurrences) == {"crnn": 2, "kws_gru": 1, "cnn1d": 0}[name]
    assert all("float" in reasons[str(op.op_id)] for op in recurrences)
    if recurrences:  # each recurrence reads its projection Matmul's result, made on the chip
        assert sum(adapted[i] == "Matmul" for op in hard for i in op.attrs["origin_ops_id"]
                   if i in adapted) >= len(recurrences)
    x = rng.normal(0, 1, shape).astype(np.float32)
    got, bound, npu = run_on_chip(net, backend_name, target, x)
    assert all(isinstance(bound[op.op_id], npu) for op in hard)
    assert got.tobytes() == run_reference(written["adapted"], x).tobytes()
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {input_name: x})[0]
    assert cosine(got, want) >= 0.99

"""Networks as exporters write them (tests/support/exporter_nets.py): each imports (its
dynamic dims filled by input_shapes), compiles for both chips, deploys, runs bit-exactly
against the integer reference and within a cosine of 0.99 of onnxruntime's float run."""

from __future__ import annotations

import numpy as np
import pytest
from corpus import load_stage, run_on_chip, run_reference
from exporter_nets import NETS

from xcompile.pipeline import DEFAULTS, compile_model
from xcompile.quant.report import cosine

pytest.importorskip("onnxruntime")

CHIPS = {"zg330": ("ZG330", "ZG"), "buyi": ("Buyi", "BY")}


@pytest.mark.parametrize("target", sorted(CHIPS))
@pytest.mark.parametrize("name", sorted(NETS))
def test_exporter_network_runs_on_the_chip(name, target, tmp_path):
    import onnxruntime as ort

    build, shape = NETS[name]
    rng = np.random.default_rng(7)
    model = build(rng)
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(model.SerializeToString())
    cal = tmp_path / "cal"
    cal.mkdir()
    for k in range(4):
        np.save(cal / f"{k}.npy", rng.normal(0, 1, shape).astype(np.float32))
    written = compile_model(dict(DEFAULTS, model=str(path), target=target, calib=str(cal),
                                 output=str(tmp_path / "out"), name=name,
                                 input_shape={"x": list(shape)}))
    backend_name, suffix = CHIPS[target]
    net = load_stage(written[suffix])
    # where the ops run: HardOps on the chip, every host op with its reason, no convolution,
    # matmul, shuffle, element-wise op, table or LRN left on the host
    reasons = net.tags[target]["host_ops"]
    host = [op for op in net.ops if op.op_type not in ("HardOp", "Input", "Output")]
    assert all(str(op.op_id) in reasons for op in host)
    assert not {"Conv2d", "ConvTranspose2d", "Matmul", "ChannelShuffle", "Add", "Multiply",
                "Resize", "Upsample", "AvgPool2d", "LRN", "Power", "Sigmoid", "Tanh", "Silu",
                "Hardswish", "Gelu", "LayerNorm"} & \
        {op.op_type for op in host}
    # a softmax stays on the host only where its probabilities leave the network
    assert all(c.op_type in ("Output", "Cast", "PruneAxis") for op in host
               if op.op_type == "Softmax" for c in op.outputs[0].consumers)
    x = rng.normal(0, 1, shape).astype(np.float32)
    got, bound, npu = run_on_chip(net, backend_name, target, x)
    hard = [op for op in net.ops if op.op_type == "HardOp"]
    assert hard and all(isinstance(bound[op.op_id], npu) for op in hard)
    assert got.tobytes() == run_reference(written["adapted"], x).tobytes()
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    assert cosine(got, want) >= 0.99


def test_automatic_mixed_precision_raises_layers_until_the_target(tmp_path):
    """Below the cosine target on the calibration samples, the compile raises the layers that
    lose most to int16, round after round, keeps the best, records what it chose; the mixed
    network still runs bit-exactly on the chip."""
    build, shape = NETS["torch_attention"]
    rng = np.random.default_rng(3)
    path = tmp_path / "attn.onnx"
    path.write_bytes(build(rng).SerializeToString())
    cal = tmp_path / "cal"
    cal.mkdir()
    for k in range(4):
        np.save(cal / f"{k}.npy", rng.normal(0, 1, shape).astype(np.float32))
    opts = dict(DEFAULTS, model=str(path), target="zg330", calib=str(cal), name="attn",
                input_shape={"x": list(shape)})
    plain = compile_model(dict(opts, output=str(tmp_path / "plain"), min_cosine=0.0))
    mixed = compile_model(dict(opts, output=str(tmp_path / "mixed"), min_cosine=0.99999,
                               max_int16=1.0))  # the user asks for more than the 10% cap
    assert "mixed_precision" not in load_stage(plain["quantized"]).tags["quantization"]
    mp = load_stage(mixed["quantized"]).tags["quantization"]["mixed_precision"]
    assert len(mp["cosines"]) > 1 and mp["op_bits"]
    assert max(mp["cosines"]) > mp["cosines"][0]
    net = load_stage(mixed["ZG"])
    assert any(v.dtype.element_dtype.numpy_dtype == np.int16 for op in net.ops
               for v in op.outputs if v.dtype.is_quantized())
    x = rng.normal(0, 1, shape).astype(np.float32)
    got, _, _ = run_on_chip(net, "ZG330", "zg330", x)
    assert got.tobytes() == run_reference(mixed["adapted"], x).tobytes()

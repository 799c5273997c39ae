"""Networks as exporters write them (tests/support/exporter_nets.py): each imports (its
dynamic dims filled by input_shapes), compiles for both chips, deploys, runs bit-exactly
against the integer reference and within a cosine of 0.99 of onnxruntime's float run."""

from __future__ import annotations

import numpy as np
import pytest
from corpus import forward_once, load_stage
from exporter_nets import NETS

from host_backend import HostBackend
from xcompile.pipeline import DEFAULTS, compile_model
from xcompile.quant.report import cosine
from xrt import Device, HostDevice, plugins

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
    # matmul, shuffle or element-wise op left on the host
    reasons = net.tags[target]["host_ops"]
    host = [op for op in net.ops if op.op_type not in ("HardOp", "Input", "Output")]
    assert all(str(op.op_id) in reasons for op in host)
    assert not {"Conv2d", "ConvTranspose2d", "Matmul", "ChannelShuffle", "Add", "Multiply"} & \
        {op.op_type for op in host}
    x = rng.normal(0, 1, shape).astype(np.float32)
    npu = plugins.backend_class(backend_name)
    dev = Device.Open(f"sim://{target}")
    try:
        got, bound = forward_once(net, [npu, HostBackend], [dev, HostDevice.Default()], x)
    finally:
        dev.close()
    hard = [op for op in net.ops if op.op_type == "HardOp"]
    assert hard and all(isinstance(bound[op.op_id], npu) for op in hard)
    ref, _ = forward_once(load_stage(written["adapted"]), [HostBackend],
                          [HostDevice.Default()], x)
    assert got.tobytes() == ref.tobytes()
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    assert cosine(got, want) >= 0.99

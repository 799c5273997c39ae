"""Networks and snapshots held in memory on both chips' simulators: `dumpSnapshotToMemory` of an
applied session of a compiled ONNX model, restored with `CreateWithSnapshot(buffer)`, forwards
bit-identically to the session it was dumped from, its HardOps bound to the chip; a lowered
network loaded from bytes (read-only Params views) or from a vendor-style json (version
"3.6.2.82", fields this reader does not know) runs on the chip like the original."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from npu_chip_lib import CHIPS, compile_onnx
from onnx import TensorProto, helper, numpy_helper

import xir
from host_backend import HostBackend
from xrt import Device, HostDevice, Session, Tensor, plugins


def run(s: Session, x: np.ndarray) -> list[np.ndarray]:
    return [np.asarray(t).copy() for t in s.forward([Tensor(x)])]


def conv_model() -> onnx.ModelProto:
    """Conv -> Relu -> Conv as an exporter writes it (initializers, NCHW)."""
    rng = np.random.default_rng(2)
    w0 = numpy_helper.from_array(rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32), "w0")
    b0 = numpy_helper.from_array(rng.normal(0, 0.1, 8).astype(np.float32), "b0")
    w1 = numpy_helper.from_array(rng.normal(0, 0.3, (4, 8, 1, 1)).astype(np.float32), "w1")
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("Conv", ["r0", "w1"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          initializer=[w0, b0, w1])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("target", sorted(CHIPS))
def test_chip_snapshot_from_memory_forwards_like_a_built_session(target):
    c = compile_onnx(conv_model(), (1, 3, 8, 8), target)
    name, url = CHIPS[target]
    npu = plugins.backend_class(name)
    dev = Device.Open(url)
    x = np.random.default_rng(1).normal(size=c.lowered.inputs()[0].shape).astype(np.float32)
    s = Session.Create([npu, HostBackend], c.lowered.view(0), [dev, HostDevice.Default()])
    try:
        s.apply()
        data = s.dumpSnapshotToMemory()
        want = run(s, x)
        r = Session.CreateWithSnapshot(np.frombuffer(data, np.uint8), [npu, HostBackend],
                                       [dev, HostDevice.Default()])
        try:
            nb = r.backends[0]
            assert isinstance(nb, npu) and nb.snapshot
            hard = [op.op_id for op in c.lowered.ops if op.op_type == "HardOp"]
            assert hard and all(r.backendBindings()[i] is nb for i in hard)  # ran on the chip
            got = run(r, x)
            assert [a.tobytes() for a in got] == [a.tobytes() for a in want]
        finally:
            r.close()
    finally:
        s.close()
        dev.close()


def forward_on_chip(target: str, net, x: np.ndarray) -> list[np.ndarray]:
    name, url = CHIPS[target]
    npu = plugins.backend_class(name)
    dev = Device.Open(url)
    s = Session.Create([npu, HostBackend], net.view(0), [dev, HostDevice.Default()])
    try:
        s.apply()
        hard = [op.op_id for op in net.ops if op.op_type == "HardOp"]
        assert hard and all(isinstance(s.backendBindings()[i], npu) for i in hard)
        return run(s, x)
    finally:
        s.close()
        dev.close()


def vendor_json(text: str) -> str:
    """`text` as the vendor's toolchain might write it: its version, no xir_format tag, fields
    this reader does not know on the network, every op and every value."""
    obj = json.loads(text)
    obj["icraft_xir_version"] = "3.6.2.82"
    obj["tags"].pop("xir_format")
    obj["icraft_build"] = "b82"
    for op in obj["ops"]:
        op["vendor_hint"] = 1
        values = op["inputs"] + op["outputs"] + op.get("params", [])
        for v in values + ([op["instr"]] if op.get("instr") else []):
            v["real"], v["fake_from"] = True, -1
    return json.dumps(obj)


@pytest.mark.parametrize("target", sorted(CHIPS))
@pytest.mark.parametrize("kind", ["bytes", "vendor"])
def test_lowered_network_from_memory_runs_on_the_chip(target, kind):
    c = compile_onnx(conv_model(), (1, 3, 8, 8), target)
    text, raw = c.lowered.dumpJsonToStr(), c.lowered.dumpParamsToBuffer()
    if kind == "vendor":
        text = vendor_json(text)
    net = xir.Network.CreateFromJsonStr(text.encode()).loadParamsFromBuffer(raw)
    assert all(not p.data.flags.writeable for p in net.params())  # views into `raw`
    if kind == "vendor":
        assert net.icraft_xir_version == "3.6.2.82"
    x = np.random.default_rng(4).normal(size=net.inputs()[0].shape).astype(np.float32)
    got, want = forward_on_chip(target, net, x), forward_on_chip(target, c.lowered, x)
    assert [a.tobytes() for a in got] == [a.tobytes() for a in want]

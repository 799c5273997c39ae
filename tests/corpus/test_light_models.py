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
from corpus import LIGHT, images, light_model, ort_int8

import xir
from host_backend import HostBackend
from xcompile.pipeline import DEFAULTS, compile_model
from xcompile.placement import placement
from xrt import Device, HostDevice, Session, Tensor

pytest.importorskip("onnxruntime")

FAST = {"squeezenet"}
CHIPS = {"zg330": ("ZG330", "ZG"), "buyi": ("Buyi", "BY")}


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity; 0 when one side is all zeros (onnxruntime's int8 inception_v2)."""
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    return float(a @ b / (na * nb)) if na and nb else float(na == nb)


def _run(net, backends, devices, x):
    s = Session.Create(backends, net.view(0), devices)
    s.apply()
    out = [np.asarray(t).copy() for t in s.forward([Tensor(x)])]
    return s, out


@pytest.mark.parametrize("target", sorted(CHIPS))
@pytest.mark.parametrize("name", [pytest.param(n, marks=[] if n in FAST else [pytest.mark.slow])
                                  for n in LIGHT])
def test_light_model_compiles_deploys_and_runs_on_the_chip(name, target, tmp_path):
    import onnx
    import onnxruntime as ort

    from xrt import plugins

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
    net = xir.Network.CreateFromJsonFile(written[suffix])
    net.loadParamsFromFile(written[suffix][:-5] + ".raw")

    # placement: HardOps for the chip, every host op with its reason
    where = placement(net, target)
    reasons = net.tags[target]["host_ops"]
    for op in net.ops:
        if op.op_type not in ("HardOp", "Input", "Output"):
            assert str(op.op_id) in reasons, f"host op {op.op_id} {op.op_type} has no reason"
    assert where.hardops > 0 and where.npu_ops >= where.hardops
    assert not {"Conv2d", "Concat"} & {t for c in where.host.values() for t in c}

    x = images(shape, 1, seed=9)[0]
    npu = plugins.backend_class(backend_name)
    dev = Device.Open(f"sim://{target}")
    try:
        s, got = _run(net, [npu, HostBackend], [dev, HostDevice.Default()], x)
        bound = s.backendBindings()
        assert all(isinstance(bound[op.op_id], npu) for op in net.ops if op.op_type == "HardOp")
        s.close()
    finally:
        dev.close()
    adapted = xir.Network.CreateFromJsonFile(written["adapted"])
    adapted.loadParamsFromFile(written["adapted"][:-5] + ".raw")
    ref_s, ref = _run(adapted, [HostBackend], [HostDevice.Default()], x)
    ref_s.close()
    for a, b in zip(got, ref):
        assert a.tobytes() == b.tobytes()  # bit-exact against the integer reference
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    ours = _cosine(got[0], want)
    assert ours >= 0.99
    # side by side with onnxruntime's own int8 (QDQ, per-channel, the same calibration set)
    qdq = ort_int8(str(path), [np.load(cal / f"{k}.npy") for k in range(4)],
                   str(tmp_path / "int8.onnx"))
    qs = ort.InferenceSession(qdq, providers=["CPUExecutionProvider"])
    theirs = _cosine(qs.run(None, {qs.get_inputs()[0].name: x})[0], want)
    assert ours >= theirs - 0.005, f"int8 cosine {ours:.4f}, onnxruntime's {theirs:.4f}"

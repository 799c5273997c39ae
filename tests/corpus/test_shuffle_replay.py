"""A channel shuffle as exporters write it (Reshape -> Transpose -> Reshape, ShuffleNet's
groups of 3 and 4 and torchvision's 2), compiled for both chips: its COPY layers replay as
one `interleave` call per shuffle (`npu_model.program.join_shuffles`), and every forward,
the decoded first one and the replayed ones, equals the integer reference byte for byte."""

from __future__ import annotations

import numpy as np
import pytest
from corpus import load_stage, run_reference
from onnx import TensorProto, helper, numpy_helper

from npu_model.kernels import interleave
from xcompile.pipeline import DEFAULTS, compile_model

CHIPS = {"zg330": ("ZG330", "ZG"), "buyi": ("Buyi", "BY")}


def _shuffle_net(rng: np.random.Generator, c: int, g: int, hw: int):
    """Conv 1x1 (grouped, as ShuffleNet's) -> Relu -> shuffle of `g` groups -> depthwise 3x3,
    NCHW as exported from PyTorch."""
    inits = [numpy_helper.from_array(rng.normal(0, 0.5, (c, c // g, 1, 1)).astype(np.float32),
                                     "w1"),
             numpy_helper.from_array(rng.normal(0, 0.5, (c, 1, 3, 3)).astype(np.float32), "w2"),
             numpy_helper.from_array(np.array([1, g, c // g, hw, hw], np.int64), "s1"),
             numpy_helper.from_array(np.array([1, c, hw, hw], np.int64), "s2")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], group=g),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Reshape", ["r", "s1"], ["b"]),
             helper.make_node("Transpose", ["b"], ["t"], perm=[0, 2, 1, 3, 4]),
             helper.make_node("Reshape", ["t", "s2"], ["s"]),
             helper.make_node("Conv", ["s", "w2"], ["y"], group=c, pads=[1, 1, 1, 1])]
    graph = helper.make_graph(
        nodes, "shuffle", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                         [1, c, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, hw, hw])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("target", sorted(CHIPS))
@pytest.mark.parametrize("c, g", [(24, 3), (32, 4), (16, 2)])
def test_replayed_shuffle_is_bit_exact(target, c, g, tmp_path, monkeypatch):
    from host_backend import HostBackend
    from xrt import Device, HostDevice, Session, Tensor, plugins

    calls = []
    pick = interleave.for_groups

    def counted(k_n):
        calls.append(k_n)
        return pick(k_n)

    monkeypatch.setattr(interleave, "for_groups", counted)
    rng = np.random.default_rng(c + g)
    hw = 7
    shape = (1, c, hw, hw)
    path = tmp_path / "shuffle.onnx"
    path.write_bytes(_shuffle_net(rng, c, g, hw).SerializeToString())
    cal = tmp_path / "cal"
    cal.mkdir()
    for k in range(3):
        np.save(cal / f"{k}.npy", rng.normal(0, 1, shape).astype(np.float32))
    written = compile_model(dict(DEFAULTS, model=str(path), target=target, calib=str(cal),
                                 output=str(tmp_path / "out"), name="shuffle",
                                 input_shape={"x": list(shape)}))
    backend_name, suffix = CHIPS[target]
    net = load_stage(written[suffix])
    kinds = [op.device_info["kinds"] for op in net.ops if op.op_type == "HardOp"]
    assert ["copy"] * g in kinds  # the shuffle runs on the chip, as `g` COPY layers
    dev = Device.Open(f"sim://{target}")
    sess = Session.Create([plugins.backend_class(backend_name), HostBackend], net.view(0),
                          [dev, HostDevice.Default()])
    try:
        sess.apply()
        for k in range(3):
            x = rng.normal(0, 1, shape).astype(np.float32)
            got = np.asarray(sess.forward([Tensor(x)])[0]).copy()
            assert got.tobytes() == run_reference(written["adapted"], x).tobytes(), k
    finally:
        sess.close()
        dev.close()
    assert calls == [g]  # joined once, when the first replay was made

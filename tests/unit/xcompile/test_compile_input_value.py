"""`xrt compile --input-value NAME=V`: a graph input fixed at import, so the If it decides keeps
one branch and the whole network reaches the chip (silero-VAD's sample-rate input)."""

from __future__ import annotations

import numpy as np
import pytest

from xcompile.pipeline import DEFAULTS, compile_model, parse_values
from xrt.errors import XrtError

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _vad(rng: np.random.Generator) -> onnx.ModelProto:
    """An If on `sr == 16000` choosing between two conv front ends, as silero-VAD exports."""
    def branch(tag: str) -> onnx.GraphProto:
        w = rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32)
        node = helper.make_node("Conv", ["x", f"w{tag}"], [f"o{tag}"], pads=[1, 1, 1, 1])
        return helper.make_graph([node], f"b{tag}", [],
                                 [helper.make_tensor_value_info(f"o{tag}", TensorProto.FLOAT,
                                                                None)],
                                 [numpy_helper.from_array(w, f"w{tag}")])

    nodes = [helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(
                 np.array(16000, np.int64))),
             helper.make_node("Equal", ["sr", "k"], ["is16k"]),
             helper.make_node("If", ["is16k"], ["c"], then_branch=branch("16"),
                              else_branch=branch("8")),
             helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(
        nodes, "vad", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8]),
                       helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_fixed_input_inlines_the_if_and_the_convs_reach_the_chip(tmp_path):
    from corpus import load_stage

    rng = np.random.default_rng(0)
    path = tmp_path / "vad.onnx"
    path.write_bytes(_vad(rng).SerializeToString())
    cal = tmp_path / "cal"
    cal.mkdir()
    for k in range(2):
        np.save(cal / f"{k}.npy", rng.normal(0, 1, (1, 3, 8, 8)).astype(np.float32))
    written = compile_model(dict(DEFAULTS, model=str(path), target="zg330", calib=str(cal),
                                 output=str(tmp_path / "out"), name="vad",
                                 input_value=["sr=16000"]))
    net = load_stage(written["ZG"])
    assert [v.name for v in net.inputs()] == ["x"]
    assert "OnnxGraph" not in {op.op_type for op in net.ops}
    assert any(op.op_type == "HardOp" for op in net.ops)


def test_input_value_specs():
    assert float(parse_values(["sr=16000"])["sr"]) == 16000.0
    assert parse_values(["sr=16000"])["sr"].shape == ()
    assert list(parse_values(["w=1,2.5"])["w"]) == [1.0, 2.5]
    assert float(parse_values({"sr": 8000})["sr"]) == 8000.0
    assert parse_values(None) is None
    for bad in (["sr=fast"], ["=3"], ["sr="]):
        with pytest.raises(XrtError, match="input-value"):
            parse_values(bad)

"""xir.ops.onnx_graph: the OnnxGraph op (a carried ONNX model) -- construction, json + raw round
trip, and every way its model blob can be broken."""

from __future__ import annotations

import json

import numpy as np
import pytest

import xir
from xir.errors import FieldTypeError, RawChecksumError, ShapeMismatchError
from xir.ops.onnx_graph import OnnxGraph, make_onnx_graph, model_digest
from xir.serialize import load_network, save_network
from xir.types import TensorType

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402


def _einsum_model() -> bytes:
    """A one-node model as the importer carries it: Einsum with typed inputs and outputs."""
    node = helper.make_node("Einsum", ["a", "b"], ["y"], equation="ij,jk->ik", name="ein")
    graph = helper.make_graph(
        [node], "Einsum_graph",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]) \
        .SerializeToString()


def _net(data: bytes | None = None) -> tuple[xir.Network, OnnxGraph]:
    data = _einsum_model() if data is None else data
    net = xir.Network("carried", framework_kind="onnx")
    a = net.newValue(TensorType(np.float32, [2, 3]), "a")
    b = net.newValue(TensorType(np.float32, [3, 4]), "b")
    y = net.newValue(TensorType(np.float32, [2, 4]), "y")
    model = net.newParams(np.frombuffer(data, np.uint8).copy(), "ein.onnx")
    net.addOp(xir.OP_REGISTRY["Input"]([], [a], name="a"))
    net.addOp(xir.OP_REGISTRY["Input"]([], [b], name="b"))
    op = make_onnx_graph([a, b], [y], model, onnx_ops=["Einsum"], onnx_nodes=["ein"], opset=17,
                         name="ein")
    net.addOp(op)
    net.addOp(xir.OP_REGISTRY["Output"]([y], []))
    net.validate()
    return net, op


def test_construction_records_what_it_carries():
    net, op = _net()
    assert op.op_type == "OnnxGraph" and "OnnxGraph" in xir.OP_REGISTRY
    assert op.label == "OnnxGraph(Einsum)"
    assert op.attrs["opset"] == 17 and op.attrs["onnx_nodes"] == ["ein"]
    assert op.attrs["digest"] == model_digest(_einsum_model())
    assert op.model_bytes() == _einsum_model()
    assert op.graph_inputs() == net.inputs()
    assert op.feature_inputs() == net.inputs()  # the model blob is a Params
    parsed = onnx.load_from_string(op.model_bytes())
    assert [n.op_type for n in parsed.graph.node] == ["Einsum"]


@pytest.mark.parametrize("attrs, field", [
    ({"onnx_ops": []}, "onnx_ops"),
    ({"onnx_ops": [""]}, "onnx_ops"),
    ({"opset": 0}, "opset"),
    ({"digest": "abc"}, "digest"),
    ({"digest": "A" * 64}, "digest"),
])
def test_bad_attributes_are_refused(attrs, field):
    _, op = _net()
    kw = {**op.attrs, **attrs}
    with pytest.raises(FieldTypeError) as info:
        OnnxGraph(op.inputs, op.outputs, **kw)
    assert info.value.field == field


def test_the_last_input_must_be_the_model_params():
    net, op = _net()
    bad = OnnxGraph(op.inputs[:-1], op.outputs, **op.attrs)  # b (a feature map) is last
    with pytest.raises(ShapeMismatchError, match="rank-1 uint8 Params"):
        bad.check_types()
    with pytest.raises(ShapeMismatchError, match="no outputs"):
        OnnxGraph(op.inputs, [], **op.attrs).check_types()


def test_json_raw_round_trip(tmp_path):
    net, op = _net()
    save_network(net, tmp_path / "n.json")
    obj = json.loads((tmp_path / "n.json").read_text())
    rec = next(o for o in obj["ops"] if o["_type_key"] == "icraft::xir::OnnxGraph")
    assert rec["onnx_ops"] == ["Einsum"] and rec["digest"] == op.attrs["digest"]
    assert rec["inputs"][-1]["_type_key"] == "icraft::xir::Params"  # bytes live in the raw
    back = load_network(tmp_path / "n.json")
    got = next(o for o in back.ops if o.op_type == "OnnxGraph")
    assert got.attrs == op.attrs and got.name == "ein"
    assert got.model_bytes() == _einsum_model()
    assert [v.shape for v in got.outputs] == [(2, 4)]
    back.validate()


def test_corrupted_raw_blob_fails_the_raw_checksum(tmp_path):
    net, _ = _net()
    save_network(net, tmp_path / "n.json")
    raw = bytearray((tmp_path / "n.raw").read_bytes())
    raw[-5] ^= 0xFF  # inside the model blob (the only Params, last in the file)
    (tmp_path / "n.raw").write_bytes(bytes(raw))
    with pytest.raises(RawChecksumError):
        load_network(tmp_path / "n.json")


def test_corrupted_blob_with_a_fresh_md5_fails_the_digest(tmp_path):
    """A raw rewritten consistently (size and md5 updated) still cannot smuggle another model:
    the op's own sha256 refuses it."""
    import hashlib

    net, _ = _net()
    save_network(net, tmp_path / "n.json")
    raw = bytearray((tmp_path / "n.raw").read_bytes())
    raw[-5] ^= 0xFF
    (tmp_path / "n.raw").write_bytes(bytes(raw))
    obj = json.loads((tmp_path / "n.json").read_text())
    obj["params_md5"] = hashlib.md5(bytes(raw)).hexdigest()
    (tmp_path / "n.json").write_text(json.dumps(obj))
    back = load_network(tmp_path / "n.json")
    op = next(o for o in back.ops if o.op_type == "OnnxGraph")
    with pytest.raises(RawChecksumError, match="sha256") as info:
        op.model_bytes()
    assert info.value.field == "digest" and info.value.op_id == op.op_id
    with pytest.raises(RawChecksumError):
        back.validate()


def test_json_with_bad_attribute_values_is_refused(tmp_path):
    net, _ = _net()
    save_network(net, tmp_path / "n.json")
    obj = json.loads((tmp_path / "n.json").read_text())
    rec = next(o for o in obj["ops"] if o["_type_key"] == "icraft::xir::OnnxGraph")
    rec["onnx_ops"] = [3]
    with pytest.raises(xir.NetworkFormatError, match="onnx_ops"):
        xir.serialize.loads(json.dumps(obj))
    rec["onnx_ops"], rec["digest"] = ["Einsum"], "not-a-digest"
    with pytest.raises(FieldTypeError, match="digest"):
        xir.serialize.loads(json.dumps(obj))


def test_xir_does_not_import_onnx():
    """xir holds the bytes; parsing them is the backend's business."""
    import ast
    from pathlib import Path

    import xir.ops.onnx_graph as mod

    tree = ast.parse(Path(mod.__file__).read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
             for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree)
              if isinstance(n, ast.ImportFrom) and n.module and n.level == 0}
    assert not names & {"onnx", "onnxruntime"}

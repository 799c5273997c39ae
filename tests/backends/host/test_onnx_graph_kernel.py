"""The HostBackend's OnnxGraph kernel: the carried graph against onnxruntime run directly, the
onnx reference evaluator where onnxruntime cannot, the runner cache, and the errors."""

from __future__ import annotations

import numpy as np
import pytest

import xir
from xir.ops.onnx_graph import make_onnx_graph, model_digest
from xir.types import TensorType
from xrt.errors import InvalidArgumentError, TensorError, UnsupportedOpError

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from host_backend.ops import FLOAT_KERNELS  # noqa: E402
from host_backend.ops import onnx_graph as kernel  # noqa: E402

RNG = np.random.default_rng(3)


def _model(nodes, inputs, outputs, inits=(), opset=17, domains=()) -> bytes:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    return helper.make_model(graph, opset_imports=opsets).SerializeToString()


def _vi(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def _attrs(data: bytes, ops) -> dict:
    return {"onnx_ops": list(ops), "onnx_nodes": ["n0"], "opset": 17,
            "digest": model_digest(data)}


def _blob(data: bytes) -> np.ndarray:
    return np.frombuffer(data, np.uint8).copy()


def _ort(data: bytes, feeds: dict) -> list[np.ndarray]:
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.fixture(autouse=True)
def _fresh_cache():
    kernel._RUNNERS.clear()
    yield
    kernel._RUNNERS.clear()


def test_registered_as_a_float_kernel():
    assert FLOAT_KERNELS["OnnxGraph"] is kernel.onnx_graph


def test_einsum_matches_onnxruntime_and_runs_on_it():
    data = _model([helper.make_node("Einsum", ["a", "b"], ["y"], equation="bij,bjk->bik")],
                  [_vi("a", [2, 3, 4]), _vi("b", [2, 4, 5])], [_vi("y", [2, 3, 5])])
    a, b = RNG.standard_normal((2, 3, 4), np.float32), RNG.standard_normal((2, 4, 5), np.float32)
    attrs = _attrs(data, ["Einsum"])
    (got,) = kernel.onnx_graph([a, b, _blob(data)], attrs)
    np.testing.assert_array_equal(got, _ort(data, {"a": a, "b": b})[0])
    np.testing.assert_allclose(got, np.einsum("bij,bjk->bik", a, b), rtol=1e-5, atol=1e-5)
    run = kernel.runner(_blob(data), attrs)
    assert run.engine == "onnxruntime"
    opts = run.ort.get_session_options()
    assert opts.intra_op_num_threads == 1 and opts.inter_op_num_threads == 1


def test_runner_is_built_once_per_model():
    data = _model([helper.make_node("Neg", ["x"], ["y"])], [_vi("x", [3])], [_vi("y", [3])])
    attrs = _attrs(data, ["Neg"])
    first = kernel.runner(_blob(data), attrs)
    for _ in range(3):
        kernel.onnx_graph([np.ones(3, np.float32), _blob(data)], attrs)
    assert kernel.runner(_blob(data), attrs) is first and len(kernel._RUNNERS) == 1


def test_integer_and_bool_graphs_keep_their_dtypes():
    data = _model([helper.make_node("BitShift", ["x", "s"], ["y"], direction="LEFT"),
                   helper.make_node("Greater", ["y", "t"], ["z"])],
                  [_vi("x", [4], TensorProto.UINT32), _vi("s", [4], TensorProto.UINT32)],
                  [_vi("y", [4], TensorProto.UINT32), _vi("z", [4], TensorProto.BOOL)],
                  [numpy_helper.from_array(np.array(9, np.uint32), "t")])
    x, s = np.array([1, 2, 3, 4], np.uint32), np.array([1, 2, 3, 0], np.uint32)
    y, z = kernel.onnx_graph([x, s, _blob(data)], _attrs(data, ["BitShift", "Greater"]))
    assert y.dtype == np.uint32 and z.dtype == np.bool_
    np.testing.assert_array_equal(y, x << s)
    np.testing.assert_array_equal(z, (x << s) > 9)


def test_reference_evaluator_when_onnxruntime_is_missing(monkeypatch):
    data = _model([helper.make_node("Einsum", ["a"], ["y"], equation="ii->i")],
                  [_vi("a", [4, 4])], [_vi("y", [4])])
    a = RNG.standard_normal((4, 4), np.float32)

    def no_ort(_data):
        raise ImportError("No module named 'onnxruntime'")

    monkeypatch.setattr(kernel, "_ort_session", no_ort)
    attrs = _attrs(data, ["Einsum"])
    (got,) = kernel.onnx_graph([a, _blob(data)], attrs)
    assert kernel.runner(_blob(data), attrs).engine == "reference"
    np.testing.assert_allclose(got, np.diag(a), rtol=1e-6)


def test_reference_where_onnxruntime_cannot_run_the_graph():
    """onnxruntime builds ConvInteger with a per-channel weight zero point but refuses to run
    it ("Non per-tensor quantization is not supported now"): the reference takes over."""
    data = _model([helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"])],
                  [_vi("x", [1, 1, 3, 3], TensorProto.UINT8)],
                  [_vi("y", [1, 2, 2, 2], TensorProto.INT32)],
                  [numpy_helper.from_array(np.arange(8, dtype=np.uint8).reshape(2, 1, 2, 2),
                                           "w"),
                   numpy_helper.from_array(np.array(1, np.uint8), "xz"),
                   numpy_helper.from_array(np.array([1, 2], np.uint8), "wz")])
    x = np.arange(9, dtype=np.uint8).reshape(1, 1, 3, 3)
    attrs = _attrs(data, ["ConvInteger"])
    (got,) = kernel.onnx_graph([x, _blob(data)], attrs)
    assert kernel.runner(_blob(data), attrs).engine == "reference"
    w = np.arange(8).reshape(2, 1, 2, 2) - np.array([1, 2]).reshape(2, 1, 1, 1)
    xs = x.astype(np.int64) - 1
    want = np.array([[[(xs[0, 0, i:i + 2, j:j + 2] * w[k, 0]).sum() for j in range(2)]
                      for i in range(2)] for k in range(2)])[None]
    np.testing.assert_array_equal(got, want)
    assert got.dtype == np.int32


def test_dft_runs_on_the_reference_first():
    data = _model([helper.make_node("DFT", ["x"], ["y"], axis=1)],
                  [_vi("x", [1, 16, 1])], [_vi("y", [1, 16, 2])])
    x = RNG.standard_normal((1, 16, 1), np.float32)
    attrs = _attrs(data, ["DFT"])
    (got,) = kernel.onnx_graph([x, _blob(data)], attrs)
    assert kernel.runner(_blob(data), attrs).engine == "reference"
    spec = np.fft.fft(x[0, :, 0].astype(np.float64))
    np.testing.assert_allclose(got[0, :, 0], spec.real, atol=1e-5)
    np.testing.assert_allclose(got[0, :, 1], spec.imag, atol=1e-5)


def test_no_runtime_knows_the_op():
    data = _model([helper.make_node("Frobnicate", ["x"], ["y"], domain="acme.ops")],
                  [_vi("x", [3])], [_vi("y", [3])], domains=["acme.ops"])
    with pytest.raises(UnsupportedOpError, match=r"OnnxGraph\(acme.ops.Frobnicate\).*'n0'"):
        kernel.onnx_graph([np.ones(3, np.float32), _blob(data)],
                          _attrs(data, ["acme.ops.Frobnicate"]))


def test_a_run_failure_names_the_op():
    data = _model([helper.make_node("Gather", ["x", "i"], ["y"])],
                  [_vi("x", [3]), _vi("i", [2], TensorProto.INT64)], [_vi("y", [2])])
    with pytest.raises(InvalidArgumentError, match=r"OnnxGraph\(Gather\)"):
        kernel.onnx_graph([np.ones(3, np.float32), np.array([0, 7], np.int64), _blob(data)],
                          _attrs(data, ["Gather"]))


def test_model_bytes_must_match_the_digest():
    data = _model([helper.make_node("Neg", ["x"], ["y"])], [_vi("x", [3])], [_vi("y", [3])])
    attrs = _attrs(data, ["Neg"])
    bad = _blob(data)
    bad[-3] ^= 0x55
    with pytest.raises(TensorError, match="sha256"):
        kernel.onnx_graph([np.ones(3, np.float32), bad], attrs)


def test_an_output_of_another_shape_than_declared_is_refused():
    data = _model([helper.make_node("Tile", ["x", "r"], ["y"])],
                  [_vi("x", [2]), _vi("r", [1], TensorProto.INT64)], [_vi("y", [4])])
    with pytest.raises(TensorError, match=r"came out \[6\]"):
        kernel.onnx_graph([np.ones(2, np.float32), np.array([3], np.int64), _blob(data)],
                          _attrs(data, ["Tile"]))


def test_a_network_with_an_onnx_graph_runs_in_a_session():
    """Through xrt: HostBackend forwards the op, its outputs typed as declared."""
    from host_backend import HostBackend
    from xrt import HostDevice, Session, Tensor

    data = _model([helper.make_node("Einsum", ["a", "b"], ["y"], equation="ij,jk->ik")],
                  [_vi("a", [2, 3]), _vi("b", [3, 4])], [_vi("y", [2, 4])])
    net = xir.Network("s")
    a = net.newValue(TensorType(np.float32, [2, 3]), "a")
    y = net.newValue(TensorType(np.float32, [2, 4]), "y")
    b = net.newParams(RNG.standard_normal((3, 4)).astype(np.float32), "b")
    model = net.newParams(_blob(data), "m.onnx")
    net.addOp(xir.OP_REGISTRY["Input"]([], [a]))
    net.addOp(make_onnx_graph([a, b], [y], model, onnx_ops=["Einsum"], opset=17))
    net.addOp(xir.OP_REGISTRY["Output"]([y], []))
    net.validate()
    assert HostBackend().isOpSupported(net.ops[1])
    sess = Session.Create([HostBackend], net.view(0), [HostDevice.Default()])
    sess.apply()
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    (out,) = sess.forward([Tensor(x)])
    np.testing.assert_allclose(np.asarray(out), x @ b.data, rtol=1e-5, atol=1e-6)

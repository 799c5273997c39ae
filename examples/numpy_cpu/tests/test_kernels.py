"""The kernels against onnxruntime (ONNX is NCHW with OIHW weights: transposed at the edges),
and a session that runs a small network where it should: Conv2d/Relu/Add/MaxPool2d on NumpyCpu,
the rest on the HostBackend."""

import numpy as np
import pytest
from xrt_numpy_cpu import NumpyCpuBackend
from xrt_numpy_cpu.kernels import conv2d, max_pool2d

import xir
from xrt import Device, Session, plugins


def _ort(node, inputs, inits):
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape) for n, a in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(a, n) for n, a in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, inputs)[0]


@pytest.mark.parametrize("k, stride, pad", [(3, 1, 1), (3, 2, 0), (1, 1, 0), (5, 2, 2)])
def test_conv2d_matches_onnxruntime(k, stride, pad):
    from onnx import helper

    rng = np.random.default_rng(k * 10 + stride)
    x = rng.standard_normal((2, 9, 11, 3)).astype(np.float32)
    w = rng.standard_normal((k, k, 3, 5)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    attrs = {"stride_height": stride, "stride_width": stride, "pad_top": pad,
             "pad_bottom": pad, "pad_left": pad, "pad_right": pad}
    (got,) = conv2d([x, w, b], attrs)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], strides=[stride, stride],
                            pads=[pad, pad, pad, pad])
    want = _ort(node, {"x": x.transpose(0, 3, 1, 2)},
                {"w": w.transpose(3, 2, 0, 1).copy(), "b": b})
    np.testing.assert_allclose(got, want.transpose(0, 2, 3, 1), rtol=1e-5, atol=1e-5)


def test_max_pool2d_matches_onnxruntime():
    from onnx import helper

    x = np.random.default_rng(1).standard_normal((1, 8, 7, 4)).astype(np.float32)
    attrs = {"pool_height": 3, "pool_width": 3, "stride_height": 2, "stride_width": 2,
             "pad_top": 1, "pad_bottom": 1, "pad_left": 1, "pad_right": 1}
    (got,) = max_pool2d([x], attrs)
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                            pads=[1, 1, 1, 1])
    want = _ort(node, {"x": x.transpose(0, 3, 1, 2)}, {})
    np.testing.assert_allclose(got, want.transpose(0, 2, 3, 1))


def _network():
    rng = np.random.default_rng(0)
    b = xir.NetworkBuilder("npcpu_demo")
    x = b.input([1, 12, 12, 3], layout="NHWC")
    y = b.conv2d(x, rng.standard_normal((3, 3, 3, 8)).astype(np.float32),
                 rng.standard_normal(8).astype(np.float32), pad_top=1, pad_bottom=1,
                 pad_left=1, pad_right=1)
    y = b.relu(y)
    z = b.add(y, b.conv2d(y, rng.standard_normal((1, 1, 8, 8)).astype(np.float32)))
    z = b.max_pool2d(z, pool_height=2, pool_width=2, stride_height=2, stride_width=2)
    b.output(b.sigmoid(z))  # no kernel here: the HostBackend runs it
    return b.build()


def test_session_places_ops_and_matches_the_host():
    net = _network()
    host = plugins.backend_class("Host")
    x = np.random.default_rng(1).standard_normal((1, 12, 12, 3)).astype(np.float32)
    sess = Session.Create([NumpyCpuBackend, host], net.view(0),
                          [Device.Open("npcpu://"), Device.Open("host://")])
    ref = Session.Create([host], net.view(0), [Device.Open("host://")])
    sess.apply()
    ref.apply()
    where = {op.op_type: type(b).name for op, b in
             ((op, sess.backendBindings()[op.op_id]) for op in net.ops)}
    assert where == {"Input": "Host", "Conv2d": "NumpyCpu", "Relu": "NumpyCpu",
                     "Add": "NumpyCpu", "MaxPool2d": "NumpyCpu", "Sigmoid": "Host",
                     "Output": "Host"}
    np.testing.assert_allclose(np.asarray(sess.forward([x])[0]),
                               np.asarray(ref.forward([x])[0]), rtol=1e-5, atol=1e-6)


def test_a_wrong_device_or_url_is_refused():
    from xrt import DeviceUrlError, InvalidArgumentError

    with pytest.raises(DeviceUrlError, match="takes no parameters"):
        Device.Open("npcpu://?threads=4")
    b = NumpyCpuBackend()
    with pytest.raises(InvalidArgumentError, match="npcpu://"):
        b.init(_network().view(0), Device.Open("host://"))

"""The model zoo (xcompile.zoo) and the ONNX exporter (xcompile.frontend.onnx_export).

Networks are compared three ways: the xrt host runtime (Session + HostBackend), onnxruntime on
the exported model, and the zoo's own numpy reference. The default run builds every network
once (module-scoped fixtures) and runs yolov5s forward only in the slow set.
"""

from __future__ import annotations

import numpy as np
import pytest

import xcompile.zoo as zoo
import xir
from xcompile.zoo import _reference

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from xcompile.frontend.onnx_export import OnnxExportError, export_onnx  # noqa: E402

PUBLISHED_PARAMS = {"resnet18": 11_689_512, "mobilenet_v2": 3_504_872, "yolov5s": 7_235_389}
PUBLISHED_MACS = {"resnet18": 1.82e9, "mobilenet_v2": 0.30e9, "yolov5s": 8.2e9}


@pytest.fixture(scope="module")
def nets() -> dict[str, xir.Network]:
    return {name: zoo.build(name) for name in zoo.names()}


def run_host(net: xir.Network, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """The network's outputs on the xrt host runtime (float kernels)."""
    from host_backend import HostBackend
    from xrt import HostDevice, Session, Tensor

    sess = Session.Create([HostBackend], net.view(0), [HostDevice.Default()])
    sess.apply()
    return [np.asarray(t) for t in sess.forward([Tensor(a) for a in inputs])]


def run_onnx(model, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """onnxruntime outputs of an exported model, brought back to xir's NHWC."""
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {i.name: (np.transpose(a, (0, 3, 1, 2)) if a.ndim == 4 else a)
            for i, a in zip(sess.get_inputs(), inputs)}
    return [np.transpose(o, (0, 2, 3, 1)) if o.ndim == 4 else o for o in sess.run(None, feed)]


# --- registry -------------------------------------------------------------------------------

def test_names() -> None:
    assert zoo.names() == ["tiny_cnn", "resnet18", "mobilenet_v2", "yolov5s"]


def test_unknown_name_lists_the_names() -> None:
    with pytest.raises(zoo.UnknownNetworkError, match="resnet18") as info:
        zoo.build("resnet19")
    assert isinstance(info.value, xir.XirError)
    with pytest.raises(xir.XirError, match="tiny_cnn"):
        zoo.calibration_set("vgg16")


# --- structure ------------------------------------------------------------------------------

@pytest.mark.parametrize("name,shapes", [
    ("tiny_cnn", [(1, 10)]),
    ("resnet18", [(1, 1000)]),
    ("mobilenet_v2", [(1, 1000)]),
    ("yolov5s", [(1, 80, 80, 255), (1, 40, 40, 255), (1, 20, 20, 255)]),
])
def test_builds_validates_and_shapes(nets, name: str, shapes) -> None:
    net = nets[name]
    net.validate()
    assert [tuple(v.shape) for v in net.outputs()] == shapes
    (inp,) = net.inputs()
    assert inp.dtype.layout.spec == "NHWC" and inp.shape[-1] == 3
    assert all(p.hasData() and np.all(np.isfinite(p.data)) for p in net.params())


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS))
def test_parameter_and_mac_counts_match_published(nets, name: str) -> None:
    assert zoo.param_count(nets[name]) == pytest.approx(PUBLISHED_PARAMS[name], rel=0.02)
    assert zoo.mac_count(nets[name]) == pytest.approx(PUBLISHED_MACS[name], rel=0.05)


def test_yolov5s_structure(nets) -> None:
    net = nets["yolov5s"]
    kinds = [op.op_type for op in net.ops]
    stem = next(op for op in net.ops if op.op_type == "Conv2d")
    assert stem.inputs[1].shape == (6, 6, 3, 32) and stem.attrs["pad_top"] == 2
    assert kinds.count("MaxPool2d") == 3 and kinds.count("Upsample") == 2
    assert kinds.count("Silu") == kinds.count("BatchNorm2d") == 57
    assert all(op.attrs["epsilon"] == pytest.approx(1e-3)
               for op in net.ops if op.op_type == "BatchNorm2d")


def test_input_size_and_batch() -> None:
    net = zoo.build("yolov5s", input_size=128, batch=2)
    assert [v.shape for v in net.outputs()] == [(2, 16, 16, 255), (2, 8, 8, 255),
                                               (2, 4, 4, 255)]
    assert zoo.build("resnet18", input_size=64).outputs()[0].shape == (1, 1000)
    with pytest.raises(ValueError, match="multiple of 32"):
        zoo.build("yolov5s", input_size=100)


# --- determinism ----------------------------------------------------------------------------

@pytest.mark.parametrize("name,size", [("tiny_cnn", None), ("resnet18", 64),
                                       ("mobilenet_v2", 64)])
def test_weights_are_deterministic_per_seed(name: str, size) -> None:
    a, b = zoo.build(name, seed=3, input_size=size), zoo.build(name, seed=3, input_size=size)
    c = zoo.build(name, seed=4, input_size=size)
    pa, pb, pc = a.params(), b.params(), c.params()
    assert [p.name for p in pa] == [p.name for p in pb]
    assert all(np.array_equal(x.data, y.data) for x, y in zip(pa, pb))
    assert not np.array_equal(pa[0].data, pc[0].data)


# --- calibration images ---------------------------------------------------------------------

def test_calibration_set_shapes_and_values() -> None:
    sets = zoo.calibration_set("resnet18", count=3, seed=1)
    assert len(sets) == 3
    for (img,) in sets:
        assert img.shape == (1, 224, 224, 3) and img.dtype == np.float32
        assert -2.2 < img.min() and img.max() < 2.7  # ImageNet-normalised pixels
    assert not np.array_equal(sets[0][0], sets[1][0])
    again = zoo.calibration_set("resnet18", count=3, seed=1)
    assert all(np.array_equal(x[0], y[0]) for x, y in zip(sets, again))
    (yolo,) = zoo.calibration_set("yolov5s", count=1, input_size=64, batch=2)[0]
    assert yolo.shape == (2, 64, 64, 3) and 0.0 <= yolo.min() and yolo.max() <= 1.0


def test_calibration_images_are_smooth() -> None:
    (img,) = zoo.calibration_set("tiny_cnn", count=1, input_size=128)[0]
    dx = np.diff(img[0], axis=1).std()
    assert dx < 0.3 * img.std()  # neighbouring pixels correlate, unlike white noise


# --- activations keep their scale ----------------------------------------------------------

@pytest.mark.parametrize("name", ["tiny_cnn", "resnet18", "mobilenet_v2"])
def test_activations_neither_explode_nor_vanish(nets, name: str) -> None:
    net = nets[name]
    bn_std = []

    def watch(op, ins):
        if op.op_type == "BatchNorm2d":
            z = (ins[0] - ins[3]) / np.sqrt(ins[4] + op.attrs["epsilon"])
            bn_std.append(float(z.std()))

    (out,) = _reference.run(net, zoo.calibration_set(name, 1, seed=5)[0], before_op=watch)
    assert 0.3 < min(bn_std) and max(bn_std) < 3.0
    assert 0.05 < out.std() < 5.0


@pytest.mark.parametrize("name,size,bound", [("tiny_cnn", None, 3.0), ("resnet18", 96, 5.0),
                                             ("mobilenet_v2", None, 5.0),
                                             ("yolov5s", 320, 15.0)])
def test_networks_are_noise_stable(name: str, size, bound: float) -> None:
    """Small input noise stays small, as in trained networks (measured: tiny 0.7, resnet18
    2.5, mobilenet_v2 2.9, yolov5s 9.4; mobilenet_v2 with zero-mean depthwise filters: 87)."""
    kw = {"input_size": size} if size else {}
    net = zoo.build(name, **kw)
    gain = zoo.noise_gain(net, zoo.calibration_set(name, 1, seed=1, **kw)[0])
    assert 0.05 < gain < bound


def test_noise_gain_detects_a_chaotic_network(monkeypatch) -> None:
    from xcompile.zoo import mobilenet_v2

    monkeypatch.setattr(mobilenet_v2, "DEPTHWISE_BLOB", 0.0)
    monkeypatch.setattr(mobilenet_v2, "RESIDUAL_GAMMA", 0.5)
    net = zoo.build("mobilenet_v2", input_size=128)
    assert zoo.noise_gain(net, zoo.calibration_set("mobilenet_v2", 1, seed=1,
                                                   input_size=128)[0]) > 20.0


# --- runtime and ONNX export ---------------------------------------------------------------

@pytest.mark.parametrize("name", ["tiny_cnn", "resnet18"])
def test_export_matches_host_runtime(nets, name: str, tmp_path) -> None:
    net = nets[name]
    model = export_onnx(net, str(tmp_path / f"{name}.onnx"))
    assert model.ir_version == 10 and (tmp_path / f"{name}.onnx").exists()
    (inp,) = model.graph.input
    assert [d.dim_value for d in inp.type.tensor_type.shape.dim] == \
        [1, 3, net.inputs()[0].shape[1], net.inputs()[0].shape[2]]  # NCHW like PyTorch
    inputs = zoo.calibration_set(name, 1, seed=2)[0]
    host = run_host(net, inputs)
    ref = _reference.run(net, inputs)
    got = run_onnx(model, inputs)
    for h, r, g in zip(host, ref, got):
        np.testing.assert_allclose(h, r, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(g, h, rtol=1e-3, atol=1e-4 * max(1.0, float(np.abs(h).max())))


def test_conv_nets_export_without_inner_transposes(nets) -> None:
    kinds = {n.op_type for n in export_onnx(nets["mobilenet_v2"]).graph.node}
    assert "Transpose" not in kinds and {"Conv", "BatchNormalization", "Clip"} <= kinds


def test_yolov5s_exports_small_input() -> None:
    net = zoo.build("yolov5s", input_size=64)
    model = export_onnx(net)
    outs = [[d.dim_value for d in o.type.tensor_type.shape.dim] for o in model.graph.output]
    assert outs == [[1, 255, 8, 8], [1, 255, 4, 4], [1, 255, 2, 2]]
    inputs = zoo.calibration_set("yolov5s", 1, input_size=64)[0]
    for g, r in zip(run_onnx(model, inputs), _reference.run(net, inputs)):
        np.testing.assert_allclose(g, r, rtol=1e-3, atol=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mobilenet_v2", "yolov5s"])
def test_export_matches_host_runtime_full_size(nets, name: str) -> None:
    net = nets[name]
    inputs = zoo.calibration_set(name, 1, seed=2)[0]
    host = run_host(net, inputs)
    for h, g in zip(host, run_onnx(export_onnx(net), inputs)):
        assert 0.05 < h.std() < 10.0
        np.testing.assert_allclose(g, h, rtol=1e-3, atol=1e-3 * max(1.0, float(np.abs(h).max())))


# --- exporter on single ops ---------------------------------------------------------------

def _export_and_compare(b: xir.NetworkBuilder, inputs: list[np.ndarray], opset: int = 17):
    net = b.build()
    got = run_onnx(export_onnx(net, opset=opset), inputs)
    want = run_host(net, inputs)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("attrs", [{}, {"max_value": 6.0}, {"alpha": 0.1},
                                   {"alpha": 0.2, "max_value": 1.5},
                                   {"threshold": 0.5, "alpha": 0.1}])
def test_relu_family(attrs) -> None:
    b = xir.NetworkBuilder("relu")
    x = b.input([1, 4, 4, 3], layout="NHWC")
    b.output(b.relu(x, **attrs))
    _export_and_compare(b, [np.linspace(-8, 8, 48, dtype=np.float32).reshape(1, 4, 4, 3)])


@pytest.mark.parametrize("opset", [13, 17, 21])
def test_shape_ops_and_axis_remapping(opset: int) -> None:
    rng = np.random.default_rng(0)
    b = xir.NetworkBuilder("shapes")
    x = b.input([1, 6, 6, 4], layout="NHWC")
    w = rng.normal(size=(3, 3, 4, 8)).astype(np.float32)
    y = b.conv2d(x, w, pad_top=1, pad_bottom=1, pad_left=1, pad_right=1)
    s1, s2 = b.split(y, axis=-1, sections=[3, 5])
    c = b.concat(b.hardswish(s2), s1, axis=3)
    sl = b.slice(c, begin=[0, 1, 0, 2], end=[1, 5, 6, 8], step=[1, 2, 1, 1])
    p = b.pad(sl, pad_before=[0, 1, 0, 0], pad_after=[0, 0, 2, 1], mode="constant", value=0.5)
    sm = b.softmax(p, axis=-1)
    r = b.resize(sm, out_height=5, out_width=7, mode="bilinear", coordinate_mode="half_pixel")
    t = b.transpose(r, perm=[0, 3, 1, 2])
    up = b.upsample(b.conv_transpose2d(y, rng.normal(size=(2, 2, 8, 3)).astype(np.float32),
                                       stride_height=2, stride_width=2), mode="nearest")
    m = b.matmul(b.reshape(b.avg_pool2d(up, pool_height=2, pool_width=2, stride_height=2,
                                        stride_width=2), shape=[0, -1]),
                 rng.normal(size=(5, 12 * 12 * 3)).astype(np.float32), transpose_b=True)
    b.output(t, b.sub(b.multiply(y, np.float32(2.0)), np.arange(8, dtype=np.float32)),
             b.unsqueeze(b.squeeze(m, axes=[0]), axes=[1]))
    _export_and_compare(b, [rng.normal(size=(1, 6, 6, 4)).astype(np.float32)], opset)


@pytest.mark.parametrize("op_type", ["AlignAxis", "PruneAxis", "Cast", "HardOp"])
def test_unsupported_ops_are_refused_by_name(op_type: str) -> None:
    b = xir.NetworkBuilder("bad")
    x = b.input([1, 4, 4, 3], layout="NHWC")
    if op_type == "AlignAxis":
        y = b.align_axis(x)
    elif op_type == "PruneAxis":
        y = b.prune_axis(x, size=2)
    else:
        y = b.op(op_type, [x], out_types=[x.dtype])
    b.output(y)
    with pytest.raises(OnnxExportError, match=op_type) as info:
        export_onnx(b.build(validate=False))
    assert isinstance(info.value, xir.XirError)


def test_old_opset_is_refused(nets) -> None:
    with pytest.raises(OnnxExportError, match="opset"):
        export_onnx(nets["tiny_cnn"], opset=11)

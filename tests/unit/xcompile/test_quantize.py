"""Optimize pass, calibration loading, quantize_network, fakeQf and the accuracy report."""

from __future__ import annotations

import json

import numpy as np
import pytest

import xcompile.zoo as zoo
import xir
from host_backend import HostBackend
from xcompile.passes import optimize
from xcompile.quant.calibrate import calibrate, load_calibration, run_float
from xcompile.quant.quantize import quantize_network
from xcompile.quant.report import accuracy_report, cosine
from xir.serialize.json import load_network
from xrt import HostDevice, Session, Tensor


def run(net, inputs, fake=False):
    sess = Session.Create([HostBackend], net.view(0), [HostDevice.Default()])
    if fake:
        sess.backends[0].setFakeQf(True)
    sess.apply()
    return [np.array(t) for t in sess.forward([Tensor(a) for a in inputs])]


@pytest.fixture(scope="module")
def tiny():
    net = zoo.build("tiny_cnn")
    cal = zoo.calibration_set("tiny_cnn", 6)
    return net, cal


@pytest.fixture(scope="module")
def tiny_q8(tiny):
    net, cal = tiny
    return quantize_network(net, cal, bits=8, method="kl")


# --- optimize -------------------------------------------------------------------------------

def test_optimize_folds_bn_and_relu_keeping_ids(tiny):
    net, cal = tiny
    before = [op.op_type for op in net.ops]
    opt = optimize(net)
    assert [op.op_type for op in net.ops] == before  # input untouched
    types = [op.op_type for op in opt.ops]
    assert "BatchNorm2d" not in types and types.count("Relu") == 0
    assert {op.op_id for op in opt.ops} <= {op.op_id for op in net.ops}
    assert [v.v_id for v in opt.outputs()] == [v.v_id for v in net.outputs()]
    stem = next(op for op in opt.ops if op.name == "stem.conv")
    assert stem.attrs["act"] == "relu" and len(stem.tags["fused_op_ids"]) == 2
    down = next(op for op in opt.ops if op.name == "down.conv")
    assert down.attrs["act_max"] == 6.0
    leaky = next(op for op in opt.ops if op.name == "branch2.conv")
    assert leaky.attrs["act_alpha"] == pytest.approx(0.1)
    for a, b in zip(run(net, cal[0]), run(opt, cal[0])):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_optimize_removes_noop_reshape_and_transpose():
    b = xir.NetworkBuilder("noop")
    x = b.input([1, 4, 4, 2], layout="NHWC")
    y = b.reshape(x, shape=[1, 4, 4, 2])
    y = b.transpose(y, perm=[0, 1, 2, 3])
    w = np.ones((1, 1, 2, 2), np.float32)
    y = b.conv2d(y, w)
    b.output(b.relu(y))
    opt = optimize(b.build())
    assert [op.op_type for op in opt.ops] == ["Input", "Conv2d", "Output"]
    assert opt.ops[1].inputs[0] is opt.inputs()[0]


# --- calibration sets -----------------------------------------------------------------------

def test_calibration_errors_name_file_and_input(tiny, tmp_path):
    net, cal = tiny
    good = cal[0][0]
    with pytest.raises(xir.CalibrationError, match="empty"):
        load_calibration([], net)
    with pytest.raises(xir.CalibrationError, match=r"sample 1: input 'input'.*shape"):
        load_calibration([good, good[:, :16]], net)
    with pytest.raises(xir.CalibrationError, match=r"input 'input'.*float64.*dtype"):
        load_calibration([good.astype(np.float64)], net)
    np.save(tmp_path / "a.npy", good)
    np.save(tmp_path / "b.npy", good[..., :2])
    with pytest.raises(xir.CalibrationError, match=r"b\.npy: input 'input'.*\[1, 32, 32, 3\]"):
        load_calibration(tmp_path, net)
    (tmp_path / "b.npy").write_bytes(b"not a numpy file")
    with pytest.raises(xir.CalibrationError, match=r"b\.npy.*cannot read") as exc:
        load_calibration(tmp_path, net)
    assert isinstance(exc.value, ValueError) and exc.value.file.endswith("b.npy")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(xir.CalibrationError, match="empty"):
        load_calibration(empty, net)


def test_calibration_folder_conventions(tiny, tmp_path):
    net, cal = tiny
    for k, (x,) in enumerate(cal[:3]):
        np.save(tmp_path / f"s{k}.npy", x)
    got = load_calibration(tmp_path, net)
    assert len(got) == 3 and np.array_equal(got[2][0], cal[2][0])
    sub = tmp_path / "nested"
    for k, (x,) in enumerate(cal[:2]):
        (sub / f"{k:03d}").mkdir(parents=True)
        np.save(sub / f"{k:03d}" / "input.npy", x)
    assert len(load_calibration(sub, net)) == 2
    assert len(load_calibration(iter(cal), net)) == len(cal)  # a generator


def test_calibration_from_images(tiny, tmp_path):
    pytest.importorskip("matplotlib")
    from matplotlib.image import imsave

    net, _ = tiny
    img = np.random.default_rng(0).random((40, 50, 3))
    imsave(tmp_path / "one.png", img)
    (x,), = load_calibration(tmp_path, net)
    assert x.shape == (1, 32, 32, 3) and x.dtype == np.float32
    assert 0.0 <= x.min() and x.max() <= 1.0


def test_calibrate_sees_every_value(tiny):
    net, cal = tiny
    opt = optimize(net)
    amax = calibrate(opt, cal[:2], "minmax")
    feats = {v.v_id for op in opt.ops for v in op.outputs}
    assert feats <= set(amax)
    assert amax[opt.inputs()[0].v_id] == pytest.approx(max(np.abs(x).max() for (x,) in cal[:2]))


# --- quantize_network -------------------------------------------------------------------------

def test_quantized_network_structure(tiny_q8):
    q = tiny_q8
    assert q.inputs()[0].dtype.element_dtype == xir.FP32
    assert all(v.dtype.element_dtype == xir.FP32 for v in q.outputs())
    first = q.inputs()[0].consumers[0]
    assert first.op_type == "Cast" and first.outputs[0].dtype.is_quantized()
    assert q.outputs()[0].producer.op_type == "Cast"
    for op in q.ops:
        if op.op_type == "Conv2d":
            w, b = op.inputs[1], op.inputs[2]
            assert w.dtype.element_dtype.storage == xir.INT8
            assert w.dtype.element_dtype.axis == 3
            assert w.dtype.element_dtype.scale.size == w.shape[3]
            assert np.abs(w.data).max() <= 127 and w.data.dtype == np.int8
            assert b.data.dtype == np.int32
        if op.op_type in ("Silu", "Sigmoid", "Hardswish"):
            assert op.is_quantized()
        if op.op_type == "Concat":  # scale shared by inputs and output
            scales = {float(v.dtype.element_dtype.scale[0]) for v in op.inputs + op.outputs}
            assert len(scales) == 1
        for v in op.outputs:
            assert "float_v_id" in v.tags


def test_quantized_network_roundtrips_json_raw(tiny_q8, tiny, tmp_path):
    q = tiny_q8
    q.save(tmp_path / "q.json")
    back = load_network(tmp_path / "q.json")
    assert [op.op_type for op in back.ops] == [op.op_type for op in q.ops]
    for a, b in zip(q.params(), back.params()):
        assert a.dtype == b.dtype and np.array_equal(a.data, b.data)
    x = tiny[1][0]
    for a, b in zip(run(q, x), run(back, x)):
        np.testing.assert_array_equal(a, b)


def _min_cos(net, q, samples):
    worst = 1.0
    for x in samples:
        for a, b in zip(run(net, x), run(q, x)):
            worst = min(worst, cosine(a, b))
    return worst


def test_tiny_cnn_int8_and_int16_accuracy(tiny, tiny_q8):
    net, cal = tiny
    test = zoo.calibration_set("tiny_cnn", 2, seed=5)
    assert _min_cos(net, tiny_q8, test) >= 0.99
    assert tiny_q8.tags["quantization"]["weight_rounding"] == "gptq"
    assert _min_cos(net, quantize_network(net, cal, bits=8), test) >= 0.99  # default: mse
    q16 = quantize_network(net, cal, bits=16, method="minmax")
    assert _min_cos(net, q16, test) >= 0.999
    conv = next(op for op in q16.ops if op.op_type == "Conv2d")
    assert conv.inputs[2].data.dtype == np.int64  # int16 layers: int64 bias


# --- mixed precision ----------------------------------------------------------------------------

def _bits(v) -> int:
    return v.dtype.element_dtype.storage.bits


def test_input_bits_16_gives_an_int16_stem_writing_int8(tiny, tmp_path):
    net, cal = tiny
    q = quantize_network(net, cal, bits=8, method="minmax", weight_rounding="nearest",
                         input_bits=16)
    ops = {op.name: op for op in q.ops}
    stem = ops["stem.conv"]
    x, w, b = stem.inputs
    assert (_bits(x), _bits(w), _bits(b)) == (16, 16, 64)
    assert _bits(stem.outputs[0]) == 8  # requantized to the network's precision
    assert _bits(ops["down.conv"].inputs[1]) == 8
    assert q.tags["quantization"]["op_bits"] == {str(stem.op_id): 16}
    assert q.tags["quantization"]["input_bits"] == 16
    test = zoo.calibration_set("tiny_cnn", 2, seed=5)
    assert _min_cos(net, q, test) >= 0.99
    q.save(tmp_path / "mixed.json")
    back = load_network(tmp_path / "mixed.json")
    for a, c in zip(run(q, test[0]), run(back, test[0])):
        np.testing.assert_array_equal(a, c)


def test_op_bits_raise_scale_groups_and_siblings(tiny):
    net, cal = tiny
    q = quantize_network(net, cal, bits=8, method="minmax", weight_rounding="nearest",
                         op_bits={"branch1.conv": 16})
    ops = {op.name: op for op in q.ops}
    # branch1 reads the MaxPool output, which shares its scale (and dtype) with the pool input
    assert _bits(ops["branch1.conv"].inputs[0]) == 16 and _bits(ops["pool"].inputs[0]) == 16
    assert _bits(ops["res"].outputs[0]) == 16            # the Add writes int16 directly
    assert _bits(ops["branch2.conv"].inputs[1]) == 16    # a sibling reader computes at 16
    assert _bits(ops["fuse"].inputs[0]) == 16            # res also feeds 'fuse': both its
    assert _bits(ops["up"].outputs[0]) == 16             # inputs (and the Upsample group)
    assert _bits(ops["branch1.act"].inputs[0]) == 8      # ... outputs go back to int8
    assert not any(op.op_type == "Cast" and all(v.dtype.element_dtype.is_quantized
                                                 for v in op.inputs + op.outputs)
                   for op in q.ops)  # precision changes inside rescaling ops, no int casts
    assert _min_cos(net, q, zoo.calibration_set("tiny_cnn", 2, seed=5)) >= 0.99
    assert sum(1 for op in q.ops if op.op_type == "Cast") == sum(
        1 for op in quantize_network(net, cal, bits=8, method="minmax",
                                     weight_rounding="nearest").ops if op.op_type == "Cast")


@pytest.mark.parametrize("kw,msg", [
    ({"op_bits": {"nope": 16}}, "does not have"),
    ({"op_bits": {"stem.bn": 16}}, "does not have"),   # folded into stem.conv
    ({"op_bits": {"stem.conv": 12}}, "raised"),
    ({"op_bits": {"stem.conv": 8}, "bits": 16}, "raised"),
    ({"input_bits": 8, "bits": 16}, "input_bits"),
    ({"op_bits": "stem.conv"}, "must map"),
    ({"op_bits": {"stem.conv": "16"}}, "raised"),
])
def test_mixed_precision_errors_name_the_field(tiny, kw, msg):
    net, cal = tiny
    with pytest.raises(xir.QuantizationError, match=msg) as e:
        quantize_network(net, cal[:1], weight_rounding="nearest", method="minmax", **kw)
    assert e.value.field in ("op_bits", "input_bits")


def test_fake_qf_differs_and_is_closer_to_float(tiny, tiny_q8):
    net, _ = tiny
    x = zoo.calibration_set("tiny_cnn", 1, seed=9)[0]
    f = run(net, x)[0]
    exact = run(tiny_q8, x)[0]
    fake = run(tiny_q8, x, fake=True)[0]
    assert not np.array_equal(exact, fake)
    assert np.abs(fake - f).mean() < np.abs(exact - f).mean()
    assert cosine(fake, f) > cosine(exact, f)


def _row_op_net(row_op: str, axis: int = -1, then_conv: bool = True):
    r = np.random.default_rng(0)
    b = xir.NetworkBuilder("sm")
    x = b.input([1, 4, 4, 3], layout="NHWC")
    y = b.conv2d(x, r.normal(0, 0.5, (3, 3, 3, 8)).astype(np.float32), pad_top=1,
                 pad_bottom=1, pad_left=1, pad_right=1)
    if row_op == "Softmax":
        y = b.softmax(y, axis=axis)
    else:
        gamma = r.normal(1, 0.1, 8 if axis == -1 else (4, 4, 8)).astype(np.float32)
        y = b.layer_norm(y, gamma, axis=axis)
    if then_conv:
        y = b.conv2d(y, r.normal(0, 0.5, (1, 1, 8, 4)).astype(np.float32))
    b.output(y)
    net = b.build()
    cal = [[r.normal(0, 1, (1, 4, 4, 3)).astype(np.float32)] for _ in range(4)]
    return net, cal


@pytest.mark.parametrize("row_op", ["Softmax", "LayerNorm"])
def test_row_ops_between_integer_ops_compute_in_integers(row_op):
    """Softmax / LayerNorm over the last axis read and write codes (xir.quant.rownorm) when
    integer ops read their output: no Casts around them, nothing left float."""
    net, cal = _row_op_net(row_op)
    q = quantize_network(net, cal, bits=8, method="minmax")
    op = next(op for op in q.ops if op.op_type == row_op)
    assert op.is_quantized()
    assert op.inputs[0].producer.op_type == "Conv2d"
    assert op.outputs[0].consumers[0].op_type == "Conv2d"
    assert q.tags["quantization"]["float_ops"] == []
    assert _min_cos(net, q, cal) >= 0.99


@pytest.mark.parametrize("row_op,axis,then_conv", [("Softmax", -1, False),
                                                   ("LayerNorm", -1, False),
                                                   ("Softmax", 1, True),
                                                   ("LayerNorm", 1, True)])
def test_row_ops_stay_float_with_casts_otherwise(row_op, axis, then_conv):
    """A softmax whose probabilities go out of the network stays float (never re-quantized on
    the way out), and a row op over another axis has no integer form: Casts around it."""
    net, cal = _row_op_net(row_op, axis, then_conv)
    q = quantize_network(net, cal, bits=8, method="minmax")
    op = next(op for op in q.ops if op.op_type == row_op)
    assert not op.is_quantized()
    assert op.inputs[0].producer.op_type == "Cast"
    assert op.outputs[0].consumers[0].op_type in ("Cast", "Output")
    assert q.tags["quantization"]["float_ops"] == [op.op_id]
    assert _min_cos(net, q, cal) >= 0.99


def test_accuracy_report_json(tiny, tiny_q8):
    net, cal = tiny
    rep = accuracy_report(net, tiny_q8, cal[:2])
    d = json.loads(rep.to_json())
    assert d["network"] == "tiny_cnn" and d["bits"] == 8 and d["method"] == "kl"
    assert set(d) == {"network", "bits", "method", "outputs", "parts", "collapsed", "layers"}
    assert [p["kind"] for p in d["parts"]] == ["value"] and d["collapsed"] == []
    assert len(d["outputs"]) == 1 and d["outputs"][0]["cosine"] > 0.99
    row = d["layers"][0]
    assert {"op_id", "op_type", "name", "v_id", "float_v_id", "cosine", "max_abs_err",
            "mean_abs_err", "rel_err", "sat_rate", "shape", "dtype", "alone"} <= set(row)
    assert len(rep.rows) >= 15 and all(-1.0 <= r.cosine <= 1.0 + 1e-9 for r in rep.rows)
    from rich.console import Console

    console = Console(record=True, width=160)
    rep.print(console)
    assert "logits" in console.export_text()


def test_alone_cosine_localises_a_damaged_layer(tiny, tmp_path):
    """`alone` runs each op on the float network's values: it equals the entire cosine where
    the inputs are the network's own (the stem), and it points at a damaged layer while the
    entire cosine drops for every layer after it."""
    net, cal = tiny
    q = quantize_network(net, cal, bits=8, method="minmax", weight_rounding="nearest")
    q.save(tmp_path / "q.json")
    bad = load_network(tmp_path / "q.json")
    w = next(op for op in bad.ops if op.name == "pw.conv").inputs[1]
    codes = np.array(w.data)
    codes[..., ::2] = 0  # half the output channels lose their weights
    w.setData(codes)
    test = zoo.calibration_set("tiny_cnn", 2, seed=3)
    good_rows = {r.name: r for r in accuracy_report(net, q, test).rows}
    rows = {r.name: r for r in accuracy_report(net, bad, test).rows}
    assert rows["stem.conv"].alone == pytest.approx(rows["stem.conv"].cosine, abs=1e-12)
    assert rows["input.cast"].alone is None
    assert rows["pw.conv"].alone < 0.9 < good_rows["pw.conv"].alone
    assert list(accuracy_report(net, bad, test).suggest_op_bits(1)) == ["pw.conv"]
    for name in ("res", "branch1.conv", "fuse", "fc"):  # after the damage
        assert rows[name].cosine < good_rows[name].cosine - 1e-3
        assert rows[name].alone == pytest.approx(good_rows[name].alone, abs=1e-12)


def test_mse_observer_and_gptq():
    from xcompile.quant.gptq import gptq_quantize
    from xcompile.quant.observers import MSEObserver

    r = np.random.default_rng(0)
    x = r.standard_t(4, 100000)  # heavy tails: the MSE threshold clips below max |x|
    obs = MSEObserver()
    obs.update(x)
    assert 0.2 * np.abs(x).max() < obs.amax() < np.abs(x).max()
    assert MSEObserver(margin=2.0).amax() == 0.0
    # GPTQ: output error ||X dw||^2 no worse than nearest rounding, codes on the same grid
    xs = r.normal(size=(4000, 16)) + 3.0 * r.normal(size=(4000, 1))  # correlated inputs
    w = r.normal(size=(16, 8))
    s = np.abs(w).max(axis=0) / 127
    q = gptq_quantize(w, s, xs.T @ xs, 127)
    near = np.round(w / s)
    assert np.abs(q).max() <= 127
    err = lambda c: np.sum((xs @ (c * s - w)) ** 2)  # noqa: E731
    assert err(q) < err(near)


# --- zoo figures (heavy) -----------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("name,bits,method,floor", [
    ("resnet18", 8, "kl", 0.99),
    ("resnet18", 8, "mse", 0.99),
    ("resnet18", 16, "minmax", 0.999),
    ("mobilenet_v2", 8, "mse", 0.99),
    ("mobilenet_v2", 8, "kl", 0.99),
    ("mobilenet_v2", 16, "minmax", 0.999),
])
def test_zoo_classifier_accuracy(name, bits, method, floor):
    net = zoo.build(name)
    q = quantize_network(net, zoo.calibration_set(name, 8), bits=bits, method=method)
    assert _min_cos(net, q, zoo.calibration_set(name, 2, seed=1)) >= floor


@pytest.mark.slow
# Held-out images (seed 1), 4 calibration images; figures in docs/quantization.md.
@pytest.mark.parametrize("bits,method,floor", [(8, "minmax", 0.99), (16, "minmax", 0.999)])
def test_yolov5s_accuracy(bits, method, floor):
    net = zoo.build("yolov5s")
    q = quantize_network(net, zoo.calibration_set("yolov5s", 4), bits=bits, method=method)
    rep = accuracy_report(net, q, zoo.calibration_set("yolov5s", 1, seed=1))
    print({o["name"]: round(o["cosine"], 5) for o in rep.outputs})
    assert min(o["cosine"] for o in rep.outputs) >= floor


def test_probabilities_are_calibrated_by_their_range():
    """Attention: softmax probabilities feeding a Matmul. With the default KL method the
    softmax output is still calibrated by its range (minmax), so the largest probabilities are
    not clipped, and the network keeps its output."""
    rng = np.random.default_rng(3)
    b = xir.NetworkBuilder("attn")
    x = b.input([1, 16, 32])
    s = b.softmax(b.matmul(x, (rng.normal(0, 0.6, (32, 16))).astype(np.float32)), axis=-1)
    b.output(b.matmul(s, rng.normal(0, 1, (16, 8)).astype(np.float32)))
    net = b.build()
    samples = [[rng.normal(0, 1, (1, 16, 32)).astype(np.float32)] for _ in range(4)]
    q = quantize_network(net, samples, method="kl")
    sm = next(op for op in net.ops if op.op_type == "Softmax").outputs[0]
    probs: list[np.ndarray] = []
    run_float(net, samples, lambda v, a: probs.append(a) if v.v_id == sm.v_id else None)
    casts = [v for op in q.ops for v in op.outputs
             if int(v.tags.get("float_v_id", -1)) == sm.v_id and v.dtype.element_dtype.is_quantized]
    assert casts, "the softmax output is quantized for the Matmul reading it"
    el = casts[0].dtype.element_dtype
    assert float(el.scale[0]) * 127 >= max(float(p.max()) for p in probs) * 0.999


def test_quant_report_shows_onnxruntime_int8_beside_ours(tmp_path):
    """`xrt quant-report --onnx MODEL` adds onnxruntime's quantize_static output cosine."""
    from onnx import TensorProto, helper, numpy_helper

    from xcompile.pipeline import DEFAULTS, compile_model
    from xrt.cli import main

    rng = np.random.default_rng(4)
    w = rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"])], "small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = tmp_path / "small.onnx"
    path.write_bytes(model.SerializeToString())
    cal = tmp_path / "cal"
    cal.mkdir()
    for k in range(3):
        np.save(cal / f"{k}.npy", rng.normal(0, 1, (1, 3, 8, 8)).astype(np.float32))
    out = compile_model(dict(DEFAULTS, model=str(path), calib=str(cal), output=str(tmp_path),
                             name="small"))
    report = tmp_path / "r.json"
    assert main(["quant-report", out["optimized"], out["quantized"], "--calib", str(cal),
                 "--onnx", str(path), "--json", str(report)]) == 0
    outs = json.loads(report.read_text())["outputs"]
    assert 0.9 < outs[0]["onnxruntime_int8"] <= 1.0 and outs[0]["cosine"] > 0.99


def test_raisable_layers_are_the_ones_reading_8_bit_codes(tiny):
    """Raising pw.conv widens the value it reads, so dw.conv (which writes it) computes at 8 bits
    and writes 16: it is raisable, pw.conv (16-bit in, 8-bit out for its 8-bit reader) is not."""
    net, cal = tiny
    q = quantize_network(net, cal[:2], bits=8, method="minmax", weight_rounding="nearest",
                         op_bits={"pw.conv": 16})
    rows = {r.name: r for r in accuracy_report(net, q, cal[:1]).rows}
    assert rows["dw.conv"].dtype.endswith("(16)") and rows["dw.conv"].in_bits == 8
    assert rows["pw.conv"].dtype.endswith("(8)") and rows["pw.conv"].in_bits == 16
    names = {r.name for r in accuracy_report(net, q, cal[:1]).raisable()}
    assert "dw.conv" in names and "pw.conv" not in names and "stem.conv" in names


def test_probe_samples_vary_image_inputs_only():
    from xcompile.quant.probes import probe_samples

    img = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    vec = np.arange(6, dtype=np.float32)
    probe = probe_samples([[img, vec]] * 3)
    assert len(probe) == 6
    np.testing.assert_array_equal(probe[3][0], img[..., ::-1])
    np.testing.assert_array_equal(probe[4][0], img[..., ::-1, :])
    np.testing.assert_array_equal(probe[5][0], np.roll(img, 2, -1))
    assert all(p[1] is vec for p in probe)
    assert len(probe_samples([[vec]] * 3)) == 3  # nothing to vary

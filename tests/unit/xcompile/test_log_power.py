"""A log-power spectrum computed in the log domain (`xcompile.passes.log_power`,
`xcompile.quant.log_domain`, docs/quantization.md section 8): keras2onnx's DNSMOS front end
(an STFT written as two rank-3 Convs, ``x * x`` of each, their sum, Sqrt then Pow 2, Max with
1e-12, Log, Div by ln 10) rewritten by the optimize stage into the same values from the
parts' magnitudes, its ops computing in 16 bits once quantized; against onnxruntime's float run
on speech-like audio."""

from __future__ import annotations

import numpy as np
import pytest
from field_nets import audio

from xcompile.passes import optimize
from xcompile.passes.log_power import match_log_power
from xcompile.quant.calibrate import run_float
from xcompile.quant.capability import integer_ops
from xcompile.quant.log_domain import LOG_POWER, log_domain_bits
from xcompile.quant.quantize import quantize_network
from xcompile.quant.report import cosine

pytest.importorskip("onnxruntime")

HOP, FRAMES, BINS = 32, 60, 33  # frames of 2 * HOP samples, hop HOP: BINS = HOP + 1
SAMPLES = HOP * (FRAMES + 1)


def _stft_kernels() -> tuple[np.ndarray, np.ndarray]:
    """keras' learned STFT initialised as the DFT of a Hann window: (BINS, 2 HOP, 1) each."""
    n = 2 * HOP
    t = np.arange(n)
    win = 0.5 - 0.5 * np.cos(2 * np.pi * t / n)
    k = np.arange(BINS)[:, None]
    re = (win * np.cos(2 * np.pi * k * t / n)).astype(np.float32)[:, :, None]
    im = (-win * np.sin(2 * np.pi * k * t / n)).astype(np.float32)[:, :, None]
    return re, im


def dnsmos_like(rng: np.random.Generator, extra_reader: bool = False):
    """DNSMOS P.835's front end and a small head as keras2onnx writes them (opset 12): the
    waveform cut into overlapping frames (two Slices, Reshapes, a Concat), the STFT as Convs
    on (N, C, L) with NWC Transposes around them, the log power in ten steps, then Conv 3x3 +
    Relu, MaxPool, Conv, global max over time and frequency, a dense head of three scores.
    `extra_reader`: the power is also a network output (the rewrite must not take it)."""
    from onnx import TensorProto, helper, numpy_helper

    re, im = _stft_kernels()
    inits = {
        "s0": np.array([0, 0], np.int64), "e0": np.array([1, HOP * FRAMES], np.int64),
        "s1": np.array([0, HOP], np.int64), "e1": np.array([1, SAMPLES], np.int64),
        "ax": np.array([0, 1], np.int64), "shape": np.array([-1, FRAMES, HOP], np.int64),
        "k_re": re, "k_im": im, "two": np.array(2.0, np.float32),
        "floor": np.array(1e-12, np.float32), "ln10": np.array(np.log(10.0), np.float32),
        "w1": (rng.normal(0, np.sqrt(2 / 9), (8, 1, 3, 3)) * 0.5).astype(np.float32),
        "b1": rng.normal(0.5, 0.1, 8).astype(np.float32),
        "w2": rng.normal(0, np.sqrt(2 / 72), (8, 8, 3, 3)).astype(np.float32),
        "b2": rng.normal(0, 0.05, 8).astype(np.float32),
        "wd": rng.normal(0, np.sqrt(1 / 8), (8, 3)).astype(np.float32),
        "bd": np.array([3.0, 2.5, 2.8], np.float32),
    }
    n = helper.make_node
    nodes = [
        n("Slice", ["x", "s0", "e0", "ax"], ["c0"]), n("Slice", ["x", "s1", "e1", "ax"], ["c1"]),
        n("Reshape", ["c0", "shape"], ["r0"]), n("Reshape", ["c1", "shape"], ["r1"]),
        n("Concat", ["r0", "r1"], ["frames"], axis=2),
        n("Transpose", ["frames"], ["t_re"], perm=[0, 2, 1]),
        n("Transpose", ["frames"], ["t_im"], perm=[0, 2, 1]),
        n("Conv", ["t_re", "k_re"], ["conv_re"], kernel_shape=[1], auto_pad="VALID"),
        n("Conv", ["t_im", "k_im"], ["conv_im"], kernel_shape=[1], auto_pad="VALID"),
        n("Transpose", ["conv_re"], ["re"], perm=[0, 2, 1]),
        n("Transpose", ["conv_im"], ["im"], perm=[0, 2, 1]),
        n("Mul", ["re", "re"], ["re2"]), n("Mul", ["im", "im"], ["im2"]),
        n("Add", ["re2", "im2"], ["power"]), n("Sqrt", ["power"], ["mag"]),
        n("Pow", ["mag", "two"], ["pow"]), n("Max", ["floor", "pow"], ["floored"]),
        n("Log", ["floored"], ["ln"]), n("Div", ["ln", "ln10"], ["log10"]),
        n("Unsqueeze", ["log10"], ["u"], axes=[3]),
        n("Transpose", ["u"], ["img"], perm=[0, 3, 1, 2]),
        n("Conv", ["img", "w1", "b1"], ["c1o"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        n("Relu", ["c1o"], ["a1"]),
        n("MaxPool", ["a1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        n("Conv", ["p1", "w2", "b2"], ["c2o"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        n("Relu", ["c2o"], ["a2"]),
        n("Transpose", ["a2"], ["nhwc"], perm=[0, 2, 3, 1]),
        n("ReduceMax", ["nhwc"], ["g"], axes=[1, 2], keepdims=0),
        n("MatMul", ["g", "wd"], ["d"]), n("Add", ["d", "bd"], ["y"]),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])]
    if extra_reader:
        outputs.append(helper.make_tensor_value_info("power", TensorProto.FLOAT,
                                                     [1, FRAMES, BINS]))
    graph = helper.make_graph(
        nodes, "dnsmos_like", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                              [1, SAMPLES])],
        outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)],
                              producer_name="keras2onnx")
    model.ir_version = 7
    return model


def _speech(count: int, seed: int) -> list[np.ndarray]:
    return [a.reshape(1, SAMPLES) for a in audio(SAMPLES, count, seed)]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """The model, imported; its path."""
    from xcompile.quant.qdq import import_qdq

    path = tmp_path_factory.mktemp("dnsmos") / "dnsmos_like.onnx"
    path.write_bytes(dnsmos_like(np.random.default_rng(5)).SerializeToString())
    return import_qdq(str(path), {"x": [1, SAMPLES]}, name="dnsmos_like"), path


def _ort(path, x: np.ndarray) -> list[np.ndarray]:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})


def _inputs() -> list[np.ndarray]:
    """Speech-like audio, digital silence, and speech with a silent stretch (the imaginary
    parts at 0 Hz and Nyquist are exactly 0 on every input)."""
    speech = _speech(2, 11)
    gap = speech[0].copy()
    gap[:, : SAMPLES // 3] = 0.0
    return speech + [np.zeros((1, SAMPLES), np.float32), gap]


def test_the_log_power_chain_is_rewritten_with_the_same_values(model):
    net, path = model
    opt = optimize(net)
    ops = {op.op_id: op for op in opt.ops}
    new = [op for op in opt.ops if op.tags.get("decomposed") == LOG_POWER]
    assert sorted(op.op_type for op in new) == sorted(
        ["Unary"] * 5 + ["Binary"] * 5 + ["Add"] * 3 + ["Sub"])
    assert sorted(op.attrs["func"] for op in new if op.op_type == "Unary") == \
        ["abs", "abs", "log", "log", "softplus"]
    # no square, no Sqrt, no linear power left; the floor is now log(1e-12)
    assert not any(op.op_type in ("Multiply", "Sqrt", "Power") or
                   op.attrs.get("func") == "sqrt" for op in opt.ops)
    floor = next(op for op in new if any(c.tags.get("decomposed") != LOG_POWER
                                         for c in op.outputs[0].consumers))
    assert floor.op_type == "Binary" and floor.attrs["func"] == "max"
    assert float(np.asarray(floor.inputs[1].data).ravel()[0]) == pytest.approx(np.log(1e-12))
    assert all(ops.get(op.op_id) is op for op in new)
    for x in _inputs():
        want = _ort(path, x)[0]
        got = np.asarray(run_float(opt, [[x]], lambda v, a: None)[0][0])
        assert np.isfinite(got).all()
        np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-5, atol=1e-5)


def test_a_power_read_elsewhere_is_left_alone(tmp_path):
    from xcompile.quant.qdq import import_qdq

    path = tmp_path / "m.onnx"
    path.write_bytes(dnsmos_like(np.random.default_rng(5), extra_reader=True)
                     .SerializeToString())
    opt = optimize(import_qdq(str(path), {"x": [1, SAMPLES]}))
    assert not any(op.tags.get("decomposed") == LOG_POWER for op in opt.ops)
    log = next(op for op in opt.ops if op.op_type == "Unary" and op.attrs["func"] == "log")
    assert match_log_power(log, {v.v_id for v in opt.outputs()}) is None


def test_int8_with_the_chain_in_16_bits_follows_onnxruntime(model, monkeypatch):
    """The default int8 quantization: the rewritten ops compute in 16 bits (the STFT parts
    they read are int16, written by int8 convolutions), every output within 0.99 of
    onnxruntime's on held-out speech; the same network without the rewrite loses the quiet
    bins (its linear power in int8) and the scores with them."""
    import xcompile.passes.stage as stage

    net, path = model
    cal = [[x] for x in _speech(4, 0)]
    held = _speech(3, 21)
    q = quantize_network(net, cal)
    opt = optimize(net)
    ints = integer_ops(opt)
    raised = log_domain_bits(opt, ints, 8)
    assert len(raised) == 14 and set(raised) <= {int(k) for k in
                                                 q.tags["quantization"]["op_bits"]}
    assert log_domain_bits(opt, ints, 16) == {}
    for op in q.ops:
        if op.tags.get("decomposed") == LOG_POWER:
            assert all(v.dtype.element_dtype.storage.bits == 16 for v in op.feature_inputs())
    convs = [op for op in q.ops if op.op_type == "Conv2d" and op.outputs[0].consumers and
             op.outputs[0].consumers[0].tags.get("decomposed") == LOG_POWER]
    assert len(convs) == 2
    for op in convs:
        assert op.inputs[0].dtype.element_dtype.storage.bits == 8
        assert op.outputs[0].dtype.element_dtype.storage.bits == 16
    got = [np.asarray(o[0]) for o in run_float(q, [[x] for x in held], lambda v, a: None)]
    cos = [cosine(g, _ort(path, x)[0]) for g, x in zip(got, held)]
    assert min(cos) >= 0.99, cos

    # the cause, where the convolutions read it: the log spectrum
    spectrum = _spectrum_cosines(opt, q, held)
    assert min(spectrum) >= 0.995, spectrum
    monkeypatch.setattr(stage, "fold_log_power", lambda *a: False)
    q8 = quantize_network(net, cal)
    assert not any(op.tags.get("decomposed") == LOG_POWER for op in q8.ops)
    spectrum8 = _spectrum_cosines(optimize(net), q8, held)
    assert max(spectrum8) < 0.95, spectrum8
    got8 = [np.asarray(o[0]) for o in run_float(q8, [[x] for x in held], lambda v, a: None)]
    cos8 = [cosine(g, _ort(path, x)[0]) for g, x in zip(got8, held)]
    assert min(cos8) < min(cos) - 0.002, (cos8, cos)


def _spectrum_cosines(opt, q, held: list[np.ndarray]) -> list[float]:
    """Per input: the cosine of the integer network's log spectrum (the first 3x3
    convolution's input, read back from its codes) against the float network's."""
    conv = next(op for op in q.ops if op.op_type == "Conv2d" and
                tuple(op.inputs[1].shape[:2]) == (3, 3))
    v = conv.inputs[0]
    fid = v.tags["float_v_id"]
    scale = float(v.dtype.element_dtype.scale[0])
    got: list[np.ndarray] = []
    want: list[np.ndarray] = []
    run_float(q, [[x] for x in held], lambda u, a: got.append(np.asarray(a, np.float64) * scale)
              if u.v_id == v.v_id else None)
    run_float(opt, [[x] for x in held], lambda u, a: want.append(np.asarray(a, np.float64))
              if u.v_id == fid else None)
    assert len(got) == len(want) == len(held)
    return [cosine(g, w) for g, w in zip(got, want)]


@pytest.mark.parametrize("target,backend,stage", [("zg330", "ZG330", "ZG"),
                                                  ("buyi", "Buyi", "BY")])
def test_the_log_domain_chain_runs_on_the_chips(model, tmp_path, target, backend, stage):
    """Compiled with the defaults: every op of the rewritten chain (Abs / Log / Softplus
    tables, Max / Min, Add and Sub, an Add of a value to itself) runs inside HardOps,
    bit-exact against the integer reference, within 0.99 of onnxruntime's float run."""
    from corpus import load_stage, run_on_chip, run_reference

    from xcompile.pipeline import DEFAULTS, compile_model

    _, path = model
    (tmp_path / "cal").mkdir()
    for k, x in enumerate(_speech(4, 0)):
        np.save(tmp_path / "cal" / f"{k}.npy", x)
    written = compile_model(dict(DEFAULTS, model=str(path), target=target,
                                 calib=str(tmp_path / "cal"), output=str(tmp_path / "out"),
                                 name="m", input_shape={"x": [1, SAMPLES]}))
    net = load_stage(written[stage])
    adapted = load_stage(written["adapted"])
    chain = {op.op_id for op in adapted.ops if op.tags.get("decomposed") == LOG_POWER}
    assert len(chain) == 14
    on_chip = {i for op in net.ops if op.op_type == "HardOp" for i in op.origin_ops_id}
    assert chain <= on_chip
    x = _speech(1, 23)[0]
    got, bound, npu = run_on_chip(net, backend, target, x)
    assert all(isinstance(bound[op.op_id], npu) for op in net.ops if op.op_type == "HardOp")
    assert got.tobytes() == run_reference(written["adapted"], x).tobytes()
    assert cosine(got, _ort(path, x)[0]) >= 0.99

"""Networks from other fields (tests/support/field_nets.py: OCR, speech, audio, control flow,
segmentation, super-resolution, ViT, EfficientNet, pre-quantized QDQ): each imports, compiles
for both chips, deploys, runs bit-exactly against the integer reference and within a cosine of
0.99 of onnxruntime's float run (per output part, `xcompile.quant.parts`), with its ops where
they belong: the listed op types inside HardOps on the chip, the listed ones on the host, every
host op with its reason."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from corpus import load_stage, run_on_chip, run_reference, wheels_or_skip
from field_nets import FIELD_NETS, qdq_model

from xcompile.pipeline import DEFAULTS, compile_model
from xcompile.quant.parts import compare_parts, format_parts, output_parts, worst
from xcompile.quant.report import cosine

pytest.importorskip("onnxruntime")

CHIPS = {"zg330": ("ZG330", "ZG"), "buyi": ("Buyi", "BY")}
#: name -> (op types of the adapted network that must run inside HardOps, op types that must
#: stay on the host). Recurrences and control flow stay on the host by design; the input
#: projections of LSTM/GRU (a Matmul over every timestep) run on the chip.
WHERE = {
    "torch_crnn_ocr": ({"Conv2d", "MaxPool2d", "Matmul"}, {"LSTMRecurrence"}),
    "torch_gru_kws": ({"Conv2d", "Matmul"}, {"GRURecurrence"}),
    "torch_melspec": ({"Conv2d", "Matmul"}, set()),
    "keras_audio_cnn": ({"Conv2d"}, set()),
    "onnx_vad_if_loop": ({"Conv2d"}, {"OnnxGraph"}),
    "onnx_vad_loop_scan": ({"Conv2d"}, {"OnnxGraph"}),
    "torch_unet": ({"Conv2d", "ConvTranspose2d", "Concat", "MaxPool2d"}, set()),
    "torch_espcn_sr": ({"Conv2d", "Tanh"}, set()),
    "torch_vit_tiny_block": ({"Conv2d", "Matmul", "Softmax", "LayerNorm", "Gelu"}, set()),
    "torch_efficientnet_swish_se": ({"Conv2d", "Silu", "Sigmoid", "Multiply", "Add",
                                     "AvgPool2d"}, set()),
}
#: ops that never stay on the host in any of these networks (a LayerNorm or Softmax may: where
#: a float op reads it, docs/quantization.md "What stays float")
NEVER_HOST = {"Conv2d", "ConvTranspose2d", "Silu", "Sigmoid", "Tanh", "Gelu"}
#: cases that cannot pass yet, with the precise reason (strict: they must fail)
XFAIL: dict[str, str] = {}


def compile_field(name: str, target: str, tmp_path: Path, model=None) -> dict:
    """Build `name`'s model (or take `model`), calibrate on 4 of its inputs, compile for
    `target`; returns the paths, the generated network and the compile's wall time."""
    fn = FIELD_NETS[name]
    model = model if model is not None else fn.build(np.random.default_rng(7))
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(model.SerializeToString())
    cal = tmp_path / "cal"
    cal.mkdir(exist_ok=True)
    for k, x in enumerate(fn.inputs(4, 0)):
        np.save(cal / f"{k}.npy", x)
    t0 = time.perf_counter()
    written = compile_model(dict(DEFAULTS, model=str(path), target=target, calib=str(cal),
                                 output=str(tmp_path / "out"), name=name,
                                 input_shape={"x": list(fn.shape)}))
    seconds = time.perf_counter() - t0
    return {"path": path, "written": written, "seconds": seconds,
            "net": load_stage(written[CHIPS[target][1]])}


def placement(net, adapted, target: str) -> tuple[set[str], dict[str, str]]:
    """The adapted op types inside HardOps, and every host op's `type#id` -> reason."""
    types = {op.op_id: op.op_type for op in adapted.ops}
    chip = {types[i] for op in net.ops if op.op_type == "HardOp" for i in op.origin_ops_id}
    reasons = net.tags[target]["host_ops"]
    host = {f"{op.op_type}#{op.op_id}": reasons.get(str(op.op_id), "") for op in net.ops
            if op.op_type not in ("HardOp", "Input", "Output")}
    return chip, host


def check_on_chip(name: str, target: str, built: dict, x: np.ndarray, want: np.ndarray,
                  chip_ops: set[str], host_ops: set[str]) -> dict:
    """The checks every corpus network passes; returns the measured figures."""
    net = built["net"]
    chip, host = placement(net, load_stage(built["written"]["adapted"]), target)
    assert chip_ops <= chip, f"{name}: {sorted(chip_ops - chip)} not on the chip"
    host_types = {k.split("#")[0] for k in host}
    assert host_ops <= host_types, f"{name}: {sorted(host_ops - host_types)} not on the host"
    assert not NEVER_HOST & host_types, f"{name}: {sorted(NEVER_HOST & host_types)} on host"
    assert all(host.values()), f"{name}: host ops without a reason: " \
        f"{[k for k, r in host.items() if not r]}"
    backend_name, _ = CHIPS[target]
    got, bound, npu = run_on_chip(net, backend_name, target, x)
    hard = [op for op in net.ops if op.op_type == "HardOp"]
    assert hard and all(isinstance(bound[op.op_id], npu) for op in hard)
    assert got.tobytes() == run_reference(built["written"]["adapted"], x).tobytes()
    parts = output_parts(load_stage(built["written"]["optimized"]), reference=[want])
    figure = worst(compare_parts([want], [got], parts))
    assert figure >= 0.99, f"{name} on {target}: worst output part cosine {figure:.4f}"
    return {"chip": chip, "host": host, "cosine": figure}


@pytest.mark.parametrize("name", sorted(FIELD_NETS))
def test_field_network_generators_are_sane(name):
    """Each generated model passes the ONNX checker (in `Builder.model`), runs on
    onnxruntime, gives finite outputs of the declared shape that vary with the input and
    across the output (nothing constant, nothing saturated to one value)."""
    import onnxruntime as ort

    fn = FIELD_NETS[name]
    model = fn.build(np.random.default_rng(7))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    outs = [sess.run(None, {"x": x})[0] for x in fn.inputs(3, 1)]
    dims = [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]
    for o in outs:
        assert np.isfinite(o).all() and list(o.shape) == dims
        assert np.ptp(o) > 1e-3 * max(float(np.abs(o).max()), 1e-6)
    spread = np.abs(outs[0] - outs[1]).mean() / np.abs(outs[0]).mean()
    assert spread > 0.01, f"{name}: outputs barely depend on the input ({spread:.4f})"


def _cases():
    for name in sorted(FIELD_NETS):
        for target in sorted(CHIPS):
            marks = [pytest.mark.slow] if FIELD_NETS[name].slow else []
            if name in XFAIL:
                marks.append(pytest.mark.xfail(reason=XFAIL[name], strict=True))
            yield pytest.param(name, target, marks=marks, id=f"{name}-{target}")


@pytest.mark.parametrize("name,target", list(_cases()))
def test_field_network_runs_on_the_chip(name, target, tmp_path):
    import onnxruntime as ort

    built = compile_field(name, target, tmp_path)
    x = FIELD_NETS[name].inputs(1, 5)[0]
    want = ort.InferenceSession(str(built["path"]), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    check_on_chip(name, target, built, x, want, *WHERE[name])


@pytest.mark.parametrize("symmetric", [True, False], ids=["int8", "uint8_zero_points"])
@pytest.mark.parametrize("target", sorted(CHIPS))
def test_pre_quantized_qdq_model_runs_on_the_chip(target, symmetric, tmp_path):
    """A QDQ model made by onnxruntime's quantize_static (per-channel int8 weights; int8
    symmetric activations, or onnxruntime's default uint8 with zero points) from the
    EfficientNet block: it imports, its pairs are removed and their ranges kept, and it runs
    bit-exactly on the chip within 0.99 of onnxruntime's run of the QDQ model."""
    import onnxruntime as ort

    name = "torch_efficientnet_swish_se"
    fn = FIELD_NETS[name]
    qdq = qdq_model(fn.build(np.random.default_rng(7)), fn.inputs(4, 0), symmetric=symmetric)
    built = compile_field(name, target, tmp_path, model=qdq)
    x = fn.inputs(1, 5)[0]
    want = ort.InferenceSession(str(built["path"]), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    check_on_chip(name, target, built, x, want, *WHERE[name])
    # the author's activation ranges on the compiled values: 8-bit values carry the author's
    # scale (symmetric pairs, to float64 round-off) or the pair's whole range [lo, hi] at zero
    # point 0 (uint8 pairs); 16-bit ones the same range at a finer step
    from onnx import numpy_helper

    inits = {i.name: numpy_helper.to_array(i) for i in qdq.graph.initializer}
    authors = {}
    for n in qdq.graph.node:
        if n.op_type == "QuantizeLinear":
            sc, zp = float(inits[n.input[1]]), inits[n.input[2]]
            info = np.iinfo(zp.dtype)
            zp = int(zp)
            authors[n.input[0]] = sc * info.max if zp == 0 and info.min < 0 else \
                max(abs(info.min - zp), abs(info.max - zp)) * sc
    checked = 0
    for op in load_stage(built["written"]["quantized"]).ops:
        for v in op.outputs:
            if v.name in authors and v.dtype.is_quantized() and op.op_type != "Cast":
                el = v.dtype.element_dtype
                qmax = 127 if el.storage.bits == 8 else 32767
                assert float(el.scale[0]) * qmax == pytest.approx(authors[v.name], rel=1e-9), \
                    v.name
                checked += 1
    assert checked >= 10


# --- trained networks from other fields, shipped inside public PyPI wheels --------------------

#: wheel -> {model file inside it: (inputs, strict xfail reason or None)}; inputs are
#: (name, kind, shape): "audio" 16 kHz speech, "spectrum" its log-magnitude STFT frames,
#: "image" 0-255 pixels, "normal" N(0, 1), "zeros", "sr" the int64 scalar 16000
TRAINED = {
    "speechmos==0.0.1.1": {  # Microsoft's DNSMOS / PLCMOS speech-quality models
        "speechmos/dnsmos_models/sig_bak_ovr.onnx": (  # keras2onnx, raw-audio STFT as Conv
            [("input_1", "audio", (1, 144160))], None),
        "speechmos/plcmos_models/plcmos_v2.onnx": (  # torch.onnx, two GRUs
            [("degraded_audio", "spectrum", (1, 1, 100, 257)), ("rater_embed", "normal", (1, 64))],
            None),
    },
    "silero-vad==6.2.3": {  # Silero's voice-activity detector
        "silero_vad/data/silero_vad_16k_op15.onnx": (  # torch.onnx: If on the rate, LSTM
            [("input", "audio", (1, 512)), ("state", "zeros", (2, 1, 128)), ("sr", "sr", ())],
            None),
        "silero_vad/data/silero_vad.onnx": (  # spox: the whole network inside one If
            [("input", "audio", (1, 512)), ("state", "zeros", (2, 1, 128)), ("sr", "sr", ())],
            None),
    },
    "ddddocr==1.6.1": {  # a captcha OCR package
        "ddddocr/common_det.onnx": (  # torch.onnx, a YOLOX-style text detector
            [("images", "image", (1, 3, 416, 416))], None),
        "ddddocr/common_old.onnx": (  # onnxruntime's dynamic int8 CRNN: ConvInteger and
            [("input1", "image", (1, 1, 64, 128))], None),  # com.microsoft DynamicQuantizeLSTM
    },
}


def _trained_input(kind: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    from corpus import images
    from field_nets import audio

    rng = np.random.default_rng(seed)
    if kind == "audio":
        return audio(int(np.prod(shape)), 1, seed)[0].reshape(shape)
    if kind == "spectrum":
        frames, bins = shape[-2], shape[-1]
        n_fft = 2 * (bins - 1)
        a = audio(frames * n_fft // 2 + n_fft, 1, seed)[0]
        win = np.hanning(n_fft)
        spec = np.stack([np.abs(np.fft.rfft(a[i * n_fft // 2:i * n_fft // 2 + n_fft] * win))
                         for i in range(frames)])
        return np.log(spec + 1e-6).astype(np.float32).reshape(shape)
    if kind == "text":  # dark text lines on light noisy backgrounds, 0-255 (a captcha)
        from corpus import text_images

        img = text_images((1, 3) + tuple(shape[2:]), 1, seed, mean=(0.0,) * 3,
                          std=(1.0,) * 3)[0]
        return np.clip(img[:, :shape[1]] * 255, 0, 255).astype(np.float32)
    if kind == "image":
        img = images((1, 3) + tuple(shape[2:]), 1, seed)[0][:, :shape[1]]
        return np.clip(img * 50 + 128, 0, 255).astype(np.float32)
    if kind == "normal":
        return rng.normal(0, 1, shape).astype(np.float32)
    if kind == "zeros":
        return np.zeros(shape, np.float32)
    return np.array(16000, np.int64)


@pytest.fixture(scope="session")
def trained_wheels(tmp_path_factory) -> Path:
    """The trained models of TRAINED's wheels (downloaded once per session, never vendored)."""
    return wheels_or_skip(tmp_path_factory.mktemp("field_wheels"), TRAINED,
                          lambda name: name.endswith(".onnx"))


def _trained_cases():
    for wheel, models in TRAINED.items():
        for model, (_, reason) in models.items():
            marks = [pytest.mark.slow]
            if reason:
                marks.append(pytest.mark.xfail(reason=reason, strict=True))
            yield pytest.param(wheel, model, marks=marks, id=model.rsplit("/", 1)[-1])


@pytest.mark.parametrize("wheel,model", list(_trained_cases()))
def test_trained_field_model_runs_on_the_host(trained_wheels, wheel, model):
    """A trained network from another field imports (input shapes fixed) and its HostBackend
    run matches onnxruntime's float run on every output."""
    import onnxruntime as ort

    from host_backend import HostBackend
    from xcompile.frontend import import_onnx
    from xrt import HostDevice, Session, Tensor

    path = trained_wheels / model
    specs, _ = TRAINED[wheel][model]
    feeds = {name: _trained_input(kind, shape, seed=3) for name, kind, shape in specs}
    # the sample rate is fixed at import, as `xrt compile --input-value sr=16000` does: the If
    # it decides keeps one branch (Silero's spox model is a whole network inside that If)
    fixed = {name: feeds.pop(name) for name, kind, _ in specs if kind == "sr"}
    net = import_onnx(str(path), {k: list(v.shape) for k, v in feeds.items() if v.ndim},
                      input_values=fixed)
    assert not fixed or "OnnxGraph" not in {op.op_type for op in net.ops}
    s = Session.Create([HostBackend], net.view(0), [HostDevice.Default()])
    try:
        s.apply()
        got = [np.asarray(o).copy() for o in
               s.forward([Tensor(feeds[v.name]) for v in net.inputs()])]
    finally:
        s.close()
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {**feeds, **fixed})
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g, w = np.asarray(g, np.float64).reshape(np.shape(w)), np.asarray(w, np.float64)
        assert np.isfinite(g).all()
        scale = max(float(np.abs(w).max()), 1e-6)
        assert float(np.abs(g - w).max()) <= 1e-3 * scale, model
        if w.size > 1 and np.ptp(w) > 0:
            assert cosine(g, w) >= 0.9999, model


#: trained networks compiled for the chip (slow: 6-7 min a compile at load 8): model ->
#: (input name, kind, shape, op types that must run on the chip)
TRAINED_ON_CHIP = {
    # ddddocr's YOLOX-style text detector (torch.onnx opset 11: 83 convs with SiLU, a decoupled
    # head whose boxes, objectness and classes meet in one Concat)
    "ddddocr/common_det.onnx": ("images", "text", (1, 3, 416, 416),
                                {"Conv2d", "Silu", "MaxPool2d"}),
    # DNSMOS P.835 (keras2onnx on 9 s of raw audio: STFT as Conv, x*x, Sqrt, Log, ReduceMax)
    "speechmos/dnsmos_models/sig_bak_ovr.onnx": ("input_1", "audio", (1, 144160),
                                                 {"Conv2d", "MaxPool2d", "Matmul"}),
}


#: detectors among them: model -> held-out input seeds on which the integer network's
#: detections must agree with onnxruntime's float run (`_detections_agree`). ddddocr's default
#: compile (17 ops in int16 from its outlier-aware int8, ranked by block; docs/quantization.md
#: section 8) finds and keeps every detection on all twelve; its objectness part reads 0.99 or
#: above on 8 of them (mean 1 - cosine 0.0094, worst 0.965 on input 21). With the calibration
#: samples among the probes (xcompile.quant.probes) the search kept plain int8 (0.9593, its
#: 20-op raise 0.9052, the outlier-aware int8 0.9625 not 0.02 better) and lost input 17's 0.51
#: (0.70 read 0.37); the search again from the outlier-aware int8
#: (`pipeline.search_from_outlier_aware`: 20 ops, 7.1% of MACs, 0.9890 on the probes, kept as
#: the closest) keeps all twelve (input 17:
#: 0.70 / 0.64 / 0.58 / 0.54 / 0.51 read 0.64 / 0.59 / 0.53 / 0.51 / 0.51), with the class
#: branch's score headroom (`score_branch.widen_scores`) on
DETECTORS = {"ddddocr/common_det.onnx": tuple(range(11, 23))}
#: score threshold of a detection, and the margin around it within which a detection may go
#: either way (a 0.31 read as 0.29 is a borderline flip, not a lost text line); a detection
#: above the margin should keep its score within DET_DROP (xfail with the figures where not).
#: With squared-error int8 thresholds ddddocr read 0.72 as 0.45 and 0.53 as 0.29: the
#: activations at the text lines, the largest of their maps, were clipped; the outlier-aware
#: int8 the compile falls back on (docs/quantization.md section 8) keeps them within 0.13.
DET_SCORE, DET_MARGIN, DET_DROP = 0.3, 0.1, 0.2


def _yolox_boxes(out: np.ndarray, size: int, floor: float) -> tuple[np.ndarray, np.ndarray]:
    """ddddocr's decoding of its YOLOX head ([1, anchors, 4 + 1 + classes], strides 8, 16,
    32): boxes (x1, y1, x2, y2) in pixels and scores objectness x class, those above `floor`
    after non-maximum suppression at IoU 0.45 (ddddocr's own)."""
    out = np.asarray(out, np.float64).reshape(-1, out.shape[-1])
    grids, strides = [], []
    for s in (8, 16, 32):
        n = size // s
        yv, xv = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
        grids.append(np.stack((xv, yv), 2).reshape(-1, 2))
        strides.append(np.full((n * n, 1), s))
    grid, stride = np.concatenate(grids), np.concatenate(strides)
    xy = (out[:, :2] + grid) * stride
    wh = np.exp(np.minimum(out[:, 2:4], 10.0)) * stride
    boxes = np.concatenate([xy - wh / 2, xy + wh / 2], 1)
    score = out[:, 4] * out[:, 5:].max(1)
    order = [i for i in np.argsort(-score) if score[i] > floor]
    keep: list[int] = []
    while order:
        i, order = order[0], order[1:]
        keep.append(i)
        order = [j for j in order if _iou(boxes[i:i + 1], boxes[j:j + 1])[0, 0] <= 0.45]
    return boxes[keep], score[keep]


def _iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(rb - lt, 0, None), 2)
    area = lambda x: np.prod(x[:, 2:] - x[:, :2], 1)  # noqa: E731
    return inter / (area(a)[:, None] + area(b)[None] - inter + 1e-9)


def _detections_agree(want: np.ndarray, got: np.ndarray, size: int
                      ) -> tuple[bool, bool, str]:
    """(found, kept, a line of figures): `found` when every detection one side scores at
    least `DET_SCORE + DET_MARGIN` has one on the other side at IoU > 0.5 scoring at least
    `DET_SCORE - DET_MARGIN` (the counts above `DET_SCORE` then differ only by borderline
    detections); `kept` when moreover each of the float run's has one within `DET_DROP` of
    its score."""
    bw, sw = _yolox_boxes(want, size, DET_SCORE - DET_MARGIN)
    bg, sg = _yolox_boxes(got, size, DET_SCORE - DET_MARGIN)

    def best(b: np.ndarray, boxes: np.ndarray, scores: np.ndarray) -> float:
        hit = _iou(b[None], boxes)[0] > 0.5 if len(boxes) else np.zeros(0, bool)
        return float(scores[hit].max()) if hit.any() else 0.0

    firm = DET_SCORE + DET_MARGIN
    lost = [round(float(s), 3) for b, s in zip(bw, sw) if s >= firm and not best(b, bg, sg)]
    extra = [round(float(s), 3) for b, s in zip(bg, sg) if s >= firm and not best(b, bw, sw)]
    drop = [f"{s:.2f} -> {best(b, bg, sg):.2f}" for b, s in zip(bw, sw)
            if s >= firm and best(b, bg, sg) < s - DET_DROP]
    line = (f"float {int((sw >= DET_SCORE).sum())} detections > {DET_SCORE}, int8 "
            f"{int((sg >= DET_SCORE).sum())}; float scores {np.round(sw, 2).tolist()}, int8 "
            f"{np.round(sg, 2).tolist()}; lost {lost}, extra {extra}, dropped {drop}")
    return not lost and not extra, not drop, line


@pytest.mark.slow
@pytest.mark.parametrize("model", sorted(TRAINED_ON_CHIP), ids=lambda m: m.rsplit("/", 1)[-1])
def test_trained_field_model_runs_on_the_chip(trained_wheels, model, tmp_path):
    """A trained network from another field compiled for zg330 on four realistic inputs: its
    convolutions on the chip, every host op with its reason, bit-exact against the integer
    reference, and per output part against onnxruntime's float run on a held-out input (below
    0.99: xfail with the measured parts; placement and bit-exactness still assert). A detector
    (`DETECTORS`) finds the same text lines as onnxruntime's float run on six held-out inputs
    (`_detections_agree`: asserted), and keeps their scores within `DET_DROP` (xfail with the
    figures where not)."""
    import onnxruntime as ort

    target = "zg330"
    name, kind, shape, chip_ops = TRAINED_ON_CHIP[model]
    path = trained_wheels / model
    cal = tmp_path / "cal"
    cal.mkdir()
    for k in range(4):
        np.save(cal / f"{k}.npy", _trained_input(kind, shape, k))
    written = compile_model(dict(DEFAULTS, model=str(path), target=target, calib=str(cal),
                                 output=str(tmp_path / "out"), name="m",
                                 input_shape={name: list(shape)}))
    net = load_stage(written[CHIPS[target][1]])
    chip, host = placement(net, load_stage(written["adapted"]), target)
    assert chip_ops <= chip
    assert not NEVER_HOST & {k.split("#")[0] for k in host}
    assert all(host.values())
    x = _trained_input(kind, shape, 11)
    got, bound, npu = run_on_chip(net, CHIPS[target][0], target, x)
    assert all(isinstance(bound[op.op_id], npu) for op in net.ops if op.op_type == "HardOp")
    assert got.tobytes() == run_reference(written["adapted"], x).tobytes()
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {name: x})[0]
    # parts from the float network: a detector head's Concat is on the chip once compiled
    parts = output_parts(load_stage(written["optimized"]), reference=[want])
    res = compare_parts([want], [got], parts)
    figure = worst(res)
    short = []
    for seed in DETECTORS.get(model, ()):  # the integer reference: bit-exact with the chip
        x = _trained_input(kind, shape, seed)
        want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
            None, {name: x})[0]
        got = run_reference(written["adapted"], x).reshape(want.shape)
        found, kept, line = _detections_agree(want, got, shape[-1])
        print(f"{model} input {seed}: {line}")
        assert found, f"{model} input {seed}: detections differ: {line}"
        short += [] if kept else [f"input {seed}: {line}"]
    if figure < 0.99 or short:
        pytest.xfail(f"worst output part cosine {figure:.4f} < 0.99 (placement, bit-exactness "
                     f"and the detections found hold): {format_parts(res)}; scores dropped by "
                     f"more than {DET_DROP}: {short}")

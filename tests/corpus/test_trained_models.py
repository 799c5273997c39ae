"""Trained networks as users bring them: PaddleOCR's text direction classifier (MobileNetV3),
text detector (DBNet: ConvTranspose, Resize, HardSwish written out, squeeze-excite gates) and
text recognizer (SVTR: attention, LayerNorm) shipped as ONNX files inside the PyPI package
`rapidocr_onnxruntime`. The wheel is fetched at test time (never vendored); without network the
tests skip. Each model compiles for both chips, runs bit-exactly against the integer reference,
and its int8 cosine to onnxruntime's float run is compared with onnxruntime's own int8."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from corpus import load_stage, run_on_chip, run_reference, text_images, wheels_or_skip

from xcompile.pipeline import DEFAULTS, compile_model
from xcompile.quant.report import cosine

pytestmark = pytest.mark.slow
pytest.importorskip("onnxruntime")

WHEEL = "rapidocr_onnxruntime==1.4.4"
IMAGENET = dict(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
#: model file -> (input shape, PaddleOCR's input normalisation). All int8 the recognizer
#: measures 0.89-0.92 with its LayerNorms folded (onnxruntime's int8 0.76-0.86); it needs
#: int16 (docs/quantization.md section 10), beyond the default 10% cap, so its compile asks for
#: it (MAX_INT16).
MODELS = {
    "ch_ppocr_mobile_v2.0_cls_infer.onnx": ((1, 3, 48, 192), {}),
    "ch_PP-OCRv4_det_infer.onnx": ((1, 3, 128, 256), IMAGENET),
    "ch_PP-OCRv4_rec_infer.onnx": ((1, 3, 48, 160), {}),
}
#: held-out images (seeds the calibration images do not use): cosine >= 0.99 on every one
HELD_OUT = (11, 12, 13, 14)
#: the int16 share a user asks for where the default 10% cap keeps int8 and warns: the
#: recognizer needs int16 throughout. The detector compiles by default: its int8 loss sat in
#: the stem (per-tensor scales over channels 50x apart, a per-channel mean shift through the
#: hard-swish tables), which the quantizer's activation bias correction and depthwise-input
#: equalisation now take out, and the search ranks layers by what they cost the output
#: (docs/quantization.md sections 8 and 10): 8 ops, 3.1% of its MACs, in int16
MAX_INT16 = {"ch_PP-OCRv4_rec_infer.onnx": 1.0}
CHIPS = {"zg330": ("ZG330", "ZG"), "buyi": ("Buyi", "BY")}


@pytest.fixture(scope="session")
def ocr_models(tmp_path_factory) -> Path:
    """The models directory of the rapidocr_onnxruntime wheel (downloaded once per session)."""
    where = wheels_or_skip(tmp_path_factory.mktemp("rapidocr"), [WHEEL],
                           lambda name: name.endswith(".onnx"))
    return where / "rapidocr_onnxruntime" / "models"


#: known accuracy shortfalls: placement and bit-exactness are asserted first, then a cosine
#: below the bar xfails with the figures, and one that clears it fails until the entry goes (a
#: strict xfail over the whole test would hide a new placement regression). None now: the
#: recognizer's (--max-int16 100%: held out 0.9547 on image 12, the search's count kept was the
#: noise of probes made of flipped and rolled calibration images only) went when the probes
#: took the calibration images in too (session 18: 135 ops raised, 1.0000 / 0.9999 / 0.9998 /
#: 1.0000; docs/quantization.md section 10)
KNOWN: dict[str, str] = {}


@pytest.mark.parametrize("target", sorted(CHIPS))
@pytest.mark.parametrize("model", sorted(MODELS))
def test_trained_model_runs_on_the_chip(ocr_models, model, target, tmp_path):
    import onnxruntime as ort

    from xcompile.quant.onnxruntime_int8 import quantize_static_int8

    path = ocr_models / model
    shape, norm = MODELS[model]
    cal = tmp_path / "cal"
    cal.mkdir()
    for k, im in enumerate(text_images(shape, 8, **norm)):
        np.save(cal / f"{k}.npy", im)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    written = compile_model(dict(DEFAULTS, model=str(path), target=target, calib=str(cal),
                                 output=str(tmp_path / "out"), name="m",
                                 input_shape={name: list(shape)},
                                 **({"max_int16": MAX_INT16[model]} if model in MAX_INT16
                                    else {})))
    backend_name, suffix = CHIPS[target]
    net = load_stage(written[suffix])
    mp = load_stage(written["quantized"]).tags["quantization"].get("mixed_precision")
    if mp:  # what the search kept: the figures docs/quantization.md section 10 quotes
        print(f"{model} {target}: search kept {len(mp['raised'])} raised ops, "
              f"{mp['int16_ops']} of {mp['integer_ops']} integer ops and "
              f"{mp['int16_mac_share']:.1%} of MACs in int16; probe worst "
              f"{mp['worst_before'][1]:.4f} -> {mp['worst_after'][1]:.4f}; attempts "
              f"{[(a['raised'], round(a['worst'], 4)) for a in mp['attempts']]}")
    host = {op.op_type for op in net.ops if op.op_type not in ("HardOp", "Input", "Output")}
    assert not {"Conv2d", "ConvTranspose2d", "Add", "Multiply", "Hardswish", "Sigmoid"} & host
    qdq = quantize_static_int8(str(path), [[np.load(cal / f"{k}.npy")] for k in range(8)],
                               str(tmp_path / "int8.onnx"))
    qs = ort.InferenceSession(qdq, providers=["CPUExecutionProvider"])
    short = []
    for seed in HELD_OUT:
        x = text_images(shape, 1, seed=seed, **norm)[0]
        got, bound, npu = run_on_chip(net, backend_name, target, x)
        assert all(isinstance(bound[op.op_id], npu) for op in net.ops
                   if op.op_type == "HardOp")
        if seed == HELD_OUT[0]:
            assert got.tobytes() == run_reference(written["adapted"], x).tobytes()
        want = sess.run(None, {name: x})[0]
        theirs = cosine(qs.run(None, {name: x})[0], want)
        ours = cosine(got, want)
        print(f"{model} {target} image {seed}: int8 cosine {ours:.4f}, onnxruntime int8 "
              f"{theirs:.4f}, host ops {sorted(host)}")
        if ours < 0.99 or ours < theirs - 0.005:
            short.append(f"image {seed}: int8 cosine {ours:.4f}, onnxruntime's {theirs:.4f}")
    if model in KNOWN:
        assert short, f"{model}: the known shortfall is gone; remove its KNOWN entry"
        pytest.xfail(f"{KNOWN[model]} (now: {'; '.join(short)})")
    assert not short, "; ".join(short)

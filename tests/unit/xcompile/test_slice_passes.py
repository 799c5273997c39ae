"""Index picks as code moves (`xcompile.slice_passes`, run first by the optimize stage):
attention's q / k / v picks, a class token and evenly stepping channel picks become Slices /
one Split the chips run, against onnxruntime; irregular picks stay Gathers."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from xcompile.frontend import import_onnx  # noqa: E402
from xcompile.passes import optimize  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))

F = TensorProto.FLOAT


def run_host(net, x: np.ndarray) -> list[np.ndarray]:
    from host_backend import HostBackend
    from xrt import HostDevice, Session, Tensor

    sess = Session.Create([HostBackend], net.view(0), [HostDevice.Default()])
    sess.apply()
    return [np.asarray(t) for t in sess.forward([Tensor(np.ascontiguousarray(x))])]


def model(nodes, x_shape, outs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, x_shape)],
                              [helper.make_tensor_value_info(o, F, None) for o in outs],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def check(m, x_shape, seed=0) -> object:
    """Import + optimize, run on the HostBackend against onnxruntime; the optimized net."""
    net = optimize(import_onnx(m))
    x = np.random.default_rng(seed).normal(0, 1, x_shape).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for g, w in zip(run_host(net, x), want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    return net


def types(net) -> list[str]:
    return [op.op_type for op in net.ops]


def test_qkv_picks_of_a_split_axis_are_one_split():
    """torch.onnx's qkv idiom: Linear to 3*D, Reshape (N, T, 3, h, d), Transpose (2, 0, 3, 1, 4),
    Gather 0 / 1 / 2: one Split of the (N, T, 3*D) value into three (N, T, D) pieces, no
    Gather, no rank-5 value left."""
    t, h, d = 5, 2, 4
    w = np.random.default_rng(1).normal(0, 0.3, (3 * h * d, 3 * h * d)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["qkv"]),
             helper.make_node("Reshape", ["qkv", "s"], ["r"]),
             helper.make_node("Transpose", ["r"], ["p"], perm=[2, 0, 3, 1, 4])]
    nodes += [helper.make_node("Gather", ["p", f"i{k}"], [f"g{k}"], axis=0) for k in range(3)]
    inits = [("w", w), ("s", np.array([1, t, 3, h, d], np.int64))] + \
        [(f"i{k}", np.array(k, np.int64)) for k in range(3)]
    net = check(model(nodes, [1, t, 3 * h * d], ["g0", "g1", "g2"], inits), (1, t, 3 * h * d))
    assert "Gather" not in types(net) and types(net).count("Split") == 1
    split = next(op for op in net.ops if op.op_type == "Split")
    assert split.attrs["sections"] == [h * d] * 3 and split.attrs["axis"] == 2
    assert split.inputs[0].producer.op_type == "Matmul"
    assert max(len(v.shape) for op in net.ops for v in op.outputs) == 4


@pytest.mark.parametrize("idx,kept", [(np.array(0, np.int64), False),
                                      (np.array([-3], np.int64), False),
                                      (np.array([1, 3, 5], np.int64), False),
                                      (np.array([5, 0, -1], np.int64), True),
                                      (np.array([2, 2], np.int64), True)])
def test_evenly_stepping_constant_picks_are_slices(idx, kept):
    """A class token (index 0), a negative index, a stride-2 channel pick are Slices; indices
    that go back or repeat stay a Gather."""
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("Gather", ["a", "i"], ["y"], axis=1)]
    net = check(model(nodes, [2, 7, 4], ["y"], [("i", idx)]), (2, 7, 4))
    assert ("Gather" in types(net)) is kept
    assert ("Slice" in types(net)) is not kept


def test_slices_that_do_not_tile_the_axis_stay_slices():
    """Two picks leaving a gap are two Slices (a Split must cover the axis)."""
    nodes = [helper.make_node("Relu", ["x"], ["a"])]
    nodes += [helper.make_node("Gather", ["a", f"i{k}"], [f"y{k}"], axis=2) for k in (0, 2)]
    inits = [(f"i{k}", np.array(k, np.int64)) for k in (0, 2)]
    net = check(model(nodes, [1, 3, 3], ["y0", "y2"], inits), (1, 3, 3))
    assert types(net).count("Slice") == 2 and "Split" not in types(net)


@pytest.mark.slow
def test_vit_block_runs_every_computing_op_on_the_chip(tmp_path):
    """The ViT-tiny block of the field corpus compiled for zg330: its q / k / v picks (Split),
    the class-token pick (Slice), the Concat of the constant class token (an integer op whose
    constant is quantized at the output's scale), every Transpose / Reshape and all three
    LayerNorms run on the chip; only the float<->integer edge stays on the host."""
    from corpus import load_stage
    from field_nets import FIELD_NETS

    from xcompile.pipeline import DEFAULTS, compile_model

    fn = FIELD_NETS["torch_vit_tiny_block"]
    path = tmp_path / "vit.onnx"
    path.write_bytes(fn.build(np.random.default_rng(7)).SerializeToString())
    cal = tmp_path / "cal"
    cal.mkdir()
    for k, x in enumerate(fn.inputs(4, 0)):
        np.save(cal / f"{k}.npy", x)
    written = compile_model(dict(DEFAULTS, model=str(path), target="zg330", calib=str(cal),
                                 output=str(tmp_path / "out"), name="vit",
                                 input_shape={"x": list(fn.shape)}))
    net, adapted = load_stage(written["ZG"]), load_stage(written["adapted"])
    origin = {op.op_id: op.op_type for op in adapted.ops}
    chip = {origin[i] for op in net.ops if op.op_type == "HardOp"
            for i in op.attrs["origin_ops_id"]}
    host = {op.op_type for op in net.ops
            if op.op_type not in ("HardOp", "Input", "Output", "Cast", "AlignAxis",
                                  "PruneAxis")}
    assert {"Split", "Slice", "LayerNorm", "Transpose", "Matmul", "Concat"} <= chip
    assert host == set(), host
    assert "Gather" not in set(origin.values())


def test_a_token_stream_stays_in_token_order():
    """A ViT patch embedding as torch.onnx writes it (Conv, Reshape (N, C, T), Transpose to
    (N, T, C)), a class token Concat, a position Add and a residual Add around a Linear: the
    NHWC map is flattened straight to (N, T, C) and no Transpose is left but the input's."""
    rng = np.random.default_rng(21)
    d = 8
    inits = [("w", rng.normal(0, 0.3, (d, 3, 4, 4)).astype(np.float32)),
             ("s", np.array([1, d, 4], np.int64)),
             ("cls", rng.normal(0, 0.1, (1, 1, d)).astype(np.float32)),
             ("pos", rng.normal(0, 0.1, (1, 5, d)).astype(np.float32)),
             ("lw", rng.normal(0, 0.3, (d, d)).astype(np.float32))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[4, 4], strides=[4, 4]),
             helper.make_node("Reshape", ["c", "s"], ["r"]),
             helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1]),
             helper.make_node("Concat", ["cls", "t"], ["cat"], axis=1),
             helper.make_node("Add", ["cat", "pos"], ["e"]),
             helper.make_node("MatMul", ["e", "lw"], ["h"]),
             helper.make_node("Relu", ["h"], ["a"]),
             helper.make_node("Add", ["e", "a"], ["y"])]
    net = check(model(nodes, [1, 3, 8, 8], ["y"], inits), (1, 3, 8, 8))
    assert types(net).count("Transpose") == 1
    cat = next(op for op in net.ops if op.op_type == "Concat")
    assert cat.attrs["axis"] == 1 and tuple(cat.outputs[0].shape) == (1, 5, d)


def test_a_flatten_of_an_nchw_map_keeps_its_transpose():
    """Flatten (N, C*H*W) reads the NCHW order: C, H, W are not neighbours in NHWC order, so the
    Transpose stays before the Reshape."""
    rng = np.random.default_rng(22)
    inits = [("w", rng.normal(0, 0.3, (4, 3, 1, 1)).astype(np.float32))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("Flatten", ["c"], ["y"], axis=1)]
    net = check(model(nodes, [1, 3, 2, 2], ["y"], inits), (1, 3, 2, 2))
    tr = [op for op in net.ops if op.op_type == "Transpose"]
    assert len(tr) == 2 and tr[-1].outputs[0].consumers[0].op_type == "Reshape"


def test_a_crnn_squeeze_and_permute_is_one_reshape():
    """A CRNN's conv output (N, C, 1, T) squeezed and permuted to (T, N, C) for the LSTM: with
    N = 1 the elements are already in that order in the NHWC map, so the Transpose to NCHW,
    the Squeeze and the Permute become one Reshape."""
    rng = np.random.default_rng(23)
    inits = [("w", rng.normal(0, 0.3, (6, 3, 2, 1)).astype(np.float32)),
             ("ax", np.array([2], np.int64))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("Squeeze", ["c", "ax"], ["s"]),
             helper.make_node("Transpose", ["s"], ["y"], perm=[2, 0, 1])]
    net = check(model(nodes, [1, 3, 2, 7], ["y"], inits), (1, 3, 2, 7))
    assert "Transpose" not in types(net)[2:], types(net)
    last = [op for op in net.ops if op.op_type not in ("Output",)][-1]
    assert last.op_type == "Reshape" and last.inputs[0].producer.op_type == "Conv2d"

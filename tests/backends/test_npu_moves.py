"""Data movement on the chips: Transpose (COPY PERMUTE), Slice, Split / Concat along h or w and
element-regrouping Reshapes run as COPY layers between chip ops, bit-exact against the integer
reference on the ZG330 and the Buyi; the YOLOv8 head's NHWC->NCHW Transposes and its box
Slices leave the host (docs/zg330-lowering.md, "Data movement")."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from npu_chip_lib import check_quantized, hard_kinds, host_types

from xir.builder import NetworkBuilder
from xir.types import INT8, INT16, QuantizedType, TensorType

CHIPS = ["zg330", "buyi"]


def _copies(z, op_type, net):
    """Layer kinds of the HardOps holding `op_type`, without the Tanh fused after it."""
    return [[k for k in ks if k != "lut"] for ks in hard_kinds(z, op_type, net)]


def _t(shape, bits=8, scale=0.05):
    el = QuantizedType(INT8 if bits == 8 else INT16, scale)
    return TensorType(el, list(shape), "NHWC" if len(shape) == 4 else None)


def _between_luts(op_type, in_shape, out_shapes, bits=8, **attrs):
    """x -> Sigmoid -> `op_type` -> Tanh per output: the move sits between two chip ops."""
    b = NetworkBuilder("move")
    x = b.input(list(in_shape), _t(in_shape, bits).element_dtype,
                "NHWC" if len(in_shape) == 4 else None, "x")
    s = b.op("Sigmoid", [x], out_types=[_t(in_shape, bits, 1 / 250)])
    ys = b.op(op_type, [s], out_types=[_t(o, bits, 1 / 250) for o in out_shapes], **attrs)
    ys = ys if isinstance(ys, list) else [ys]
    b.output(*[b.op("Tanh", [y], out_types=[_t(y.shape, bits, 1 / 120)]) for y in ys])
    return b.build()


@pytest.mark.parametrize("target", CHIPS)
@pytest.mark.parametrize("shape,perm", [((1, 3, 5, 7), p) for p in
                                        itertools.permutations([1, 2, 3])] +
                         [((2, 3, 4, 5), (0, 3, 1, 2)), ((2, 3, 4, 5), (0, 1, 3, 2))] +
                         [((3, 4, 6), p) for p in [(2, 0, 1), (1, 0, 2), (0, 2, 1)]] +
                         [((6, 9), (1, 0))])
def test_transpose_runs_as_copy_permute(target, shape, perm):
    perm = list(perm) if len(shape) != 4 or perm[0] == 0 else [0] + list(perm)
    out = tuple(shape[p] for p in perm)
    net = _between_luts("Transpose", shape, [out], perm=perm)
    z = check_quantized(net, target, seed=len(shape) + sum(perm))
    assert "Transpose" not in host_types(z, target)
    items = shape[0] if len(shape) == 4 else 1
    folded = len(shape) == 4 and perm[1] == 1 or len(shape) == 3 and perm[0] == 0
    assert _copies(z, "Transpose", net) == [["copy"] * (1 if folded else items)]


@pytest.mark.parametrize("target", CHIPS)
@pytest.mark.parametrize("shape,begin,end,step", [
    ((1, 9, 10, 40), [0, 2, 1, 5], [1, 8, 9, 37], [1, 1, 1, 1]),
    ((1, 9, 10, 40), [0, 1, 0, 0], [1, 9, 10, 40], [1, 3, 2, 1]),
    ((2, 7, 6, 8), [0, 6, 1, 0], [2, 1, 6, 8], [1, -2, 2, 1]),  # negative step: host
    ((3, 5, 6, 8), [0, 1, 0, 2], [3, 4, 5, 6], [1, 1, 2, 1]),
    ((1, 4, 189), [0, 2, 0], [1, 4, 189], [1, 1, 1]),  # YOLOv8's rb = dist[:, 2:4]
    ((12, 20), [3, 0], [9, 20], [2, 1]),
])
def test_slice_runs_as_a_copy_of_a_window(target, shape, begin, end, step):
    out = tuple(len(range(*slice(b, e, s).indices(d))) for b, e, s, d in
                zip(begin, end, step, shape))
    net = _between_luts("Slice", shape, [out], begin=begin, end=end, step=step)
    z = check_quantized(net, target, seed=sum(out))
    if min(step) < 0:
        reasons = z.tags[target]["host_ops"]
        assert any("negative step" in r for r in reasons.values())
        return
    assert "Slice" not in host_types(z, target)
    assert _copies(z, "Slice", net) in ([["copy"]], [["copy"] * shape[0]])


@pytest.mark.parametrize("target", CHIPS)
@pytest.mark.parametrize("shape,axis,parts", [((1, 6, 5, 8), 1, [2, 4]),
                                              ((2, 6, 5, 8), 2, [1, 3, 1]),
                                              ((1, 144, 21), 1, [64, 80]),
                                              ((3, 4, 5, 8), 1, [3, 1])])
def test_split_and_concat_along_h_or_w(target, shape, axis, parts):
    outs = [tuple(p if i == axis else d for i, d in enumerate(shape)) for p in parts]
    net = _between_luts("Split", shape, outs, axis=axis, sections=parts)
    z = check_quantized(net, target, seed=3)
    assert "Split" not in host_types(z, target)
    # and back: Concat of the pieces (each through a chip op) along the same axis
    b = NetworkBuilder("cat")
    xs = [b.input(list(o), _t(o).element_dtype, "NHWC" if len(o) == 4 else None, f"x{i}")
          for i, o in enumerate(outs)]
    ss = [b.op("Sigmoid", [x], out_types=[_t(x.shape, 8, 1 / 250)]) for x in xs]
    cat = b.op("Concat", ss, out_types=[_t(shape, 8, 1 / 250)], axis=axis)
    b.output(b.op("Tanh", [cat], out_types=[_t(shape, 8, 1 / 120)]))
    net = b.build()
    z = check_quantized(net, target, seed=4)
    assert "Concat" not in host_types(z, target)
    assert len(_copies(z, "Concat", net)[0]) >= len(parts)


@pytest.mark.parametrize("target", CHIPS)
@pytest.mark.parametrize("shape,out", [((1, 12, 12, 144), (1, 144, 144)),
                                       ((1, 4, 6, 8), (1, 8, 24)),
                                       ((1, 64, 21), (1, 4, 16, 21)),  # a view
                                       ((2, 3, 4, 10), (2, 6, 2, 10)),  # a view
                                       ((2, 3, 4, 10), (2, 4, 3, 10)),  # a view
                                       ((1, 5, 6), (1, 30, 1))])
def test_reshape_regroups_through_a_dense_map(target, shape, out):
    net = _between_luts("Reshape", shape, [out], shape=list(out))
    z = check_quantized(net, target, seed=5)
    assert "Reshape" not in host_types(z, target)
    kinds = _copies(z, "Reshape", net)
    keeps = shape[-1] == out[-1]
    # a regrouping reads its input in place when it could make that buffer dense, else it
    # goes through a dense scratch map
    assert kinds in ([[[]]] if keeps else [[["copy"]], [["copy", "copy"]]])


@pytest.mark.parametrize("target", CHIPS)
def test_int16_transpose_and_slice(target):
    net = _between_luts("Transpose", (1, 4, 6, 20), [(1, 20, 4, 6)], bits=16, perm=[0, 3, 1, 2])
    check_quantized(net, target, seed=6)
    net = _between_luts("Slice", (1, 4, 6, 20), [(1, 2, 6, 9)], bits=16, begin=[0, 1, 0, 3],
                        end=[1, 3, 6, 12], step=[1, 1, 1, 1])
    check_quantized(net, target, seed=7)


def test_copy_permute_checks_its_shapes(hw):
    """The device faults on a COPY PERMUTE whose output shape is not the permuted input's."""
    from npu_model import asm
    from xrt import DeviceError

    x = np.arange(2 * 3 * 4, dtype=np.int8).reshape(2, 3, 4)
    src = hw.fmap_in(x)
    good = hw.fmap_out(4, 2, 3)
    hw.run([asm.Copy(src, good, perm=(2, 0, 1))])
    assert np.array_equal(hw.read(good), x.transpose(2, 0, 1))
    bad = hw.fmap_out(4, 3, 2)
    with pytest.raises(ValueError, match="copy permute"):
        hw.run([asm.Copy(src, bad, perm=(2, 0, 1))])
    from npu_model.isa import CopyMode, F, Op, run_word, set_word

    words = asm.emit_program([asm.Copy(src, good, perm=(2, 0, 1))], hw.cfg)
    patched = [int(w) for w in words]
    i = next(k for k, w in enumerate(patched) if w >> 56 == Op.SET and (w >> 48) & 0xFF == F.PERM)
    patched[i] = set_word(F.PERM, a0=1, a1=1, a2=0)  # not a permutation
    assert run_word(Op.COPY, CopyMode.PERMUTE) in patched
    addr = hw.put(np.asarray(patched, np.uint64))
    with pytest.raises(DeviceError, match="COPY PERMUTE"):
        hw.dev.icoreCalc(hw.chunk.addr + (addr - 0x1000_0000), len(patched) * 8)


@pytest.mark.parametrize("target", CHIPS)
def test_yolov8_head_transposes_and_slices_run_on_the_chip(target):
    """The ultralytics head (tests/support/yolov8_head.py): its four NHWC->NCHW Transposes
    (input and three levels) and the DFL's two box Slices, quantized, are COPY layers now;
    what stays on the host is float (the quantizer keeps the DFL softmax over axis 2 and the
    output concat float) or the host/NPU edge."""
    import yolov8_head
    from npu_chip_lib import assert_bit_exact, compile_onnx

    c = compile_onnx(yolov8_head.build(64), (1, 3, 64, 64), target, input_name="images")
    host = {k: (t, r) for k, (t, r) in c.host_ops.items()
            if t not in ("Cast", "AlignAxis", "PruneAxis")}
    assert all(r.startswith("float op") or t == "Softmax" for t, r in host.values()), host
    moves = [op for op in c.adapted.ops if op.is_quantized() and
             op.op_type in ("Transpose", "Slice", "Split", "Reshape", "Concat")]
    # how many of each the importer and the optimize stage leave varies (the box Slices may
    # be one Split, the level Transposes may sink below the Reshapes): every one is on the chip
    types = [op.op_type for op in moves]
    assert "Transpose" in types and ("Slice" in types or "Split" in types)
    chip_ids = {i for h in c.lowered.ops if h.op_type == "HardOp" for i in h.origin_ops_id}
    assert all(op.op_id in chip_ids for op in moves), [op.op_type for op in moves
                                                        if op.op_id not in chip_ids]
    x = yolov8_head.images(1, 64)[0]
    assert_bit_exact(c, [x])


def _d2s_model(op_type: str, mode: str | None, c: int, block: int = 2):
    """conv -> DepthToSpace / SpaceToDepth -> conv on a dynamic batch (the importer writes the
    rearrangement as Reshape -> Transpose -> Reshape through rank-6 values)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(c)
    cin = c * block * block if op_type == "DepthToSpace" else c
    cout = c if op_type == "DepthToSpace" else c * block * block
    w1 = numpy_helper.from_array(rng.normal(0, 0.3, (cin, 3, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.normal(0, 0.3, (4, cout, 1, 1)).astype(np.float32), "w2")
    attrs = {"blocksize": block} | ({"mode": mode} if mode else {})
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node(op_type, ["a"], ["b"], **attrs),
             helper.make_node("Conv", ["b", "w2"], ["y"])]
    g = helper.make_graph(nodes, "d2s", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, ["N", 3, 8, 8])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], [w1, w2])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("target", CHIPS)
@pytest.mark.parametrize("op_type,mode,c,n", [("DepthToSpace", "DCR", 1, 1),
                                              ("DepthToSpace", "CRD", 3, 2),
                                              ("DepthToSpace", "DCR", 5, 1),
                                              ("SpaceToDepth", None, 2, 2)])
def test_depth_to_space_chain_runs_as_strided_copies(target, op_type, mode, c, n):
    """The Reshape -> Transpose -> Reshape chain of a DepthToSpace (ESPCN's pixel shuffle) or a
    SpaceToDepth: one HardOp of COPY layers between strided windows, bit-exact."""
    from npu_chip_lib import assert_bit_exact, compile_onnx

    cc = compile_onnx(_d2s_model(op_type, mode, c), (n, 3, 8, 8), target)
    movers = [op for op in cc.adapted.ops if op.op_type in ("Reshape", "Transpose")
              and len(op.outputs[0].shape) > 4]
    assert movers, "the importer wrote no rank-6 chain"
    assert cc.host_types() <= {"Transpose"} and "Reshape" not in cc.host_types(), cc.host_ops
    chain_ops = [h for h in cc.lowered.ops if h.op_type == "HardOp" and
                 len(h.origin_ops_id) >= 3 and set(h.device_info["kinds"]) == {"copy"}]
    assert len(chain_ops) == 1 and len(chain_ops[0].device_info["kinds"]) <= 16
    x = np.random.default_rng(n).normal(0, 1, (n, 3, 8, 8)).astype(np.float32)
    assert_bit_exact(cc, [x])


@pytest.mark.parametrize("target", CHIPS)
def test_reshape_of_a_channel_window_goes_through_a_dense_scratch(target):
    """A regrouping Reshape whose input is a channel window of a wider buffer (a Split piece)
    cannot read it in place: COPY into a dense scratch map, then COPY in the new geometry."""
    b = NetworkBuilder("win")
    x = b.input([1, 4, 6, 40], _t((1, 4, 6, 40)).element_dtype, "NHWC", "x")
    s = b.op("Sigmoid", [x], out_types=[_t((1, 4, 6, 40), 8, 1 / 250)])
    p1, p2 = b.op("Split", [s], axis=3, sections=[24, 16],
                  out_types=[_t((1, 4, 6, 24), 8, 1 / 250), _t((1, 4, 6, 16), 8, 1 / 250)])
    r = b.op("Reshape", [p2], out_types=[_t((1, 4, 12, 8), 8, 1 / 250)], shape=[1, 4, 12, 8])
    b.output(b.op("Tanh", [r], out_types=[_t((1, 4, 12, 8), 8, 1 / 120)]),
             b.op("Tanh", [p1], out_types=[_t((1, 4, 6, 24), 8, 1 / 120)]))
    net = b.build()
    z = check_quantized(net, target, seed=11)
    assert _copies(z, "Reshape", net) == [["copy", "copy"]]

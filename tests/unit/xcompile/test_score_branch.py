"""xcompile.quant.score_branch: a detector's class-score branch found from the graph (the values
whose channels reach the outputs only as scores), against an independent derivation on the
YOLOv8 head as ultralytics exports it, and the networks that have none."""

from __future__ import annotations

import numpy as np
import yolov5_head as Y5
import yolov8_head as Y
from onnx import TensorProto, helper, numpy_helper

from xcompile.frontend.onnx_import import import_onnx
from xcompile.passes import optimize
from xcompile.quant.score_branch import score_branch_values


def _ancestors(op) -> set[int]:
    """Value ids of every feature value `op` is computed from."""
    out, todo = set(), list(op.feature_inputs())
    while todo:
        v = todo.pop()
        if v.v_id in out:
            continue
        out.add(v.v_id)
        if v.producer is not None:
            todo.extend(v.producer.feature_inputs())
    return out


def test_yolov8_head_class_branch_and_nothing_of_the_boxes():
    """The class branch of each level (Conv + SiLU, Conv + SiLU, 1x1 Conv to the 80 classes):
    per level, the compute values the Concat's class input is computed from (itself included)
    that its box input is not."""
    net = optimize(import_onnx(Y.build(64)))
    got = score_branch_values(net)
    producers = {v.v_id: op for op in net.ops for v in op.outputs}
    levels = [op for op in net.ops if op.op_type == "Concat" and len(op.inputs) == 2
              and op.inputs[1].shape[op.attrs["axis"]] == Y.NC
              and op.inputs[0].shape[op.attrs["axis"]] == 4 * Y.REG_MAX]
    assert len(levels) == 3
    want: set[int] = set()
    for cat in levels:
        box, cls = cat.inputs
        want |= ({cls.v_id} | _ancestors(cls.producer)) - ({box.v_id} | _ancestors(box.producer))
    want = {v for v in want if producers[v].op_type in ("Conv2d", "Silu")}
    assert got == want and len(got) == 15  # 3 levels x (2 x (Conv, SiLU) + Conv)
    finals = [producers[v] for v in got if Y.NC in producers[v].outputs[0].shape]
    assert len(finals) == 3 and all(op.op_type == "Conv2d" for op in finals)


def test_yolov5_sigmoid_over_boxes_and_scores_is_no_branch():
    """YOLOv5 applies one Sigmoid to boxes and scores alike and decodes the box channels
    further: nothing upstream reaches the output only as scores."""
    assert score_branch_values(optimize(import_onnx(Y5.build(64)))) == set()


def _model(nodes, inits, outputs):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        outputs, [numpy_helper.from_array(np.asarray(a, np.float32), n) for n, a in inits])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_classifier_has_no_branch():
    """A classifier's every value ends in its Softmax: calibrating them all by range would be
    a rule for the whole network, not for a head; none is returned."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "fw", "fb"], ["l"], transB=1),
             helper.make_node("Softmax", ["l"], ["prob"], axis=1)]
    inits = [("w", rng.normal(0, 0.3, (8, 3, 3, 3))), ("b", np.zeros(8)),
             ("fw", rng.normal(0, 0.3, (10, 8))), ("fb", np.zeros(10))]
    out = [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, 10])]
    assert score_branch_values(optimize(import_onnx(_model(nodes, inits, out)))) == set()


def test_two_output_head_branch_is_the_score_convolutions():
    """A shared trunk, a box output and a score output of their own (no Concat): the score
    output's convolutions are the branch, the trunk and the box convolution are not."""
    rng = np.random.default_rng(1)
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["t"], kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1], name="trunk"),
             helper.make_node("Relu", ["t"], ["tr"], name="trunk_relu"),
             helper.make_node("Conv", ["tr", "wb", "bb"], ["boxes"], kernel_shape=[1, 1],
                              name="box"),
             helper.make_node("Conv", ["tr", "w1", "b1"], ["s1"], kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1], name="cls1"),
             helper.make_node("Relu", ["s1"], ["s1r"], name="cls1_relu"),
             helper.make_node("Conv", ["s1r", "w2", "b2"], ["logits"], kernel_shape=[1, 1],
                              name="cls2"),
             helper.make_node("Sigmoid", ["logits"], ["scores"], name="sigmoid")]
    inits = [("w0", rng.normal(0, 0.3, (8, 3, 3, 3))), ("b0", np.zeros(8)),
             ("wb", rng.normal(0, 0.3, (4, 8, 1, 1))), ("bb", np.zeros(4)),
             ("w1", rng.normal(0, 0.3, (8, 8, 3, 3))), ("b1", np.zeros(8)),
             ("w2", rng.normal(0, 0.3, (5, 8, 1, 1))), ("b2", np.zeros(5))]
    outs = [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, 4, 16, 16]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 5, 16, 16])]
    net = optimize(import_onnx(_model(nodes, inits, outs)))
    got = score_branch_values(net)
    names = {op.name for op in net.ops if any(v.v_id in got for v in op.outputs)}
    assert names and all(n.startswith("cls") for n in names), names
    assert "cls2" in names

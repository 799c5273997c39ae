"""Element-wise ops on a rank-5 step of a head-splitting chain run on the chips
(npu_model/lowering/commute.py): SVTR's attention as paddle2onnx writes it, ``qkv.reshape(N, T,
3, H, D).transpose(2, 0, 3, 1, 4)``, the three heads sliced off axis 0 and squeezed, ``q *
scale`` (the PP-OCRv4 recognizer's p2o.Mul.180 / 189). The import's clean-up leaves the scaling
on the rank-5 view ``(N, T, 1, H, D)``, which has no NPU map form; the lowering moves it below
the Reshape / Transpose / Reshape chain, so the Multiply is an ELTW layer and the chain COPY
layers, bit-exact against the integer reference and close to onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from exporter_nets import _G
from npu_chip_lib import assert_bit_exact, compile_onnx

CHIPS = ["zg330", "buyi"]
T, HEADS, D = 6, 2, 5


def _ints(g: _G, values: list[int]) -> str:
    from onnx import numpy_helper

    n = g.name("i")
    g.inits.append(numpy_helper.from_array(np.array(values, np.int64), n))
    return n


def _svtr_attention(scale_op: str):
    """x (1, T, C) -> qkv Linear -> SVTR's head split -> (q `scale_op`) @ k^T -> Softmax -> @ v
    -> heads merged -> Linear (paddle2onnx, opset 11: Slice + Squeeze of axis 0)."""
    g = _G(np.random.default_rng(3))
    c = HEADS * D
    qkv = g.op("MatMul", ["x", g.const(g.rng.normal(0, c ** -0.5, (c, 3 * c)))])
    heads = g.op("Transpose", [g.op("Reshape", [qkv, _ints(g, [0, -1, 3, HEADS, D])])],
                 perm=[2, 0, 3, 1, 4])

    def part(i: int) -> str:
        s = g.op("Slice", [heads, _ints(g, [i]), _ints(g, [i + 1]), _ints(g, [0])])
        return g.op("Squeeze", [s], axes=[0])

    q, k, v = part(0), part(1), part(2)
    if scale_op == "Mul":
        q = g.op("Mul", [q, g.const(np.array([D ** -0.5]))])
    else:
        q = g.op(scale_op, [q])
    a = g.op("Softmax", [g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 1, 3, 2])])],
             axis=3)
    o = g.op("Transpose", [g.op("MatMul", [a, v])], perm=[0, 2, 1, 3])
    o = g.op("Reshape", [o, _ints(g, [0, -1, c])])
    y = g.op("MatMul", [o, g.const(g.rng.normal(0, c ** -0.5, (c, c)))])
    return g.model([1, T, c], y, opset=11)


@pytest.mark.parametrize("target", CHIPS)
@pytest.mark.parametrize("scale_op,op_type", [("Mul", "Multiply"), ("Sigmoid", "Sigmoid")])
def test_attention_scaling_on_a_rank5_view_runs_on_the_chip(target, scale_op, op_type):
    import onnxruntime as ort

    model = _svtr_attention(scale_op)
    shape = (1, T, HEADS * D)
    c = compile_onnx(model, shape, target, bits=16)
    (scaling,) = [op for op in c.quantized.ops if op.op_type == op_type]
    assert len(scaling.outputs[0].shape) == 5  # the import leaves it on the rank-5 view
    assert c.host_types() == set(), c.host_ops
    assert len(c.hardop_of(op_type)) == 1
    assert c.on_chip().count("Transpose") == 4  # the three head chains and the merge
    x = np.random.default_rng(5).normal(0, 1, shape).astype(np.float32)
    (got,) = assert_bit_exact(c, [x])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = sess.run(None, {"x": x})
    a, b = got.ravel().astype(np.float64), want.ravel().astype(np.float64)
    assert a @ b / (np.linalg.norm(a) * np.linalg.norm(b)) >= 0.99


def test_a_branching_rank5_step_keeps_the_op_in_place():
    """The moved op's chain must be its alone: when the rank-5 value after it has a second
    reader, moving the op would change what that reader sees, so it stays (on the host)."""
    from npu_model.lowering.commute import commute
    from xir.builder import NetworkBuilder
    from xir.types import INT8, QuantizedType, TensorType

    el = QuantizedType(INT8, 0.05)
    b = NetworkBuilder("branch")
    x = b.input([1, 4, 6], el, None, "x")
    v = b.op("Reshape", [x], out_types=[TensorType(el, [1, 4, 1, 2, 3])], shape=[1, 4, 1, 2, 3])
    s = b.op("Sigmoid", [v], out_types=[TensorType(QuantizedType(INT8, 1 / 250),
                                                   [1, 4, 1, 2, 3])])
    t1 = b.op("Transpose", [s], out_types=[TensorType(s.dtype.element_dtype, [1, 1, 2, 4, 3])],
              perm=[2, 0, 3, 1, 4])
    t2 = b.op("Transpose", [s], out_types=[TensorType(s.dtype.element_dtype, [1, 1, 2, 4, 3])],
              perm=[2, 0, 3, 1, 4])
    b.output(t1, t2)
    net = b.build()
    assert commute(net) == 0
    assert [op.op_type for op in net.ops if op.op_type not in ("Input", "Output")] == \
        ["Reshape", "Sigmoid", "Transpose", "Transpose"]

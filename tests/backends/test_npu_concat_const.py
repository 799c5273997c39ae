"""A Concat with a constant input on the chips: a ViT's class token joined to its patch tokens.

The quantizer quantizes the constant at the Concat's shared output scale (docs/quantization.md,
"Concat"), so the Concat moves codes unchanged; the lowering puts the constant's codes in the
weight blob and COPYs them into their window of the output, as it COPYs every other input
(docs/zg330-lowering.md, "Data movement"). Bit-exact against the integer reference on the
ZG330 and the Buyi, close to onnxruntime's float result."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from npu_chip_lib import assert_bit_exact, check_quantized, compile_onnx, hard_kinds, host_types
from onnx import TensorProto, helper, numpy_helper

from xir.builder import NetworkBuilder
from xir.types import INT8, INT16, QuantizedType, TensorType

CHIPS = ["zg330", "buyi"]


def _vit_stem(rng: np.random.Generator, cls_first: bool = True, d: int = 16):
    """torch.onnx's ViT stem: a patch Conv (k 4, s 4), Reshape (N, D, T), Transpose to
    (N, T, D), Concat with the class token (a constant (1, 1, D)), a Linear (MatMul + Add)."""
    inits = [numpy_helper.from_array(a, n) for n, a in [
        ("w", rng.normal(0, 0.3, (d, 3, 4, 4)).astype(np.float32)),
        ("b", rng.normal(0, 0.1, d).astype(np.float32)),
        ("s", np.array([1, d, 4], np.int64)),
        ("cls", rng.normal(0, 0.5, (1, 1, d)).astype(np.float32)),
        ("lw", rng.normal(0, 0.3, (d, 12)).astype(np.float32)),
        ("lb", rng.normal(0, 0.1, 12).astype(np.float32))]]
    pair = ["cls", "t"] if cls_first else ["t", "cls"]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[4, 4],
                              strides=[4, 4]),
             helper.make_node("Reshape", ["c", "s"], ["r"]),
             helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1]),
             helper.make_node("Concat", pair, ["cat"], axis=1),
             helper.make_node("MatMul", ["cat", "lw"], ["m"]),
             helper.make_node("Add", ["m", "lb"], ["y"])]
    g = helper.make_graph(nodes, "vit_stem",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, 12])],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.reshape(-1).astype(np.float64), b.reshape(-1).astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.mark.parametrize("target", CHIPS)
@pytest.mark.parametrize("cls_first", [True, False])
def test_class_token_concat_runs_on_the_chip(target, cls_first):
    model = _vit_stem(np.random.default_rng(3), cls_first)
    c = compile_onnx(model, (1, 3, 8, 8), target, calib=8)
    concat = next(op for op in c.quantized.ops if op.op_type == "Concat")
    const = next(v for v in concat.inputs if v.is_params)
    y = concat.outputs[0]
    # the constant's codes at the Concat's shared scale (no rescale inside the Concat)
    assert const.dtype.element_dtype.scale[0] == y.dtype.element_dtype.scale[0]
    assert const.data.dtype == np.int8 and concat.op_id not in \
        c.quantized.tags["quantization"]["float_ops"]
    assert "Concat" in c.on_chip() and c.host_types() == set(), c.host_ops
    (hard,) = c.hardop_of("Concat")
    assert {"Conv2d", "Matmul"} & set(c.on_chip())
    assert hard.device_info["kinds"].count("copy") >= 2
    rng = np.random.default_rng(5)
    xs = [rng.normal(0, 1, (1, 3, 8, 8)).astype(np.float32) for _ in range(3)]
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for x in xs:
        (got,) = assert_bit_exact(c, [x])
        (want,) = sess.run(None, {"x": x})
        assert _cosine(got, want) >= 0.99, _cosine(got, want)


def _t(shape, bits=8, scale=0.05):
    el = QuantizedType(INT8 if bits == 8 else INT16, scale)
    return TensorType(el, list(shape), "NHWC" if len(shape) == 4 else None)


@pytest.mark.parametrize("target", CHIPS)
@pytest.mark.parametrize("shape,const_shape,axis,bits", [
    ((1, 4, 6), (1, 1, 6), 1, 8),       # tokens (B, T, D): a class token in front
    ((1, 4, 6), (1, 2, 6), 1, 16),      # two register tokens, int16
    ((2, 3, 5, 4), (2, 1, 5, 4), 1, 8),  # a constant row per item, batch of 2
    ((2, 3, 5, 4), (2, 3, 2, 4), 2, 8),  # constant columns per item, batch of 2
    ((2, 3, 5, 4), (2, 3, 5, 3), 3, 8),  # constant channels per item, batch of 2
])
def test_constant_concat_is_copied_from_the_weight_blob(target, shape, const_shape, axis, bits):
    """x -> Sigmoid -> Concat(constant, .) -> Tanh, built quantized: the Concat's constant is a
    COPY from the weight blob, for every batch item, bit-exact."""
    rng = np.random.default_rng(sum(shape) + axis)
    b = NetworkBuilder("cc")
    layout = "NHWC" if len(shape) == 4 else None
    x = b.input(list(shape), _t(shape, bits).element_dtype, layout, "x")
    s = b.op("Sigmoid", [x], out_types=[_t(shape, bits, 1 / 250)])
    info = np.iinfo(np.int8 if bits == 8 else np.int16)
    codes = rng.integers(info.min, info.max + 1, const_shape).astype(info.dtype)
    k = b.net.newParams(codes, "cls", "NHWC" if len(shape) == 4 else None,
                        _t(const_shape, bits, 1 / 250).element_dtype)
    out = list(shape)
    out[axis] += const_shape[axis]
    cat = b.op("Concat", [k, s], out_types=[_t(out, bits, 1 / 250)], axis=axis)
    b.output(b.op("Tanh", [cat], out_types=[_t(out, bits, 1 / 120)]))
    net = b.build()
    z = check_quantized(net, target, seed=len(shape))
    assert "Concat" not in host_types(z, target)
    kinds = [[k for k in ks if k != "lut"] for ks in hard_kinds(z, "Concat", net)]
    folded = axis != 1 or len(shape) == 3  # the batch items run as one COPY each
    assert kinds and kinds[0].count("copy") == 2 * (1 if folded else shape[0])


@pytest.mark.parametrize("target", CHIPS)
def test_a_constant_at_another_scale_stays_on_the_host(target):
    """A constant whose codes are not at the output's scale would need a rescale: the lowering
    refuses it with a reason, and the HostBackend still runs it."""
    b = NetworkBuilder("cc")
    x = b.input([1, 4, 6], INT8, None, "x")
    s = b.op("Sigmoid", [x], out_types=[_t((1, 4, 6), 8, 1 / 250)])
    k = b.net.newParams(np.arange(6, dtype=np.int8).reshape(1, 1, 6), "cls", None,
                        QuantizedType(INT8, 1 / 100))
    cat = b.op("Concat", [k, s], out_types=[_t((1, 5, 6), 8, 1 / 250)], axis=1)
    b.output(b.op("Tanh", [cat], out_types=[_t((1, 5, 6), 8, 1 / 120)]))
    net = b.build()
    z = check_quantized(net, target)
    assert "Concat" in host_types(z, target)
    reason = next(r for k_, r in z.tags[target]["host_ops"].items()
                  if z.getOpById(int(k_)).op_type == "Concat")
    assert "rescale" in reason or "constant" in reason

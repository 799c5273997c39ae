"""LayerNorm written out over the tokens of a (N, C, L) map as paddle2onnx writes it (PaddleOCR's
SVTR recognizer), whose ReduceMeans the importer makes global pools: one LayerNorm over the last
axis (`xcompile.passes.pooled_layernorm`), exact in float, integer once quantized."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from xcompile.passes import optimize
from xcompile.quant.calibrate import run_float
from xcompile.quant.quantize import quantize_network
from xcompile.quant.report import cosine

C, L, D = 24, 10, 16


def svtr_layernorm(rng: np.random.Generator, *, back: bool = True, mean_axis: int = -1,
                   affine: bool = True) -> onnx.ModelProto:
    """A (1, C, 1, L) conv map flattened to (1, C, L) and transposed to tokens (1, L, C), a
    LayerNorm over C written out (ReduceMean, Sub, Pow 2, ReduceMean, Add eps, Sqrt, Div, Mul
    gamma, Add beta), a residual Add and a projection of the tokens (`back`) or the normalized
    map transposed back to (1, C, L) as the output."""
    inits, nodes = [], []

    def const(name, arr, dtype=np.float32):
        inits.append(numpy_helper.from_array(np.asarray(arr, dtype), name))
        return name

    const("w", rng.normal(0, 0.3, (C, C, 1, 3)))
    const("b", rng.normal(0, 0.1, C))
    const("flat", [1, C, L], np.int64)
    nodes += [helper.make_node("Conv", ["x", "w", "b"], ["conv"], pads=[0, 1, 0, 1]),
              helper.make_node("Reshape", ["conv", "flat"], ["f"]),
              helper.make_node("Transpose", ["f"], ["t"], perm=[0, 2, 1]),
              helper.make_node("ReduceMean", ["t"], ["m"], axes=[mean_axis]),
              helper.make_node("Sub", ["t", "m"], ["dev"]),
              helper.make_node("Pow", ["dev", const("two", 2.0)], ["sq"]),
              helper.make_node("ReduceMean", ["sq"], ["var"], axes=[mean_axis]),
              helper.make_node("Add", ["var", const("eps", 1e-6)], ["ve"]),
              helper.make_node("Sqrt", ["ve"], ["sd"]),
              helper.make_node("Div", ["dev", "sd"], ["n"])]
    last = "n"
    if affine:
        nodes += [helper.make_node("Mul", ["n", const("gamma", rng.uniform(0.5, 1.5, C))],
                                   ["g"]),
                  helper.make_node("Add", ["g", const("beta", rng.normal(0, 0.2, C))], ["ln"])]
        last = "ln"
    if back:
        nodes.append(helper.make_node("MatMul", [last, const("proj", rng.normal(0, 0.3, (C, D)))],
                                      ["y"]))
        shape = [1, L, D]
    else:
        nodes += [helper.make_node("Transpose", [last], ["tb"], perm=[0, 2, 1]),
                  helper.make_node("Add", ["tb", "f"], ["y"])]
        shape = [1, C, L]
    g = helper.make_graph(nodes, "svtr_ln",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, 1, L])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)])
    m.ir_version = 7
    onnx.checker.check_model(m)
    return m


def _imported(model, tmp_path):
    import onnxruntime as ort

    from xcompile.quant.qdq import import_qdq

    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    net = import_qdq(str(path), {"x": [1, C, 1, L]})
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(5)
    xs = [rng.normal(0, 1, (1, C, 1, L)).astype(np.float32) * rng.uniform(0.2, 3.0, (1, C, 1, 1))
          .astype(np.float32) for _ in range(6)]
    return net, xs, [sess.run(None, {"x": x})[0] for x in xs]


@pytest.mark.parametrize("back", [True, False], ids=["tokens_read_on", "map_read_on"])
def test_the_written_out_layernorm_is_one_layernorm_exact_in_float(back, tmp_path):
    net, xs, want = _imported(svtr_layernorm(np.random.default_rng(0), back=back), tmp_path)
    assert [op.op_type for op in net.ops].count("AvgPool2d") == 2  # the importer's pools
    opt = optimize(net)
    types = [op.op_type for op in opt.ops]
    assert types.count("LayerNorm") == 1
    assert not {"AvgPool2d", "Div", "Sqrt", "Sub", "Unary"} & set(types)
    ln = next(op for op in opt.ops if op.op_type == "LayerNorm")
    assert ln.attrs["axis"] == 2 and ln.inputs[0].shape == (1, L, C)
    # tokens read by the projection directly; a map read on gets its Transpose back
    readers = [op.op_type for op in ln.outputs[0].consumers]
    assert readers == (["Matmul"] if back else ["Transpose"])
    got = run_float(opt, [[x] for x in xs], lambda v, a: None)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g[0], w, rtol=1e-5, atol=1e-5 * float(np.abs(w).max()))


def test_a_mean_over_the_other_axis_is_no_layernorm_over_the_channels(tmp_path):
    """Means over the tokens (axis 1 of the (1, L, C) view) stay axis-local Reduces at import
    and normalize over L: `normalization.fold_layernorm` takes them (gamma and beta, along C,
    stay a Multiply and an Add), this pass does not, and the network still computes what
    onnxruntime does."""
    net, xs, want = _imported(svtr_layernorm(np.random.default_rng(1), mean_axis=1), tmp_path)
    assert "AvgPool2d" not in [op.op_type for op in net.ops]
    opt = optimize(net)
    (ln,) = [op for op in opt.ops if op.op_type == "LayerNorm"]
    assert ln.inputs[0].shape == (1, C, L) and ln.attrs["axis"] == 2
    got = run_float(opt, [[x] for x in xs], lambda v, a: None)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g[0], w, rtol=1e-4, atol=1e-4 * float(np.abs(w).max()))


def test_without_gamma_and_beta(tmp_path):
    net, xs, want = _imported(svtr_layernorm(np.random.default_rng(2), affine=False), tmp_path)
    opt = optimize(net)
    assert [op.op_type for op in opt.ops].count("LayerNorm") == 1
    got = run_float(opt, [[x] for x in xs], lambda v, a: None)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g[0], w, rtol=1e-5, atol=1e-5 * float(np.abs(w).max()))


def test_the_layernorm_computes_in_integers(tmp_path):
    """Quantized, the LayerNorm reads 16-bit codes (`stream_bits`) and writes codes for the
    projection; nothing of it stays float (the written-out form divided by the standard
    deviation in float on the host, and squared in int8)."""
    net, xs, want = _imported(svtr_layernorm(np.random.default_rng(3)), tmp_path)
    q = quantize_network(net, [[x] for x in xs[:4]])
    assert q.tags["quantization"]["float_ops"] == []
    ln = next(op for op in q.ops if op.op_type == "LayerNorm")
    assert ln.inputs[0].dtype.element_dtype.storage.bits == 16
    assert ln.outputs[0].dtype.is_quantized()
    got = run_float(q, [[x] for x in xs[4:]], lambda v, a: None)
    for g, w in zip(got, want[4:]):
        assert cosine(g[0], w) > 0.999

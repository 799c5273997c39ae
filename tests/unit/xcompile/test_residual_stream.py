"""A LayerNorm's input is stored in 16 bits and the Adds writing it compute in 16 bits
(`xcompile.quant.bits.stream_bits`, docs/quantization.md section 10): a transformer's residual
stream, whose rows (a ViT's class token) can lie far below the tensor's range."""

from __future__ import annotations

import numpy as np
import pytest
from field_nets import FIELD_NETS

from xcompile.passes import optimize
from xcompile.quant.bits import logit_bits, normalized_inputs, stream_bits
from xcompile.quant.calibrate import run_float
from xcompile.quant.capability import integer_ops
from xcompile.quant.mixed import int16_share, part_cosines, planned_int16, worst_part
from xcompile.quant.quantize import quantize_network
from xcompile.quant.report import cosine

NAME = "torch_vit_tiny_block"


@pytest.fixture(scope="module")
def vit(tmp_path_factory):
    """The field corpus ViT block as torch.onnx writes it, imported; its calibration samples
    and held-out inputs, with onnxruntime's float outputs on the latter."""
    import onnxruntime as ort

    from xcompile.quant.qdq import import_qdq

    fn = FIELD_NETS[NAME]
    model = fn.build(np.random.default_rng(7))
    path = tmp_path_factory.mktemp("vit") / "vit.onnx"
    path.write_bytes(model.SerializeToString())
    net = import_qdq(str(path), {"x": list(fn.shape)}, name=NAME)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    held = [[x] for x in fn.inputs(4, 5)]
    want = [[sess.run(None, {"x": s[0]})[0]] for s in held]
    return net, [[x] for x in fn.inputs(4, 0)], held, want


def test_the_adds_writing_layernorm_inputs_are_raised(vit):
    net = optimize(vit[0])
    ints = integer_ops(net)
    ops = {op.op_id: op for op in net.ops}
    norms = {op.op_id for op in net.ops if op.op_type == "LayerNorm"}
    assert len(norms) == 3 and norms <= ints
    stream = stream_bits(net, ints, 8)
    assert {ops[o].op_type for o in stream} == {"Add"} and len(stream) == 3
    assert set(stream) == {v.producer.op_id for v in normalized_inputs(net, ints)}
    assert set(stream) <= set(logit_bits(net, ints, 8))  # part of the default raises
    assert stream_bits(net, ints, 16) == {}
    at16 = planned_int16(net, {})
    # the stream's Adds and LayerNorms compute in 16 bits; no projection does (the Matmuls
    # writing into the stream write int16 from int8 inputs), the one Conv2d is the softmax
    # logits' scaling (16-bit logits, `logit_bits`)
    assert set(stream) | norms <= at16
    assert sorted(ops[o].name for o in at16 if ops[o].op_type in ("Conv2d", "Matmul")) == \
        ["mul_38"]
    assert int16_share(net, at16) < 0.002

def test_the_class_token_keeps_its_row(vit):
    """Every LayerNorm reads 16-bit codes, the projections and the patch embedding keep int8
    weights and inputs, and the class token's row of the last LayerNorm -- 5-10x smaller
    than the patch tokens' rows before it, magnified back to unit scale by the LayerNorm --
    keeps a cosine above 0.99 on held-out inputs (it read 0.96 with an 8-bit stream; the
    10 logits it feeds 0.976)."""
    net, samples, held, want = vit
    q = quantize_network(net, samples)
    for op in q.ops:
        if op.op_type == "LayerNorm":
            assert op.inputs[0].dtype.element_dtype.storage.bits == 16
        if op.op_type in ("Conv2d", "Matmul") and op.name != "mul_38":  # mul_38: logits
            assert op.inputs[1].dtype.element_dtype.storage.bits == 8, op.name
    opt = optimize(net)
    last = [op for op in opt.ops if op.op_type == "LayerNorm"][-1].outputs[0].v_id
    got: dict[int, list] = {}

    def grab(store):
        return lambda v, a: store.setdefault(v.tags.get("float_v_id", v.v_id), []).append(
            np.asarray(a, np.float64)) if v.tags.get("float_v_id", v.v_id) == last else None

    ref: dict[int, list] = {}
    run_float(opt, held, grab(ref))
    outs = run_float(q, held, grab(got))
    rows = [cosine(g[0, 0], f[0, 0]) for g, f in zip(got[last], ref[last])]
    assert min(rows) > 0.99, rows
    assert worst_part(part_cosines(q, want, outs))[1] >= 0.99


def test_the_cap_counts_the_ops_a_raise_adds(vit):
    """The layer cap of the mixed-precision search counts the layers a raise adds to those
    holding 16-bit values anyway: the ViT block's ten ops computing in 16 bits (residual Adds,
    LayerNorms, softmax logits and the Concat and Reshape sharing the first Add's input)
    exceed its budget of 2 layers (10% of its layers, at least one raise) by themselves, and
    counting them left no layer raisable."""
    from types import SimpleNamespace

    from xcompile.quant.mixed import _capped_order, op_budget

    net = optimize(vit[0])
    base = planned_int16(net, {})
    assert len(base) == 10 and op_budget(net, 0.10) == 2
    ids = {op.name: op.op_id for op in net.ops if op.op_type == "Matmul"}
    gelu = next(op.op_id for op in net.ops if op.op_type == "Gelu")
    # the head widens itself and its Slice and Reshape (3 ops, 0.3% of the MACs); the MLP's
    # first projection is 21% of the MACs: passed over; the GELU table 1 op, no MACs
    rows = [SimpleNamespace(op_id=o) for o in (ids["matmul_75"], ids["matmul_53"], gelu)]
    order, shares = _capped_order(net, rows, {}, 0.10)
    assert [r.op_id for r in order] == [ids["matmul_75"]]
    order, shares = _capped_order(net, rows[1:], {}, 0.10)
    assert [r.op_id for r in order] == [gelu] and shares[0] < 0.01

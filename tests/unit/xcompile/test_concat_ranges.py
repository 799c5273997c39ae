"""Concat branches of far-apart ranges keep their own scales (xcompile.quant.concats
`concat_plan`): an inner branch far below the others is requantized into the Concat's scale by
a Cast the NPUs run as an ELTW (its producer and its other readers keep their resolution), the
Concat stored in 16 bits so the branch keeps its codes there too, and the result is bit-exact
between the HostBackend's integer reference and both chips."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import xcompile.quant.concats as concats_mod
from xcompile.frontend.onnx_import import import_onnx
from xcompile.quant.parts import compare_samples, output_parts
from xcompile.quant.quantize import quantize_network
from xir.types import QuantizedType


def _model():
    """x -> conv (x40: range ~100) and conv -> Sigmoid -> x0.05 (range 0..0.05); both
    concatenated and read by a 1x1 conv (output "y"); the small branch is also read by a conv of
    its own (output "z")."""
    r = np.random.default_rng(0)
    inits, nodes = [], []

    def const(name, a):
        inits.append(numpy_helper.from_array(np.asarray(a, np.float32), name))
        return name

    def conv(x, cin, cout, name, gain=1.0):
        w = r.normal(0, np.sqrt(2 / (cin * 9)), (cout, cin, 3, 3)) * gain
        nodes.append(helper.make_node("Conv", [x, const(name + ".w", w),
                                               const(name + ".b", r.normal(0, 0.1, cout))],
                                      [name], pads=[1, 1, 1, 1]))
        return name

    big = conv("x", 3, 8, "big", gain=40.0)
    s = conv("x", 3, 8, "small_pre")
    nodes.append(helper.make_node("Sigmoid", [s], ["sig"]))
    nodes.append(helper.make_node("Mul", ["sig", const("k", 0.05)], ["small"]))
    nodes.append(helper.make_node("Concat", [big, "small"], ["cat"], axis=1))
    conv("cat", 16, 8, "y")
    conv("small", 8, 4, "z", gain=50.0)
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
          for n, s in (("x", [1, 3, 16, 16]), ("y", [1, 8, 16, 16]), ("z", [1, 4, 16, 16]))]
    g = helper.make_graph(nodes, "concat_ranges", vi[:1], vi[1:], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _images(n, seed):
    r = np.random.default_rng(seed)
    return [r.uniform(0, 1, (1, 3, 16, 16)).astype(np.float32) for _ in range(n)]


@pytest.fixture(scope="module")
def nets():
    model = _model()
    net = import_onnx(model)
    q = quantize_network(net, _images(4, 1), weight_rounding="nearest")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(concats_mod, "BRANCH_SPREAD", float("inf"))
        # the baseline without the activation bias correction, which gives z's convolution,
        # reading only 0 codes, the float output's mean per channel: a constant per channel
        # whose cosine (0.94) no longer reads as the collapse the shared scale is
        shared = quantize_network(net, _images(4, 1), weight_rounding="nearest",
                                  activation_bias=False)
    sess = ort.InferenceSession(model.SerializeToString())
    xs = _images(3, 7)
    return q, shared, xs, [sess.run(None, {"x": x}) for x in xs]


def _run(net, xs, backends, devices):
    from xrt import Session

    s = Session.Create(backends, net.view(0), devices)
    try:
        s.apply()
        return [[np.asarray(t).copy() for t in s.forward([x])] for x in xs], \
            s.backendBindings()
    finally:
        s.close()


def test_far_branch_keeps_its_scale_and_its_other_reader_gains(nets):
    from host_backend import HostBackend
    from xrt import HostDevice

    q, shared, xs, ref = nets
    (cat,) = q.tags["quantization"]["concats"].values()
    assert cat["form"] == "int16" and max(cat["spread"]) > 1000
    concat = next(op for op in q.ops if op.op_type == "Concat")
    cast = concat.inputs[1].producer
    small, y = cast.inputs[0].dtype.element_dtype, concat.outputs[0].dtype.element_dtype
    assert cast.op_type == "Cast" and isinstance(small, QuantizedType)
    assert small.numpy_dtype == np.int8 and y.numpy_dtype == np.int16  # int8 -> int16
    assert float(y.scale[0]) / float(small.scale[0]) > 1000 / 256
    assert concat.inputs[0].dtype.element_dtype.scale[0] == y.scale[0]
    reader = concat.outputs[0].consumers[0]
    assert reader.op_type == "Conv2d" and str(reader.op_id) in q.tags["quantization"]["op_bits"]
    host = [HostBackend], [HostDevice.Default()]
    got, _ = _run(q, xs, *host)
    base, _ = _run(shared, xs, *host)
    parts = output_parts(q)
    mine, theirs = compare_samples(ref, got, parts), compare_samples(ref, base, parts)
    assert mine[0].cosine > 0.999 and mine[0].cosine >= theirs[0].cosine - 1e-4  # y
    # z reads the small branch: at the shared scale (step ~0.8) it is all 0 codes
    assert mine[1].cosine > 0.99 and not mine[1].collapsed
    assert theirs[1].collapsed


@pytest.mark.parametrize("target", ["zg330", "buyi"])
def test_requantizing_cast_runs_on_the_chip_bit_exactly(nets, target):
    from host_backend import HostBackend
    from xrt import Device, HostDevice

    q, _, xs, _ = nets
    if target == "zg330":
        from zg330backend import ZG330Backend as B
        from zg330backend.lowering import adapt, lower
    else:
        from buyibackend import BuyiBackend as B
        from buyibackend.lowering import adapt, lower
    low = lower(adapt(q))
    cast = next(op for op in q.ops if op.op_type == "Concat").inputs[1].producer
    concat = next(op for op in q.ops if op.op_type == "Concat")
    hard = [op for op in low.ops if op.op_type == "HardOp"]
    origin = {i for op in hard for i in op.attrs["origin_ops_id"]}
    assert cast.op_id in origin and concat.op_id in origin  # the ELTW requant and the alias
    dev = Device.Open(f"sim://{target}")
    try:
        got, bound = _run(low, xs, [B, HostBackend], [dev, HostDevice.Default()])
    finally:
        dev.close()
    assert all(isinstance(bound[op.op_id], B) for op in hard)
    ref, _ = _run(q, xs, [HostBackend], [HostDevice.Default()])
    for r, g in zip(ref, got):
        assert all(np.array_equal(a, b) for a, b in zip(r, g))

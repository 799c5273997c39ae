"""Buyi bit-exactness on randomised one-layer networks (int8 and int16) against the HostBackend
integer reference. The network builders and strategies are the ZG330 suite's: both targets
lower the same quantized ops through npu_model.lowering, with different channel units."""

from __future__ import annotations

import os
import sys

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "zg330"))
from test_zg330_lowering import SETTINGS, _conv_net, conv_cfg, small_map  # noqa: E402
from test_zg330_lowering_lib import out_type, qin, rand_input  # noqa: E402

from xir.builder import NetworkBuilder  # noqa: E402


def _check_buyi(net, rng, bits, dev):
    from buyibackend import BuyiBackend
    from buyibackend.lowering import lower
    from host_backend import HostBackend
    from xrt import HostDevice, Session

    xs = [rand_input(rng, v, bits) for v in net.inputs()]
    hs = Session.Create([HostBackend], net.view(0), [HostDevice.Default()])
    hs.apply()
    ref = [np.asarray(t).copy() for t in hs.forward(xs)]
    z = lower(net)
    s = Session.Create([BuyiBackend, HostBackend], z.view(0), [dev, HostDevice.Default()])
    s.apply()
    try:
        got = [np.asarray(t).copy() for t in s.forward(xs)]
    finally:
        s.close()
    for a, b in zip(ref, got):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    assert any(op.op_type == "HardOp" and op.compile_target == "@buyi" for op in z.ops)
    # it ran on the chip: nothing but HardOps and the host/NPU edge glue is left
    edge = {"Input", "Output", "HardOp", "Cast", "AlignAxis", "PruneAxis"}
    assert {op.op_type for op in z.ops} <= edge, z.tags.get("buyi", {}).get("host_ops")


@settings(max_examples=80, **SETTINGS)
@given(conv_cfg(8))
def test_buyi_conv_int8_bit_exact(buyi_dev, c):
    net, rng = _conv_net(c)
    _check_buyi(net, rng, 8, buyi_dev)


@settings(max_examples=40, **SETTINGS)
@given(conv_cfg(16))
def test_buyi_conv_int16_bit_exact(buyi_dev, c):
    net, rng = _conv_net(c)
    _check_buyi(net, rng, 16, buyi_dev)


@settings(max_examples=40, **SETTINGS)
@given(st.sampled_from(["Add", "Multiply", "MaxPool2d"]), small_map(), st.sampled_from([8, 16]),
       st.integers(0, 2 ** 31))
def test_buyi_eltw_and_pool_bit_exact(buyi_dev, op, hwc, bits, seed):
    rng = np.random.default_rng(seed)
    h, w, c = hwc
    b = NetworkBuilder(op)
    s_a = float(rng.uniform(0.01, 0.1))
    x = qin(b, (1, h, w, c), bits, s_a, "a")
    if op == "MaxPool2d":
        h, w = max(h, 2), max(w, 2)
        b = NetworkBuilder(op)
        x = qin(b, (1, h, w, c), bits, s_a, "a")
        y = b.op(op, [x], out_types=[out_type((1, h // 2, w // 2, c), bits, s_a)],
                 pool_height=2, pool_width=2, stride_height=2, stride_width=2)
    else:
        yb = qin(b, (1, h, w, c), bits, float(rng.uniform(0.01, 0.1)), "b")
        y = b.op(op, [x, yb], out_types=[out_type((1, h, w, c), bits,
                                                   float(rng.uniform(0.01, 0.2)))])
    b.output(y)
    _check_buyi(b.build(), rng, bits, buyi_dev)


@settings(max_examples=30, **SETTINGS)
@given(st.sampled_from(["Sigmoid", "Tanh", "Power"]), small_map(), st.sampled_from([8, 16]),
       st.integers(0, 2 ** 31))
def test_buyi_tables_bit_exact(buyi_dev, kind, hwc, bits, seed):
    """The lookup-table ops, Power (LRN's denominator, ONNX Pow) with drawn parameters."""
    rng = np.random.default_rng(seed)
    h, w, c = hwc
    b = NetworkBuilder(kind)
    s_in = float(rng.uniform(0.01, 0.1))
    attrs = {} if kind != "Power" else {
        "power": float(rng.choice([-0.75, -1.0, 0.5, 2.5])),
        "scale": float(rng.uniform(1e-3, 1.0)), "shift": float(rng.uniform(0.5, 2.0))}
    x = qin(b, (1, h, w, c), bits, s_in, "a")
    b.output(b.op(kind, [x], out_types=[out_type((1, h, w, c), bits, s_in * 0.7)], **attrs))
    _check_buyi(b.build(), rng, bits, buyi_dev)


@settings(max_examples=20, **SETTINGS)
@given(st.sampled_from(["Softmax", "LayerNorm"]), small_map(), st.sampled_from([8, 16]),
       st.integers(0, 2 ** 31))
def test_buyi_row_norms_bit_exact(buyi_dev, kind, hwc, bits, seed):
    """Softmax and LayerNorm over the channels on Buyi's NORM unit (Buyi's channel unit
    pitches the rows differently from ZG330's)."""
    rng = np.random.default_rng(seed)
    h, w, c = hwc
    b = NetworkBuilder(kind)
    x = qin(b, (1, h, w, c), bits, float(rng.uniform(0.001, 0.1)), "a")
    qmax = 127 if bits == 8 else 32767
    if kind == "Softmax":
        y = b.op(kind, [x], out_types=[out_type((1, h, w, c), bits, 1.0 / qmax)], axis=-1)
    else:
        gamma = b.params(rng.normal(1, 0.3, c).astype(np.float32), "gamma")
        beta = b.params(rng.normal(0, 0.2, c).astype(np.float32), "beta")
        y = b.op(kind, [x, gamma, beta], out_types=[out_type((1, h, w, c), bits, 4.0 / qmax)],
                 axis=-1)
    b.output(y)
    _check_buyi(b.build(), rng, bits, buyi_dev)

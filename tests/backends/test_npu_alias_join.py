"""Pure aliases join the HardOp that writes their input (npu_model/lowering/lower.py,
`_join_aliases`): a Reshape / Split placed as a view of its input's buffer has no layer, so it
needs no HardOp of its own. A 1-D Conv's (N, L, C) <-> (N, 1, L, C) Reshapes ride with the op
before them, and the 1-D network compiles to its 2-D twin's HardOps. Bit-exact against the
integer reference on both chips, the joined op asserted inside its producer's HardOp."""

from __future__ import annotations

import numpy as np
import pytest
from npu_chip_lib import check_quantized, host_types

from xir.builder import NetworkBuilder
from xir.types import INT8, QuantizedType, TensorType

CHIPS = ["zg330", "buyi"]


def _t(shape, scale):
    return TensorType(QuantizedType(INT8, scale), list(shape),
                      "NHWC" if len(shape) == 4 else None)


def _hardops(z):
    return [op for op in z.ops if op.op_type == "HardOp"]


def _origin(z, net):
    types = {op.op_id: op.op_type for op in net.ops}
    return [[types[i] for i in op.origin_ops_id] for op in _hardops(z)]


@pytest.mark.parametrize("target", CHIPS)
@pytest.mark.parametrize("items", [1, 2])
def test_a_unit_axis_reshape_rides_in_the_hardop_before_it(target, items):
    """Sigmoid on (N, 1, L, C) -> Reshape to (N, L, C) (a 1-D conv's output view) -> Tanh:
    two HardOps, the Reshape inside the Sigmoid's, no layer of its own."""
    b = NetworkBuilder("join")
    x = b.input([items, 1, 12, 8], QuantizedType(INT8, 0.05), "NHWC", "x")
    s = b.op("Sigmoid", [x], out_types=[_t((items, 1, 12, 8), 1 / 250)])
    r = b.op("Reshape", [s], out_types=[_t((items, 12, 8), 1 / 250)], shape=[items, 12, 8])
    b.output(b.op("Tanh", [r], out_types=[_t((items, 12, 8), 1 / 120)]))
    net = b.build()
    z = check_quantized(net, target, seed=items)
    assert host_types(z, target) == set()
    assert _origin(z, net) == [["Sigmoid", "Reshape"], ["Tanh"]]
    assert [op.device_info["layers"] for op in _hardops(z)] == [1, 1]  # a LUT each


@pytest.mark.parametrize("target", CHIPS)
def test_a_split_joins_its_producer(target):
    """Sigmoid -> last-axis Split (channel windows of the Sigmoid's buffer) -> a Tanh on
    each piece: the Split rides in the Sigmoid's HardOp, whose outputs are its pieces."""
    b = NetworkBuilder("split")
    x = b.input([1, 6, 5, 16], QuantizedType(INT8, 0.05), "NHWC", "x")
    s = b.op("Sigmoid", [x], out_types=[_t((1, 6, 5, 16), 1 / 250)])
    parts = b.op("Split", [s], out_types=[_t((1, 6, 5, 8), 1 / 250)] * 2, axis=-1,
                 sections=[8, 8])
    b.output(*[b.op("Tanh", [p], out_types=[_t((1, 6, 5, 8), 1 / 120)]) for p in parts])
    net = b.build()
    z = check_quantized(net, target, seed=3)
    assert _origin(z, net) == [["Sigmoid", "Split"], ["Tanh"], ["Tanh"]]
    assert [v.v_id for v in _hardops(z)[0].outputs] == [v.v_id for v in parts]


@pytest.mark.parametrize("target", CHIPS)
def test_a_split_read_by_the_host_is_a_copy(target):
    """The same Split with its pieces leaving the network: a value read by the host is
    dense, so the second piece (channels 8..15 of the Sigmoid's buffer) needs a COPY layer;
    a HardOp with a layer is no alias and keeps its own place."""
    b = NetworkBuilder("split_out")
    x = b.input([1, 6, 5, 16], QuantizedType(INT8, 0.05), "NHWC", "x")
    s = b.op("Sigmoid", [x], out_types=[_t((1, 6, 5, 16), 1 / 250)])
    parts = b.op("Split", [s], out_types=[_t((1, 6, 5, 8), 1 / 250)] * 2, axis=-1,
                 sections=[8, 8])
    b.output(*parts)
    net = b.build()
    z = check_quantized(net, target, seed=3)
    assert _origin(z, net) == [["Sigmoid"], ["Split"]]
    assert "copy" in _hardops(z)[1].device_info["kinds"]


@pytest.mark.parametrize("target", CHIPS)
def test_an_alias_into_more_batch_items_keeps_its_own_hardop(target):
    """A 3x3 MaxPool on one (1, 8, 8, 8) map, then a Reshape into (2, 4, 8, 8), two items of
    the same pixels: joined, the pool's HardOp would run once per item of its largest map;
    so the Reshape keeps its own HardOp and the pool stays one layer."""
    b = NetworkBuilder("items")
    x = b.input([1, 8, 8, 8], QuantizedType(INT8, 0.05), "NHWC", "x")
    p = b.op("MaxPool2d", [x], out_types=[_t((1, 8, 8, 8), 0.05)], pool_height=3,
             pool_width=3, pad_top=1, pad_bottom=1, pad_left=1, pad_right=1)
    r = b.op("Reshape", [p], out_types=[_t((2, 4, 8, 8), 0.05)], shape=[2, 4, 8, 8])
    b.output(b.op("Tanh", [r], out_types=[_t((2, 4, 8, 8), 1 / 120)]))
    net = b.build()
    z = check_quantized(net, target, seed=5)
    assert _origin(z, net) == [["MaxPool2d"], ["Reshape"], ["Tanh"]]
    assert [op.device_info["layers"] for op in _hardops(z)] == [1, 0, 1]


@pytest.mark.parametrize("target", CHIPS)
def test_an_alias_of_a_host_value_keeps_its_own_hardop(target):
    """A Reshape of the network's input (written by the host) has no HardOp to join: it
    stays a zero-layer HardOp, and the Sigmoid after it reads the same buffer."""
    b = NetworkBuilder("host_alias")
    x = b.input([1, 12, 8], QuantizedType(INT8, 0.05), None, "x")
    r = b.op("Reshape", [x], out_types=[_t((1, 1, 12, 8), 0.05)], shape=[1, 1, 12, 8])
    b.output(b.op("Sigmoid", [r], out_types=[_t((1, 1, 12, 8), 1 / 250)]))
    net = b.build()
    z = check_quantized(net, target, seed=4)
    assert _origin(z, net) == [["Reshape"], ["Sigmoid"]]
    assert [op.device_info["layers"] for op in _hardops(z)] == [0, 1]


def test_the_1d_net_has_its_2d_twins_hardops():
    """Conv1d-BN-ReLU x2 (torch.onnx) and its 2-D twin on (1, 4, 1, 32): as many HardOps, the
    two unit-axis Reshapes inside the HardOps before them (zg330)."""
    import sys
    from pathlib import Path

    from npu_chip_lib import assert_bit_exact, compile_onnx

    from xcompile.placement import placement

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "xcompile"))
    from test_onnx_import_1d_folds import conv_bn_relu

    c1 = compile_onnx(conv_bn_relu(1), (1, 4, 32), "zg330")
    c2 = compile_onnx(conv_bn_relu(2), (1, 4, 1, 32), "zg330")
    p1, p2 = placement(c1.lowered, "zg330"), placement(c2.lowered, "zg330")
    assert p1.hardops == p2.hardops and p1.host_ops == p2.host_ops, (p1.lines(), p2.lines())
    assert c1.on_chip().count("Reshape") == 2
    assert c1.host_types() == set()
    x = np.random.default_rng(2).normal(0, 1, (1, 4, 32)).astype(np.float32)
    assert_bit_exact(c1, [x])

"""Batches on the chips: a network whose ONNX batch dimension is dynamic, compiled for batch N,
runs every HardOp on the chip for every batch item, bit-exact against the integer reference, on
the ZG330 and the Buyi (docs/zg330-lowering.md, "Batches")."""

from __future__ import annotations

import numpy as np
import pytest
from exporter_nets import _G
from npu_chip_lib import assert_bit_exact, compile_onnx

#: ops the batch network holds that must all run on the chip
CHIP_OPS = {"Conv2d", "Matmul", "Add", "Multiply", "MaxPool2d", "AvgPool2d", "Sigmoid",
            "Reshape", "Transpose"}


def _batch_net(seed: int = 0):
    """A small CNN as torch.onnx writes it with a dynamic batch ("N"): a strided 3x3 stem,
    BN + ReLU, a depthwise 3x3, a max pool, a squeeze-excite branch (global pool, 1x1 convs,
    sigmoid, a per-item channel multiply), a residual add, global pool, flatten and a Gemm."""
    g = _G(np.random.default_rng(seed))
    y = g.op("Relu", [g.bn(g.conv("x", 3, 16, stride=2), 16)])
    y = g.op("Relu", [g.conv(y, 16, 16, group=16)])
    y = g.op("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])
    s = g.op("GlobalAveragePool", [y])
    s = g.op("Relu", [g.conv(s, 16, 8, k=1)])
    s = g.op("Sigmoid", [g.conv(s, 8, 16, k=1)])
    y = g.op("Add", [g.op("Mul", [y, s]), g.conv(y, 16, 16, k=1)])
    y = g.op("Flatten", [g.op("GlobalAveragePool", [y])], axis=1)
    w = g.rng.normal(0, 0.3, (10, 16))
    return g.model(["N", 3, 16, 16], g.op("Gemm", [y, g.const(w), g.const(np.zeros(10))],
                                          transB=1))


@pytest.mark.parametrize("target", ["zg330", "buyi"])
@pytest.mark.parametrize("n", [1, 2, 4])
def test_batch_runs_every_item_on_the_chip(target, n):
    c = compile_onnx(_batch_net(), (n, 3, 16, 16), target)
    # where the ops ran: everything but the host/NPU edge is a HardOp
    assert c.host_types() == set(), c.host_ops
    assert CHIP_OPS <= set(c.on_chip())
    # how: a 3x3 convolution runs once per item, a 1x1 one (and the Gemm, the element-wise
    # ops) as one layer over all the items' rows
    (stem,) = [op for op in c.hardop_of("Conv2d") if op.device_info["macs"] ==
               max(h.device_info["macs"] for h in c.hardop_of("Conv2d"))]
    assert stem.device_info["kinds"] == ["conv"] * n
    (gemm,) = c.hardop_of("Matmul")
    assert gemm.device_info["kinds"] == ["matmul"]
    (mul,) = c.hardop_of("Multiply")  # the per-item channel scale: one layer per item
    assert mul.device_info["kinds"] == ["eltw"] * n
    x = np.random.default_rng(5).normal(0, 1, (n, 3, 16, 16)).astype(np.float32)
    (got,) = assert_bit_exact(c, [x])
    assert got.shape == (n, 10)


def test_batch_items_are_independent():
    """Item i of a batch-4 run is what item i alone gives through the same compiled network
    (the reference computes the batch; the chip must not mix items' rows at window edges)."""
    c = compile_onnx(_batch_net(1), (4, 3, 16, 16), "zg330")
    x = np.random.default_rng(6).normal(0, 1, (4, 3, 16, 16)).astype(np.float32)
    y = np.random.default_rng(7).normal(0, 1, (4, 3, 16, 16)).astype(np.float32)
    mixed = x.copy()
    mixed[2] = y[2]
    (a,), (b,) = assert_bit_exact(c, [x]), assert_bit_exact(c, [mixed])
    assert np.array_equal(a[[0, 1, 3]], b[[0, 1, 3]]) and not np.array_equal(a[2], b[2])


@pytest.mark.parametrize("target", ["zg330", "buyi"])
@pytest.mark.parametrize("a_shape,b_shape,bt", [((3, 4, 8), (1, 8, 5), False),
                                                 ((1, 4, 8), (3, 8, 5), False),
                                                 ((3, 4, 8), (1, 5, 8), True),
                                                 ((2, 3, 4, 8), (1, 3, 8, 5), False),
                                                 ((2, 3, 4, 8), (2, 1, 8, 5), False)])
def test_matmul_of_two_maps_broadcasts_batches(target, a_shape, b_shape, bt):
    """A @ B of two feature maps whose batch axes broadcast (numpy's matmul): the map of one
    batch row is read against every row of the other (a MATMUL per row), the batch items of an
    NHWC pair per item."""
    from npu_chip_lib import check_quantized, hard_kinds

    from xir.builder import NetworkBuilder
    from xir.types import INT8, QuantizedType, TensorType

    lead = tuple(max(p, q) for p, q in zip(a_shape[:-2], b_shape[:-2]))
    n = b_shape[-2] if bt else b_shape[-1]
    y_shape = lead + (a_shape[-2], n)
    q = lambda s: QuantizedType(INT8, s)  # noqa: E731
    lay = "NHWC" if len(a_shape) == 4 else None
    b = NetworkBuilder("bmm")
    xa = b.input(list(a_shape), q(0.05), lay, "a")
    xb = b.input(list(b_shape), q(0.04), lay, "b")
    b.output(b.op("Matmul", [xa, xb], out_types=[TensorType(q(0.9), list(y_shape), lay)],
                  transpose_b=bt))
    net = b.build()
    z = check_quantized(net, target, seed=len(a_shape) + a_shape[0])
    (kinds,) = hard_kinds(z, "Matmul", net)
    assert set(kinds) == {"matmul"}

"""The reductions the POOL unit has no mode for, on the chips (npu_model/lowering/reduce.py):
Reduce min as ``~max(~x)`` (two ELTW complements around the max layers) and Reduce mean over
the channels and space as one CONV of ones (one rounding, as the reference). Quantized networks
built directly, fed random codes over the whole int8 / int16 range (the extremes included: the
complement of -128 / -32768 must not saturate), bit-exact against the HostBackend's integer
reference on the ZG330 and the Buyi, the op asserted inside a HardOp."""

from __future__ import annotations

import numpy as np
import pytest
from npu_chip_lib import check_quantized, hard_kinds, host_types

from xir.builder import NetworkBuilder
from xir.types import INT8, INT16, QuantizedType, TensorType

CHIPS = ["zg330", "buyi"]


def _reduce_net(func: str, shape, axes, keep: bool, bits: int, s_out: float = 0.05):
    """x -> Reduce(func, axes) -> y, every value per-tensor int8 / int16."""
    el = INT8 if bits == 8 else INT16
    r = len(shape)
    ax = [a % r for a in axes]
    out = [1 if a in ax else d for a, d in enumerate(shape)] if keep else \
        [d for a, d in enumerate(shape) if a not in ax]
    layout = "NHWC" if r == 4 else None
    b = NetworkBuilder("reduce")
    x = b.input(list(shape), QuantizedType(el, 0.05), layout, "x")
    y = b.op("Reduce", [x], out_types=[TensorType(QuantizedType(el, s_out), out,
                                                  layout if len(out) == 4 else None)],
             func=func, axes=list(axes), keepdims=bool(keep))
    b.output(y)
    return b.build()


@pytest.mark.parametrize("target", CHIPS)
@pytest.mark.parametrize("bits", [8, 16])
@pytest.mark.parametrize("shape,axes,keep,middle", [
    ((1, 5, 6, 8), [3], True, ["copy", "maxpool", "copy"]),  # channels, kept
    ((2, 5, 6, 8), [3], False, ["copy", "maxpool"]),  # channels, dropped, two items
    ((1, 5, 6, 8), [1], True, ["maxpool"]),  # H
    ((2, 5, 6, 8), [1, 2], True, ["maxpool"]),  # H and W, two items
    ((1, 5, 6, 8), [1, 2, 3], True, ["maxpool", "copy", "maxpool", "copy"]),  # everything
    ((4, 9, 12), [2], True, ["copy", "maxpool", "copy"]),  # a rank-3 (B, M, K) map
])
def test_reduce_min_runs_on_the_chip(target, bits, shape, axes, keep, middle):
    net = _reduce_net("min", shape, axes, keep, bits)
    z = check_quantized(net, target, seed=len(axes) + bits)
    assert "Reduce" not in host_types(z, target)
    kinds = hard_kinds(z, "Reduce", net)
    assert len(kinds) == 1
    items = shape[0] if len(shape) == 4 else 1
    per_item = ["eltw"] + middle + ["eltw"]
    assert kinds[0] in (per_item, per_item * items), kinds


@pytest.mark.parametrize("target", CHIPS)
@pytest.mark.parametrize("bits", [8, 16])
def test_reduce_min_of_the_extreme_codes(target, bits):
    """Every code of the dtype in one map: the complement maps qmin to qmax and back, the
    minimum over the channels is qmin wherever it occurs."""
    from npu_chip_lib import CHIPS as URLS
    from npu_chip_lib import forward

    from host_backend import HostBackend
    from xrt import Device, HostDevice, plugins

    dt = np.int8 if bits == 8 else np.int16
    info = np.iinfo(dt)
    shape = (1, 4, 8, 8)
    net = _reduce_net("min", shape, [3], True, bits)
    rng = np.random.default_rng(1)
    x = rng.integers(info.min, info.max + 1, size=shape).astype(dt)
    x[0, 0, :, 0], x[0, 1, 2, :] = info.min, info.max
    x[0, 2, 3, 5], x[0, 3, 7, 7] = info.min + 1, info.max - 1
    want = forward(net, [HostBackend], [HostDevice.Default()], [x])[0][0]
    assert (want[0, 0, :, 0] == info.min).all() and want[0, 1, 2, 0] == info.max
    lowered = plugins.target(target)(net)
    name, url = URLS[target]
    npu, dev = plugins.backend_class(name), Device.Open(url)
    try:
        got, bound = forward(lowered, [npu, HostBackend], [dev, HostDevice.Default()], [x])
    finally:
        dev.close()
    assert all(isinstance(bound[op.op_id], npu) for op in lowered.ops
               if op.op_type == "HardOp")
    assert got[0].tobytes() == want.tobytes()
    assert np.array_equal(want, x.min(axis=3, keepdims=True))


@pytest.mark.parametrize("target", CHIPS)
@pytest.mark.parametrize("bits", [8, 16])
@pytest.mark.parametrize("shape,axes,keep,per_item", [
    ((1, 5, 6, 8), [1, 2, 3], True, ["conv"]),  # everything: one CONV 5 x 6 x 8 -> 1
    ((2, 5, 6, 8), [1, 2, 3], True, ["conv"]),  # two items
    ((1, 5, 6, 8), [2, 3], True, ["conv"]),  # W and C: a 1 x 6 window, five rows
    ((3, 5, 6, 8), [1, 3], False, ["conv", "copy"]),  # H and C dropped: W becomes channels
    ((4, 9, 12), [1, 2], True, ["conv"]),  # a rank-3 map: rows and channels
])
def test_reduce_mean_over_channels_and_space_runs_as_one_conv(target, bits, shape, axes,
                                                              keep, per_item):
    net = _reduce_net("mean", shape, axes, keep, bits, s_out=0.011)
    z = check_quantized(net, target, seed=sum(axes) + bits)
    assert "Reduce" not in host_types(z, target)
    kinds = hard_kinds(z, "Reduce", net)
    items = shape[0] if len(shape) == 4 else 1
    assert len(kinds) == 1 and kinds[0] in (per_item, per_item * items), kinds

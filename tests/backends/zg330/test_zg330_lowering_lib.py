"""Helpers of the ZG330 lowering/backend tests: one-layer quantized networks built directly, and
a host-vs-ZG330 runner."""

from __future__ import annotations

import numpy as np
import pytest

from xir.builder import NetworkBuilder
from xir.types import INT8, INT16, INT32, INT64, QuantizedType, TensorType

NP = {8: np.int8, 16: np.int16}


def qtype(bits: int, scale, axis=None) -> QuantizedType:
    return QuantizedType(INT8 if bits == 8 else INT16, scale, axis=axis)


def qin(b: NetworkBuilder, shape, bits: int, scale: float, name: str = "x"):
    return b.input(list(shape), qtype(bits, scale), "NHWC" if len(shape) == 4 else None, name)


def out_type(shape, bits, scale, layout="NHWC"):
    return TensorType(qtype(bits, scale), list(shape), layout if len(shape) == 4 else None)


def conv_params(b, rng, kh, kw, cin_g, cout, bits, s_in, bias=True):
    qmax = 127 if bits == 8 else 32767
    w = rng.integers(-qmax, qmax + 1, size=(kh, kw, cin_g, cout)).astype(NP[bits])
    s_w = rng.uniform(0.002, 0.02, size=cout)
    wp = b.params(w, "w", "HWIO", qtype(bits, s_w, axis=3))
    ins = [wp]
    if bias:
        bd = INT32 if bits == 8 else INT64
        bq = rng.integers(-5000, 5000, size=cout).astype(np.int32 if bits == 8 else np.int64)
        ins.append(b.params(bq, "b", None, QuantizedType(bd, s_in * s_w, axis=0)))
    return ins, s_w


def rand_input(rng, value, bits):
    lo, hi = (-128, 127) if bits == 8 else (-32768, 32767)
    return rng.integers(lo, hi + 1, size=value.shape).astype(NP[bits])


def run_both(net, inputs, dev, merge=True):
    """(host outputs, zg outputs, zg backend) of the lowered network vs the quantized one."""
    from host_backend import HostBackend
    from xrt import HostDevice, Session
    from zg330backend import ZG330Backend
    from zg330backend.lowering import lower

    hs = Session.Create([HostBackend], net.view(0), [HostDevice.Default()])
    hs.apply()
    ref = [np.asarray(t).copy() for t in hs.forward(inputs)]
    z = lower(net)
    s = Session.Create([ZG330Backend, HostBackend], z.view(0), [dev, HostDevice.Default()])
    if not merge:
        s.backends[0].disableMergeHardOp()
    s.apply()
    try:
        got = [np.asarray(t).copy() for t in s.forward(inputs)]
    finally:
        s.close()
    return ref, got, z


@pytest.fixture(scope="module")
def zdev():
    """One simulator for a whole module."""
    from xrt import Device

    d = Device.Open("sim://zg330")
    yield d
    d.close()


_ZOO: dict = {}


def compiled_zoo(name: str, quant: dict | None = None, **kw):
    """(quantized, ZG330-lowered) zoo network, quantized fast (minmax, 2 images, nearest
    rounding; more `quantize_network` options in `quant`), cached per process."""
    quant = quant or {}
    key = (name, repr(sorted(quant.items())), tuple(sorted(kw.items())))
    if key not in _ZOO:
        from xcompile import zoo
        from xcompile.quant.quantize import quantize_network
        from zg330backend.lowering import adapt, lower

        net = zoo.build(name, **kw)
        q = quantize_network(net, zoo.calibration_set(name, count=2, **kw), bits=8,
                             method="minmax", weight_rounding="nearest", **quant)
        _ZOO[key] = (q, lower(adapt(q)))
    return _ZOO[key]

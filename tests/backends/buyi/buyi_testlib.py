"""Shared helpers of the Buyi tests: compiled zoo networks (cached), host reference, runs."""

from __future__ import annotations

import numpy as np

from host_backend import HostBackend
from xrt import HostDevice, Session

_CACHE: dict = {}


def compiled(name: str, bits: int = 8, quant: dict | None = None, **kw):
    """(quantized network, Buyi-lowered network) of a zoo network (more `quantize_network`
    options in `quant`)."""
    quant = quant or {}
    key = (name, bits, repr(sorted(quant.items())), tuple(sorted(kw.items())))
    if key not in _CACHE:
        from buyibackend.lowering import adapt, lower
        from xcompile import zoo
        from xcompile.quant.quantize import quantize_network

        net = zoo.build(name, **kw)
        q = quantize_network(net, zoo.calibration_set(name, count=2, **kw), bits=bits,
                             method="minmax", weight_rounding="nearest", **quant)
        _CACHE[key] = (q, lower(adapt(q)))
    return _CACHE[key]


def rand_x(q, seed=0):
    return np.random.default_rng(seed).normal(size=q.inputs()[0].shape).astype(np.float32)


def host_ref(q, x):
    s = Session.Create([HostBackend], q.view(0), [HostDevice.Default()])
    s.apply()
    out = [np.asarray(t).copy() for t in s.forward([x])]
    s.close()
    return out


def buyi_session(net, dev, configure=None, profile=False):
    from buyibackend import BuyiBackend

    s = Session.Create([BuyiBackend, HostBackend], net.view(0), [dev, HostDevice.Default()])
    s.enableTimeProfile(profile)
    if configure is not None:
        configure(s.backends[0])
    s.apply()
    return s


def run_buyi(net, dev, x, configure=None, profile=False):
    s = buyi_session(net, dev, configure, profile)
    out = [np.asarray(t).copy() for t in s.forward([x])]
    return s, out


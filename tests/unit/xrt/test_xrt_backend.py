"""Backend base class: Create/Init/init, cast, forwardOp, init functions, fork, call order."""

from __future__ import annotations

import numpy as np
import pytest

import xir
from host_backend import HostBackend
from xrt import Backend, CallOrderError, HostDevice, Tensor, UnsupportedOpError, XrtError


def relu_net() -> xir.Network:
    b = xir.NetworkBuilder("r")
    x = b.input([2, 2])
    b.output(b.relu(x))
    return b.build()


def test_create_binds_view_and_device_and_cast_returns_same_object():
    net = relu_net()
    backend = Backend.Create(HostBackend, net.view(0), HostDevice.Default())
    assert backend.network_view.opIds() == net.opIds()
    assert backend.device is HostDevice.Default()
    assert HostBackend(backend) is backend  # the vendor's cast
    with pytest.raises(XrtError, match="cannot cast"):
        type("Other", (Backend,), {})(backend)
    with pytest.raises(XrtError, match="Backend subclass"):
        Backend.Create(int, net.view(0), HostDevice.Default())


def test_forward_op_and_support_queries():
    net = relu_net()
    backend = Backend.Create(HostBackend, net.view(0), HostDevice.Default())
    relu = net.ops[1]
    assert backend.isOpSupported(relu) and backend.getForwardFunc(relu) is not None
    (out,) = backend.forwardOp(relu, [Tensor(np.array([[-1, 2], [3, -4]], np.float32))])
    np.testing.assert_array_equal(np.asarray(out), [[0, 2], [3, 0]])
    hard = xir.ops.HardOp([], [], op_id=99, compile_target="@zhuget(330)")
    assert not backend.isOpSupported(hard)
    with pytest.raises(UnsupportedOpError, match="HardOp"):
        backend.forwardOp(hard, [])


def test_init_functions_run_per_supported_op():
    seen = []

    class Counting(Backend):
        name = "Counting"
        FORWARDS = {"Relu": lambda op, i, o, b: i}
        INITS = {"Relu": lambda op, b: seen.append(op.op_id)}

    net = relu_net()
    Backend.Create(Counting, net.view(0), HostDevice.Default())
    assert seen == [net.ops[1].op_id]


def test_call_order_rules_and_fork():
    net = relu_net()
    fresh = HostBackend.Init()
    with pytest.raises(CallOrderError, match="before init"):
        fresh.apply()
    backend = Backend.Create(HostBackend, net.view(0), HostDevice.Default())
    backend.apply()
    with pytest.raises(CallOrderError, match="already"):
        backend.apply()
    with pytest.raises(CallOrderError, match="after apply"):
        backend.setDevice(HostDevice.Default())
    with pytest.raises(CallOrderError, match="after apply"):
        backend.init(net.view(0), HostDevice.Default())
    fork = backend.fork()
    assert fork is not backend and fork.network_view is backend.network_view
    backend.setTimeElapses(1, 0.5, 2.0)
    backend.setTimeElapses(1, 0.5, 1.0)
    assert backend.takeTimeElapses() == {1: (1.0, 3.0, 0.0)} and backend.takeTimeElapses() == {}
    backend.enableTimeProfile(True)
    assert backend.time_profile and not backend.snapshot

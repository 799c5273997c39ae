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


class _Recording(HostBackend):
    """A backend that implements the lifecycle hooks and records the calls."""

    def __init__(self, other=None):
        super().__init__(other)
        self.calls: list[str] = []

    def _bind(self, network_view, device):
        self.calls.append("bind")
        if device is None:
            raise XrtError("no device")
        return network_view.view([op.op_id for op in network_view.ops if op.op_type != "Output"])

    def _init(self):
        self.calls.append(f"init:{len(self.network_view.ops)}")

    def _apply(self):
        assert not self.is_applied  # the base sets the state after the hook
        self.calls.append("apply")

    def _fork(self, parent):
        self.calls = [*parent.calls, "fork"]

    def _deinit(self):
        self.calls.append("deinit")


def test_lifecycle_is_template_methods_over_hooks():
    net = relu_net()
    b = _Recording.Init()
    with pytest.raises(XrtError, match="no device"):
        b.init(net.view(0), None)
    assert b.network_view is None and b.device is None  # a refused bind leaves it unbound
    dev = HostDevice.Default()
    b.init(net.view(0), dev)
    assert [op.op_type for op in b.network_view.ops] == ["Input", "Relu"]  # the hook narrowed
    assert b.device is dev and not b.is_applied
    b.apply()
    assert b.is_applied and b.calls == ["bind", "bind", "init:2", "apply"]
    with pytest.raises(CallOrderError, match="already"):
        b.apply()
    f = b.fork()
    assert f.calls[-1] == "fork" and b.calls[-1] == "apply" and f.is_applied
    b.deinit()
    b.deinit()  # idempotent: the hook runs once
    assert b.calls.count("deinit") == 1
    with pytest.raises(CallOrderError, match="after deinit"):
        b.fork()
    with pytest.raises(CallOrderError, match="after deinit"):
        b._require_forwardable("forward")


def test_restore_snapshot_binds_then_restores_and_freezes_settings():
    net = relu_net()
    b = _Recording.Init()
    b.restoreSnapshot(net.view(0), HostDevice.Default(), {}, {})
    assert b.calls == ["bind", "init:2", "apply"] and b.is_applied and b.snapshot
    with pytest.raises(CallOrderError, match="frozen at dump time"):
        b.setFakeQf(True)
    with pytest.raises(CallOrderError, match="on an applied backend"):
        b.restoreSnapshot(net.view(0), HostDevice.Default(), {}, {})
    fresh = _Recording.Init()
    with pytest.raises(CallOrderError, match="after apply"):
        fresh.snapshotState()

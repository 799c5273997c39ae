"""Weights refreshed on the device without re-apply (`NpuBackend.refreshWeights`, the device
half of issue 29's refit; docs/memory-and-weights.md), on both chips: the refreshed deployment
gives, bit for bit, what a fresh deployment of the new network gives; a source whose
instructions differ is refused with nothing changed; a forward in another thread sees the old or
the new weights, never a mix; the network object, precheck and snapshots follow; a WEIGHT chunk
shared by sessions is refreshed for all of them."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from refit_nets import copy_network
from runtime_cases import x_of

from host_backend import HostBackend
from npu_runtime import SegmentType
from xrt import Device, HostDevice, Session
from xrt.errors import CallOrderError, InvalidArgumentError
from xrt.remote.server import DeviceServer


def _mixed(z0, z1):
    """z0 with the weight blocks of z1 (tiny_cnn drawn from another seed) in every HardOp whose
    instructions the two share: a network a refit could produce. Returns it and those ids."""
    mix = copy_network(z0)
    new = {op.op_id: op for op in z1.ops}
    changed = []
    for op in mix.ops:
        o = new[op.op_id]
        if op.op_type == "HardOp" and op.params and np.array_equal(op.instr.data, o.instr.data):
            op.params[0].setData(np.array(o.params[0].data))
            changed.append(op.op_id)
    return mix, changed


def _session(chip, z, merge=None, shared=None, dev=None):
    s = Session.Create([chip.backend, HostBackend], z.view(0), [dev or chip.dev,
                                                                HostDevice.Default()])
    chip.configure(s.backends[0], merge=merge)
    for st, c in (shared or {}).items():
        s.backends[0].userReuseSegment(c, st)
    s.apply()
    return s


def _out(s, x):
    return [np.asarray(t).copy() for t in s.forward([x])]


@pytest.fixture
def nets(chip):
    z0 = chip.compiled("tiny_cnn")[1]
    z1 = chip.compiled("tiny_cnn", seed=1)[1]
    mix, changed = _mixed(z0, z1)
    assert len(changed) >= 5
    x = x_of(chip.compiled("tiny_cnn")[0], 7)
    fresh = _session(chip, mix)
    want_mix = _out(fresh, x)
    fresh.close()
    return z0, z1, mix, changed, x, want_mix


def test_refreshed_deployment_equals_a_fresh_one(chip, nets):
    z0, z1, mix, changed, x, want_mix = nets
    net = copy_network(z0)
    s = _session(chip, net)
    b = s.backends[0]
    old = _out(s, x)
    weight_addr = b.phy_segment_map[SegmentType.WEIGHT].phy_addr
    rep = b.refreshWeights(mix)
    assert sorted(rep["hardops"]) == sorted(changed) and rep["bytes"] > 0
    got = _out(s, x)
    for u, v in zip(want_mix, got):
        np.testing.assert_array_equal(u, v)
    assert any(not np.array_equal(u, v) for u, v in zip(old, got))
    assert b.phy_segment_map[SegmentType.WEIGHT].phy_addr == weight_addr  # no re-apply
    assert b.precheck()  # the network object holds what the chip holds
    for op in net.ops:
        if op.op_type == "HardOp" and op.params:
            want = next(o for o in mix.ops if o.op_id == op.op_id).params[0].data
            np.testing.assert_array_equal(op.params[0].data, want)
    # a snapshot of the refreshed session restores to the same outputs
    s2 = Session.CreateWithSnapshot(s.dumpSnapshotToMemory(), [chip.backend, HostBackend],
                                    [chip.dev, HostDevice.Default()])
    for u, v in zip(want_mix, _out(s2, x)):
        np.testing.assert_array_equal(u, v)
    # the HardOps ran on the chip
    assert all(type(s.backendBindings()[op.op_id]) is chip.backend
               for op in s.network_view.ops if op.op_type == "HardOp")
    s2.close()
    s.close()


def test_a_source_with_other_instructions_is_refused_and_nothing_changes(chip, nets):
    z0, z1, mix, changed, x, want_mix = nets
    net = copy_network(z0)
    s = _session(chip, net)
    before = _out(s, x)
    blocks = {op.op_id: np.array(op.params[0].data) for op in net.ops
              if op.op_type == "HardOp" and op.params}
    with pytest.raises(InvalidArgumentError, match=r"instructions of HardOp \d+ .* differ"):
        s.backends[0].refreshWeights(z1)
    with pytest.raises(InvalidArgumentError, match="network lowered for"):
        s.backends[0].refreshWeights(object())
    for u, v in zip(before, _out(s, x)):
        np.testing.assert_array_equal(u, v)
    for op in net.ops:
        if op.op_id in blocks:
            np.testing.assert_array_equal(op.params[0].data, blocks[op.op_id])
    assert s.backends[0].precheck()
    s.close()


def test_a_forward_in_another_thread_sees_old_or_new_never_a_mix(chip, nets):
    z0, z1, mix, changed, x, want_mix = nets
    # one icoreCalc per HardOp: many chances to mix
    s = _session(chip, copy_network(z0), merge=False)
    want_old = _out(s, x)
    outs: list[list[np.ndarray]] = []
    stop = threading.Event()

    def forward():  # the session forwarded from another thread while this one refreshes
        while not stop.is_set() and len(outs) < 30:
            outs.append(_out(s, x))

    old_copy = copy_network(z0)
    t = threading.Thread(target=forward)
    t.start()
    i = 0
    while t.is_alive() and i < 400:  # refresh back and forth while the thread forwards
        s.backends[0].refreshWeights(mix if i % 2 == 0 else old_copy)
        i += 1
    stop.set()
    t.join(120)
    assert outs
    for o in outs:
        assert (all(np.array_equal(u, v) for u, v in zip(want_old, o))
                or all(np.array_equal(u, v) for u, v in zip(want_mix, o)))
    s.close()


def test_a_paused_forward_in_this_thread_is_refused(chip, nets):
    z0, z1, mix, changed, x, want_mix = nets
    s = _session(chip, copy_network(z0), merge=False)
    hard = [op.op_id for op in s.network_view.ops if op.op_type == "HardOp"]
    s.stepTo(hard[3], [x])
    with pytest.raises(CallOrderError, match="paused"):
        s.backends[0].refreshWeights(mix)
    s.close()


def test_a_shared_weight_chunk_is_refreshed_for_every_session(chip, nets):
    z0, z1, mix, changed, x, want_mix = nets
    net = copy_network(z0)
    probe = Session.Create([chip.backend, HostBackend], net.view(0),
                           [chip.dev, HostDevice.Default()]).backends[0]
    region = chip.dev.defaultMemRegion()
    chunks = {st: region.malloc(max(probe.logic_segment_map[st].byte_size, 1), True, 4096)
              for st in (SegmentType.WEIGHT, SegmentType.INSTR)}
    probe.deinit()
    ss = [_session(chip, net, shared=chunks) for _ in range(2)]
    ss[0].backends[0].refreshWeights(mix)
    for s in ss:
        for u, v in zip(want_mix, _out(s, x)):
            np.testing.assert_array_equal(u, v)
        assert s.backends[0].precheck()
    other = _session(chip, copy_network(mix), shared=chunks)  # same weights, another network object
    with pytest.raises(InvalidArgumentError, match="another network object"):
        ss[0].backends[0].refreshWeights(copy_network(z0))
    for u, v in zip(want_mix, _out(other, x)):
        np.testing.assert_array_equal(u, v)
    for s in (*ss, other):
        s.close()
    for c in chunks.values():
        c.free()


def test_refresh_over_the_socket(chip, nets):
    z0, z1, mix, changed, x, want_mix = nets
    srv = DeviceServer(Device.Open(f"sim://{chip.kind}"), close_device=True).start()
    host, port = srv.address
    dev = Device.Open(f"socket://{chip.kind}@{host}:{port}")
    try:
        s = _session(chip, copy_network(z0), dev=dev)
        s.backends[0].refreshWeights(mix)
        for u, v in zip(want_mix, _out(s, x)):
            np.testing.assert_array_equal(u, v)
        assert s.backends[0].precheck()
        s.close()
    finally:
        dev.close()
        srv.shutdown()

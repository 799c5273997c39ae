"""Session's compiled forward plan (issue 30, point 3): a plain forward calls a backend that has
`forwardSegment` once per run of consecutive ops bound to it (feeding it the values it reads
from outside, asking for the values read after it) and every other op once, without per-op
bookkeeping; callbacks, the time profile, the IO log and dumps take the per-op path and behave
as documented; a backend's own `forwardOp` is honoured; clones plan over their own backends."""

from __future__ import annotations

import numpy as np
import pytest

from host_backend import HostBackend
from xir import NetworkBuilder
from xrt import HostDevice, Session, Tensor
from xrt.errors import XrtError


class SegHost(HostBackend):
    """A HostBackend running Relus, a chip segment at a time (as an NPU backend runs HardOps)."""

    name = "SegHost"
    #: the backend object of every forwardSegment call
    callers: list = []

    def __init__(self, other=None):
        super().__init__(other)
        self.segments: list[tuple[list[int], tuple[int, ...], tuple[int, ...]]] = []

    def isOpSupported(self, op):
        return op.op_type == "Relu"

    def forwardSegment(self, ops, feeds, wanted):
        SegHost.callers.append(self)
        self.segments.append(([op.op_id for op in ops], tuple(feeds), wanted))
        values = dict(feeds)
        for op in ops:
            outs = self.forwardOp(op, [values[v.v_id] for v in op.inputs])
            values.update(zip((v.v_id for v in op.outputs), outs))
        return [values[v] for v in wanted]


def _net():
    b = NetworkBuilder("segments")
    x = b.input([1, 2, 2, 3], layout="NHWC")
    y1 = b.relu(x)
    y2 = b.relu(y1)
    y3 = b.sigmoid(y2)
    y4 = b.relu(y3)
    y5 = b.add(y1, y4)
    b.output(y5, y2)
    return b.build(), (x, y1, y2, y3, y4, y5)


def _session(net, first=SegHost):
    s = Session.Create([first, HostBackend], net.view(0), [HostDevice.Default()] * 2)
    s.apply()
    return s


def _want(a):
    r = np.maximum(a, 0)
    return [r + 1 / (1 + np.exp(-r)), r]


X = np.linspace(-1, 1, 12, dtype=np.float32).reshape(1, 2, 2, 3)


def test_a_plain_forward_is_one_call_per_segment_fed_and_asked_for_what_crosses():
    net, (x, y1, y2, y3, y4, y5) = _net()
    s = _session(net)
    seg = s.backends[0]
    got = [np.asarray(t) for t in s.forward([X])]
    for u, v in zip(got, _want(X)):
        np.testing.assert_allclose(u, v, rtol=1e-6)
    relus = [op.op_id for op in net.ops if op.op_type == "Relu"]
    assert seg.segments == [(relus[:2], (x.v_id,), (y1.v_id, y2.v_id)),
                            (relus[2:], (y3.v_id,), (y4.v_id,))]
    s.forward([X])
    assert len(seg.segments) == 4  # the same plan again


def test_callbacks_profiles_logs_and_dumps_take_the_per_op_path(tmp_path, capsys):
    net, _ = _net()
    s = _session(net)
    seg = s.backends[0]
    plain = [np.asarray(t).copy() for t in s.forward([X])]
    seen = []
    s.setPreCallBack(lambda sess, op, b, ins: seen.append((op.op_id, type(b).__name__)))
    by_op = [np.asarray(t).copy() for t in s.forward([X])]
    assert [o for o, _ in seen] == [op.op_id for op in net.ops]
    assert [b for (o, b), op in zip(seen, net.ops) if op.op_type == "Relu"] == ["SegHost"] * 3
    assert len(seg.segments) == 2  # only the plain forward's two
    assert all(u.tobytes() == v.tobytes() for u, v in zip(plain, by_op))
    s.setPreCallBack(None)
    s.enableTimeProfile(True)
    s.forward([X])
    assert set(s.timeProfileResults()) == {op.op_id for op in net.ops}
    s.enableTimeProfile(False)
    s.forward([X])
    assert s.timeProfileResults() == {} and len(seg.segments) == 4
    s.setLogIO(True)
    s.forward([X])
    s.setLogIO(False)
    assert capsys.readouterr().out.count(" out v") == sum(len(op.outputs) for op in net.ops)
    s.setDumpOutputs(True, str(tmp_path))
    s.forward([X])
    s.setDumpOutputs(False)
    assert len(list(tmp_path.iterdir())) == sum(len(op.outputs) for op in net.ops)
    assert len(seg.segments) == 4


class OwnForwardOp(HostBackend):
    """A backend whose forwardOp does more than call the forward function."""

    name = "OwnForwardOp"
    calls = 0

    def forwardOp(self, op, inputs, outputs=None):
        type(self).calls += 1
        return super().forwardOp(op, inputs, outputs)


def test_a_backend_s_own_forward_op_is_called_on_the_plain_path():
    net, _ = _net()
    s = _session(net, first=OwnForwardOp)
    OwnForwardOp.calls = 0
    got = [np.asarray(t) for t in s.forward([X])]
    assert OwnForwardOp.calls == len(net.ops)
    for u, v in zip(got, _want(X)):
        np.testing.assert_allclose(u, v, rtol=1e-6)


class Short(HostBackend):
    name = "Short"

    def forwardOp(self, op, inputs, outputs=None):
        return super().forwardOp(op, inputs, outputs)[:0] if op.op_type == "Sigmoid" else \
            super().forwardOp(op, inputs, outputs)


def test_a_backend_returning_too_few_tensors_is_named():
    net, _ = _net()
    s = _session(net, first=Short)
    with pytest.raises(XrtError, match=r"Short returned 0 tensors for op \d+ \(Sigmoid\)"):
        s.forward([X])


def test_clones_plan_over_their_own_backends():
    net, _ = _net()
    s = Session.Create([SegHost, HostBackend], net.view(0), [HostDevice.Default()] * 2)
    deep = s.clone(2)
    s.apply()
    deep.apply()
    shallow = s.clone()
    SegHost.callers = []
    for sess in (s, shallow, deep):
        got = [np.asarray(t) for t in sess.forward([Tensor(X)])]
        for u, v in zip(got, _want(X)):
            np.testing.assert_allclose(u, v, rtol=1e-6)
    mine, twin = s.backends[0], deep.backends[0]
    assert twin is not mine
    assert SegHost.callers == [mine] * 4 + [twin] * 2  # a shallow clone shares the backends


class ShortSegment(SegHost):
    name = "ShortSegment"

    def forwardSegment(self, ops, feeds, wanted):
        return super().forwardSegment(ops, feeds, wanted)[1:]


def test_a_segment_returning_too_few_tensors_is_named():
    net, _ = _net()
    s = _session(net, first=ShortSegment)
    with pytest.raises(XrtError, match=r"ShortSegment.forwardSegment returned 1 tensors for the "
                                       r"2 values asked of ops \[1, 2\]"):
        s.forward([X])

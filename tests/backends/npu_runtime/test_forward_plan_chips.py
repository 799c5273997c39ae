"""The compiled forward plan (issue 30, point 3), on both chips: a plain `Session.forward` (no
callbacks, time profile, logs or dumps) makes one `forwardSegment` call per chip segment, which
runs the same runs on the same simulated device memory as the per-op path -- the same outputs
byte for byte, the same layers executed, the same profiler records -- and a forward that asks
for per-op information (callbacks, the time profile, stepTo) still goes op by op. The plan lives
as long as the deployment: a weight refresh, a snapshot restore and a fork forward what they
hold."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from runtime_cases import host_ref, x_of

from host_backend import HostBackend
from xrt import HostDevice, Session


def _session(chip, z, merge=None, dev=None):
    s = Session.Create([chip.backend, HostBackend], z.view(0),
                       [dev or chip.dev, HostDevice.Default()])
    chip.configure(s.backends[0], merge=merge)
    s.apply()
    return s


def _out(s, x):
    return [np.asarray(t).copy() for t in s.forward([x])]


def _count(b, name):
    """Count the calls of backend `b`'s method `name` (an instance attribute over it)."""
    calls = []
    real = getattr(b, name)

    def counted(*a, **k):
        calls.append(a[0])
        return real(*a, **k)

    setattr(b, name, counted)
    return calls


@pytest.mark.parametrize("merge", [True, False])
def test_a_plain_forward_is_one_call_per_chip_segment_with_the_per_op_results(chip, merge):
    q, z = chip.compiled("tiny_cnn")
    x = x_of(q, 3)
    s = _session(chip, z, merge=merge)
    b = s.backends[0]
    hard = [op for op in z.ops if op.op_type == "HardOp"]
    segs, per_op = _count(b, "forwardSegment"), _count(b, "forwardHardOp")
    plain = _out(s, x)
    assert len(segs) == 1 and [op.op_id for op in segs[0]] == [op.op_id for op in hard]
    assert per_op == []
    layers, prof = chip.dev.layerCount(), b.profileInfo()
    assert layers == b.layout.n_layers > 0  # the simulated core ran every layer
    assert prof and set(prof) <= {op.op_id for op in hard}  # HardOps without layers: none
    runs = len(b.deployment.runs)
    assert (runs == 1) == merge  # merging off: one icoreCalc per HardOp, still one call

    seen = []
    s.setPostCallBack(lambda sess, op, backend, outs: seen.append(op.op_id))
    by_op = _out(s, x)  # a callback: the per-op path
    assert seen == [op.op_id for op in z.ops]
    assert len(segs) == 1 and [op.op_id for op in per_op] == [op.op_id for op in hard]
    for u, v in zip(plain, by_op):
        assert u.dtype == v.dtype and u.tobytes() == v.tobytes()
    assert chip.dev.layerCount() == layers and b.profileInfo() == prof
    for u, v in zip(plain, host_ref(q, x)):  # and both are the integer reference
        np.testing.assert_array_equal(u, v)
    s.setPostCallBack(None)
    again = _out(s, x)
    assert len(segs) == 2
    for u, v in zip(plain, again):
        assert u.tobytes() == v.tobytes()
    s.close()


def test_the_time_profile_and_step_to_still_go_op_by_op(chip):
    q, z = chip.compiled("tiny_cnn")
    x = x_of(q, 5)
    s = _session(chip, z)
    b = s.backends[0]
    want = _out(s, x)
    segs, per_op = _count(b, "forwardSegment"), _count(b, "forwardHardOp")
    s.enableTimeProfile(True)
    got = _out(s, x)
    prof = s.timeProfileResults()
    assert segs == [] and len(per_op) == sum(op.op_type == "HardOp" for op in z.ops)
    assert {op.op_id for op in z.ops} <= set(prof)
    assert all(u.tobytes() == v.tobytes() for u, v in zip(want, got))
    s.enableTimeProfile(False)
    # a stepTo stopped halfway, then a plain forward (the plan starts the chip over), then
    # stepTo again from the start
    hard = [op for op in z.ops if op.op_type == "HardOp"]
    s.stepTo(hard[len(hard) // 2].op_id, [x])
    assert all(u.tobytes() == v.tobytes() for u, v in zip(want, _out(s, x)))
    tail = z.ops[-2]  # the op before Output: it makes a result of the view
    k = [v.v_id for v in z.view(0).outputs()].index(tail.outputs[0].v_id)
    last = s.stepTo(tail.op_id, [x])
    assert len(segs) == 1
    assert s.timeProfileResults() == {}
    assert np.asarray(last[0]).tobytes() == want[k].tobytes()
    assert all(u.tobytes() == v.tobytes() for u, v in zip(want, _out(s, x)))
    s.close()


def test_user_outputs_and_clones_forward_the_same(chip):
    q, z = chip.compiled("tiny_cnn")
    x = x_of(q, 9)
    s = _session(chip, z)
    want = _out(s, x)
    c = s.clone()
    assert all(u.tobytes() == v.tobytes() for u, v in zip(want, _out(c, x)))
    outs = [np.zeros_like(w) for w in want]
    from xrt import Tensor

    ts = [Tensor(o) for o in outs]
    assert s.forward([x], ts) is None
    assert all(u.tobytes() == np.asarray(t).tobytes() for u, t in zip(want, ts))
    s.close()


def test_the_plan_follows_a_weight_refresh_and_a_snapshot_restore(chip):
    from refit_nets import copy_network
    from test_refresh_weights import _mixed

    z0 = chip.compiled("tiny_cnn")[1]
    mix, changed = _mixed(z0, chip.compiled("tiny_cnn", seed=1)[1])
    assert changed
    x = x_of(chip.compiled("tiny_cnn")[0], 7)
    fresh = _session(chip, mix)
    want = _out(fresh, x)
    fresh.close()
    s = _session(chip, copy_network(z0))
    old = _out(s, x)  # the plan is made here
    s.backends[0].refreshWeights(mix)
    got = _out(s, x)
    assert all(u.tobytes() == v.tobytes() for u, v in zip(want, got))
    assert any(u.tobytes() != v.tobytes() for u, v in zip(old, got))
    s2 = Session.CreateWithSnapshot(s.dumpSnapshotToMemory(), [chip.backend, HostBackend],
                                    [chip.dev, HostDevice.Default()])
    segs = _count(s2.backends[0], "forwardSegment")
    assert all(u.tobytes() == v.tobytes() for u, v in zip(want, _out(s2, x)))
    assert len(segs) == 1
    s2.close()
    s.close()


def test_forks_forward_their_plans_from_threads(chip):
    q, z = chip.compiled("tiny_cnn")
    xs = [x_of(q, k) for k in range(3)]
    s = _session(chip, z)
    want = [_out(s, x) for x in xs]
    b, hb = s.backends
    forks = [Session.CreateWithBackends(z.view(0), [b.fork(), hb.fork()]) for _ in range(2)]
    for f in forks:
        f.apply()  # forks of applied backends: nothing is deployed again
    bad: list[str] = []

    def work(sess, k):
        for r in range(6):
            i = (k + r) % len(xs)
            got = _out(sess, xs[i])
            if any(u.tobytes() != v.tobytes() for u, v in zip(want[i], got)):
                bad.append(f"session {k} round {r}")

    threads = [threading.Thread(target=work, args=(f, k)) for k, f in enumerate([s, *forks])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert bad == []
    for f in forks:
        f.close()
    s.close()


def test_a_sub_session_starting_inside_a_run_forwards_as_op_by_op(chip):
    """`Session.sub` from the fourth HardOp (inside a merged run on the ZG330): the plan's
    segment starts mid-run and gives what the per-op path gives, and what the whole view
    gave."""
    from xrt import Tensor

    q, z = chip.compiled("tiny_cnn")
    x = x_of(q, 3)
    s = _session(chip, z)
    seen = {}
    s.setPostCallBack(lambda sess, op, b, outs: seen.update(
        {v.v_id: np.array(np.asarray(t)) for v, t in zip(op.outputs, outs)}))
    want = _out(s, x)
    s.setPostCallBack(None)
    k = [i for i, op in enumerate(z.ops) if op.op_type == "HardOp"][3]
    sub = s.sub(k)
    feed = [Tensor(seen[v.v_id], v.dtype) for v in sub.network_view.inputs()]
    segs = _count(s.backends[0], "forwardSegment")
    plain = [np.asarray(t).copy() for t in sub.forward(feed)]
    assert len(segs) == 1 and segs[0][0].op_id == z.ops[k].op_id
    sub.setPostCallBack(lambda *a: None)
    by_op = [np.asarray(t).copy() for t in sub.forward(feed)]
    assert len(segs) == 1
    assert all(u.tobytes() == v.tobytes() for u, v in zip(plain, by_op))
    assert all(u.tobytes() == v.tobytes() for u, v in zip(plain, want))
    s.close()

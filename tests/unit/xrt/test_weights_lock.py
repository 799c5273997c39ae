"""A refit and the forwards of other threads on one network: a forward sees the old weights or
the new, never some host layers refitted and others not (xrt/weights_lock.py)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from refit_nets import tiny_exports, tiny_quantized

from host_backend import HostBackend
from xrt import HostDevice, Session
from xrt.errors import CallOrderError
from xrt.weights_lock import WeightsLock


def _host_session():
    _, m1 = tiny_exports()
    q = tiny_quantized()
    s = Session.Create([HostBackend], q.view(0), [HostDevice.Default()])
    s.apply()
    x = np.random.default_rng(3).normal(size=q.inputs()[0].shape).astype(np.float32)
    return s, m1, x


def _out(s, x):
    return np.array(s.forward([x])[0].numpy())


def test_a_refit_waits_for_a_running_forward_and_the_forward_sees_the_old_weights():
    s, m1, x = _host_session()
    old = _out(s, x)
    entered, release = threading.Event(), threading.Event()
    seen: list = []

    def pause_once(sess, op, backend, ins):
        if not entered.is_set():
            entered.set()
            release.wait(10)

    s.setPreCallBack(pause_once)
    t = threading.Thread(target=lambda: seen.append(_out(s, x)))
    t.start()
    assert entered.wait(10)
    done = threading.Event()
    r = threading.Thread(target=lambda: (s.refitWeights(m1), done.set()))
    r.start()
    assert not done.wait(0.5), "the refit wrote while a forward was running"
    release.set()
    t.join(10)
    r.join(30)
    assert done.is_set()
    assert np.array_equal(seen[0], old)  # the paused forward ran wholly on the old weights
    s.setPreCallBack(None)
    new = _out(s, x)
    assert not np.array_equal(new, old)


def test_a_refit_from_inside_a_forward_of_the_same_thread_is_refused():
    s, m1, x = _host_session()
    old = _out(s, x)
    errors: list = []

    def refit_inside(sess, op, backend, ins):
        if not errors:
            with pytest.raises(CallOrderError, match="inside a forward") as e:
                sess.refitWeights(m1)
            errors.append(e.value)

    s.setPreCallBack(refit_inside)
    assert np.array_equal(_out(s, x), old)
    assert errors
    s.setPreCallBack(None)
    assert np.array_equal(_out(s, x), old)  # nothing was written


def test_readers_share_and_a_writer_excludes_them():
    lock = WeightsLock()
    order: list[str] = []
    with lock.reading():
        with lock.reading():  # nested reads on one thread
            pass
        other = threading.Thread(target=lambda: _read(lock, order))
        other.start()
        other.join(5)
        assert order == ["read"]  # another reader was not held back
        w = threading.Thread(target=lambda: _write(lock, order))
        w.start()
        w.join(0.3)
        assert order == ["read"]  # the writer waits for this reader
    w.join(5)
    assert order == ["read", "write"]


def _read(lock, order):
    with lock.reading():
        order.append("read")


def _write(lock, order):
    with lock.writing("test"):
        order.append("write")

"""A replayed program on one thread calls each kernel's compiled code straight
(`npu_model.program.Recording.direct_steps`): no `pool.Split` sizing, no dispatcher type
resolution, the same bytes as decoding; a kernel replaced after the first replay (a test's spy)
is still the one that runs; more threads go through the splits; a kernel not compiled yet runs
through its dispatcher until a later replay binds its compiled code."""

from __future__ import annotations

import numpy as np
import pytest
from npu_testlib import LOGICAL, rand_requant, ref_conv_acc, ref_requant
from numba import njit

from npu_model import asm, program
from npu_model.kernels import implicit, pool


def _layers(hw, rng):
    """A 3x3 convolution then a ReLU-free 1x1 one (two split kernels), their reference."""
    x = rng.integers(-128, 128, (7, 9, 16)).astype(np.int8)
    w1 = rng.integers(-127, 128, (3, 3, 16, 24)).astype(np.int8)
    w2 = rng.integers(-127, 128, (1, 1, 24, 8)).astype(np.int8)
    b1, b2 = rng.integers(-5000, 5000, 24), rng.integers(-5000, 5000, 8)
    m1, s1 = rand_requant(rng, 24, 2.0 / (9 * 16 * 30))
    m2, s2 = rand_requant(rng, 8, 2.0 / (24 * 30))
    fi, fm, fo = hw.fmap_in(x), hw.fmap_out(7, 9, 24), hw.fmap_out(7, 9, 8)
    layers = [asm.Conv(fi, fm, hw.put(asm.pack_conv_weights(w1, 1, "int8", hw.cfg)),
                       hw.put(asm.pack_requant_params(b1, m1, s1)), kernel=(3, 3),
                       pad=(1, 1, 1, 1)),
              asm.Conv(fm, fo, hw.put(asm.pack_conv_weights(w2, 1, "int8", hw.cfg)),
                       hw.put(asm.pack_requant_params(b2, m2, s2)), kernel=(1, 1))]
    mid = ref_requant(ref_conv_acc(x, w1, b1, pad=(1, 1, 1, 1)), m1, s1, -128, 127)
    ref = ref_requant(ref_conv_acc(mid.astype(np.int8), w2, b2), m2, s2, -128, 127)
    return layers, fo, ref


@pytest.fixture
def one_thread():
    pool.set_threads(1)
    yield
    pool.set_threads(None)


def test_one_thread_replays_on_compiled_code(dev, hw, rng, decodes, one_thread, monkeypatch):
    layers, fo, ref = _layers(hw, rng)
    phys, nbytes = hw.run(layers)
    np.testing.assert_array_equal(hw.read(fo), ref)
    splits, progs = [], []
    monkeypatch.setattr(pool.Split, "__call__", lambda self, *a: splits.append(self))
    real = program.Program.replay
    monkeypatch.setattr(program.Program, "replay", lambda self: progs.append(self) or real(self))
    for _ in range(3):
        hw.chunk.fill(0x5A, fo.addr - LOGICAL, 7 * 9 * fo.pitch)  # a split not run would show
        dev.reset(1)
        dev.icoreCalc(phys, nbytes)
        np.testing.assert_array_equal(hw.read(fo), ref)
    assert decodes[0] == 1 and len(progs) == 3 and not splits  # replayed, no split sized a call
    steps = progs[0].rec.direct_steps()
    kernels = [s for s in steps if s[0] is not None]
    assert kernels and all(s[2] is not s[1] and s[2] is s[1].overloads[
        tuple(s[1].typeof_pyval(a) for a in s[3])].entry_point for s in kernels)


def test_a_kernel_replaced_later_still_runs(dev, hw, rng, decodes, one_thread, monkeypatch):
    layers, fo, ref = _layers(hw, rng)
    phys, nbytes = hw.run(layers)
    dev.reset(1)
    dev.icoreCalc(phys, nbytes)  # the direct steps are built
    seen = []
    real = implicit.CONV_IMPLICIT.kernel
    monkeypatch.setattr(implicit.CONV_IMPLICIT, "kernel",
                        lambda *a: seen.append(a[-2:]) or real(*a))
    dev.reset(1)
    dev.icoreCalc(phys, nbytes)
    assert decodes[0] == 1 and seen  # replayed, through the spy
    np.testing.assert_array_equal(hw.read(fo), ref)


@pytest.mark.parametrize(("inline_s", "through"), [(0.0, 2), (1e6, 0)],
                         ids=["may-cut", "never-cut"])
def test_more_threads_go_through_the_splits_that_may_cut(dev, hw, rng, decodes, monkeypatch,
                                                          inline_s, through):
    """At two threads a replayed call its split may cut goes through the split (the pool
    sizes its parts); one whose shape was measured too short to cut runs its kernel straight,
    with the same bytes."""
    layers, fo, ref = _layers(hw, rng)
    monkeypatch.setattr(pool, "INLINE_S", inline_s)
    pool.set_threads(2)
    try:
        phys, nbytes = hw.run(layers)
        calls = []
        real = pool.Split.__call__
        monkeypatch.setattr(pool.Split, "__call__",
                            lambda self, *a: calls.append(self) or real(self, *a))
        dev.reset(1)
        dev.icoreCalc(phys, nbytes)
    finally:
        pool.set_threads(None)
    assert decodes[0] == 1 and len(calls) == through
    np.testing.assert_array_equal(hw.read(fo), ref)


def test_an_uncompiled_kernel_is_bound_by_a_later_replay():
    @njit
    def add_one(a, n):
        for i in range(n):
            a[i] += 1

    a = np.zeros(4, np.int64)
    rec = program.Recording(steps=[(add_one, (a, 4))])
    step, bound = program.direct_step(add_one, (a, 4))
    assert not bound and step[2] is add_one  # nothing compiled: the dispatcher compiles
    for _ in range(3):
        for _, _, call, args, _, _ in rec.direct_steps():
            call(*args)
    assert (a == 3).all()  # the first call compiled it through the dispatcher
    for _ in range(program.REBIND_EVERY):
        rec.direct_steps()
    call = rec.direct_steps()[0][2]
    assert call is not add_one and call is add_one.overloads[
        tuple(add_one.typeof_pyval(v) for v in (a, 4))].entry_point
    call(a, 4)
    assert (a == 4).all()

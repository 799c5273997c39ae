"""The MPE kernels on the thread pool: byte-identical results at 1, 2 and 4 threads, the work
really split over threads, and the thread count taken from ``XRT_THREADS``."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from npu_testlib import Harness, rand_requant, ref_conv_acc, ref_requant

from npu_model import asm
from npu_model.kernels import bgemm, depthwise, implicit, matmul, mpe, pool

_free_cores = pool.free_cores


@pytest.fixture(autouse=True)
def _restore_threads(monkeypatch):
    monkeypatch.setattr(pool, "_machine", pool._Backoff())  # no loss seen before the test
    # the cores free now unknown: the timing alone decides, whatever the machine's load
    monkeypatch.setattr(pool, "free_cores", lambda: None)
    yield
    pool.set_threads(None)


def _layers(hw, rng, dtype):
    """A stream exercising every split kernel: a padded stem, a 3x3, a 1x1, a depthwise and
    a dynamic matmul, large enough to be cut into four parts."""
    npdt = np.int16 if dtype == "int16" else np.int8
    info = np.iinfo(npdt)
    scale = 3000 if dtype == "int16" else 30

    def conv(x, cout, k, s, p, groups=1):
        h, w, cin = x.shape
        wq = rng.integers(-info.max, info.max + 1, (k, k, cin // groups, cout)).astype(npdt)
        m, sh = rand_requant(rng, cout, 2.0 / (k * k * cin // groups * scale))
        oh, ow = asm.conv_out_hw(h, w, (k, k), (s, s), (p,) * 4, (1, 1))
        fo = hw.fmap_out(oh, ow, cout, dtype)
        layer = asm.Conv(hw.fmap_in(x), fo, hw.put(asm.pack_conv_weights(wq, groups, dtype,
                                                                         hw.cfg)),
                         hw.put(asm.pack_requant_params(7, m, sh)), kernel=(k, k),
                         stride=(s, s), pad=(p,) * 4, groups=groups, clip=(info.min, info.max))
        return layer, fo

    def rand(*shape):
        return rng.integers(info.min, info.max + 1, shape).astype(npdt)

    out = [conv(rand(194, 194, 3), 16, 6, 2, 2), conv(rand(30, 30, 64), 64, 3, 1, 1),
           conv(rand(40, 40, 64), 96, 1, 1, 0), conv(rand(64, 64, 64), 64, 3, 1, 1, groups=64)]
    a, b = rand(8, 64, 256), rand(8, 256, 96)
    fo = hw.fmap_out(8, 64, 96, dtype)
    m, sh = rand_requant(rng, 96, 1.0 / (256 * scale * 300))
    out.append((asm.Matmul(hw.fmap_in(a), fo, hw.put(asm.pack_requant_params(3, m, sh, n=96)),
                           b=hw.fmap_in(b), clip=(info.min, info.max)), fo))
    return out


_SPLITS = (mpe.CONV_INT, mpe.CONV_INT16, mpe.CONV_INT8_BYTES, mpe.CONV_INT16_BYTES,
           implicit.CONV_IMPLICIT, implicit.CONV_POINTWISE_INT16, mpe.CONV_DEPTHWISE,
           depthwise.CONV_DEPTHWISE_PAIRS,
           matmul.MATMUL_INT,
           matmul.MATMUL_INT8_BYTES, matmul.MATMUL_INT16, matmul.MATMUL_INT16_BYTES)


def _spy(monkeypatch) -> dict[str, list[tuple[int, int]]]:
    """kernel name -> (part start, thread) per part run, filled as the kernels run."""
    seen: dict[str, list[tuple[int, int]]] = {}
    for split in _SPLITS:
        kernel = split.kernel

        def spy(*args, _k=kernel, _name=split.__name__):
            seen.setdefault(_name, []).append((args[-2], threading.get_ident()))
            return _k(*args)

        monkeypatch.setattr(split, "kernel", spy)
        monkeypatch.setattr(split, "_shapes", {})  # no shape measured yet
    return seen


def _run_stream(dtype, runs=1):
    """The outputs of `_layers` run `runs` times on one device (a list per run)."""
    from xrt import Device

    dev = Device.Open("sim://zg330")
    dev.sim.int_gemm = dev.sim.int_gemm16 = True
    try:
        hw = Harness(dev, size=32 << 20)
        layers = _layers(hw, np.random.default_rng(5), dtype)
        out = []
        for _ in range(runs):
            hw.run([layer for layer, _ in layers])
            out.append([hw.read(fo).tobytes() for _, fo in layers])
        return out
    finally:
        dev.close()


@pytest.mark.parametrize("dtype", ["int8", "int16"])
def test_results_are_byte_identical_at_any_thread_count(dtype, monkeypatch):
    """Parts sized by work count alone (no timing): every layer cut at 2 and 4 threads."""
    monkeypatch.setattr(pool, "INLINE_S", 0.0)
    seen = _spy(monkeypatch)
    results = {}
    for n in (1, 2, 4):
        pool.set_threads(n)
        seen.clear()
        results[n] = _run_stream(dtype)[0]
        # dense (int8 on the byte GEMM: the implicit one; int16's 1x1 its pointwise one),
        # depthwise, matmul of this dtype
        assert len(seen) == (4 if dtype == "int16" and bgemm.enabled() else 3), seen
        assert ("conv_implicit_int8" in seen) == (dtype == "int8" and bgemm.enabled())
        for name, parts in seen.items():  # cut into parts at n > 1, run on n threads at most
            calls = sum(1 for lo, _ in parts if lo == 0)
            if n == 1:
                assert len(parts) == calls, name
            else:
                assert calls < len(parts) <= calls * n * pool.PARTS_PER_THREAD, name
            assert len({t for _, t in parts}) <= n
    assert results[1] == results[2] == results[4]


@pytest.mark.parametrize("dtype", ["int8", "int16"])
def test_measured_shapes_are_cut_by_their_time(dtype, monkeypatch):
    """A shape not seen before runs inline and timed; the next call of it is cut by the time
    measured (every call here counts as long enough, and no cut call as a loss: the backoff
    has tests of its own), and the outputs of both runs are byte-identical to one thread's."""
    monkeypatch.setattr(pool, "INLINE_S", 1e-9)
    monkeypatch.setattr(pool, "PART_S", 1e-9)
    monkeypatch.setattr(pool._Backoff, "lost", lambda self: None)
    seen = _spy(monkeypatch)
    pool.set_threads(1)
    one = _run_stream(dtype)[0]
    pool.set_threads(2)
    runs = []

    def record(*args, _orig=pool.Split.__call__):
        before = {k: len(v) for k, v in seen.items()}
        _orig(*args)
        name = args[0].__name__
        runs.append((name, len(seen[name]) - before.get(name, 0)))

    monkeypatch.setattr(pool.Split, "__call__", record)
    first, second = _run_stream(dtype, runs=2)
    assert first == second == one
    half = len(runs) // 2
    assert half == 5 and all(parts == 1 for _, parts in runs[:half])  # unseen: inline
    assert all(parts > 1 for _, parts in runs[half:])  # measured: cut
    for split in _SPLITS:  # the time kept per shape
        assert all(known.inline > 0 for known in split._shapes.values())


def test_shapes_measured_faster_than_the_threshold_stay_inline(monkeypatch):
    monkeypatch.setattr(pool, "INLINE_S", 1e3)
    seen = _spy(monkeypatch)
    pool.set_threads(4)
    _run_stream("int8", runs=2)
    for name, parts in seen.items():
        assert len(parts) == sum(1 for lo, _ in parts if lo == 0), name


#: what a part sleeps per item (or per part): long enough that a busy machine's scheduling
#: delay (a few ms on 2 cores at load 14) cannot make a cut call of 4 items lose to 8 inline
SLEEP_S = 0.006


def _sleepy(per_part: bool):
    """A Split over 8 items whose parts sleep (releasing the GIL as a Numba kernel does):
    `SLEEP_S` per item, or per part whatever its size; the parts each call was cut into go to
    `calls`."""
    calls: list[int] = []

    def kernel(n, lo, hi):
        if lo == 0:
            calls.append(0)
        calls[-1] += 1
        time.sleep(SLEEP_S * (1 if per_part else hi - lo))

    return pool.Split(kernel, extent=("n",), work=("n",), min_work=1), calls


def test_cutting_goes_on_while_it_pays(monkeypatch):
    monkeypatch.setattr(pool, "INLINE_S", 1e-3)
    monkeypatch.setattr(pool, "PART_S", 1e-3)
    pool.set_threads(2)
    split, calls = _sleepy(per_part=False)
    for _ in range(6):
        split(8)
    assert calls[0] == 1 and all(parts > 1 for parts in calls[1:]), calls


def test_a_shape_slower_cut_goes_back_inline_for_longer_each_time(monkeypatch):
    """Parts costing the same whatever their size (a busy machine's stall, in effect): each cut
    call loses to the inline time, and the shape stays inline for 1, 2, 4 ... calls."""
    monkeypatch.setattr(pool, "INLINE_S", 1e-3)
    monkeypatch.setattr(pool, "PART_S", 1e-4)
    pool.set_threads(2)
    split, calls = _sleepy(per_part=True)
    for _ in range(12):
        split(8)
    cut = [i for i, parts in enumerate(calls) if parts > 1]
    assert cut == [1, 3, 6, 11], calls  # timed inline, cut, 1 inline, cut, 2, cut, 4, cut


def test_a_losing_cut_holds_every_kernel_back(monkeypatch):
    """The other cores busy for one kernel are busy for the next: after a cut call of one
    kernel loses, another kernel's shape that would be cut runs inline until the machine's
    backoff has passed."""
    monkeypatch.setattr(pool, "INLINE_S", 1e-3)
    monkeypatch.setattr(pool, "PART_S", 1e-4)
    pool.set_threads(2)
    loser, lost = _sleepy(per_part=True)
    other, calls = _sleepy(per_part=False)
    other(8)  # timed inline
    loser(8)
    loser(8)  # cut, and slower than inline
    assert lost == [1, 8]
    other(8)  # the machine's backoff: inline
    other(8)  # cut
    assert calls == [1, 1, 8]


def test_split_results_match_the_reference(hw, rng):
    """Four parts of a convolution still give the int64 reference, padding rows included."""
    pool.set_threads(4)
    x = rng.integers(-128, 128, (31, 29, 40)).astype(np.int8)
    wq = rng.integers(-127, 128, (3, 3, 40, 48)).astype(np.int8)
    m, s = rand_requant(rng, 48, 1 / 3000)
    fo = hw.fmap_out(31, 29, 48)
    hw.run([asm.Conv(hw.fmap_in(x), fo, hw.put(asm.pack_conv_weights(wq)),
                     hw.put(asm.pack_requant_params(11, m, s)), kernel=3, pad=1)])
    ref = ref_requant(ref_conv_acc(x, wq, 11, pad=(1, 1, 1, 1)), m, s, -128, 127)
    np.testing.assert_array_equal(hw.read(fo), ref)


def test_parts_run_at_the_same_time(monkeypatch):
    """Two parts meet at a barrier: they can only pass it if they run concurrently."""
    monkeypatch.setattr(pool, "INLINE_S", 0.0)  # cut by work count: no timed first call
    pool.set_threads(2)
    meet = threading.Barrier(2, timeout=30)
    ran = []

    def kernel(n, lo, hi):
        meet.wait()
        ran.append((lo, threading.get_ident()))

    pool.Split(kernel, extent=("n",), work=("n",), min_work=1)(2)
    assert sorted(lo for lo, _ in ran) == [0, 1] and len({t for _, t in ran}) == 2


def test_small_layers_stay_on_the_calling_thread():
    pool.set_threads(8)
    args = [0] * 34
    names = mpe.CONV_INT._extent + mpe.CONV_INT._work
    for i in names:
        args[i] = 1
    assert mpe.CONV_INT.parts(tuple(args)) == [0, 1]


def test_thread_count_from_the_environment(monkeypatch):
    monkeypatch.setenv("XRT_THREADS", "3")
    pool.set_threads(None)
    assert pool.threads() == 3
    monkeypatch.setenv("XRT_THREADS", "zero")
    pool.set_threads(None)
    with pytest.raises(pool.ThreadCountError, match="XRT_THREADS"):
        pool.threads()
    with pytest.raises(pool.ThreadCountError):
        pool.set_threads(0)


def test_a_forked_child_gets_its_own_pool(monkeypatch):
    """A child forked after the pool started (a worker process) must not wait on the parent's
    threads, which it does not have."""
    import multiprocessing as mp

    monkeypatch.setattr(pool, "INLINE_S", 0.0)  # cut by work count: the pool is used
    pool.set_threads(2)
    x = np.ones(10)
    pool.Split(_sum_parts, extent=("n",), work=("n",), min_work=1)(x, out := np.zeros(2), 2)
    assert out.sum() == 10
    ctx = mp.get_context("fork")
    with ctx.Pool(1) as workers:
        assert workers.apply(_split_in_child, ()) == 10.0


def _sum_parts(x, out, n, lo, hi):
    out[lo] = x[lo * 5:hi * 5].sum()


def _split_in_child():
    out = np.zeros(2)
    pool.Split(_sum_parts, extent=("n",), work=("n",), min_work=1)(np.ones(10), out, 2)
    return float(out.sum())


def test_an_error_in_a_part_reaches_the_caller_and_the_pool_goes_on(monkeypatch):
    """A part raising: the other parts still run, the caller raises the error once every part
    has finished, and the next call is cut and runs as usual."""
    monkeypatch.setattr(pool, "INLINE_S", 0.0)
    pool.set_threads(2)
    ran = []

    def kernel(n, lo, hi):
        ran.append(lo)
        if lo == 1:
            raise ArithmeticError("part 1")

    split = pool.Split(kernel, extent=("n",), work=("n",), min_work=1)
    with pytest.raises(ArithmeticError, match="part 1"):
        split(4)
    assert sorted(ran) == [0, 1, 2, 3]
    out = np.zeros(2)
    pool.Split(_sum_parts, extent=("n",), work=("n",), min_work=1)(np.ones(10), out, 2)
    assert out.tolist() == [5.0, 5.0]


def _kernel_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("npu-kernel")]


def test_a_new_thread_count_ends_the_old_pool_threads(monkeypatch):
    monkeypatch.setattr(pool, "INLINE_S", 0.0)
    split = pool.Split(_sum_parts, extent=("n",), work=("n",), min_work=1)
    for n, expected in ((4, 3), (2, 1)):
        pool.set_threads(n)
        out = np.zeros(2)
        split(np.ones(10), out, 2)
        assert out.sum() == 10
        assert len(_kernel_threads()) == expected
    pool.set_threads(1)
    assert _kernel_threads() == []


def test_calls_from_several_threads_at_once(monkeypatch):
    """Two threads cutting calls at the same time: one has the pool threads, the other runs
    its call inline meanwhile; every result is right."""
    monkeypatch.setattr(pool, "INLINE_S", 0.0)
    pool.set_threads(2)
    split = pool.Split(_sum_units, extent=("n",), work=("n",), min_work=1)
    bad = []

    def caller(k):
        x = np.full(10, float(k))
        for _ in range(300):
            out = np.zeros(2)
            split(x, out, 2)
            if out.tolist() != [5.0 * k, 5.0 * k]:
                bad.append((k, out.tolist()))

    callers = [threading.Thread(target=caller, args=(k,)) for k in (1, 2, 3)]
    for t in callers:
        t.start()
    for t in callers:
        t.join()
    assert bad == []


def test_measured_calls_use_the_cores_free_now(monkeypatch):
    """A measured call long enough to cut runs inline while no other core is free, and on as
    many threads as there are free cores otherwise (the pool's size at most)."""
    monkeypatch.setattr(pool, "INLINE_S", 1e-3)
    monkeypatch.setattr(pool, "PART_S", 1e-4)
    monkeypatch.setattr(pool._Backoff, "lost", lambda self: None)
    pool.set_threads(4)
    free = [1]
    monkeypatch.setattr(pool, "free_cores", lambda: free[0])
    ran: list[tuple[int, int]] = []

    def kernel(n, lo, hi):
        ran.append((lo, threading.get_ident()))
        time.sleep(0.0005 * (hi - lo))

    split = pool.Split(kernel, extent=("n",), work=("n",), min_work=1)
    split(32)  # timed inline
    for cores, most in ((1, 1), (2, 2), (3, 3), (9, 4)):
        free[0] = cores
        ran.clear()
        split(32)
        assert len(ran) == (1 if cores == 1 else min(32, most * pool.PARTS_PER_THREAD))
        assert len({t for _, t in ran}) <= most


def test_free_cores_reads_the_runnable_count(monkeypatch, tmp_path):
    load = tmp_path / "loadavg"
    load.write_text("0.50 0.40 0.30 3/345 999\n")
    monkeypatch.setattr(pool, "LOADAVG", str(load))
    monkeypatch.setattr(pool, "_loadavg_fd", None)
    monkeypatch.setattr(pool, "_cpus", 8)
    monkeypatch.setattr(pool, "SHARE", 0)
    assert _free_cores() == 6  # 8 CPUs, 3 runnable (the caller one of them)
    monkeypatch.setattr(pool, "SHARE", 1)  # a core shared with one other task as well
    assert _free_cores() == 7
    monkeypatch.setattr(pool, "SHARE", 0)
    monkeypatch.setattr(pool, "_cpus", 2)
    assert _free_cores() == 1  # busier than its cores: the caller's own only
    monkeypatch.setattr(pool._crew, "spinners", lambda: 2)  # two of the 3 are this pool's
    assert _free_cores() == 2
    monkeypatch.setattr(pool, "LOADAVG", str(tmp_path / "absent"))
    monkeypatch.setattr(pool, "_loadavg_fd", None)
    assert _free_cores() is None


def _sum_units(x, out, n, lo, hi):
    for i in range(lo, hi):
        out[i] = x[i * 5:(i + 1) * 5].sum()


def _wait_for(cond, seconds: float) -> None:
    """Poll `cond` until it holds or `seconds` pass (a busy machine runs the pool late); the
    caller asserts it."""
    deadline = time.perf_counter() + seconds
    while not cond() and time.perf_counter() < deadline:
        time.sleep(0.001)


def test_pool_threads_watch_for_the_next_call_then_sleep(monkeypatch):
    """After a cut call a pool thread spins for `SPIN_S` (a runnable task the free-core count
    leaves out), then sleeps on its lock; either way the next cut call gets it."""
    from npu_model.kernels import spin

    spin.wait_change(np.zeros(1, dtype=np.int64), 0, 1)  # compiled: the pool may spin
    monkeypatch.setattr(pool, "INLINE_S", 0.0)
    monkeypatch.setattr(pool, "SPIN_S", 0.2)
    pool.set_threads(2)
    split = pool.Split(_sum_units, extent=("n",), work=("n",), min_work=1)
    for _ in range(3):
        out = np.zeros(4)
        split(np.arange(20.0), out, 4)
        assert out.tolist() == [10.0, 35.0, 60.0, 85.0]
        _wait_for(lambda: pool._crew.spinning[0], 5)  # a busy machine may run it late
        assert pool._crew.spinning[0] and pool._crew.spinners() == 1
    _wait_for(lambda: pool._crew.sleeping[0], 10)
    assert pool._crew.sleeping[0] and pool._crew.spinners() == 0
    out = np.zeros(4)
    split(np.arange(20.0), out, 4)
    assert out.tolist() == [10.0, 35.0, 60.0, 85.0]


def test_the_end_of_a_run_sends_the_spinners_to_sleep(monkeypatch, dev):
    """`pool.rest` (called when a chip run ends) stops the spin at once: the threads sleep
    until the next cut call, which still gets them."""
    from npu_model.kernels import spin

    spin.wait_change(np.zeros(1, dtype=np.int64), 0, 1)  # compiled: the pool may spin
    monkeypatch.setattr(pool, "INLINE_S", 0.0)
    monkeypatch.setattr(pool, "SPIN_S", 30.0)  # spins until told otherwise
    pool.set_threads(2)
    split = pool.Split(_sum_units, extent=("n",), work=("n",), min_work=1)
    for _ in range(2):
        out = np.zeros(4)
        split(np.arange(20.0), out, 4)
        assert out.tolist() == [10.0, 35.0, 60.0, 85.0]
        _wait_for(lambda: pool._crew.spinning[0], 5)
        assert pool._crew.spinners() == 1
        pool.rest()
        _wait_for(lambda: pool._crew.sleeping[0], 5)
        assert pool._crew.sleeping[0] and pool._crew.spinners() == 0
    # a chip run ends with it: a layer on the chip, then nobody spins
    hw = Harness(dev)
    rng = np.random.default_rng(3)
    out = np.zeros(4)
    split(np.arange(20.0), out, 4)  # spinning again
    x = rng.integers(-128, 128, (4, 4, 8)).astype(np.int8)
    fo = hw.fmap_out(4, 4, 8)
    hw.run([asm.Copy(hw.fmap_in(x), fo)])
    _wait_for(lambda: pool._crew.sleeping[0], 5)
    assert pool._crew.spinners() == 0


def test_no_spinning_with_spin_s_zero(monkeypatch):
    monkeypatch.setattr(pool, "INLINE_S", 0.0)
    monkeypatch.setattr(pool, "SPIN_S", 0.0)
    pool.set_threads(2)
    split = pool.Split(_sum_units, extent=("n",), work=("n",), min_work=1)
    seen = []
    for _ in range(20):
        out = np.zeros(4)
        split(np.arange(20.0), out, 4)
        seen.append(pool._crew.spinners())
        assert out.tolist() == [10.0, 35.0, 60.0, 85.0]
    assert seen == [0] * 20


def test_wait_change_returns_the_new_count_or_times_out():
    from npu_model.kernels import spin

    counter = np.zeros(1, dtype=np.int64)
    rate = spin.ticks_per_second(counter)
    assert 1e8 < rate < 1e11  # a time-stamp counter of 0.1 to 100 GHz
    t0 = time.perf_counter()
    assert spin.wait_change(counter, 0, int(rate * 0.01)) == 0
    assert time.perf_counter() - t0 >= 0.009

    def bump():
        time.sleep(0.02)
        counter[0] = 7

    t = threading.Thread(target=bump)
    t.start()
    assert spin.wait_change(counter, 0, int(rate * 30)) == 7  # long before its 30 s
    t.join()


def test_pool_threads_a_call_leaves_out_sleep(monkeypatch):
    """A call cut for fewer threads than the pool has (fewer cores free) wakes only those it
    uses; the others sleep instead of spinning on for the calls after."""
    from npu_model.kernels import spin

    spin.wait_change(np.zeros(1, dtype=np.int64), 0, 1)
    monkeypatch.setattr(pool, "INLINE_S", 1e-9)
    monkeypatch.setattr(pool, "PART_S", 1e-9)
    monkeypatch.setattr(pool, "SPIN_S", 0.5)
    monkeypatch.setattr(pool._Backoff, "lost", lambda self: None)
    monkeypatch.setattr(pool, "free_cores", lambda: 4)
    pool.set_threads(4)
    split = pool.Split(_sum_units, extent=("n",), work=("n",), min_work=1)
    x = np.arange(40.0)
    split(x, np.zeros(8), 8)  # timed inline
    split(x, np.zeros(8), 8)  # cut for 4 threads: the three pool threads spin after it
    _wait_for(lambda: pool._crew.spinners() >= 3, 5)
    assert pool._crew.spinners() == 3
    monkeypatch.setattr(pool, "free_cores", lambda: 2)
    out = np.zeros(8)
    split(x, out, 8)  # cut for 2: pool threads 1 and 2 go to sleep
    assert out.tolist() == [x[5 * i:5 * i + 5].sum() for i in range(8)]
    _wait_for(lambda: all(pool._crew.sleeping[1:]), 5)
    assert pool._crew.sleeping[1:] == [True, True]


def test_may_cut_tells_which_calls_a_replay_may_run_itself(monkeypatch):
    """`Split.may_cut`: False at one thread and for a shape measured below `INLINE_S` (a
    replay may call the kernel over its whole range itself), True otherwise."""
    monkeypatch.setattr(pool, "INLINE_S", 1e-3)
    split, _ = _sleepy(per_part=False)
    pool.set_threads(1)
    assert not split.may_cut((8,))
    pool.set_threads(2)
    assert split.may_cut((8,)) and split.may_cut((1,))  # not measured yet
    split(8)  # 8 x SLEEP_S inline: long enough to cut
    split(1)  # SLEEP_S
    monkeypatch.setattr(pool, "INLINE_S", 4 * SLEEP_S)
    assert split.may_cut((8,)) and not split.may_cut((1,))
    monkeypatch.setattr(pool, "INLINE_S", 0.0)  # sized by work count: any may be cut
    assert split.may_cut((1,))

"""Shared memory made safe by the runtime (issue 29, point 4; docs/memory-and-weights.md,
"Shared memory: what the runtime guarantees"), on both chips: WEIGHT and INSTR chunks read by
many sessions in many threads, one FTMP chunk shared by two networks forwarded from two threads
(serialised by the chunk's gate), a paused forward that another session in the same thread
would corrupt (refused), and shared chunks that cannot be freed while a session uses them."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest
from runtime_cases import host_ref, x_of

from host_backend import HostBackend
from npu_runtime import SegmentType
from npu_runtime.sharing import SharedSegmentBusyError, gate_of
from xrt import Device, HostDevice, Session
from xrt.errors import ChunkInUseError, InvalidArgumentError, MemoryAccessError
from xrt.remote.server import DeviceServer

ITERATIONS = 12


def _session(chip, z, dev=None, merge=None):
    s = Session.Create([chip.backend, HostBackend], z.view(0), [dev or chip.dev,
                                                                HostDevice.Default()])
    # every map in FTMP: the chunk really is shared
    chip.configure(s.backends[0], no_ocm=True, merge=merge)
    return s


def _two_networks_on_one_ftmp(chip, dev=None, merge=None):
    """Sessions of two different networks (tiny_cnn at 32 and 48 pixels) applied with one FTMP
    chunk sized to the larger, and their inputs and integer references. `merge=False`: one
    icoreCalc per HardOp, so a forward paused between HardOps has feature maps in the chunk."""
    dev = dev or chip.dev
    cases = [chip.compiled("tiny_cnn"), chip.compiled("tiny_cnn", input_size=48)]
    ss = [_session(chip, z, dev, merge) for _, z in cases]
    size = max(s.backends[0].logic_segment_map[SegmentType.FTMP].byte_size for s in ss)
    assert size == max(chip.backend.QuerySize(z.view(0), etm_reuse=chip.backend.chip.etm_reuse
                                              ).ftmp for _, z in cases)
    chunk = dev.defaultMemRegion().malloc(size, True, 4096)
    for s in ss:
        s.backends[0].userReuseSegment(chunk, SegmentType.FTMP)
        s.apply()
        assert s.backends[0].phy_segment_map[SegmentType.FTMP].phy_addr == chunk.addr
    xs = [x_of(q, 3 + i) for i, (q, _) in enumerate(cases)]
    refs = [host_ref(q, x) for (q, _), x in zip(cases, xs)]
    return ss, chunk, xs, refs


def _forward_loop(s, x, ref, n, errors):
    try:
        for _ in range(n):
            outs = s.forward([x])
            for a, b in zip(ref, outs):
                if not np.array_equal(a, np.asarray(b)):
                    errors.append(f"{s.backends[0]!r}: output differs from the reference")
                    return
    except Exception as exc:  # reported by the test thread
        errors.append(repr(exc))


def test_two_threads_two_networks_one_ftmp_chunk_exact(chip):
    ss, chunk, xs, refs = _two_networks_on_one_ftmp(chip, merge=False)
    gate = gate_of(chunk)
    before = gate.forwards
    errors: list[str] = []
    threads = [threading.Thread(target=_forward_loop, args=(s, x, r, ITERATIONS, errors))
               for s, x, r in zip(ss, xs, refs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[:3]
    assert gate.forwards - before == 2 * ITERATIONS  # every forward went through the gate
    assert not gate.busy
    # the HardOps ran on the chip, not the host
    for s in ss:
        assert all(type(s.backendBindings()[op.op_id]) is chip.backend
                   for op in s.network_view.ops if op.op_type == "HardOp")
    for s in ss:
        s.close()
    chunk.free()


def test_a_paused_forward_is_not_corrupted_by_a_second_network(chip):
    """stepTo pauses A between its HardOps (its feature maps live in the shared chunk): B in the
    same thread is refused, B in another thread waits until A has finished; both exact."""
    ss, chunk, xs, refs = _two_networks_on_one_ftmp(chip, merge=False)
    a, b = ss
    hard = [op.op_id for op in a.network_view.ops if op.op_type == "HardOp"]
    a.stepTo(hard[len(hard) // 2], [xs[0]])  # half of A's layers ran; the rest need their maps
    assert gate_of(chunk).busy
    with pytest.raises(SharedSegmentBusyError, match="paused forward.*stepTo"):
        b.forward([xs[1]])
    done = threading.Event()
    errors: list[str] = []

    def other():
        _forward_loop(b, xs[1], refs[1], 1, errors)
        done.set()

    t = threading.Thread(target=other)
    t.start()
    assert not done.wait(0.3)  # waits for A's forward to end
    out_v = a.network_view.outputs()[0].v_id
    last = next(op.op_id for op in a.network_view.ops if out_v in [v.v_id for v in op.outputs])
    outs = [o for o, v in zip(a.stepTo(last), next(
        op for op in a.network_view.ops if op.op_id == last).outputs) if v.v_id == out_v]
    t.join(60)
    assert done.is_set() and not errors, errors
    np.testing.assert_array_equal(np.asarray(outs[0]), refs[0][0])
    # after the refusal both still run exactly
    for s, x, r in zip(ss, xs, refs):
        for u, v in zip(r, s.forward([x])):
            np.testing.assert_array_equal(u, np.asarray(v))
    for s in ss:
        s.close()


def test_weights_and_instructions_shared_by_four_sessions_in_four_threads(chip):
    q, z = chip.compiled("tiny_cnn")
    ss = [Session.Create([chip.backend, HostBackend], z.view(0),
                         [chip.dev, HostDevice.Default()]) for _ in range(4)]
    region = chip.dev.defaultMemRegion()
    chunks = {st: region.malloc(max(ss[0].backends[0].logic_segment_map[st].byte_size, 1),
                                True, 4096) for st in (SegmentType.WEIGHT, SegmentType.INSTR)}
    for s in ss:
        for st, c in chunks.items():
            s.backends[0].userReuseSegment(c, st)
        s.apply()
    for st, c in chunks.items():
        assert all(s.backends[0].phy_segment_map[st].phy_addr == c.addr for s in ss)
        assert len(c.users()) == 4
    xs = [x_of(q, 10 + i) for i in range(4)]
    errors: list[str] = []
    threads = [threading.Thread(target=_forward_loop, args=(s, x, host_ref(q, x), 6, errors))
               for s, x in zip(ss, xs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[:3]
    for s in ss:
        s.close()
    for c in chunks.values():
        assert c.users() == []
        c.free()


def test_a_shared_chunk_in_use_cannot_be_freed(chip):
    ss, chunk, xs, refs = _two_networks_on_one_ftmp(chip)
    with pytest.raises(ChunkInUseError, match=r"2 deployment\(s\).*FTMP segment"):
        chunk.free()
    with pytest.raises(ChunkInUseError):
        chunk.close()  # the owner's idempotent free is refused as well
    ss[0].close()
    with pytest.raises(ChunkInUseError, match=r"1 deployment\(s\)"):
        chunk.free()
    for u, v in zip(refs[1], ss[1].forward([xs[1]])):  # the survivor is intact
        np.testing.assert_array_equal(u, np.asarray(v))
    ss[1].close()
    chunk.free()
    assert chunk.is_freed


def test_a_pin_goes_with_a_dropped_session_and_a_configured_one_pins(chip):
    _, z = chip.compiled("tiny_cnn")
    s = _session(chip, z)
    chunk = chip.dev.defaultMemRegion().malloc(
        s.backends[0].logic_segment_map[SegmentType.FTMP].byte_size, True, 4096)
    s.backends[0].userReuseSegment(chunk, SegmentType.FTMP)  # configured, not applied yet
    with pytest.raises(ChunkInUseError):
        chunk.free()
    s.apply()
    del s
    gc.collect()  # a session dropped without close lets go of its pins
    assert chunk.users() == []
    chunk.free()


def test_socket_clients_that_share_nothing(chip):
    """Two socket clients of one served chip, each with two networks on one FTMP chunk of its
    own, forwarding from four threads at once: every result exact. Neither client can deploy
    into, read, or free the other's chunk."""
    srv = DeviceServer(Device.Open(f"sim://{chip.kind}"), close_device=True).start()
    host, port = srv.address
    devs = [Device.Open(f"socket://{chip.kind}@{host}:{port}") for _ in range(2)]
    try:
        setups = [_two_networks_on_one_ftmp(chip, dev, merge=False) for dev in devs]
        (ss_a, chunk_a, _, _), (ss_b, chunk_b, _, _) = setups
        _, z = chip.compiled("tiny_cnn")
        thief = _session(chip, z, devs[1])
        with pytest.raises(InvalidArgumentError, match="ETM memory of this backend's device"):
            thief.backends[0].userReuseSegment(chunk_a, SegmentType.FTMP)
        with pytest.raises(MemoryAccessError):  # B's raw access to A's chunk
            devs[1].defaultMemRegion().storage.read(chunk_a.addr, 64)
        thief.close()
        errors: list[str] = []
        threads = [threading.Thread(target=_forward_loop, args=(s, x, r, 4, errors))
                   for ss, _, xs, refs in setups for s, x, r in zip(ss, xs, refs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(180)
        assert not errors, errors[:3]
        assert gate_of(chunk_a).forwards >= 8 and gate_of(chunk_b).forwards >= 8
        with pytest.raises(ChunkInUseError):
            chunk_a.free()
        for ss, chunk, _, _ in setups:
            for s in ss:
                s.close()
            chunk.free()
    finally:
        for d in devs:
            d.close()
        srv.shutdown()


def test_closing_a_paused_session_lets_go_of_the_chunk(chip):
    ss, chunk, xs, refs = _two_networks_on_one_ftmp(chip, merge=False)
    a, b = ss
    hard = [op.op_id for op in a.network_view.ops if op.op_type == "HardOp"]
    a.stepTo(hard[1], [xs[0]])
    errors: list[str] = []
    t = threading.Thread(target=_expect_busy, args=(a, xs[0], errors))
    t.start()
    t.join(30)
    assert errors == ["refused"]  # one session forwarded from two threads at once
    a.close()  # the paused forward ends with its session
    assert not gate_of(chunk).busy
    for u, v in zip(refs[1], b.forward([xs[1]])):
        np.testing.assert_array_equal(u, np.asarray(v))
    b.close()
    chunk.free()


def _expect_busy(s, x, errors):
    try:
        s.forward([x])
        errors.append("ran")
    except SharedSegmentBusyError as exc:
        errors.append("refused" if "two threads at once" in str(exc) else repr(exc))
    except Exception as exc:
        errors.append(repr(exc))


def test_a_fork_keeps_the_weights_it_borrows_alive(chip):
    """The backend a fork was forked from, closed first, cannot free the WEIGHT / INSTR chunks
    under the fork: the fork still forwards exactly after the freed space would have been handed
    out again, and the chunks go once the fork lets go of them."""
    q, z = chip.compiled("tiny_cnn")
    x = x_of(q, 21)
    ref = host_ref(q, x)
    region = chip.dev.defaultMemRegion()
    gc.collect()
    before = region.used_bytes
    s, zb = chip.session(z)
    fork = zb.fork()
    t = Session.CreateWithBackends(z.view(0), [fork, s.backends[1].fork()])
    t.apply()
    weights = zb.phy_segment_map[SegmentType.WEIGHT].single_chunk.memChunk
    assert any("forked from" in u for u in weights.users())
    s.close()  # the parent first
    assert not weights.is_freed
    junk = [region.malloc(1 << 16, True, 4096) for _ in range(8)]  # would reuse freed space
    for c in junk:
        c.fill(0xA5)
    for u, v in zip(ref, t.forward([x])):
        np.testing.assert_array_equal(u, np.asarray(v))
    t.close()
    del fork, t, s, zb, weights, junk, c
    gc.collect()
    assert region.used_bytes == before  # nothing leaked: the borrowed chunks went with the fork

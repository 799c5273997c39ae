"""The cost around a chip run's kernels, and what keeps it honest.

A decoded run replays without comparing its instruction and constant bytes while the memory
store says nothing may have written them (npu_runtime/watched_memory.py): these tests check
that a plain forward compares nothing once warm, and that a write into the instruction or
weight range through every public path (a chunk's write / fill / copyFrom / view / numpy /
read-then-write, the region's store, a weight refresh, a snapshot restore, a served client)
is seen at the very next run, on both chips.
"""

from __future__ import annotations

import numpy as np
import pytest
from runtime_cases import x_of

import npu_model.program as program
from npu_runtime import SegmentType
from npu_runtime.watched_memory import WatchedArena
from xrt.errors import DeviceError

ILLEGAL = np.array([0x7F << 56], np.uint64).view(np.uint8)  # an illegal opcode word


@pytest.fixture
def compares(monkeypatch):
    """[calls of the byte comparison of a program's instructions or constants]."""
    n = [0]
    same, unchanged = program.same_bytes, program.Recording.consts_unchanged

    def counted_same(a, b):
        n[0] += 1
        return same(a, b)

    def counted_unchanged(self, whole):
        n[0] += 1
        return unchanged(self, whole)

    monkeypatch.setattr(program, "same_bytes", counted_same)
    monkeypatch.setattr(program.Recording, "consts_unchanged", counted_unchanged)
    return n


def _chunks(b):
    return (b.phy_segment_map[SegmentType.INSTR].single_chunk.memChunk,
            b.phy_segment_map[SegmentType.WEIGHT].single_chunk.memChunk)


def _first_word(b, z):
    """Byte offset, in the INSTR chunk, of the first HardOp's first instruction word."""
    hard = [op for op in z.ops if op.op_type == "HardOp" and op.params]
    hi = b.forward_info.hardop_map[hard[0].op_id]
    return hi.instr_logic_addr - b.logic_segment_map[SegmentType.INSTR].logic_addr


def test_warm_forward_compares_nothing(chip, compares):
    """The stores are watched, and once warm a plain forward replays every run without
    reading its instruction or constant bytes, with the outputs of the first forward."""
    q, z = chip.compiled("tiny_cnn")
    s, b = chip.session(z, profile=False)
    assert isinstance(b.device.getMemRegion("etm").storage, WatchedArena)
    x = x_of(q, 1)
    first = np.asarray(s.forward([x])[0]).copy()
    s.forward([x])
    compares[0] = 0
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(s.forward([x])[0]), first)
    assert compares[0] == 0
    s.close()


def _poke_paths(chip, b):
    """(name, poke(chunk, offset, bytes)) for every public way to write device memory."""
    dev = chip.dev

    def chunk_write(c, off, data):
        c.write(off, data)

    def chunk_fill(c, off, data):
        assert len(set(data.tolist())) == 1
        c.fill(int(data[0]), off, data.size)

    def chunk_copy(c, off, data):
        src = dev.malloc(data.size)
        src.write(0, data)
        c.copyFrom(off, src, 0, data.size)
        src.free()

    def chunk_view(c, off, data):
        c.view(off, data.size)[:] = data

    def chunk_numpy_kept(c, off, data):
        v = c.numpy()  # taken, held, written later (after a run)
        _held.append(v[off:off + data.size].view(np.int8))
        _held[-1][:] = data.view(np.int8)

    def store_write(c, off, data):
        c.region.storage.write(c.begin.addr() + off, data)

    def store_view(c, off, data):
        c.region.storage.view(c.begin.addr() + off, data.size)[:] = data

    return [("chunk.write", chunk_write), ("chunk.fill", chunk_fill),
            ("chunk.copyFrom", chunk_copy), ("chunk.view", chunk_view),
            ("chunk.numpy held", chunk_numpy_kept), ("storage.write", store_write),
            ("storage.view", store_view)]


_held: list[np.ndarray] = []


@pytest.mark.parametrize("path", range(7))
def test_instruction_write_is_seen(chip, path):
    """An illegal word written into the instructions through each public path faults at the
    next run, though the stream ran (and replayed) just before; the word put back runs
    again, exactly."""
    q, z = chip.compiled("tiny_cnn")
    s, b = chip.session(z, profile=False)
    x = x_of(q, 2)
    name, poke = _poke_paths(chip, b)[path]
    instr, _ = _chunks(b)
    off = _first_word(b, z)
    saved = np.empty(8, np.uint8)
    instr.read(saved, off, 8)  # (before the runs: a read's view ending counts as a write)
    good = np.asarray(s.forward([x])[0]).copy()
    s.forward([x])
    bad = ILLEGAL if name != "chunk.fill" else np.full(8, 0xFF, np.uint8)
    poke(instr, off, bad)
    with pytest.raises(DeviceError, match="illegal opcode"):
        s.forward([x])
    instr.write(off, saved)
    np.testing.assert_array_equal(np.asarray(s.forward([x])[0]), good)
    _held.clear()
    s.close()


def test_view_held_across_runs_is_seen(chip):
    """A view of the weights taken before the runs and written between two of them: the
    next run computes on the new weights (the view's whole lifetime counts as a write)."""
    q, z = chip.compiled("tiny_cnn")
    s, b = chip.session(z, profile=False)
    x = x_of(q, 4)
    _, wchunk = _chunks(b)
    w = wchunk.numpy()[: wchunk.byte_size].view(np.int8)  # held from now on
    good = np.asarray(s.forward([x])[0]).copy()
    s.forward([x])
    saved = w.copy()
    w[:] = ~saved
    bad = np.asarray(s.forward([x])[0]).copy()
    assert not np.array_equal(bad, good)
    w[:] = saved
    del w
    np.testing.assert_array_equal(np.asarray(s.forward([x])[0]), good)
    s.close()


def test_view_ended_then_write_is_seen(chip, compares):
    """A view of the weights dropped: runs are trusted again (nothing compared), and a later
    write through the chunk is still seen."""
    q, z = chip.compiled("tiny_cnn")
    s, b = chip.session(z, profile=False)
    x = x_of(q, 5)
    _, wchunk = _chunks(b)
    good = np.asarray(s.forward([x])[0]).copy()
    w = wchunk.view(0, wchunk.byte_size)
    saved = w.copy()
    s.forward([x])
    del w
    s.forward([x])
    compares[0] = 0
    s.forward([x])
    assert compares[0] == 0
    wchunk.write(0, ~saved)
    assert not np.array_equal(np.asarray(s.forward([x])[0]), good)
    wchunk.write(0, saved)
    np.testing.assert_array_equal(np.asarray(s.forward([x])[0]), good)
    s.close()


def test_refresh_and_restore_are_seen(chip, tmp_path):
    """A weight refresh and a snapshot restore into the deployed chunks change what the
    very next run computes (inverted weights, then the originals back)."""
    q, z = chip.compiled("tiny_cnn")
    s, b = chip.session(z, profile=False)
    x = x_of(q, 6)
    _, wchunk = _chunks(b)
    saved = np.empty(wchunk.byte_size, np.uint8)
    wchunk.read(saved, 0, saved.size)
    path = tmp_path / "snap.bin"
    s.dumpSnapshot(str(path))
    good = np.asarray(s.forward([x])[0]).copy()
    s.forward([x])
    wchunk.write(0, ~saved)
    bad = np.asarray(s.forward([x])[0]).copy()
    assert not np.array_equal(bad, good)
    s.close()
    r = chip.load(path)  # restores the original images into fresh chunks
    np.testing.assert_array_equal(np.asarray(r.forward([x])[0]), good)
    r.close()


def test_socket_client_write_is_seen(chip):
    """A served client's WRITE and FILL into its instructions: the server's next run faults;
    the word put back runs exactly again."""
    from xrt import Device
    from xrt.remote.server import DeviceServer

    q, z = chip.compiled("tiny_cnn")
    srv = DeviceServer(Device.Open(f"sim://{chip.kind}"), close_device=True).start()
    host, port = srv.address
    dev = Device.Open(f"socket://{chip.kind}@{host}:{port}")
    try:
        s, b = chip.session(z, dev, profile=False)
        x = x_of(q, 8)
        good = np.asarray(s.forward([x])[0]).copy()
        s.forward([x])
        instr, _ = _chunks(b)
        off = _first_word(b, z)
        saved = np.empty(8, np.uint8)
        instr.read(saved, off, 8)
        for poke in (lambda: instr.write(off, ILLEGAL), lambda: instr.fill(0xFF, off, 8)):
            poke()
            with pytest.raises(DeviceError, match="illegal opcode"):
                s.forward([x])
            instr.write(off, saved)
            np.testing.assert_array_equal(np.asarray(s.forward([x])[0]), good)
        s.close()
    finally:
        dev.close()
        srv.shutdown()


def test_socket_requests_per_chip_run(chip, monkeypatch):
    """A plain forward over a socket asks the served device per chip run only to run it
    (icoreCalc); the MMU mode, the enabled MPEs, the profiler area, the layer count and the
    profiler records, and the Buyi's data type are read or set once per chip segment.
    The outputs are the in-process device's; the per-op path (a callback) still asks per
    run, and the Buyi's data type is the last run's after either."""
    import collections

    import xrt.remote.client as client
    import xrt.remote.protocol as P
    from xrt import Device
    from xrt.remote.server import DeviceServer

    q, z = chip.compiled("tiny_cnn")
    x = x_of(q, 9)
    local, _ = chip.session(z, profile=False, merge=False)
    want = np.asarray(local.forward([x])[0]).copy()
    local.close()
    calls: collections.Counter = collections.Counter()
    request = client.RemoteEndpoint.request

    def counted(self, mtype, *parts, **kw):
        if mtype == P.Msg.CALL:
            calls[P.decode_json(bytearray(parts[0]))["m"]] += 1
        else:
            calls[P.Msg(mtype).name] += 1
        return request(self, mtype, *parts, **kw)

    srv = DeviceServer(Device.Open(f"sim://{chip.kind}"), close_device=True).start()
    host, port = srv.address
    dev = Device.Open(f"socket://{chip.kind}@{host}:{port}")
    try:
        s, b = chip.session(z, dev, profile=False, merge=False)  # a run per HardOp
        s.forward([x])
        monkeypatch.setattr(client.RemoteEndpoint, "request", counted)
        np.testing.assert_array_equal(np.asarray(s.forward([x])[0]), want)
        runs = calls["icoreCalc"]
        assert runs >= 3
        assert calls["layerCount"] == 2 and calls["READ"] <= 2  # records once a segment
        per_segment = ("modeInfo", "getRowsCols") if chip.kind == "buyi" else ("getRowsCols",)
        for name in per_segment:
            assert calls[name] == 1, (name, dict(calls))
        keys = [r.key for r in b._forwarder.dep.runs if r.instr_size]
        if chip.kind == "buyi":
            changes = 1 + sum(a != c for a, c in zip(keys, keys[1:]))
            assert calls["setDType"] == changes
            assert dev.dtype() == keys[-1]
        assert sum(calls.values()) <= runs + 16, dict(calls)
        prof = b.profileInfo()
        assert len(prof) >= runs - 2 and all(r["cycles"] > 0 for r in prof.values())
        calls.clear()
        s.setPostCallBack(lambda *args: None)  # the per-op path asks per run, as before
        np.testing.assert_array_equal(np.asarray(s.forward([x])[0]), want)
        assert calls["getRowsCols"] == calls["icoreCalc"]
        assert b.profileInfo() == prof  # the same records, read per run there
        if chip.kind == "buyi":
            assert calls["setDType"] == calls["modeInfo"] == calls["icoreCalc"]
            assert dev.dtype() == keys[-1]
        s.close()
    finally:
        monkeypatch.undo()
        dev.close()
        srv.shutdown()


def _kernel(dst, src):
    """A stand-in kernel: dst = src + 1."""
    np.add(src, 1, out=dst)


def _steps_of(mem, with_kernel_on=None):
    """Record writes into slots 0..3 (16 bytes each, adjacent) of `mem`'s area at 64, a kernel
    between them on `mem[0:16]` (or on `with_kernel_on`)."""
    recs = [np.full(16, k + 1, np.uint8) for k in range(4)]
    kin = np.arange(16, dtype=np.uint8)
    kout = mem[0:16] if with_kernel_on is None else with_kernel_on
    steps = []
    for k, r in enumerate(recs):
        steps.append((_kernel, (kout, kin)))
        steps.append((np.copyto, (mem[64 + 16 * k:80 + 16 * k], r)))
    return steps


def _run(steps):
    for fn, args in steps:
        fn(*args)


def test_record_writes_join_exactly():
    """Adjacent record writes become one copy after the kernels, with the same bytes as
    the writes one by one."""
    mem_a, mem_b = np.zeros(256, np.uint8), np.zeros(256, np.uint8)
    steps_a, steps_b = _steps_of(mem_a), _steps_of(mem_b)
    joined = program.join_record_writes(steps_b)
    assert len(joined) == 5 and joined[-1][0] is np.copyto and joined[-1][1][0].size == 64
    _run(steps_a)
    _run(joined)
    np.testing.assert_array_equal(mem_a, mem_b)


def test_record_writes_a_kernel_touches_stay_in_place():
    """A kernel that reads or writes a record slot (here: writes over slot 1) keeps every
    write where it was; so does a write whose slots are not adjacent."""
    mem = np.zeros(256, np.uint8)
    steps = _steps_of(mem, with_kernel_on=mem[80:96])
    assert program.join_record_writes(steps) == steps
    mem_a, mem_b = np.zeros(256, np.uint8), np.zeros(256, np.uint8)
    _run(_steps_of(mem_a, with_kernel_on=mem_a[80:96]))
    _run(program.join_record_writes(_steps_of(mem_b, with_kernel_on=mem_b[80:96])))
    np.testing.assert_array_equal(mem_a, mem_b)
    gap = [(np.copyto, (mem[0:16], np.ones(16, np.uint8))),
           (np.copyto, (mem[32:48], np.ones(16, np.uint8)))]
    assert program.join_record_writes(gap) == gap


def test_a_shared_segment_deployed_again_is_seen(chip, compares):
    """userReuseSegment: a second backend of the network deploys into the WEIGHT and INSTR
    chunks the first one runs from; the first one's next run compares its bytes (the deploy
    wrote them), finds them equal and replays; later runs compare nothing again."""
    from host_backend import HostBackend
    from xrt import HostDevice, Session

    q, z = chip.compiled("tiny_cnn")
    x = x_of(q, 10)
    region = chip.dev.defaultMemRegion()
    first = Session.Create([chip.backend, HostBackend], z.view(0),
                           [chip.dev, HostDevice.Default()])
    zb = first.backends[0]
    chunks = {st: region.malloc(max(zb.logic_segment_map[st].byte_size, 1), True, 4096)
              for st in (SegmentType.WEIGHT, SegmentType.INSTR)}
    for st, c in chunks.items():
        zb.userReuseSegment(c, st)
    first.apply()
    good = np.asarray(first.forward([x])[0]).copy()
    first.forward([x])
    compares[0] = 0
    first.forward([x])
    assert compares[0] == 0
    second = Session.Create([chip.backend, HostBackend], z.view(0),
                            [chip.dev, HostDevice.Default()])
    for st, c in chunks.items():
        second.backends[0].userReuseSegment(c, st)
    second.apply()  # uploads the same words and weights into the shared chunks
    np.testing.assert_array_equal(np.asarray(first.forward([x])[0]), good)
    assert compares[0] > 0
    compares[0] = 0
    np.testing.assert_array_equal(np.asarray(first.forward([x])[0]), good)
    assert compares[0] == 0
    np.testing.assert_array_equal(np.asarray(second.forward([x])[0]), good)
    second.close()
    first.close()

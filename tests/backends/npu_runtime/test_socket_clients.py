"""Issue 29 through ``socket://``, on both chips: a network loaded from memory deployed on a served
device, snapshots dumped to and restored from bytes by another client, the OCM of one served
chip used by two clients that share nothing (time-shared by the server: a second client restores
an OCM snapshot while the first still holds its own, and a forward of one paused between its
HardOps is not disturbed by the other's), and a weight refresh by one client that leaves the
other's deployment as it was. Every result is compared bit for bit with the integer reference
(the HostBackend) and every chip op is asserted to run on the chip."""

from __future__ import annotations

import importlib
import threading

import numpy as np
import pytest
from refit_nets import copy_network
from runtime_cases import host_ref, run, x_of

import xir
from host_backend import HostBackend
from npu_runtime import SegmentType
from npu_runtime import regs as R
from npu_runtime.sharing import SharedSegmentBusyError
from xrt import Device, HostDevice, Session
from xrt.errors import (
    AddressInUseError,
    ChunkInUseError,
    DeviceUrlError,
    OutOfDeviceMemoryError,
    UnsupportedOpError,
)
from xrt.remote.server import DeviceServer


@pytest.fixture
def served(chip):
    """A served simulator of the chip and two clients of it that share nothing."""
    srv = DeviceServer(Device.Open(f"sim://{chip.kind}"), close_device=True).start()
    host, port = srv.address
    devs = [Device.Open(f"socket://{chip.kind}@{host}:{port}") for _ in range(2)]
    yield srv, devs
    for d in devs:
        d.close()
    srv.shutdown()


_OCM_NETS: dict = {}


def ocm_network(chip):
    """tiny_cnn lowered with its feature maps in the OCM (the Buyi decides that at compile
    time, the ZG330 at deploy time by default)."""
    if chip.kind not in _OCM_NETS:
        q, z = chip.compiled("tiny_cnn")
        if chip.kind == "buyi":
            lowering = importlib.import_module(f"{chip.package}.lowering")
            z = lowering.lower(lowering.adapt(q), {"ocm": 1})
        _OCM_NETS[chip.kind] = (q, z)
    return _OCM_NETS[chip.kind]


def _session(chip, net, dev, merge=None):
    s = Session.Create([chip.backend, HostBackend], net.view(0), [dev, HostDevice.Default()])
    chip.configure(s.backends[0], merge=merge)
    s.apply()
    return s


def _on_chip(s, chip):
    hard = [op.op_id for op in s.network_view.ops if op.op_type == "HardOp"]
    assert hard and all(isinstance(s.backendBindings()[i], chip.backend) for i in hard)


def _ocm_slots(s):
    return [sl for sl in s.backends[0].deployment.layout.slots if sl.ocm]


def test_one_device_class_and_one_set_of_fields_whatever_the_transport(chip, served):
    """The device holds its transport: the URL's scheme picks it in the one __init__, the chip's
    own class opens a served device too, and every instance has the same fields."""
    srv, (a, _) = served
    host, port = srv.address
    cls = chip.device_class()
    sock_cls = type(a)
    assert sock_cls.__mro__[1] is cls and sock_cls.served_only
    direct = cls(f"socket://{chip.kind}@{host}:{port}")
    mock = chip.mock()
    try:
        assert type(direct) is cls and direct.transport.remote is not None
        fields = set(vars(srv.device))
        assert set(vars(a)) == set(vars(direct)) == set(vars(mock)) == fields
        assert a.sim is None and a.confined is None
        assert srv.device.sim is not None and srv.device.mmu_generation >= 0
        assert direct.getRowsCols() == srv.device.getRowsCols()
        assert direct.version()["id"] == srv.device.version()["id"]
        assert direct.version()["server"] and "server" not in srv.device.version()
    finally:
        direct.close()
    with pytest.raises(DeviceUrlError, match="served"):
        sock_cls(f"sim://{chip.kind}")
    with pytest.raises(UnsupportedOpError, match="in-process"):
        srv.device.call("layerCount")


def test_every_served_method_is_on_the_servers_allow_list(chip, served):
    _, (a, _) = served
    cls = type(a)
    names = {n for n in dir(cls) if getattr(getattr(cls, n), "served", False)}
    assert {"icoreCalc", "reset"} <= set(a.transport.description["methods"])
    assert {"calcTime", "mmuMap", "getRowsCols"} <= names
    assert names <= set(a.transport.description["methods"])


def test_a_paused_forward_on_a_shared_ftmp_chunk_blocks_only_its_own_client(chip, served):
    """Client A: two networks on one FTMP chunk of its own, the first paused between its
    HardOps; the second in the same thread is refused (SharedSegmentBusyError), and the chunk
    cannot be freed under them (ChunkInUseError). Client B, sharing nothing, forwards the same
    networks on its own chunk meanwhile, exactly."""
    _, devs = served
    cases = [chip.compiled("tiny_cnn"), chip.compiled("tiny_cnn", input_size=48)]
    xs = [x_of(q, 13 + i) for i, (q, _) in enumerate(cases)]
    refs = [host_ref(q, x) for (q, _), x in zip(cases, xs)]
    setups = []
    for dev in devs:
        ss = []
        for _, z in cases:
            s = Session.Create([chip.backend, HostBackend], z.view(0),
                               [dev, HostDevice.Default()])
            chip.configure(s.backends[0], merge=False, no_ocm=True)
            ss.append(s)
        size = max(s.backends[0].logic_segment_map[SegmentType.FTMP].byte_size for s in ss)
        chunk = dev.defaultMemRegion().malloc(size, True, 4096)
        for s in ss:
            s.backends[0].userReuseSegment(chunk, SegmentType.FTMP)
            s.apply()
        setups.append((ss, chunk))
    (a1, a2), chunk_a = setups[0]
    hard = [op.op_id for op in a1.network_view.ops if op.op_type == "HardOp"]
    a1.stepTo(hard[len(hard) // 2], [xs[0]])
    with pytest.raises(SharedSegmentBusyError):
        a2.forward([xs[1]])
    with pytest.raises(ChunkInUseError):
        chunk_a.free()
    (b1, b2), chunk_b = setups[1]
    for s, x, r in ((b2, xs[1], refs[1]), (b1, xs[0], refs[0])):
        for u, v in zip(r, run(s, x)):
            np.testing.assert_array_equal(u, v)
    a1.close()  # the paused forward ends with its session
    for u, v in zip(refs[1], run(a2, xs[1])):
        np.testing.assert_array_equal(u, v)
    for (ss, chunk) in setups:
        for s in ss:
            s.close()
        chunk.free()


def test_a_client_reprograms_the_mmu_only_when_its_own_entries_changed(chip, served):
    """The server keeps each client's MMU entries apart, so a socket device counts its own
    changes (mmuMap, mmuClear, MMU register writes, full resets) in `mmu_generation`; a session
    forwarded again programs nothing, two sessions of one client take turns, another client's
    changes do not count, and every output stays exact."""
    srv, (a, b) = served
    page = a.malloc(4096)
    g = a.mmu_generation
    a.mmuMap(0, 0x1000, page.addr, 4096)
    assert a.mmu_generation == g + 1 and len(a.mmu_table()) == 1
    a.writeReg(R.REG_BASE + R.mmu_entry(0) + R.MMU_FLAGS, 0)
    assert a.mmu_generation == g + 2 and len(a.mmu_table()) == 0  # the cache followed
    a.mmuMap(1, 0x1000, page.addr, 4096)
    a.writeReg(R.REG_BASE + R.ICORE_CLK_HZ, 400_000_000)  # not an MMU register
    a.reset(1)  # a fast reset keeps the MMU
    assert a.mmu_generation == g + 3 and len(a.mmu_table()) == 1
    other = b.malloc(4096)
    b.mmuMap(0, 0x2000, other.addr, 4096)  # another client's entries
    assert a.mmu_generation == g + 3 and len(a.mmu_table()) == 1
    a.reset(0)
    assert a.mmu_generation == g + 4 and len(a.mmu_table()) == 0
    a.mmuMap(1, 0x1000, page.addr, 4096)
    a.defaultRegRegion().reset()  # REG_RESET
    assert a.mmu_generation == g + 6 and len(a.mmu_table()) == 0
    q, z = chip.compiled("tiny_cnn")
    x = x_of(q, 17)
    ref = host_ref(q, x)
    s1, s2 = _session(chip, z, a), _session(chip, z, a)
    run(s1, x)
    g = a.mmu_generation
    before = srv.requests
    for u, v in zip(ref, run(s1, x)):
        np.testing.assert_array_equal(u, v)
    assert a.mmu_generation == g  # programmed once, kept
    alone = srv.requests - before
    for s in (s2, s1, s2):
        for u, v in zip(ref, run(s, x)):
            np.testing.assert_array_equal(u, v)
    assert a.mmu_generation > g  # the two sessions took turns
    before = srv.requests
    run(s1, x)
    assert srv.requests - before > alone  # after s2: s1 programs its entries again
    s1.close()
    s2.close()


def test_a_network_loaded_from_memory_runs_on_a_served_chip(chip, served):
    _, (dev, _) = served
    q, z = chip.compiled("tiny_cnn")
    text, raw = z.dumpJsonToStr(), z.dumpParamsToBuffer()
    net = xir.Network.CreateFromJsonStr(text).loadParamsFromBuffer(memoryview(raw))
    x = x_of(q, 5)
    s = _session(chip, net, dev)
    _on_chip(s, chip)
    got = run(s, x)
    for u, v in zip(host_ref(q, x), got):
        np.testing.assert_array_equal(u, v)
    s.close()


def test_a_snapshot_in_bytes_restored_by_another_client_with_the_first_still_on_the_ocm(
        chip, served):
    """The known bug: the second client's restore of an OCM snapshot was refused ("the OCM ...
    is not available") until the first client disconnected, since the first held the whole
    served OCM. Now both hold it at once, time-shared, and both forward exactly."""
    srv, (a, b) = served
    q, z = ocm_network(chip)
    x = x_of(q, 7)
    ref = host_ref(q, x)
    sa = _session(chip, z, a)
    assert _ocm_slots(sa), "the network must keep feature maps in the OCM"
    data = sa.dumpSnapshotToMemory()
    assert isinstance(data, (bytes, bytearray, memoryview))
    sb = chip.load(bytes(data), b)  # a's session is open and its OCM lease held
    _on_chip(sb, chip)
    ocm_a, ocm_b = (s.backends[0].deployment.ocm_chunk for s in (sa, sb))
    assert ocm_a is not None and ocm_b is not None
    assert ocm_a.addr == ocm_b.addr  # the same physical OCM, one lease per client
    for s in (sb, sa, sb, sa):
        for u, v in zip(ref, run(s, x)):
            np.testing.assert_array_equal(u, v)
    assert srv.info()["clients"] == 2
    sa.close()
    sb.close()


def test_a_paused_forward_keeps_its_ocm_maps_while_another_client_runs(chip, served):
    """A stops between its HardOps (one icoreCalc each) with feature maps in the OCM; B runs
    whole forwards over the same OCM; A then finishes exactly: the server switched A's bytes
    out and back in."""
    _, (a, b) = served
    q, z = ocm_network(chip)
    xa, xb = x_of(q, 8), x_of(q, 9)
    ra, rb = host_ref(q, xa), host_ref(q, xb)
    sa, sb = _session(chip, z, a, merge=False), _session(chip, z, b, merge=False)
    assert _ocm_slots(sa) and _ocm_slots(sb)
    ops = sa.network_view.ops
    hard = [op.op_id for op in ops if op.op_type == "HardOp"]
    assert len(hard) >= 2
    sa.stepTo(hard[len(hard) // 2], [xa])
    for _ in range(2):
        for u, v in zip(rb, run(sb, xb)):
            np.testing.assert_array_equal(u, v)
    out_v = sa.network_view.outputs()[0].v_id
    last = next(op for op in ops if out_v in [v.v_id for v in op.outputs])
    outs = [o for o, v in zip(sa.stepTo(last.op_id), last.outputs) if v.v_id == out_v]
    np.testing.assert_array_equal(np.asarray(outs[0]), ra[0])
    sa.close()
    sb.close()


def test_the_served_ocm_is_leased_whole_and_given_back(chip, served):
    """Leaseholders read back only their own bytes; an ordinary OCM chunk is refused while a
    lease is held, and a lease while an ordinary chunk is; the OCM is zeroed when the last
    lease goes."""
    srv, (a, b) = served
    la = a.getMemRegion("ocm").lease()
    lb = b.getMemRegion("ocm").lease()
    assert la.addr == lb.addr == a.config.ocm_base and la.byte_size == a.config.ocm_size
    la.write(0, np.full(4096, 0xA5, np.uint8))
    back = np.empty(4096, np.uint8)
    lb.read(back)
    assert not back.any()  # b never sees a's bytes
    lb.write(0, np.full(4096, 0x3C, np.uint8))
    la.read(back)
    assert (back == 0xA5).all()
    with pytest.raises(OutOfDeviceMemoryError):
        b.malloc("ocm", 256)  # the server holds the leased region
    la.free()
    assert a.server_info()["clients"] == 2  # a's next request carries its queued free
    lb.read(back)
    assert (back == 0x3C).all()
    lb.free()
    own = b.malloc("ocm", 256)
    assert not np.asarray(srv.device.getMemRegion("ocm").storage.read(own.addr, 256)).any()
    with pytest.raises(AddressInUseError, match="leased .* once they are freed"):
        a.getMemRegion("ocm").lease()
    own.free()


def test_a_refresh_by_one_client_leaves_the_other_as_it_was(chip, served):
    """Two clients deploy the same network; one refreshes its weights (from tiny_cnn's weights
    of another seed, in every HardOp whose instructions the two share): its outputs are those
    of a fresh deployment of the refreshed network, the other client's stay the original's."""
    _, (a, b) = served
    q0, z0 = chip.compiled("tiny_cnn")
    _, z1 = chip.compiled("tiny_cnn", seed=1)
    mix = copy_network(z0)
    new = {op.op_id: op for op in z1.ops}
    changed = 0
    for op in mix.ops:
        o = new[op.op_id]
        if op.op_type == "HardOp" and op.params and np.array_equal(op.instr.data, o.instr.data):
            op.params[0].setData(np.array(o.params[0].data))
            changed += 1
    assert changed >= 3
    x = x_of(q0, 11)
    fresh = _session(chip, mix, chip.dev)
    want = run(fresh, x)
    fresh.close()
    r0 = host_ref(q0, x)
    assert any(not np.array_equal(u, v) for u, v in zip(r0, want))
    sa, sb = _session(chip, copy_network(z0), a), _session(chip, z0, b)
    sa.backends[0].refreshWeights(mix)
    for s, expect in ((sa, want), (sb, r0), (sa, want)):
        for u, v in zip(expect, run(s, x)):
            np.testing.assert_array_equal(u, v)
    sa.close()
    sb.close()


def _forward_loop(s, x, ref, n, errors):
    try:
        for _ in range(n):
            for u, v in zip(ref, run(s, x)):
                if not np.array_equal(u, v):
                    errors.append(f"{s.backends[0]!r}: output differs from the reference")
                    return
    except Exception as exc:  # reported by the test thread
        errors.append(repr(exc))


def test_two_clients_four_threads_shared_weights_and_the_ocm(chip, served):
    """Each client: two sessions of one network on one WEIGHT and one INSTR chunk of its own,
    feature maps in the OCM; four threads forward at once, so the two clients' runs interleave
    on the served chip and the server switches the OCM between them: every output exact."""
    _, devs = served
    q, z = ocm_network(chip)
    setups = []
    for dev in devs:
        ss = [Session.Create([chip.backend, HostBackend], z.view(0), [dev, HostDevice.Default()])
              for _ in range(2)]
        region = dev.defaultMemRegion()
        chunks = {st: region.malloc(max(ss[0].backends[0].logic_segment_map[st].byte_size, 1),
                                    True, 4096) for st in (SegmentType.WEIGHT, SegmentType.INSTR)}
        for s in ss:
            for st, c in chunks.items():
                s.backends[0].userReuseSegment(c, st)
            s.apply()
            assert _ocm_slots(s)
        setups.append((ss, chunks))
    xs = [x_of(q, 20 + i) for i in range(4)]
    sessions = [s for ss, _ in setups for s in ss]
    errors: list[str] = []
    threads = [threading.Thread(target=_forward_loop, args=(s, x, host_ref(q, x), 4, errors))
               for s, x in zip(sessions, xs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert not errors, errors[:3]
    for ss, chunks in setups:
        for s in ss:
            s.close()
        for c in chunks.values():
            c.free()

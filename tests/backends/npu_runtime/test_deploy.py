"""The shared runtime's deployment, on both chips: ETM feature-map reuse, instruction
relocation, user segments (userReuseSegment), forks serving from threads, connected networks
(userConnectNetwork) and MMU entries shared when a device has too few. Every run is compared
against the HostBackend's integer reference. (The ZG330's OCM option and log:
tests/backends/zg330/test_zg330_deploy.py.)"""

from __future__ import annotations

import gc

import numpy as np
import pytest
from runtime_cases import HEAVY, host_ref, run, x_of

from host_backend import HostBackend
from npu_model.isa import F, Op, decode_arrays, set_word
from npu_model.planners import etm as etm_planner
from npu_runtime import SegmentType
from npu_runtime.deploy import relocate
from xrt import HostDevice, Session
from xrt.errors import CallOrderError, InvalidArgumentError

_ADDR_FIELDS = [int(f) for f in (F.IN_ADDR, F.IN1_ADDR, F.OUT_ADDR, F.WGT_ADDR, F.PRM_ADDR)]
NETS = [("zg330", "tiny_cnn", {}), ("buyi", "tiny_cnn", {}),
        ("zg330", "yolov5s", {"input_size": 160}),
        pytest.param("buyi", "yolov5s", {"input_size": 160}, marks=pytest.mark.slow)]


def relocate_words(words: np.ndarray, moves: list[tuple[int, int, int]]) -> np.ndarray:
    """The word-by-word reference of `deploy.relocate` (docs/zg330-isa.md address words)."""
    out = np.array(words, dtype=np.uint64, copy=True)
    ops, fids, payloads = decode_arrays(out)
    for i in np.nonzero((ops == Op.SET) & np.isin(fids, _ADDR_FIELDS))[0]:
        a = int(payloads[i])
        for old, new, size in moves:
            if old <= a < old + size:
                out[i] = np.uint64(set_word(F(int(fids[i])), new + (a - old)))
                break
    return out


@pytest.mark.parametrize("chip,name,kw", NETS, indirect=["chip"])
def test_etm_reuse_meets_the_bound_and_keeps_outputs(chip, name, kw):
    q, z = chip.compiled(name, **kw)
    x = x_of(q)
    ref = host_ref(q, x)
    region = chip.dev.defaultMemRegion()
    used = {}
    outs = {}
    plans = {}
    for reuse in (True, False):
        gc.collect()  # sessions other tests dropped give their memory back first
        before = region.used_bytes
        s, zb = chip.session(z, reuse=reuse, no_ocm=True)
        used[reuse] = region.used_bytes - before
        outs[reuse] = run(s, x)
        plans[reuse] = zb.deployment.plan
        ftmp = zb.logic_segment_map[SegmentType.FTMP].byte_size
        assert zb.phy_segment_map[SegmentType.FTMP].single_chunk.memChunk.byte_size >= ftmp
        assert zb.is_etmOptimize == reuse
        assert zb.precheck()
        s.close()
    for r in (True, False):
        for a, b in zip(ref, outs[r]):
            np.testing.assert_array_equal(a, b)
    on, off = plans[True], plans[False]
    assert on.ftmp_size == on.ftmp_lower_bound  # the planner's certificate on the zoo
    assert off.ftmp_size == off.ftmp_no_reuse == on.ftmp_no_reuse
    assert on.ftmp_size < off.ftmp_size
    assert used[True] < used[False]  # the device's ETM use drops
    assert used[False] - used[True] >= off.ftmp_size - on.ftmp_size - 4096


@pytest.mark.parametrize("chip", HEAVY, indirect=True)
def test_etm_plan_is_valid_and_honours_aliases(chip):
    q, z = chip.compiled("yolov5s", input_size=160)
    s, zb = chip.session(z, reuse=True, no_ocm=True)
    slots = [sl for sl in zb.deployment.layout.slots if not sl.ocm]
    etm_planner.verify_plan([sl.offset for sl in slots], sizes=[sl.size for sl in slots],
                            starts=[sl.start for sl in slots], ends=[sl.end for sl in slots],
                            alignment=64, total=zb.deployment.plan.ftmp_size)
    assert all(sl.new % 64 == 0 for sl in zb.deployment.layout.slots)
    # aliases (real=False) sit inside their owner's slot at the owner's new address
    fakes = [vi for vi in zb.value_info.values() if not vi.real and vi.fake_from is not None
             and vi.segment == SegmentType.FTMP]
    assert fakes
    for vi in fakes:
        owner = zb.value_info[vi.fake_from.v_id]
        assert owner.logic_addr <= vi.logic_addr < owner.logic_addr + owner.byte_size
        assert vi.value in owner.real_to
    s.close()


def test_relocated_instructions_are_uploaded(chip):
    q, z = chip.compiled("tiny_cnn")
    s, zb = chip.session(z, reuse=True)
    moves = [(sl.old, sl.new, sl.size) for sl in zb.deployment.layout.slots]
    changed = 0
    for op in z.ops:
        if op.op_type != "HardOp" or op.instr is None:
            continue
        words = op.instr.data.view(np.uint64)
        fast = relocate(words, moves)
        np.testing.assert_array_equal(fast, relocate_words(words, moves))
        np.testing.assert_array_equal(fast, zb.deployment.instr_words[op.op_id])
        changed += int((fast != words).any())
    assert changed > 0
    assert zb.precheck()  # precheck compares against the relocated words
    s.close()


@pytest.mark.parametrize("chip", HEAVY, indirect=True)
def test_reused_slots_do_not_depend_on_zeroed_memory(chip):
    """Reused slots hold the previous tenant's bytes; padding channels must not matter."""
    q, z = chip.compiled("yolov5s", input_size=160)
    x = x_of(q, 3)
    ref = host_ref(q, x)
    s, zb = chip.session(z, reuse=True, no_ocm=True)
    zb.phy_segment_map[SegmentType.FTMP].single_chunk.memChunk.fill(0x5A)
    for a, b in zip(ref, run(s, x)):
        np.testing.assert_array_equal(a, b)
    s.close()


def _seg_chunks(zb, region, types=(SegmentType.WEIGHT, SegmentType.INSTR)):
    return {st: region.malloc(max(zb.logic_segment_map[st].byte_size, 1), True, 4096)
            for st in types}


@pytest.mark.parametrize("chip", HEAVY, indirect=True)
def test_two_backends_of_one_network_share_weights_and_instructions(chip):
    q, z = chip.compiled("yolov5s", input_size=160)
    x = x_of(q, 5)
    ref = host_ref(q, x)
    region = chip.dev.defaultMemRegion()

    def pair(share: bool):
        before = region.used_bytes
        ss = [Session.Create([chip.backend, HostBackend], z.view(0),
                             [chip.dev, HostDevice.Default()]) for _ in range(2)]
        chunks = _seg_chunks(ss[0].backends[0], region) if share else {}
        for s in ss:
            for st, c in chunks.items():
                s.backends[0].userReuseSegment(c, st)
            s.apply()
        return ss, region.used_bytes - before, chunks

    plain, used_plain, _ = pair(False)
    shared, used_shared, chunks = pair(True)
    saved = sum(c.byte_size for c in chunks.values())
    assert used_plain - used_shared == saved
    for s in shared:
        for a, b in zip(ref, run(s, x)):
            np.testing.assert_array_equal(a, b)
        assert s.backends[0].precheck()
    for s in plain + shared:
        s.close()


@pytest.mark.parametrize("chip", HEAVY, indirect=True)
def test_two_networks_share_one_ftmp_chunk_serially(chip):
    qa, za = chip.compiled("tiny_cnn")
    qb, zb_ = chip.compiled("yolov5s", input_size=160)
    xa, xb = x_of(qa, 6), x_of(qb, 6)
    sa = Session.Create([chip.backend, HostBackend], za.view(0), [chip.dev, HostDevice.Default()])
    sb = Session.Create([chip.backend, HostBackend], zb_.view(0), [chip.dev, HostDevice.Default()])
    a, b = sa.backends[0], sb.backends[0]
    for be in (a, b):
        chip.configure(be, no_ocm=True)  # all maps in FTMP: the shared chunk really is shared
    size = max(a.logic_segment_map[SegmentType.FTMP].byte_size,
               b.logic_segment_map[SegmentType.FTMP].byte_size)
    chunk = chip.dev.defaultMemRegion().malloc(size, True, 4096)
    a.userReuseSegment(chunk, SegmentType.FTMP)
    b.userReuseSegment(chunk, SegmentType.FTMP)
    sa.apply()
    sb.apply()
    assert a.phy_segment_map[SegmentType.FTMP].phy_addr == \
        b.phy_segment_map[SegmentType.FTMP].phy_addr == chunk.addr
    for _ in range(2):  # interleaved: each run overwrites the other's feature maps
        np.testing.assert_array_equal(run(sa, xa)[0], host_ref(qa, xa)[0])
        for u, v in zip(run(sb, xb), host_ref(qb, xb)):
            np.testing.assert_array_equal(u, v)
    sa.close()
    sb.close()


@pytest.mark.parametrize("chip", HEAVY, indirect=True)
def test_user_segment_rules(chip):
    qa, za = chip.compiled("tiny_cnn")
    qb, zb_ = chip.compiled("yolov5s", input_size=160)
    region = chip.dev.defaultMemRegion()
    a = Session.Create([chip.backend, HostBackend], za.view(0),
                       [chip.dev, HostDevice.Default()]).backends[0]
    b = Session.Create([chip.backend, HostBackend], zb_.view(0),
                       [chip.dev, HostDevice.Default()]).backends[0]
    big = region.malloc(8 << 20, True, 4096)
    for st in (SegmentType.WEIGHT, SegmentType.INSTR):
        c = region.malloc(8 << 20, True, 4096)
        a.userReuseSegment(c, st)
        with pytest.raises(InvalidArgumentError, match=st.name):
            b.userReuseSegment(c, st)  # another network: only FTMP may be shared
    a.userReuseSegment(big, SegmentType.FTMP)
    b.userReuseSegment(big, SegmentType.FTMP)  # FTMP across networks is fine
    with pytest.raises(InvalidArgumentError, match="FTMP.*WEIGHT|WEIGHT.*FTMP"):
        b.userReuseSegment(big, SegmentType.WEIGHT)  # a chunk holds one kind of segment
    need = b.logic_segment_map[SegmentType.WEIGHT].byte_size
    small = region.malloc(4096, True, 4096)
    with pytest.raises(InvalidArgumentError,
                       match=rf"WEIGHT segment has 4096 bytes, {need} are needed"):
        b.userReuseSegment(small, SegmentType.WEIGHT)
    keep = []
    while True:
        c = region.malloc(64, True, 64)
        if c.addr % 4096:
            break
        keep.append(c)
    with pytest.raises(InvalidArgumentError, match=r"INSTR segment starts at .*4096-aligned"):
        b.userReuseSegment(c, SegmentType.INSTR)
    with pytest.raises(InvalidArgumentError, match="INPUT"):
        b.userReuseSegment(big, SegmentType.INPUT)


def test_shared_instructions_need_the_same_settings(chip):
    q, z = chip.compiled("tiny_cnn")
    region = chip.dev.defaultMemRegion()
    ss = [Session.Create([chip.backend, HostBackend], z.view(0), [chip.dev, HostDevice.Default()])
          for _ in range(2)]
    chunk = region.malloc(1 << 20, True, 4096)
    for s in ss:
        s.backends[0].userReuseSegment(chunk, SegmentType.INSTR)
    # other FTMP (and, on the ZG330, OCM) placements: other relocated instructions
    chip.configure(ss[1].backends[0], reuse=not chip.backend.chip.etm_reuse, no_ocm=True)
    ss[0].apply()
    with pytest.raises(InvalidArgumentError, match="INSTR"):
        ss[1].apply()
    for s in ss:
        s.close()


def test_configuration_call_order(chip):
    q, z = chip.compiled("tiny_cnn")
    s, zb = chip.session(z)
    for call in (*chip.option_calls(zb),
                 lambda: zb.userReuseSegment(chip.dev.malloc(4096), SegmentType.FTMP)):
        with pytest.raises(CallOrderError, match="before apply"):
            call()
    with pytest.raises(CallOrderError):
        zb.apply()
    s.close()
    fresh = chip.backend.Init()
    for call in chip.option_calls(fresh):
        with pytest.raises(CallOrderError, match="before init"):
            call()
    s = Session.Create([chip.backend, HostBackend], z.view(0), [chip.mock(), HostDevice.Default()])
    with pytest.raises(CallOrderError):
        s.backends[0].log()
    s.close()


def _state(lay):
    """Everything of a layout a deployment could move, as plain data."""
    import dataclasses

    return (sorted((st.name, ls.logic_addr, ls.byte_size) for st, ls in lay.segments.items()),
            sorted((k, b.logic_addr, b.byte_size, tuple(b.members)) for k, b in
                   lay.buffers.items()),
            sorted((k, vi.logic_addr, vi.phy_addr, vi.is_ocm) for k, vi in
                   lay.value_info.items()),
            sorted((k, hi.weight_phy_addr, hi.instr_phy_addr) for k, hi in
                   lay.hardop_info.items()),
            [dataclasses.asdict(sl) for sl in lay.slots])


def test_apply_and_fork_leave_the_layout_as_init_made_it(chip):
    """`apply` places a copy of the layout (the deployment holds it, with the MMU indices and
    physical addresses); the backend's layout is the one init built, and a fork shares its
    parent's placed layout without copying it, with its own addresses."""
    q, z = chip.compiled("tiny_cnn")
    s = Session.Create([chip.backend, HostBackend], z.view(0), [chip.dev, HostDevice.Default()])
    zb = s.backends[0]
    chip.configure(zb, reuse=True)
    before = _state(zb.layout)
    s.apply()
    dep = zb.deployment
    assert _state(zb.layout) == before and dep.layout is not zb.layout
    assert any(a.new != a.old for a in dep.layout.slots)  # the plan moved the copy
    assert zb.logic_segment_map is dep.layout.segments and zb.value_info is dep.value_info
    io = set(dep.mmu_index)
    assert io and io == {o for o, b in dep.layout.buffers.items()
                         if b.segment in (SegmentType.INPUT, SegmentType.OUTPUT)}
    placed = _state(dep.layout)
    f = zb.fork()
    assert f.deployment.layout is dep.layout and f.layout is zb.layout
    assert _state(dep.layout) == placed and _state(zb.layout) == before
    assert f.deployment.mmu_index == dep.mmu_index
    ins = [k for k, vi in dep.value_info.items() if vi.segment == SegmentType.INPUT]
    assert ins and all(f.value_info[k].phy_addr != zb.value_info[k].phy_addr for k in ins)
    x = x_of(q, 4)
    for a, b in zip(host_ref(q, x), run(s, x)):
        np.testing.assert_array_equal(a, b)
    f.deinit()
    s.close()


@pytest.mark.parametrize("chip", HEAVY, indirect=True)
def test_forks_serve_from_threads(chip):
    import threading

    q, z = chip.compiled("yolov5s", input_size=160)
    s = Session.Create([chip.backend, HostBackend], z.view(0), [chip.dev, HostDevice.Default()])
    s.apply()
    zb, hb = s.backends
    region = chip.dev.defaultMemRegion()
    before = region.used_bytes
    forks = [zb.fork() for _ in range(3)]
    grown = region.used_bytes - before
    shared = (zb.phy_segment_map[SegmentType.WEIGHT].single_chunk.memChunk.byte_size
              + zb.phy_segment_map[SegmentType.INSTR].single_chunk.memChunk.byte_size)
    assert grown < 3 * shared  # INSTR and WEIGHT are not copied
    for f in forks:
        for st in (SegmentType.WEIGHT, SegmentType.INSTR):
            assert f.phy_segment_map[st].phy_addr == zb.phy_segment_map[st].phy_addr
        assert f.phy_segment_map[SegmentType.FTMP].phy_addr != \
            zb.phy_segment_map[SegmentType.FTMP].phy_addr or not f.deployment.plan.ftmp_size
        ins = f.phy_segment_map[SegmentType.INPUT].multi_chunk
        assert all(c.memChunk.addr != zb.phy_segment_map[SegmentType.INPUT].multi_chunk[k]
                   .memChunk.addr for k, c in ins.items())
    sessions = [Session.CreateWithBackends(z.view(0), [f, hb.fork()]) for f in forks]
    for t in sessions:
        t.apply()  # its backends are forks of an applied one: nothing is deployed again
    xs = [x_of(q, 10 + k) for k in range(len(sessions))]
    refs = [host_ref(q, x) for x in xs]
    errors: list = []

    def serve(k):
        try:
            for _ in range(2):
                for a, b in zip(refs[k], run(sessions[k], xs[k])):
                    np.testing.assert_array_equal(a, b)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append((k, exc))

    threads = [threading.Thread(target=serve, args=(k,)) for k in range(len(sessions))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for a, b in zip(host_ref(q, xs[0]), run(s, xs[0])):  # the parent still works
        np.testing.assert_array_equal(a, b)
    for f in forks:
        f.deinit()
    s.close()


def _cuts(z):
    """(k, v) where z.view(0, k + 1) -> z.view(k + 1) passes exactly one map, HardOp to HardOp."""
    out = []
    for k in range(1, len(z.ops) - 1):
        a, b = z.ops[k], z.ops[k + 1]
        if a.op_type != "HardOp" or b.op_type != "HardOp":
            continue
        ins = z.view(k + 1).inputs()
        if len(ins) == 1 and ins[0].v_id in {o.v_id for o in a.outputs}:
            out.append((k, ins[0]))
    return out


def _dense(chip, v):
    t = chip.tag(v)
    return t["c_off"] == 0 and t["pitch"] == t["c"] and t["buffer"] == v.v_id


@pytest.mark.parametrize("chip", HEAVY, indirect=True)
@pytest.mark.parametrize("staged", [False, True])
def test_connected_networks_pass_the_map_in_place(chip, staged):
    q, z = chip.compiled("yolov5s", input_size=160)
    x = x_of(q, 7)
    ref = host_ref(q, x)
    cuts = [(k, v) for k, v in _cuts(z) if _dense(chip, v) != staged]
    if not cuts:
        pytest.skip("no such cut in this network")
    k, v = cuts[len(cuts) // 2]
    sa = Session.Create([chip.backend, HostBackend], z.view(0, k + 1),
                        [chip.dev, HostDevice.Default()])
    sb = Session.Create([chip.backend, HostBackend], z.view(k + 1),
                        [chip.dev, HostDevice.Default()])
    a, b = sa.backends[0], sb.backends[0]
    chunk = chip.dev.defaultMemRegion().malloc(v.storageBytes() if staged else
                                           a.value_info[v.v_id].byte_size, True, 4096)
    a.userConnectNetwork(chunk, v.v_id)
    b.userConnectNetwork(chunk, v.v_id)
    for s in (sa, sb):
        s.enableTimeProfile(True)
        s.apply()
    assert (v.v_id in a.phy_segment_map[SegmentType.OUTPUT].multi_chunk[
        chip.tag(v)["buffer"]].staged_chunk) == staged
    for _ in range(2):
        (mid,) = sa.forward([x])
        assert mid.chunk() == chunk and mid.offset() == 0  # no host round trip
        got = [np.asarray(t).copy() for t in sb.forward([mid])]
        for u, w in zip(ref, got):
            np.testing.assert_array_equal(u, w)
    first_b = next(op for op in sb.network_view.ops if op.op_type == "HardOp")
    if not staged:
        assert sb.timeProfileResults()[first_b.op_id][1] == 0.0  # zero memcpy between them
        assert b._forwarder.bound[v.v_id][1] == chunk  # B's MMU maps its input buffer to A's output
    # the same through the host gives the same result
    host_mid = np.asarray(mid).copy()
    via_host = [np.asarray(t).copy() for t in sb.forward([host_mid])]
    for u, w in zip(got, via_host):
        np.testing.assert_array_equal(u, w)
    sa.close()
    sb.close()


@pytest.mark.parametrize("chip", HEAVY, indirect=True)
def test_io_buffers_share_mmu_entries_when_the_device_has_too_few(chip, tmp_path):
    """yolov5s-160 needs 6 entries with one per INPUT/OUTPUT buffer (WEIGHT, the OCM window,
    1 input, 3 outputs; its FTMP all fits the OCM); on a device with 4 the buffers are packed,
    bit-exact, forward after forward, through forks and a snapshot. A device with enough
    entries keeps one per buffer (tensors mapped, not copied)."""
    import dataclasses

    q, z = chip.compiled("yolov5s", input_size=160)
    s, zb = chip.session(z)
    full = len(zb.deployment.mmu)
    assert not zb.deployment.packed_io and full >= 6
    s.close()
    entries = full - 2  # one left for each of the INPUT and OUTPUT groups
    small = chip.device_class()(f"sim://{chip.kind}",
                                config=dataclasses.replace(chip.config(), mmu_entries=entries))
    try:
        s, zb = chip.session(z, small)
        dep = zb.deployment
        assert dep.packed_io and len(dep.mmu) <= entries and zb.precheck()
        entries = {dep.mmu_index[o] for o in dep.io_offsets}
        assert len(entries) == 2  # one for the INPUT group, one for the OUTPUT group
        for seed in (1, 2):
            x = x_of(q, seed)
            for a, b in zip(host_ref(q, x), run(s, x)):
                np.testing.assert_array_equal(a, b)
        f = zb.fork()
        fs = Session.Create([chip.backend, HostBackend], z.view(0), [small, HostDevice.Default()])
        assert f.deployment.packed_io
        s.dumpSnapshot(tmp_path / "packed.snap")
        r = chip.load(tmp_path / "packed.snap", small)
        assert r.backends[0].deployment.packed_io
        x = x_of(q, 3)
        for a, b in zip(host_ref(q, x), run(r, x)):
            np.testing.assert_array_equal(a, b)
        for sess in (r, fs, s):
            sess.close()
        f.deinit()
    finally:
        small.close()

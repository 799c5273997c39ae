"""ZG330 deployment options that change what the simulated chip does: ETM feature-map reuse,
OCM planning, userReuseSegment (docs/zg330-deployment.md). Every run is compared against the
HostBackend's integer reference."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest
from test_zg330_lowering_lib import (
    compiled_zoo,
    zdev,  # noqa: F401  (fixture)
)

from host_backend import HostBackend
from npu_model.isa import F, Op, decode_arrays, set_word
from npu_model.mmu import MEM_OCM
from npu_model.planners import etm as etm_planner
from npu_runtime.deploy import relocate
from xrt import Device, HostDevice, Session
from xrt.errors import CallOrderError, InvalidArgumentError
from zg330backend import OcmOpt, SegmentType, ZG330Backend

_CACHE: dict = {}
_ADDR_FIELDS = [int(f) for f in (F.IN_ADDR, F.IN1_ADDR, F.OUT_ADDR, F.WGT_ADDR, F.PRM_ADDR)]


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


compiled = compiled_zoo


def x_of(q, seed=0):
    return np.random.default_rng(seed).normal(size=q.inputs()[0].shape).astype(np.float32)


def host_ref(q, x):
    key = ("ref", id(q), float(x.ravel()[0]))
    if key not in _CACHE:
        s = Session.Create([HostBackend], q.view(0), [HostDevice.Default()])
        s.apply()
        _CACHE[key] = [np.asarray(t).copy() for t in s.forward([x])]
    return _CACHE[key]


def session(z, dev, *, reuse=True, ocm=OcmOpt.BEST_SCORE, merge=True, profile=True):
    s = Session.Create([ZG330Backend, HostBackend], z.view(0), [dev, HostDevice.Default()])
    zb = s.backends[0]
    if not reuse:
        zb.disableEtmOptimize()
    if not merge:
        zb.disableMergeHardOp()
    zb.ocmOptimize(ocm)
    s.enableTimeProfile(profile)
    s.apply()
    return s, zb


def run(s, x):
    return [np.asarray(t).copy() for t in s.forward([x])]


def totals(zb):
    prof = zb.profileInfo()
    return {k: sum(d[k] for d in prof.values()) for k in ("cycles", "etm_bytes", "ocm_bytes")}


NETS = [("tiny_cnn", {}), ("yolov5s", {"input_size": 160})]


# --- 1. ETM feature-map reuse -------------------------------------------------------------------

@pytest.mark.parametrize("name,kw", NETS)
def test_etm_reuse_meets_the_bound_and_keeps_outputs(zdev, name, kw):  # noqa: F811
    q, z = compiled(name, **kw)
    x = x_of(q)
    ref = host_ref(q, x)
    region = zdev.defaultMemRegion()
    used = {}
    outs = {}
    plans = {}
    for reuse in (True, False):
        gc.collect()  # sessions other tests dropped give their memory back first
        before = region.used_bytes
        s, zb = session(z, zdev, reuse=reuse, ocm=OcmOpt.NONE)
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


def test_etm_plan_is_valid_and_honours_aliases(zdev):  # noqa: F811
    q, z = compiled("yolov5s", input_size=160)
    s, zb = session(z, zdev, ocm=OcmOpt.NONE)
    slots = [sl for sl in zb.layout.slots if not sl.ocm]
    etm_planner.verify_plan([sl.offset for sl in slots], sizes=[sl.size for sl in slots],
                            starts=[sl.start for sl in slots], ends=[sl.end for sl in slots],
                            alignment=64, total=zb.deployment.plan.ftmp_size)
    assert all(sl.new % 64 == 0 for sl in zb.layout.slots)
    # aliases (real=False) sit inside their owner's slot at the owner's new address
    fakes = [vi for vi in zb.value_info.values() if not vi.real and vi.fake_from is not None
             and vi.segment == SegmentType.FTMP]
    assert fakes
    for vi in fakes:
        owner = zb.value_info[vi.fake_from.v_id]
        assert owner.logic_addr <= vi.logic_addr < owner.logic_addr + owner.byte_size
        assert vi.value in owner.real_to
    s.close()


def test_relocated_instructions_are_uploaded(zdev):  # noqa: F811
    q, z = compiled("tiny_cnn")
    s, zb = session(z, zdev)
    moves = [(sl.old, sl.new, sl.size) for sl in zb.layout.slots]
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


def test_reused_slots_do_not_depend_on_zeroed_memory(zdev):  # noqa: F811
    """Reused slots hold the previous tenant's bytes; padding channels must not matter."""
    q, z = compiled("yolov5s", input_size=160)
    x = x_of(q, 3)
    ref = host_ref(q, x)
    s, zb = session(z, zdev, ocm=OcmOpt.NONE)
    zb.phy_segment_map[SegmentType.FTMP].single_chunk.memChunk.fill(0x5A)
    for a, b in zip(ref, run(s, x)):
        np.testing.assert_array_equal(a, b)
    s.close()


# --- 2. OCM planning ------------------------------------------------------------------------------

@pytest.mark.parametrize("name,kw", NETS)
def test_every_ocm_option_gives_identical_outputs(zdev, name, kw):  # noqa: F811
    q, z = compiled(name, **kw)
    x = x_of(q, 1)
    ref = host_ref(q, x)
    cyc = {}
    for opt in OcmOpt:
        s, zb = session(z, zdev, ocm=opt)
        for a, b in zip(ref, run(s, x)):
            np.testing.assert_array_equal(a, b)
        t = totals(zb)
        cyc[opt] = t["cycles"]
        if opt == OcmOpt.BEST_SCORE:
            assert zb.ocmopt in (OcmOpt.OPTION1, OcmOpt.OPTION2, OcmOpt.OPTION3)
            best = max(v for v in zb.deployment.plan.ocm_per_option.values() if v is not None)
            assert zb.deployment.plan.ocm_score == best
        else:
            assert zb.ocmopt == opt
        if opt == OcmOpt.NONE:
            assert t["ocm_bytes"] == 0 and not any(vi.is_ocm for vi in zb.value_info.values())
        else:
            assert t["ocm_bytes"] > 0
            assert any(vi.is_ocm for vi in zb.value_info.values())
            ocm_region = zdev.getMemRegion("ocm")
            entries = [e for e in zb.deployment.mmu if ocm_region.contains(e[1], e[2])]
            assert len(entries) == 1
            table = zdev.mmu_table()
            assert any(sg.mem == MEM_OCM for sg in table.segments)
        s.close()
    assert cyc[OcmOpt.BEST_SCORE] < cyc[OcmOpt.NONE]


def test_ocm_cuts_etm_traffic_and_cycles_yolov5s_160(zdev):  # noqa: F811
    q, z = compiled("yolov5s", input_size=160)
    x = x_of(q, 2)
    res = {}
    for opt in (OcmOpt.NONE, OcmOpt.BEST_SCORE):
        s, zb = session(z, zdev, ocm=opt)
        run(s, x)
        res[opt] = totals(zb)
        s.close()
    none, best = res[OcmOpt.NONE], res[OcmOpt.BEST_SCORE]
    assert best["cycles"] < none["cycles"]
    assert best["etm_bytes"] < none["etm_bytes"]
    assert best["ocm_bytes"] > 0 == none["ocm_bytes"]


def test_ocm_feature_maps_are_dumped_from_ocm(zdev, tmp_path):  # noqa: F811
    """Merge off + setDumpOutputs: maps living in OCM are dumped, read from OCM memory."""
    q, z = compiled("tiny_cnn")
    x = x_of(q, 4)
    seen = {}
    for opt in (OcmOpt.BEST_SCORE, OcmOpt.NONE):
        s, zb = session(z, zdev, ocm=opt, merge=False)
        path = tmp_path / opt.name
        s.setDumpOutputs(True, str(path), "SFB")
        got = {}

        def post(sess, op, backend, outs, got=got):
            for v, t in zip(op.outputs, outs):
                got[v.v_id] = (t.chunk().region.name, np.asarray(t).copy())

        s.setPostCallBack(post)
        run(s, x)
        seen[opt] = (got, {v: vi.value.tags["zg330"] for v, vi in zb.value_info.items()
                           if vi.is_ocm}, set(os.listdir(path)))
        s.close()
    got, ocm_values, files = seen[OcmOpt.BEST_SCORE]
    produced = [v for v in ocm_values if v in got]
    assert produced
    ref, _, ref_files = seen[OcmOpt.NONE]
    assert files == ref_files
    for v in produced:
        region, arr = got[v]
        assert region == "ocm" and f"{v}.SFB" in files
        t = ocm_values[v]
        if arr.shape[-1] == t["pitch"] != t["c"]:  # the whole hardware buffer: the window
            win = slice(t["c_off"], t["c_off"] + t["c"])
            np.testing.assert_array_equal(arr[..., win], ref[v][1][..., win])
        else:
            np.testing.assert_array_equal(arr, ref[v][1])


# --- 3. userReuseSegment --------------------------------------------------------------------------

def _seg_chunks(zb, region, types=(SegmentType.WEIGHT, SegmentType.INSTR)):
    return {st: region.malloc(max(zb.logic_segment_map[st].byte_size, 1), True, 4096)
            for st in types}


def test_two_backends_of_one_network_share_weights_and_instructions(zdev):  # noqa: F811
    q, z = compiled("yolov5s", input_size=160)
    x = x_of(q, 5)
    ref = host_ref(q, x)
    region = zdev.defaultMemRegion()

    def pair(share: bool):
        before = region.used_bytes
        ss = [Session.Create([ZG330Backend, HostBackend], z.view(0),
                             [zdev, HostDevice.Default()]) for _ in range(2)]
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


def test_two_networks_share_one_ftmp_chunk_serially(zdev):  # noqa: F811
    qa, za = compiled("tiny_cnn")
    qb, zb_ = compiled("yolov5s", input_size=160)
    xa, xb = x_of(qa, 6), x_of(qb, 6)
    sa = Session.Create([ZG330Backend, HostBackend], za.view(0), [zdev, HostDevice.Default()])
    sb = Session.Create([ZG330Backend, HostBackend], zb_.view(0), [zdev, HostDevice.Default()])
    a, b = sa.backends[0], sb.backends[0]
    for be in (a, b):
        be.ocmOptimize(OcmOpt.NONE)  # all maps in FTMP: the shared chunk really is shared
    size = max(a.logic_segment_map[SegmentType.FTMP].byte_size,
               b.logic_segment_map[SegmentType.FTMP].byte_size)
    chunk = zdev.defaultMemRegion().malloc(size, True, 4096)
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


def test_user_segment_rules(zdev):  # noqa: F811
    qa, za = compiled("tiny_cnn")
    qb, zb_ = compiled("yolov5s", input_size=160)
    region = zdev.defaultMemRegion()
    a = Session.Create([ZG330Backend, HostBackend], za.view(0),
                       [zdev, HostDevice.Default()]).backends[0]
    b = Session.Create([ZG330Backend, HostBackend], zb_.view(0),
                       [zdev, HostDevice.Default()]).backends[0]
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


def test_shared_instructions_need_the_same_settings(zdev):  # noqa: F811
    q, z = compiled("tiny_cnn")
    region = zdev.defaultMemRegion()
    ss = [Session.Create([ZG330Backend, HostBackend], z.view(0), [zdev, HostDevice.Default()])
          for _ in range(2)]
    chunk = region.malloc(1 << 20, True, 4096)
    for s in ss:
        s.backends[0].userReuseSegment(chunk, SegmentType.INSTR)
    ss[1].backends[0].disableEtmOptimize()
    ss[1].backends[0].ocmOptimize(OcmOpt.NONE)
    ss[0].apply()
    with pytest.raises(InvalidArgumentError, match="INSTR"):
        ss[1].apply()
    for s in ss:
        s.close()


def test_configuration_call_order(zdev):  # noqa: F811
    q, z = compiled("tiny_cnn")
    s, zb = session(z, zdev)
    for call in (zb.disableEtmOptimize, lambda: zb.ocmOptimize(OcmOpt.OPTION1),
                 lambda: zb.userReuseSegment(zdev.malloc(4096), SegmentType.FTMP)):
        with pytest.raises(CallOrderError, match="before apply"):
            call()
    with pytest.raises(CallOrderError):
        zb.apply()
    s.close()
    fresh = ZG330Backend.Init()
    with pytest.raises(CallOrderError):
        fresh.disableEtmOptimize()
    dev = Device.Open("mock://zg330")
    s = Session.Create([ZG330Backend, HostBackend], z.view(0), [dev, HostDevice.Default()])
    with pytest.raises(CallOrderError):
        s.backends[0].log()
    s.close()


# --- 5. fork for multithreaded serving ------------------------------------------------------------

def test_forks_serve_from_threads(zdev):  # noqa: F811
    import threading

    q, z = compiled("yolov5s", input_size=160)
    s = Session.Create([ZG330Backend, HostBackend], z.view(0), [zdev, HostDevice.Default()])
    s.apply()
    zb, hb = s.backends
    region = zdev.defaultMemRegion()
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
        t._applied = True  # the backends are deployed (forks of an applied backend)
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


# --- 6. log ---------------------------------------------------------------------------------------

def test_log_text_and_json(zdev, tmp_path, monkeypatch):  # noqa: F811
    import json

    monkeypatch.chdir(tmp_path)
    q, z = compiled("tiny_cnn")
    s, zb = session(z, zdev, merge=True)
    path = zb.log()
    assert path.startswith(str(tmp_path / ".icraft" / "logs"))
    from pathlib import Path

    text = Path(path).read_text(encoding="utf-8")
    rep = json.loads(Path(path[:-4] + ".json").read_text(encoding="utf-8"))
    assert "lower bound" in text and "OCM: option" in text
    assert rep["ocm"]["option"] == zb.ocmopt.name and rep["ocm"]["score"] > 0
    assert rep["etm"]["ftmp_bytes"] == zb.deployment.plan.ftmp_size
    assert rep["etm"]["lower_bound"] == zb.deployment.plan.ftmp_lower_bound
    segs = {sg["segment"]: sg for sg in rep["segments"]}
    assert {"WEIGHT", "INSTR", "FTMP", "INPUT", "OUTPUT", "OCM"} <= set(segs)
    assert segs["WEIGHT"]["phy_addr"] == zb.phy_segment_map[SegmentType.WEIGHT].phy_addr
    vals = {v["v_id"]: v for v in rep["values"]}
    assert set(zb.value_info) <= set(vals)
    assert any(v["memory"] == "OCM" for v in vals.values())
    assert any(v["fake_from"] is not None for v in vals.values())
    hard = {h["op_id"]: h for h in rep["hardops"]}
    assert any(h["merge_from"] for h in hard.values())
    for op in z.ops:
        if op.op_type == "HardOp" and op.instr is not None:
            assert hard[op.op_id]["instr_phy_addr"] == \
                zb.forward_info.hardop_map[op.op_id].instr_phy_addr
            assert f"{hard[op.op_id]['instr_phy_addr']:#14x}" in text
    assert zb.precheck()
    s.close()


# --- 4. userConnectNetwork ------------------------------------------------------------------------

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


def _dense(v):
    t = v.tags["zg330"]
    return t["c_off"] == 0 and t["pitch"] == t["c"] and t["buffer"] == v.v_id


@pytest.mark.parametrize("staged", [False, True])
def test_connected_networks_pass_the_map_in_place(zdev, staged):  # noqa: F811
    q, z = compiled("yolov5s", input_size=160)
    x = x_of(q, 7)
    ref = host_ref(q, x)
    cuts = [(k, v) for k, v in _cuts(z) if _dense(v) != staged]
    if not cuts:
        pytest.skip("no such cut in this network")
    k, v = cuts[len(cuts) // 2]
    sa = Session.Create([ZG330Backend, HostBackend], z.view(0, k + 1),
                        [zdev, HostDevice.Default()])
    sb = Session.Create([ZG330Backend, HostBackend], z.view(k + 1),
                        [zdev, HostDevice.Default()])
    a, b = sa.backends[0], sb.backends[0]
    chunk = zdev.defaultMemRegion().malloc(v.storageBytes() if staged else
                                           a.value_info[v.v_id].byte_size, True, 4096)
    a.userConnectNetwork(chunk, v.v_id)
    b.userConnectNetwork(chunk, v.v_id)
    for s in (sa, sb):
        s.enableTimeProfile(True)
        s.apply()
    assert (v.v_id in a.phy_segment_map[SegmentType.OUTPUT].multi_chunk[
        v.tags["zg330"]["buffer"]].staged_chunk) == staged
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


# --- MMU entries --------------------------------------------------------------------------------

def test_io_buffers_share_mmu_entries_when_the_device_has_too_few(zdev, tmp_path):  # noqa: F811
    """yolov5s-160 needs 6 entries with one per INPUT/OUTPUT buffer (WEIGHT, the OCM window,
    1 input, 3 outputs; its FTMP all fits the OCM); on a device with 4 the buffers are packed,
    bit-exact, forward after forward, through forks and a snapshot. A device with enough
    entries keeps one per buffer (tensors mapped, not copied)."""
    import dataclasses

    from zg330backend import ZG330_CONFIG, ZG330Device

    q, z = compiled("yolov5s", input_size=160)
    s, zb = session(z, zdev)
    assert not zb.deployment.packed_io and len(zb.deployment.mmu) == 6
    s.close()
    small = ZG330Device("sim://zg330", config=dataclasses.replace(ZG330_CONFIG, mmu_entries=4))
    try:
        s, zb = session(z, small)
        dep = zb.deployment
        assert dep.packed_io and len(dep.mmu) == 4 and zb.precheck()
        entries = {zb.layout.buffers[o].mmu_index for o in dep.io_offsets}
        assert len(entries) == 2  # one for the INPUT group, one for the OUTPUT group
        for seed in (1, 2):
            x = x_of(q, seed)
            for a, b in zip(host_ref(q, x), run(s, x)):
                np.testing.assert_array_equal(a, b)
        f = zb.fork()
        fs = Session.Create([ZG330Backend, HostBackend], z.view(0), [small, HostDevice.Default()])
        assert f.deployment.packed_io
        s.dumpSnapshot(tmp_path / "packed.snap")
        r = Session.CreateWithSnapshot(tmp_path / "packed.snap", [ZG330Backend, HostBackend],
                                       [small, HostDevice.Default()])
        assert r.backends[0].deployment.packed_io
        x = x_of(q, 3)
        for a, b in zip(host_ref(q, x), run(r, x)):
            np.testing.assert_array_equal(a, b)
        for sess in (r, fs, s):
            sess.close()
        f.deinit()
    finally:
        small.close()

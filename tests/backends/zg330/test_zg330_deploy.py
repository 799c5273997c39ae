"""The ZG330's OCM option (ocmOptimize) and its deployment log (docs/zg330-deployment.md). Every
run is compared against the HostBackend's integer reference. What both chips share (ETM reuse,
relocation, user segments, forks, connected networks, MMU entries) is tested in
tests/backends/npu_runtime/."""

from __future__ import annotations

import os

import numpy as np
import pytest
from test_zg330_lowering_lib import (
    compiled_zoo,
    zdev,  # noqa: F401  (fixture)
)

from host_backend import HostBackend
from npu_model.mmu import MEM_OCM
from xrt import HostDevice, Session
from zg330backend import OcmOpt, SegmentType, ZG330Backend

_CACHE: dict = {}
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


# --- OCM planning ------------------------------------------------------------------------------

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


# --- log ---------------------------------------------------------------------------------------

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

"""ZG330 snapshots (docs/snapshot-format.md): made on mock://zg330, loaded on sim://zg330, they
forward byte-identically to a session built normally, without lowering or planning again."""

from __future__ import annotations

import os

import pytest
from test_zg330_deploy import NETS, compiled, host_ref, run, session, x_of
from test_zg330_lowering_lib import zdev  # noqa: F401  (fixture)

from host_backend import HostBackend
from xrt import (
    CallOrderError,
    Device,
    HostDevice,
    Session,
    SnapshotError,
    UnsupportedOpError,
    XrtError,
)
from zg330backend import OcmOpt, SegmentType, ZG330Backend


@pytest.fixture(scope="module")
def mock():
    d = Device.Open("mock://zg330")
    yield d
    d.close()


def dump_on_mock(z, mock, path, **kw):
    s, zb = session(z, mock, profile=False, **kw)
    s.dumpSnapshot(path)
    settings = (zb.is_mergeHardop, zb.is_etmOptimize, zb.ocmopt, zb.deployment.plan.to_json())
    s.close()
    return settings


def load(path, dev):
    return Session.CreateWithSnapshot(path, [ZG330Backend, HostBackend],
                                      [dev, HostDevice.Default()])


@pytest.mark.parametrize("name,kw", NETS)
def test_mock_snapshot_forwards_on_sim_like_a_built_session(zdev, mock, tmp_path,  # noqa: F811
                                                            name, kw):
    q, z = compiled(name, **kw)
    x = x_of(q)
    p = tmp_path / f"{name}.snap"
    settings = dump_on_mock(z, mock, p)
    r0 = load(p, mock)
    with pytest.raises(UnsupportedOpError, match="mock device"):  # the mock cannot forward
        run(r0, x)
    r0.close()
    r = load(p, zdev)
    zb = r.backends[0]
    assert zb.snapshot and r.backends[1].snapshot
    plan = zb.deployment.plan.to_json()
    assert (zb.is_mergeHardop, zb.is_etmOptimize, zb.ocmopt, plan) == settings
    assert zb.precheck()
    got = run(r, x)
    s, zb2 = session(z, zdev, profile=False)
    want = run(s, x)
    assert zb2.deployment.mmu and [m[0::2] for m in zb.deployment.mmu] == \
        [m[0::2] for m in zb2.deployment.mmu]
    for a, b, c in zip(got, want, host_ref(q, x)):
        assert a.tobytes() == b.tobytes() == c.tobytes()
    got2 = run(r, x_of(q, seed=1))  # a second forward on the restored session
    want2 = run(s, x_of(q, seed=1))
    assert all(a.tobytes() == b.tobytes() for a, b in zip(got2, want2))
    s.close()
    r.close()


def test_non_default_settings_are_kept_and_frozen(zdev, mock, tmp_path):  # noqa: F811
    q, z = compiled("tiny_cnn")
    p = tmp_path / "t.snap"
    settings = dump_on_mock(z, mock, p, reuse=False, merge=False, ocm=OcmOpt.OPTION2)
    r = load(p, zdev)
    zb = r.backends[0]
    plan = zb.deployment.plan.to_json()
    assert (zb.is_mergeHardop, zb.is_etmOptimize, zb.ocmopt, plan) == settings
    assert settings[:2] == (False, False)
    assert all(len(run_.op_ids) == 1 for run_ in zb.deployment.runs)  # merge off was kept
    for call in (zb.disableMergeHardOp, zb.disableEtmOptimize,
                 lambda: zb.ocmOptimize(OcmOpt.NONE),
                 lambda: zb.userReuseSegment(None, SegmentType.FTMP)):
        with pytest.raises(CallOrderError, match="frozen at dump time"):
            call()
    with pytest.raises(CallOrderError, match="frozen"):
        r.backends[1].setFakeQf(True)
    x = x_of(q)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(run(r, x), host_ref(q, x)))
    r.close()


def test_restore_runs_no_lowering_or_planning(zdev, mock, tmp_path, monkeypatch):  # noqa: F811
    q, z = compiled("yolov5s", input_size=160)
    x = x_of(q)
    p = tmp_path / "y.snap"
    dump_on_mock(z, mock, p)

    def forbidden(*a, **k):
        raise AssertionError("lowering / planning ran during CreateWithSnapshot")

    import zg330backend.lowering as lowering
    from npu_model.planners import etm as etm_planner
    from npu_model.planners import ocm as ocm_planner
    from npu_runtime import apply as apply_stage
    from npu_runtime import backend as npu_backend
    from npu_runtime import deploy
    from npu_runtime.layout import Layout

    for mod, attr in [(deploy, "plan"), (deploy, "relocate"),
                      (etm_planner, "plan_etm_detailed"), (etm_planner, "plan_no_reuse"),
                      (etm_planner, "lower_bound"), (ocm_planner, "plan_ocm"),
                      (lowering, "lower"), (lowering, "adapt"),
                      (ZG330Backend, "apply"), (ZG330Backend, "init"),
                      (npu_backend, "build_layout"), (apply_stage, "apply"),
                      (Layout, "move_to"), (Layout, "ftmp_estimate")]:
        monkeypatch.setattr(mod, attr, forbidden)
    r = load(p, zdev)
    got = run(r, x)
    monkeypatch.undo()
    for a, b in zip(got, host_ref(q, x)):
        assert a.tobytes() == b.tobytes()
    r.close()


def test_dump_before_apply_raises(zdev, tmp_path):  # noqa: F811
    q, z = compiled("tiny_cnn")
    s = Session.Create([ZG330Backend, HostBackend], z.view(0), [zdev, HostDevice.Default()])
    with pytest.raises(CallOrderError):
        s.dumpSnapshot(tmp_path / "x.snap")
    with pytest.raises(CallOrderError, match="after apply"):
        s.backends[0].snapshotState()
    assert not os.listdir(tmp_path)
    s.close()


def test_mismatched_backends_and_devices_raise(zdev, mock, tmp_path):  # noqa: F811
    q, z = compiled("tiny_cnn")
    p = tmp_path / "t.snap"
    dump_on_mock(z, mock, p)
    host = HostDevice.Default()
    with pytest.raises(SnapshotError, match=r"'ZG330' at dump time.*t\.snap|t\.snap.*'ZG330'"):
        Session.CreateWithSnapshot(p, [HostBackend, ZG330Backend], [zdev, host])
    with pytest.raises(SnapshotError, match="holds 2 backends"):
        Session.CreateWithSnapshot(p, [ZG330Backend], [zdev])
    with pytest.raises(SnapshotError, match="1 devices"):
        Session.CreateWithSnapshot(p, [ZG330Backend, HostBackend], [zdev])
    used = zdev.defaultMemRegion().used_bytes
    with pytest.raises(XrtError, match="ZG330 device"):
        Session.CreateWithSnapshot(p, [ZG330Backend, HostBackend], [host, host])
    assert zdev.defaultMemRegion().used_bytes == used  # nothing leaked


@pytest.mark.parametrize("case,pattern", [("truncated", "truncated"),
                                          ("bitflip", "corrupted"),
                                          ("magic", "wrong magic"),
                                          ("version", "format version")])
def test_damaged_zg330_snapshot_raises(zdev, mock, tmp_path, case, pattern):  # noqa: F811
    import struct

    q, z = compiled("tiny_cnn")
    p = tmp_path / "t.snap"
    dump_on_mock(z, mock, p)
    data = bytearray(p.read_bytes())
    if case == "truncated":
        data = data[:-1000]
    elif case == "bitflip":
        data[len(data) - 5000] ^= 0x01  # inside the INSTR/WEIGHT images
    elif case == "magic":
        data[1] ^= 0xFF
    else:
        struct.pack_into("<I", data, 8, 99)
    bad = tmp_path / "bad.snap"
    bad.write_bytes(bytes(data))
    with pytest.raises(SnapshotError, match=pattern) as ei:
        load(bad, zdev)
    assert str(bad) in str(ei.value)


def test_user_chunks_cannot_be_snapshotted_and_dump_is_atomic(zdev, tmp_path):  # noqa: F811
    q, z = compiled("tiny_cnn")
    p = tmp_path / "t.snap"
    s, _ = session(z, zdev, profile=False)
    s.dumpSnapshot(p)
    before = p.read_bytes()
    s.close()
    s = Session.Create([ZG330Backend, HostBackend], z.view(0), [zdev, HostDevice.Default()])
    zb = s.backends[0]
    need = zb.logic_segment_map[SegmentType.FTMP].byte_size
    chunk = zdev.defaultMemRegion().malloc(need, True, 4096)
    zb.userReuseSegment(chunk, SegmentType.FTMP)
    s.apply()
    with pytest.raises(SnapshotError, match="user chunks"):
        s.dumpSnapshot(p)
    assert p.read_bytes() == before  # the old file is untouched
    assert sorted(os.listdir(tmp_path)) == ["t.snap"]  # no temporary left behind
    s.close()
    chunk.free()


def test_snapshots_written_before_the_shared_runtime_still_load(zdev, mock, tmp_path):  # noqa: F811
    """State version 1 as the ZG330 runtime wrote it before `npu_runtime`: the plan's OCM
    options were ints, not names. Such a file (re-sealed here) restores and runs bit-exactly;
    a state version this runtime does not know is refused by name."""
    from xrt.snapshot import read_snapshot, write_snapshot

    q, z = compiled("tiny_cnn")
    x = x_of(q, 2)
    p = tmp_path / "new.snap"
    dump_on_mock(z, mock, p, ocm=OcmOpt.OPTION2)
    snap = read_snapshot(p)
    header = dict(snap.header)
    sections = {s["name"]: bytes(snap.sections[s["name"]]) for s in header.pop("sections")}
    state = header["backends"][0]["state"]
    assert state["plan"]["ocm_used"] == "OPTION2"  # names now
    for k in ("ocm_requested", "ocm_used"):
        state["plan"][k] = int(OcmOpt[state["plan"][k]])
    old = tmp_path / "old.snap"
    write_snapshot(old, header, sections)
    r = load(old, zdev)
    zb = r.backends[0]
    assert zb.ocmopt == OcmOpt.OPTION2 and zb.deployment.plan.ocm_requested == OcmOpt.OPTION2
    for a, b in zip(run(r, x), host_ref(q, x)):
        assert a.tobytes() == b.tobytes()
    r.close()
    state["version"] = 2
    write_snapshot(old, header, sections)
    with pytest.raises(SnapshotError, match="state version 2"):
        load(old, zdev)

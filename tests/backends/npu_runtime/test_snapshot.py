"""Snapshots of the shared runtime (docs/snapshot-format.md), on both chips: made on the chip's
mock device, loaded on its simulator, they forward byte-identically to a session built
normally, without lowering or planning again."""

from __future__ import annotations

import os

import pytest
from runtime_cases import HEAVY, host_ref, run, x_of

from host_backend import HostBackend
from npu_runtime import OcmOpt, SegmentType
from xrt import (
    CallOrderError,
    HostDevice,
    Session,
    SnapshotError,
    UnsupportedOpError,
    XrtError,
)


def dump_on_mock(chip, z, path, **options):
    s, b = chip.session(z, chip.mock(), profile=False, **options)
    s.dumpSnapshot(path)
    settings = (b.is_mergeHardop, b.is_etmOptimize, b.ocmopt, b.deployment.plan.to_json())
    s.close()
    return settings


@pytest.mark.parametrize("chip,name,kw", [("zg330", "tiny_cnn", {}), ("buyi", "tiny_cnn", {}),
                                          ("zg330", "yolov5s", {"input_size": 160}),
                                          pytest.param("buyi", "yolov5s", {"input_size": 160},
                                                       marks=pytest.mark.slow)],
                         indirect=["chip"])
def test_mock_snapshot_forwards_on_sim_like_a_built_session(chip, tmp_path, name, kw):
    q, z = chip.compiled(name, **kw)
    x = x_of(q)
    p = tmp_path / f"{name}.snap"
    settings = dump_on_mock(chip, z, p)
    r0 = chip.load(p, chip.mock())
    with pytest.raises(UnsupportedOpError, match="mock device"):  # the mock cannot forward
        run(r0, x)
    r0.close()
    r = chip.load(p)
    zb = r.backends[0]
    assert zb.snapshot and r.backends[1].snapshot
    plan = zb.deployment.plan.to_json()
    assert (zb.is_mergeHardop, zb.is_etmOptimize, zb.ocmopt, plan) == settings
    assert zb.precheck()
    got = run(r, x)
    s, zb2 = chip.session(z, profile=False)
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


def test_non_default_settings_are_kept_and_frozen(chip, tmp_path):
    q, z = chip.compiled("tiny_cnn")
    p = tmp_path / "t.snap"
    merge = not chip.backend.chip.merge  # both of the chip's defaults turned round
    reuse = not chip.backend.chip.etm_reuse
    settings = dump_on_mock(chip, z, p, merge=merge, reuse=reuse)
    r = chip.load(p)
    zb = r.backends[0]
    plan = zb.deployment.plan.to_json()
    assert (zb.is_mergeHardop, zb.is_etmOptimize, zb.ocmopt, plan) == settings
    assert settings[:2] == (merge, reuse)
    assert any(len(run_.op_ids) > 1 for run_ in zb.deployment.runs) == merge  # merge was kept
    for call in (*chip.option_calls(zb), lambda: zb.userReuseSegment(None, SegmentType.FTMP)):
        with pytest.raises(CallOrderError, match="frozen at dump time"):
            call()
    with pytest.raises(CallOrderError, match="frozen"):
        r.backends[1].setFakeQf(True)
    x = x_of(q)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(run(r, x), host_ref(q, x)))
    r.close()


@pytest.mark.parametrize("chip", HEAVY, indirect=True)
def test_restore_runs_no_lowering_or_planning(chip, tmp_path, monkeypatch):
    import importlib

    q, z = chip.compiled("yolov5s", input_size=160)
    x = x_of(q)
    p = tmp_path / "y.snap"
    dump_on_mock(chip, z, p)

    def forbidden(*a, **k):
        raise AssertionError("lowering / planning ran during CreateWithSnapshot")

    lowering = importlib.import_module(f"{chip.package}.lowering")
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
                      (chip.backend, "apply"), (chip.backend, "init"),
                      (chip.backend, "_apply"), (chip.backend, "_init"),
                      (npu_backend, "build_layout"), (apply_stage, "apply"),
                      (Layout, "move_to"), (Layout, "ftmp_estimate")]:
        monkeypatch.setattr(mod, attr, forbidden)
    r = chip.load(p)
    got = run(r, x)
    monkeypatch.undo()
    for a, b in zip(got, host_ref(q, x)):
        assert a.tobytes() == b.tobytes()
    r.close()


def test_dump_before_apply_raises(chip, tmp_path):
    q, z = chip.compiled("tiny_cnn")
    s = Session.Create([chip.backend, HostBackend], z.view(0), [chip.dev, HostDevice.Default()])
    with pytest.raises(CallOrderError):
        s.dumpSnapshot(tmp_path / "x.snap")
    with pytest.raises(CallOrderError, match="after apply"):
        s.backends[0].snapshotState()
    assert not os.listdir(tmp_path)
    s.close()


def test_mismatched_backends_and_devices_raise(chip, tmp_path):
    q, z = chip.compiled("tiny_cnn")
    p = tmp_path / "t.snap"
    dump_on_mock(chip, z, p)
    host, dev, npu, name = HostDevice.Default(), chip.dev, chip.backend, chip.backend.name
    with pytest.raises(SnapshotError, match=rf"'{name}' at dump time.*t\.snap|t\.snap.*'{name}'"):
        Session.CreateWithSnapshot(p, [HostBackend, npu], [dev, host])
    with pytest.raises(SnapshotError, match="holds 2 backends"):
        Session.CreateWithSnapshot(p, [npu], [dev])
    with pytest.raises(SnapshotError, match="1 devices"):
        Session.CreateWithSnapshot(p, [npu, HostBackend], [dev])
    used = dev.defaultMemRegion().used_bytes
    with pytest.raises(XrtError, match=f"{npu.chip.name} device"):
        Session.CreateWithSnapshot(p, [npu, HostBackend], [host, host])
    assert dev.defaultMemRegion().used_bytes == used  # nothing leaked


@pytest.mark.parametrize("case,pattern", [("truncated", "truncated"),
                                          ("bitflip", "corrupted"),
                                          ("magic", "wrong magic"),
                                          ("version", "format version")])
def test_damaged_snapshot_raises(chip, tmp_path, case, pattern):
    import struct

    q, z = chip.compiled("tiny_cnn")
    p = tmp_path / "t.snap"
    dump_on_mock(chip, z, p)
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
        chip.load(bad)
    assert str(bad) in str(ei.value)


def test_user_chunks_cannot_be_snapshotted_and_dump_is_atomic(chip, tmp_path):
    q, z = chip.compiled("tiny_cnn")
    p = tmp_path / "t.snap"
    s, _ = chip.session(z, profile=False)
    s.dumpSnapshot(p)
    before = p.read_bytes()
    s.close()
    s = Session.Create([chip.backend, HostBackend], z.view(0), [chip.dev, HostDevice.Default()])
    zb = s.backends[0]
    need = max(zb.logic_segment_map[SegmentType.FTMP].byte_size, 1)
    chunk = chip.dev.defaultMemRegion().malloc(need, True, 4096)
    zb.userReuseSegment(chunk, SegmentType.FTMP)
    s.apply()
    with pytest.raises(SnapshotError, match="user chunks"):
        s.dumpSnapshot(p)
    assert p.read_bytes() == before  # the old file is untouched
    assert sorted(os.listdir(tmp_path)) == ["t.snap"]  # no temporary left behind
    s.close()
    chunk.free()


@pytest.mark.parametrize("chip", ["zg330"], indirect=True)  # the ZG330 runtime wrote them
def test_snapshots_written_before_the_shared_runtime_still_load(chip, tmp_path):
    """State version 1 as the ZG330 runtime wrote it before `npu_runtime`: the plan's OCM
    options were ints, not names. Such a file (re-sealed here) restores and runs bit-exactly;
    a state version this runtime does not know is refused by name."""
    from xrt.snapshot import read_snapshot, write_snapshot

    q, z = chip.compiled("tiny_cnn")
    x = x_of(q, 2)
    p = tmp_path / "new.snap"
    s = Session.Create([chip.backend, HostBackend], z.view(0),
                       [chip.mock(), HostDevice.Default()])
    s.backends[0].ocmOptimize(OcmOpt.OPTION2)
    s.apply()
    s.dumpSnapshot(p)
    s.close()
    snap = read_snapshot(p)
    header = dict(snap.header)
    sections = {s["name"]: bytes(snap.sections[s["name"]]) for s in header.pop("sections")}
    state = header["backends"][0]["state"]
    assert state["plan"]["ocm_used"] == "OPTION2"  # names now
    for k in ("ocm_requested", "ocm_used"):
        state["plan"][k] = int(OcmOpt[state["plan"][k]])
    old = tmp_path / "old.snap"
    write_snapshot(old, header, sections)
    r = chip.load(old)
    zb = r.backends[0]
    assert zb.ocmopt == OcmOpt.OPTION2 and zb.deployment.plan.ocm_requested == OcmOpt.OPTION2
    for a, b in zip(run(r, x), host_ref(q, x)):
        assert a.tobytes() == b.tobytes()
    r.close()
    state["version"] = 2
    write_snapshot(old, header, sections)
    with pytest.raises(SnapshotError, match="state version 2"):
        chip.load(old)

"""ETM feature-map reuse planner: validity, the lower bound as certificate, errors."""

from __future__ import annotations

import time

import numba
import numpy as np
import pytest
from etm_instances import random_network_instance
from etm_network import instance_from_network
from hypothesis import given, settings
from hypothesis import strategies as st

import xir
from npu_model.planners import etm
from npu_model.planners.etm import (
    AliasError,
    BufferSpecError,
    PlanError,
    lower_bound,
    plan_etm,
    plan_etm_detailed,
    plan_no_reuse,
    verify_plan,
)
from xcompile import zoo

JIT = not numba.config.DISABLE_JIT


def brute_peak(inst: dict) -> int:
    """The bound recomputed position by position (numpy, independent of the planner)."""
    n = len(inst["sizes"])
    owner, a = inst.get("alias_owner", np.full(n, -1)), inst.get("alignment", 64)
    root = np.arange(n)
    for i in range(n):
        while owner[root[i]] >= 0:
            root[i] = owner[root[i]]
    lo = np.full(n, np.iinfo(np.int64).max)
    hi = np.full(n, np.iinfo(np.int64).min)
    for i in range(n):
        lo[root[i]] = min(lo[root[i]], inst["starts"][i])
        hi[root[i]] = max(hi[root[i]], inst["ends"][i])
    peak = 0
    t0, t1 = int(np.min(inst["starts"], initial=0)), int(np.max(inst["ends"], initial=0))
    for t in range(t0, t1 + 1):
        live = sum(-(-int(inst["sizes"][r]) // a) * a for r in set(root.tolist())
                   if lo[r] <= t <= hi[r])
        peak = max(peak, live)
    return peak


def check_valid(inst: dict, offsets: np.ndarray, total: int) -> None:
    """Independent validity check: alignment, members at their offsets, no shared bytes."""
    n = len(inst["sizes"])
    a = inst.get("alignment", 64)
    owner = inst.get("alias_owner", np.full(n, -1))
    off_in = inst.get("alias_offset", np.zeros(n, dtype=np.int64))
    assert offsets.dtype == np.int64 and offsets.shape == (n,)
    assert np.all(offsets % a == 0)
    for i in range(n):
        if owner[i] >= 0:
            assert offsets[i] == offsets[owner[i]] + off_in[i]
    assert np.all(offsets + inst["sizes"] <= total)
    verify_plan(offsets, total=total, **inst)
    # Buffer level: two buffers of different alias groups never share live bytes.
    root = np.arange(n)
    for i in range(n):
        while owner[root[i]] >= 0:
            root[i] = owner[root[i]]
    s, e, o, z = inst["starts"], inst["ends"], offsets, inst["sizes"]
    time_ov = (s[:, None] <= e[None, :]) & (s[None, :] <= e[:, None])
    byte_ov = (o[:, None] < (o + z)[None, :]) & (o[None, :] < (o + z)[:, None])
    clash = time_ov & byte_ov & (root[:, None] != root[None, :])
    assert not clash.any(), np.argwhere(clash)[:3]


# --- zoo networks: the plan meets the bound -------------------------------------------------
# yolov5s at 640 takes several seconds to build (BatchNorm statistics); the default run plans
# it at 320 (same graph, smaller maps) and the full size runs with -m slow and in benchmarks/.
@pytest.fixture(scope="module", params=[
    ("tiny_cnn", None), ("resnet18", None), ("mobilenet_v2", None), ("yolov5s", 320),
    pytest.param(("yolov5s", 640), marks=pytest.mark.slow)], ids=lambda p: f"{p[0]}-{p[1]}")
def zoo_instance(request) -> tuple[str, dict]:
    name, size = request.param
    return name, instance_from_network(zoo.build(name, input_size=size))


def test_zoo_plan_meets_lower_bound(zoo_instance):
    name, inst = zoo_instance
    plan = plan_etm_detailed(**inst)
    check_valid(inst, plan.offsets, plan.total)
    assert plan.total == plan.lower_bound == lower_bound(**inst), name
    assert plan.optimal and plan.ratio == 1.0
    _, no_reuse = plan_no_reuse(**inst)
    assert plan.total < no_reuse


def test_instance_from_network_tiny_cnn():
    net = zoo.build("tiny_cnn")
    inst = instance_from_network(net)
    values = {v.v_id: v for op in net.ops for v in op.inputs + op.outputs if not v.is_params}
    assert sorted(inst["v_ids"].tolist()) == sorted(values)
    assert np.all(inst["sizes"] % 64 == 0)
    for k, vid in enumerate(inst["v_ids"]):
        assert inst["sizes"][k] == -(-values[vid].storageBytes() // 64) * 64
    # the NHWC channel concat (H*W > 1) is not contiguous per input: no alias
    concat = next(op for op in net.ops if op.op_type == "Concat")
    pos = {int(v): k for k, v in enumerate(inst["v_ids"])}
    assert all(inst["alias_owner"][pos[v.v_id]] == -1 for v in concat.inputs)
    # the reshape output shares its input at offset 0
    reshape = next(op for op in net.ops if op.op_type == "Reshape")
    y, x = pos[reshape.outputs[0].v_id], pos[reshape.inputs[0].v_id]
    assert inst["alias_owner"][y] == x and inst["alias_offset"][y] == 0
    # lifetimes: input from 0, output to the end, everything else producer -> last reader
    assert inst["starts"][pos[net.inputs()[0].v_id]] == 0
    assert inst["ends"][pos[net.outputs()[0].v_id]] == len(net.ops) - 1
    for i, op in enumerate(net.ops):
        for v in op.outputs:
            assert inst["starts"][pos[v.v_id]] == i
            readers = [net.index(c.op_id) for c in v.consumers]
            assert inst["ends"][pos[v.v_id]] == max(readers, default=i)
    assert lower_bound(**inst) == brute_peak(inst)


def test_instance_from_network_contiguous_concat_and_split():
    b = xir.NetworkBuilder("alias")
    x = b.input([1, 1, 1, 64], layout="NHWC")          # channel concat with H = W = 1: contiguous
    h = b.relu(x)
    g = b.sigmoid(x)
    c = b.concat(h, g, axis=-1)                          # 2 x 256 bytes
    p, q = b.split(c, axis=-1, sections=[96, 32])        # 384 + 128 bytes
    r = b.reshape(b.relu(p), shape=[1, -1])
    b.output(b.add(r, b.reshape(b.relu(p), shape=[1, -1])), q)
    net = b.build()
    inst = instance_from_network(net)
    pos = {int(v): k for k, v in enumerate(inst["v_ids"])}
    cat = next(op for op in net.ops if op.op_type == "Concat")
    spl = next(op for op in net.ops if op.op_type == "Split")
    out = pos[cat.outputs[0].v_id]
    assert [(inst["alias_owner"][pos[v.v_id]], inst["alias_offset"][pos[v.v_id]])
            for v in cat.inputs] == [(out, 0), (out, 256)]
    # the split's input is the concat output: split outputs are members of it (a tree)
    assert [(inst["alias_owner"][pos[v.v_id]], inst["alias_offset"][pos[v.v_id]])
            for v in spl.outputs] == [(out, 0), (out, 384)]
    offsets, total = plan_etm(**inst)
    check_valid(inst, offsets, total)
    assert total == lower_bound(**inst) == brute_peak(inst)


def test_instance_from_view():
    net = zoo.build("tiny_cnn")
    view = net.view(3, 12)
    inst = instance_from_network(view)
    offsets, total = plan_etm(**inst)
    check_valid(inst, offsets, total)
    assert total == lower_bound(**inst)
    assert inst["ends"].max() == len(view.ops) - 1


# --- random instances -----------------------------------------------------------------------
@settings(max_examples=250, deadline=None)
@given(n_ops=st.integers(2, 160), seed=st.integers(0, 2**32 - 1), irregular=st.booleans(),
       alignment=st.sampled_from([64, 64, 128, 4096]))
def test_random_networks_valid_and_within_one_percent(n_ops, seed, irregular, alignment):
    inst = random_network_instance(n_ops, seed, irregular=irregular, alignment=alignment)
    plan = plan_etm_detailed(**inst)
    check_valid(inst, plan.offsets, plan.total)
    assert plan.lower_bound == brute_peak(inst)
    # CNN-shaped networks: within 1% of the bound. The irregular stress family (uniform sizes,
    # skips up to 40 values back) occasionally ends above 1% (e.g. n_ops=92, seed=2308: 1.4%).
    assert plan.lower_bound <= plan.total <= (1.05 if irregular else 1.01) * plan.lower_bound


@st.composite
def interval_instances(draw):
    """Arbitrary (not network-shaped) buffers with alias trees; sizes not aligned."""
    n = draw(st.integers(0, 40))
    sizes = np.array(draw(st.lists(st.integers(0, 5000), min_size=n, max_size=n)), np.int64)
    starts = np.array(draw(st.lists(st.integers(0, 30), min_size=n, max_size=n)), np.int64)
    lengths = np.array(draw(st.lists(st.integers(0, 12), min_size=n, max_size=n)), np.int64)
    owner = np.full(n, -1, np.int64)
    offset = np.zeros(n, np.int64)
    for i in range(1, n):
        if draw(st.booleans()) and draw(st.booleans()):
            j = draw(st.integers(0, i - 1))       # owners come earlier: no cycles
            room = (sizes[j] - sizes[i]) // 64
            if room >= 0:
                owner[i] = j
                offset[i] = 64 * draw(st.integers(0, int(room)))
    return {"sizes": sizes, "starts": starts, "ends": starts + lengths,
            "alias_owner": owner, "alias_offset": offset, "alignment": 64}


@settings(max_examples=200, deadline=None)
@given(inst=interval_instances())
def test_arbitrary_intervals_always_valid(inst):
    plan = plan_etm_detailed(**inst, max_iters=300)
    check_valid(inst, plan.offsets, plan.total)
    assert plan.lower_bound == brute_peak(inst) <= plan.total
    offsets, total = plan_no_reuse(**inst)
    check_valid(inst, offsets, total)


def test_deterministic():
    inst = random_network_instance(200, 7, irregular=True)
    a = plan_etm_detailed(**inst)
    b = plan_etm_detailed(**inst)
    assert a.total == b.total and np.array_equal(a.offsets, b.offsets)


def test_search_improves_a_greedy_miss():
    # Found by search: greedy by size leaves a hole here; the local search closes it.
    rng = np.random.default_rng(12)
    n = 30
    inst = {"sizes": rng.integers(1, 64, n) * 64, "starts": rng.integers(0, 10, n)}
    inst["ends"] = inst["starts"] + rng.integers(0, 5, n)
    greedy = plan_etm_detailed(**inst, max_iters=0)
    full = plan_etm_detailed(**inst)
    check_valid(inst, full.offsets, full.total)
    assert full.total <= greedy.total
    assert full.lower_bound <= full.total


@pytest.mark.skipif(not JIT, reason="timing needs the JIT")
def test_500_op_network_plans_fast():
    inst = random_network_instance(500, 3)
    plan_etm(**inst)  # warm-up (compiled code may come from the cache)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        offsets, total = plan_etm(**inst)
        best = min(best, time.perf_counter() - t0)
    check_valid(inst, offsets, total)
    assert total == lower_bound(**inst)
    assert best < 0.5  # loose sanity bound; the 50 ms figure is measured in benchmarks/


# --- special cases --------------------------------------------------------------------------
def test_no_reuse_is_sum_of_aligned_sizes():
    sizes = np.array([1, 64, 65, 0, 1000])
    starts = np.array([0, 0, 1, 2, 3])
    ends = np.array([5, 1, 2, 2, 3])
    offsets, total = plan_no_reuse(sizes, starts, ends)
    assert total == 64 + 64 + 128 + 0 + 1024
    assert offsets.tolist() == [0, 64, 128, 256, 256]
    inst = {"sizes": sizes, "starts": starts, "ends": ends}
    check_valid(inst, offsets, total)


def test_no_reuse_members_live_in_their_owner():
    sizes = np.array([256, 128, 128, 64])
    owner = np.array([-1, 0, 0, -1])
    offset = np.array([0, 0, 128, 0])
    offsets, total = plan_no_reuse(sizes, [0, 0, 1, 2], [3, 1, 2, 2], owner, offset)
    assert total == 256 + 64 and offsets.tolist() == [0, 0, 128, 256]


def test_empty_and_zero_sizes():
    offsets, total = plan_etm([], [], [])
    assert total == 0 and offsets.shape == (0,)
    offsets, total = plan_etm([0, 0], [0, 1], [3, 4])
    assert total == 0 and offsets.tolist() == [0, 0]
    assert lower_bound([0], [0], [0]) == 0


def test_chain_reuses_two_slots():
    n = 10
    sizes = np.full(n, 1000)
    starts = np.arange(n)
    offsets, total = plan_etm(sizes, starts, starts + 1)
    assert total == 2 * 1024 == lower_bound(sizes, starts, starts + 1)


def test_alias_chain_offsets_accumulate():
    # 0 owns 1 at 512; 1 owns 2 at 128; 3 reshapes 2 (offset 0)
    sizes = [1024, 512, 256, 256, 700]
    starts = [2, 0, 0, 3, 1]
    ends = [4, 2, 1, 5, 2]
    owner = [-1, 0, 1, 2, -1]
    off = [0, 512, 128, 0, 0]
    offsets, total = plan_etm(sizes, starts, ends, owner, off)
    assert offsets[1] == offsets[0] + 512 and offsets[2] == offsets[0] + 640
    assert offsets[3] == offsets[2]
    # group 0 lives over [0, 5] and overlaps buffer 4: 1024 + 704
    assert total == lower_bound(sizes, starts, ends, owner, off) == 1024 + 704


def test_alignment_parameter():
    offsets, total = plan_etm([10, 10, 10], [0, 0, 0], [1, 1, 1], alignment=4096)
    assert total == 3 * 4096 and sorted(offsets.tolist()) == [0, 4096, 8192]


# --- errors: one test per invariant ---------------------------------------------------------
def test_error_hierarchy():
    assert issubclass(PlanError, ValueError)
    assert issubclass(BufferSpecError, PlanError) and issubclass(AliasError, PlanError)


def test_negative_size():
    with pytest.raises(BufferSpecError, match=r"buffer 1 \(v_id 11\) has a negative size"):
        plan_etm([64, -1], [0, 0], [1, 1], v_ids=[10, 11])


def test_end_before_start():
    with pytest.raises(BufferSpecError, match="ends at position 0 before it starts at 2"):
        lower_bound([64], [2], [0])


def test_length_mismatch():
    with pytest.raises(BufferSpecError, match="starts has 1 entries, sizes has 2"):
        plan_etm([64, 64], [0], [0, 0])


def test_non_integer_arrays():
    with pytest.raises(BufferSpecError, match="integers"):
        plan_etm([1.5], [0], [0])
    with pytest.raises(BufferSpecError, match="1-D"):
        plan_etm([[64]], [[0]], [[0]])


def test_bad_alignment():
    with pytest.raises(BufferSpecError, match="alignment"):
        plan_etm([64], [0], [0], alignment=0)


def test_unknown_owner():
    with pytest.raises(AliasError, match="names alias owner 5"):
        plan_etm([64, 64], [0, 0], [1, 1], [-1, 5], [0, 0])


def test_self_owner():
    with pytest.raises(AliasError, match="its own alias owner"):
        plan_etm([64, 64], [0, 0], [1, 1], [-1, 1], [0, 0])


def test_alias_cycle():
    with pytest.raises(AliasError, match="alias cycle"):
        plan_etm([64, 64, 64], [0, 0, 0], [1, 1, 1], [1, 2, 0], [0, 0, 0])


def test_member_out_of_owner_bounds():
    with pytest.raises(AliasError, match=r"buffer 1 \(128 bytes at offset 64\) does not fit"):
        plan_etm([128, 128], [0, 0], [1, 1], [-1, 0], [0, 64])


def test_member_negative_offset():
    with pytest.raises(AliasError, match="negative offset"):
        plan_etm([128, 64], [0, 0], [1, 1], [-1, 0], [0, -64])


def test_member_misaligned_offset():
    with pytest.raises(AliasError, match="not a multiple of the 64-byte alignment"):
        plan_etm([256, 64], [0, 0], [1, 1], [-1, 0], [0, 32])


def test_verify_plan_catches_overlap_and_misplaced_member():
    sizes, starts, ends = [128, 128], [0, 1], [2, 3]
    with pytest.raises(PlanError, match="share bytes"):
        verify_plan([0, 64], sizes, starts, ends)
    with pytest.raises(PlanError, match="aligned"):
        verify_plan([0, 130], sizes, starts, ends)
    with pytest.raises(PlanError, match="owner"):
        verify_plan([0, 0], [256, 128], starts, ends, [-1, 0], [0, 128])
    verify_plan([0, 128], sizes, starts, ends, total=256)
    with pytest.raises(PlanError, match="beyond"):
        verify_plan([0, 128], sizes, starts, ends, total=200)


def test_module_exports():
    for name in etm.__all__:
        assert hasattr(etm, name)

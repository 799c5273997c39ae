"""Members of an `xir.Bundle` on both chips (issue 29, point 6; docs/memory-and-weights.md,
"Bundles"): tiny_cnn quantized once and lowered at three input sizes, bundled, loaded back from
the bundle's bytes. Deployed on one device with one WEIGHT chunk for the three, every member
gives bit for bit what its own separate deployment gives (lowered alone, its own chunks) and the
integer reference; the chunk is smaller than the three separate WEIGHT segments; one refresh
through one member refreshes every member; a network of no bundle cannot join the chunk; the
same holds through `socket://`."""

from __future__ import annotations

import importlib
import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from refit_nets import copy_network
from runtime_cases import host_ref, x_of

import xir
from host_backend import HostBackend
from npu_runtime import SegmentType
from xcompile import zoo
from xcompile.bundle import reshape_network
from xrt import Device, HostDevice, Session
from xrt.cli import main
from xrt.errors import InvalidArgumentError
from xrt.remote.server import DeviceServer

SIZES = (32, 40, 48)
_CACHE: dict = {}


def _case(chip, seed=0):
    """(bundle bytes, {member: quantized at its size}, {member: lowered alone})."""
    key = (chip.kind, seed)
    if key not in _CACHE:
        lowering = importlib.import_module(f"{chip.package}.lowering")
        q = chip.compiled("tiny_cnn", **({"seed": seed} if seed else {}))[0]
        qs = {f"s{n}": reshape_network(q, {"input": (1, n, n, 3)}) for n in SIZES}
        alone = {k: lowering.lower(lowering.adapt(v)) for k, v in qs.items()}
        bundle = xir.Bundle.from_networks({k: copy_network(v) for k, v in alone.items()},
                                          name="tiny_cnn")
        _CACHE[key] = (bundle.dumpToBuffer(), qs, alone)
    return _CACHE[key]


def _session(chip, net, chunk=None, dev=None):
    s = Session.Create([chip.backend, HostBackend], net.view(0),
                       [dev or chip.dev, HostDevice.Default()])
    if chunk is not None:
        s.backends[0].userReuseSegment(chunk, SegmentType.WEIGHT)
    s.apply()
    return s


def _out(s, x):
    return [np.asarray(t).copy() for t in s.forward([x])]


def _source(bundle, member, other, shared_only):
    """Member `member` with the weight blocks of `other` (tiny_cnn from another seed, lowered
    at the same size) wherever their instructions agree -- with `shared_only`, only in the
    HardOps whose block every member holds: a network `refreshWeights` takes."""
    src = copy_network(bundle.network(member))
    everyone = set.intersection(*({id(op.params[0]) for op in bundle.network(k).ops
                                   if op.op_type == "HardOp" and op.params}
                                  for k in bundle.names()))
    mine = {op.op_id: op for op in bundle.network(member).ops}
    new = {op.op_id: op for op in other.ops}
    for op in src.ops:
        o = new[op.op_id]
        if op.op_type != "HardOp" or not op.params or \
                not np.array_equal(op.instr.data, o.instr.data):
            continue
        if shared_only and id(mine[op.op_id].params[0]) not in everyone:
            continue
        op.params[0].setData(np.array(o.params[0].data))
    return src


def _shared(chip, bundle, dev=None):
    """Every member deployed with one WEIGHT chunk sized by QuerySize; (sessions, chunk)."""
    dev = dev or chip.dev
    sizes = [chip.backend.QuerySize(bundle.network(k).view(0)) for k in bundle.names()]
    need = max(s.chunk_bytes(SegmentType.WEIGHT) for s in sizes)
    chunk = dev.defaultMemRegion().malloc(need, True, sizes[0].align)
    return {k: _session(chip, bundle.network(k), chunk, dev) for k in bundle.names()}, chunk


def test_members_on_one_weight_chunk_equal_their_own_deployments(chip):
    data, qs, alone = _case(chip)
    bundle = xir.Bundle.CreateFromBuffer(data)
    assert bundle.names() == list(qs)
    ss, chunk = _shared(chip, bundle)
    separate = 0
    for k, s in ss.items():
        x = x_of(qs[k], 3)
        own = _session(chip, alone[k])  # lowered alone, its own chunks
        separate += own.backends[0].logic_segment_map[SegmentType.WEIGHT].byte_size
        got = _out(s, x)
        for u, v, w in zip(got, _out(own, x), host_ref(qs[k], x)):
            np.testing.assert_array_equal(u, v)
            np.testing.assert_array_equal(u, w)
        own.close()
        b = s.backends[0]
        ci = b.phy_segment_map[SegmentType.WEIGHT].single_chunk
        assert ci.user_used and ci.memChunk == chunk  # one WEIGHT chunk for all three
        assert b.precheck()  # the chunk holds every member's weights where its HardOps read
        assert all(type(s.backendBindings()[op.op_id]) is chip.backend
                   for op in s.network_view.ops if op.op_type == "HardOp")
    assert len(chunk.users()) == 3
    assert chunk.byte_size < separate * 0.6  # 3 sizes of tiny_cnn: the weights once
    for s in ss.values():
        s.close()
    chunk.free()


def test_members_hold_the_same_weight_params(chip):
    bundle = xir.Bundle.CreateFromBuffer(_case(chip)[0])
    a, c = (bundle.network(k) for k in (bundle.names()[0], bundle.names()[-1]))
    ha = {op.op_id: op for op in a.ops if op.op_type == "HardOp" and op.params}
    hc = {op.op_id: op for op in c.ops if op.op_type == "HardOp" and op.params}
    same = [i for i in ha if ha[i].params[0] is hc[i].params[0]]
    assert len(same) >= len(ha) - 2  # all but the global average pools' shape-bound blocks
    for i in ha:  # a block that is not shared differs (its size depends on the input size)
        if i not in same:
            assert ha[i].params[0].storageBytes() != hc[i].params[0].storageBytes()


def test_one_refresh_updates_every_member(chip):
    data, qs, alone = _case(chip)
    other = _case(chip, seed=1)[2]  # tiny_cnn drawn from another seed, quantized on its own
    bundle = xir.Bundle.CreateFromBuffer(data)
    ss, chunk = _shared(chip, bundle)
    xs = {k: x_of(qs[k], 5) for k in ss}
    before = {k: _out(s, xs[k]) for k, s in ss.items()}
    first = bundle.names()[0]
    src = _source(bundle, first, other[first], shared_only=True)
    rep = ss[first].backends[0].refreshWeights(src)
    assert len(rep["hardops"]) >= 5 and rep["bytes"] > 0
    for k, s in ss.items():
        got = _out(s, xs[k])
        assert any(not np.array_equal(u, v) for u, v in zip(before[k], got)), k
        fresh = _session(chip, copy_network(bundle.network(k)))  # the member as it holds now
        for u, v in zip(_out(fresh, xs[k]), got):
            np.testing.assert_array_equal(u, v)
        fresh.close()
        assert s.backends[0].precheck()
    # a later session of a member joins the refreshed chunk (its claim follows the refresh)
    late = _session(chip, bundle.network(bundle.names()[1]), chunk)
    k = bundle.names()[1]
    for u, v in zip(_out(late, xs[k]), _out(ss[k], xs[k])):
        np.testing.assert_array_equal(u, v)
    for s in (*ss.values(), late):
        s.close()
    chunk.free()


def test_one_refit_from_onnx_updates_every_member(chip):
    """`Session.refitWeights(onnx)` on one member (tiny_cnn exported to ONNX, the bundle built
    from it, refitted from the export of another seed): every member then gives, bit for bit,
    the integer reference of its own quantized network refitted alike."""
    from xcompile.frontend import import_onnx
    from xcompile.frontend.onnx_export import export_onnx
    from xcompile.quant.quantize import quantize_network

    m0, m1 = (export_onnx(zoo.build("tiny_cnn", seed=seed)) for seed in (0, 1))
    cal = [[np.transpose(s[0], (0, 3, 1, 2))] for s in zoo.calibration_set("tiny_cnn", count=2)]
    q = quantize_network(import_onnx(m0), cal, bits=8, method="minmax",
                         weight_rounding="nearest")
    name = q.inputs()[0].name
    lowering = importlib.import_module(f"{chip.package}.lowering")
    qs = {f"s{n}": reshape_network(q, {name: (1, 3, n, n)}) for n in SIZES}
    bundle = xir.Bundle.CreateFromBuffer(xir.Bundle.from_networks(
        {k: lowering.lower(lowering.adapt(v)) for k, v in qs.items()}).dumpToBuffer())
    ss, chunk = _shared(chip, bundle)
    xs = {k: x_of(qs[k], 11) for k in ss}
    before = {k: _out(s, xs[k]) for k, s in ss.items()}
    rep = ss[bundle.names()[1]].refitWeights(m1)
    assert rep.bytes > 0 and rep.host_ops == []
    for k, s in ss.items():
        h = Session.Create([HostBackend], copy_network(qs[k]).view(0), [HostDevice.Default()])
        h.apply()
        h.refitWeights(m1)
        got = _out(s, xs[k])
        for u, v in zip(_out(h, xs[k]), got):
            np.testing.assert_array_equal(u, v)
        assert any(not np.array_equal(u, v) for u, v in zip(before[k], got)), k
        assert s.backends[0].precheck()
        h.close()
        s.close()
    chunk.free()


def test_a_refresh_of_a_block_one_member_holds_alone_is_refused(chip):
    """The global average pools' blocks depend on the input size: each member has its own. A
    source that changes one (other activation scales) cannot refresh the bundle through one
    member -- the others would keep theirs -- so it is refused, nothing written."""
    data, qs, _ = _case(chip)
    bundle = xir.Bundle.CreateFromBuffer(data)
    ss, chunk = _shared(chip, bundle)
    first = bundle.names()[0]
    src = _source(bundle, first, _case(chip, seed=1)[2][first], shared_only=False)
    xs = {k: x_of(qs[k], 6) for k in ss}
    before = {k: _out(s, xs[k]) for k, s in ss.items()}
    with pytest.raises(InvalidArgumentError, match="does not hold the weight Params of "
                                                    "HardOp .*pool"):
        ss[first].backends[0].refreshWeights(src)
    for k, s in ss.items():
        for u, v in zip(before[k], _out(s, xs[k])):
            np.testing.assert_array_equal(u, v)
        s.close()
    chunk.free()


def test_members_forward_from_three_threads_at_once(chip):
    """The WEIGHT chunk is only read by forwards: the three members forward at once, each from
    its own thread, 6 times each, every output exact."""
    data, qs, _ = _case(chip)
    bundle = xir.Bundle.CreateFromBuffer(data)
    ss, chunk = _shared(chip, bundle)
    xs = {k: x_of(qs[k], 8) for k in ss}
    want = {k: host_ref(qs[k], xs[k]) for k in ss}
    bad: list[str] = []

    def work(k):
        for _ in range(6):
            if not all(np.array_equal(u, v) for u, v in zip(_out(ss[k], xs[k]), want[k])):
                bad.append(k)

    threads = [threading.Thread(target=work, args=(k,)) for k in ss]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not bad and not any(t.is_alive() for t in threads)
    for s in ss.values():
        s.close()
    chunk.free()


def test_a_refresh_while_another_member_forwards_in_a_thread(chip):
    """The Ascend weight-update scenario: one member's weights updated back and forth while
    another member forwards from another thread; each of its forwards sees the old weights or
    the new, never a mix (the refresh writes under the device's forward lock)."""
    data, qs, _ = _case(chip)
    bundle = xir.Bundle.CreateFromBuffer(data)
    ss, chunk = _shared(chip, bundle)
    first, last = bundle.names()[0], bundle.names()[-1]
    x = x_of(qs[last], 9)
    old_src = copy_network(bundle.network(first))
    new_src = _source(bundle, first, _case(chip, seed=1)[2][first], shared_only=True)
    want_old = _out(ss[last], x)
    ss[first].backends[0].refreshWeights(new_src)
    want_new = _out(ss[last], x)
    ss[first].backends[0].refreshWeights(old_src)
    assert any(not np.array_equal(u, v) for u, v in zip(want_old, want_new))
    outs: list = []
    stop = threading.Event()

    def forward():
        while not stop.is_set() and len(outs) < 20:
            outs.append(_out(ss[last], x))

    t = threading.Thread(target=forward)
    t.start()
    i = 0
    while t.is_alive() and i < 200:
        ss[first].backends[0].refreshWeights(new_src if i % 2 == 0 else old_src)
        i += 1
    stop.set()
    t.join(120)
    assert outs and i > 1
    for o in outs:
        assert (all(np.array_equal(u, v) for u, v in zip(want_old, o))
                or all(np.array_equal(u, v) for u, v in zip(want_new, o)))
    for s in ss.values():
        s.close()
    chunk.free()


def test_members_with_the_mmu_off(chip):
    """A chip whose MMU can be switched off (the Buyi) runs every address physical: the bundle's
    weight moves and then the physical relocation, one after the other; still exact."""
    if not chip.backend.chip.mmu_switch:
        pytest.skip(f"{chip.kind} has no MMU switch")
    data, qs, _ = _case(chip)
    dev = Device.Open(f"sim://{chip.kind}")
    try:
        dev.mmuModeSwitch(False)
        bundle = xir.Bundle.CreateFromBuffer(data)
        ss, chunk = _shared(chip, bundle, dev)
        for k, s in ss.items():
            assert not s.backends[0].mmu_mode
            x = x_of(qs[k], 10)
            for u, v in zip(_out(s, x), host_ref(qs[k], x)):
                np.testing.assert_array_equal(u, v)
            assert s.backends[0].precheck()
            s.close()
        chunk.free()
    finally:
        dev.close()


def test_a_network_of_no_bundle_cannot_join_the_chunk(chip):
    data, qs, alone = _case(chip)
    bundle = xir.Bundle.CreateFromBuffer(data)
    ss, chunk = _shared(chip, bundle)
    k = bundle.names()[0]
    stranger = Session.Create([chip.backend, HostBackend], _case(chip, seed=1)[2][k].view(0),
                              [chip.dev, HostDevice.Default()])
    with pytest.raises(InvalidArgumentError, match="members of one bundle whose weight blocks "
                                                    "agree.*differs"):
        stranger.backends[0].userReuseSegment(chunk, SegmentType.WEIGHT)
    # the member lowered alone lays its blocks out elsewhere: refused too
    own = Session.Create([chip.backend, HostBackend], alone[k].view(0),
                         [chip.dev, HostDevice.Default()])
    with pytest.raises(InvalidArgumentError, match="WEIGHT segment can be shared only"):
        own.backends[0].userReuseSegment(chunk, SegmentType.WEIGHT)
    for s in (*ss.values(), stranger, own):
        s.close()
    chunk.free()


def test_a_member_snapshot_restores_to_the_same_outputs(chip):
    data, qs, _ = _case(chip)
    bundle = xir.Bundle.CreateFromBuffer(data)
    k = bundle.names()[-1]
    s = _session(chip, bundle.network(k))
    x = x_of(qs[k], 2)
    s2 = Session.CreateWithSnapshot(s.dumpSnapshotToMemory(), [chip.backend, HostBackend],
                                    [chip.dev, HostDevice.Default()])
    for u, v in zip(_out(s, x), _out(s2, x)):
        np.testing.assert_array_equal(u, v)
    s2.close()
    s.close()


def _dynamic_onnx(path) -> None:
    """Conv-Relu, a strided Conv-Relu, a global average pool and a Flatten over an NCHW input
    of any size, as an exporter writes it (symbolic H and W)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.normal(0, 0.1, 8).astype(np.float32), "b1"),
             numpy_helper.from_array(rng.normal(0, 0.2, (8, 8, 3, 3)).astype(np.float32), "w2"),
             numpy_helper.from_array(rng.normal(0, 0.1, 8).astype(np.float32), "b2")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1],
                              strides=[2, 2]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
             helper.make_node("Flatten", ["g"], ["y"])]
    g = helper.make_graph(nodes, "dyn", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 3, "H", "W"])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 8])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def test_an_onnx_bundle_compiled_by_the_cli_runs_each_shape_like_onnxruntime(chip, tmp_path):
    """`xrt compile model.onnx --bundle-shapes x=1,3,16,16 x=1,3,24,24 x=1,3,32,32`: each
    member on the chip, on one WEIGHT chunk, against onnxruntime at its own shape."""
    import onnxruntime as ort

    _dynamic_onnx(tmp_path / "dyn.onnx")
    calib = tmp_path / "calib"
    calib.mkdir()
    rng = np.random.default_rng(1)
    for i in range(4):
        np.save(calib / f"{i}.npy", rng.uniform(0, 1, (1, 3, 16, 16)).astype(np.float32))
    sizes = (16, 24, 32)
    assert main(["compile", str(tmp_path / "dyn.onnx"), "--target", chip.kind, "--calib",
                 str(calib), "--method", "minmax", "-o", str(tmp_path / "o"),
                 "--bundle-shapes", *(f"x=1,3,{n},{n}" for n in sizes)]) == 0
    suffix = chip.backend.chip.target.suffix
    bundle = xir.Bundle.CreateFromFile(tmp_path / "o" / f"dyn_{suffix}.bundle")
    assert bundle.names() == [f"1x3x{n}x{n}" for n in sizes]
    ss, chunk = _shared(chip, bundle)
    sess = ort.InferenceSession(str(tmp_path / "dyn.onnx"), providers=["CPUExecutionProvider"])
    for n, (k, s) in zip(sizes, ss.items()):
        x = rng.uniform(0, 1, (1, 3, n, n)).astype(np.float32)
        want = sess.run(None, {"x": x})[0].ravel()
        got = np.asarray(_out(s, x)[0], np.float64).ravel()
        cos = float(got @ want / (np.linalg.norm(got) * np.linalg.norm(want)))
        assert cos > 0.99, (k, cos)
        assert all(type(s.backendBindings()[op.op_id]) is chip.backend
                   for op in s.network_view.ops if op.op_type == "HardOp")
        s.close()
    chunk.free()


def test_a_member_saved_alone_deploys_alone(chip, tmp_path):
    """A member is an ordinary network: saved as json + raw (its union addresses and
    `weights_lowered_at` kept), loaded and deployed with its own chunks, it gives what it gives
    in the bundle, and QuerySize tells its WEIGHT segment as in the bundle."""
    data, qs, _ = _case(chip)
    bundle = xir.Bundle.CreateFromBuffer(data)
    k = bundle.names()[1]
    bundle.network(k).save(tmp_path / "member.json")
    net = xir.Network.CreateFromJsonFile(tmp_path / "member.json")
    net.loadParamsFromFile(tmp_path / "member.raw")
    assert chip.backend.QuerySize(net.view(0)) == chip.backend.QuerySize(bundle.network(k).view(0))
    x = x_of(qs[k], 12)
    alone, member = _session(chip, net), _session(chip, bundle.network(k))
    for u, v, w in zip(_out(alone, x), _out(member, x), host_ref(qs[k], x)):
        np.testing.assert_array_equal(u, v)
        np.testing.assert_array_equal(u, w)
    alone.close()
    member.close()


def test_members_share_a_chunk_over_the_socket(chip):
    data, qs, alone = _case(chip)
    srv = DeviceServer(Device.Open(f"sim://{chip.kind}"), close_device=True).start()
    host, port = srv.address
    dev = Device.Open(f"socket://{chip.kind}@{host}:{port}")
    try:
        bundle = xir.Bundle.CreateFromBuffer(data)
        ss, chunk = _shared(chip, bundle, dev)
        for k, s in ss.items():
            x = x_of(qs[k], 4)
            for u, v in zip(_out(s, x), host_ref(qs[k], x)):
                np.testing.assert_array_equal(u, v)
            assert s.backends[0].phy_segment_map[SegmentType.WEIGHT].single_chunk.memChunk \
                == chunk
        # one refresh through the first member, over the socket, reaches every member
        first = bundle.names()[0]
        ss[first].backends[0].refreshWeights(
            _source(bundle, first, _case(chip, seed=1)[2][first], shared_only=True))
        for k, s in ss.items():
            x = x_of(qs[k], 4)
            # local, from the member as it is
            fresh = _session(chip, copy_network(bundle.network(k)))
            for u, v in zip(_out(fresh, x), _out(s, x)):
                np.testing.assert_array_equal(u, v)
            fresh.close()
        late = _session(chip, bundle.network(bundle.names()[-1]), chunk, dev)  # joins after
        late.close()
        for s in ss.values():
            s.close()
        chunk.free()
    finally:
        dev.close()
        srv.shutdown()

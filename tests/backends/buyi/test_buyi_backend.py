"""BuyiBackend: bit-exact against the HostBackend integer reference (int8 / int16, MMU on / off),
and every Buyi semantic that differs from the ZG330Backend (ZG330Backend user guide,
"一 新增功能说明")."""

from __future__ import annotations

import tempfile

import numpy as np
import pytest
from buyi_testlib import compiled, host_ref, rand_x, run_buyi

from buyibackend import BuyiBackend, OcmTensor, SegmentType
from host_backend import HostBackend
from xrt import Device, HostDevice, Session, Tensor
from xrt.errors import CallOrderError, InvalidArgumentError, UnsupportedOpError
from zg330backend import OcmOpt, ZG330Backend


@pytest.mark.parametrize("speed", [False, True])
def test_mixed_precision_runs_per_precision(bdev, speed):
    """A mixed-precision network (int16 stem and island, int8 elsewhere) is bit-exact; with
    speedMode the merged runs never mix precisions, and the NPU's dtype is set per run."""
    q, z = compiled("tiny_cnn", quant={"input_bits": 16, "op_bits": {"branch1.conv": 16}})
    x = rand_x(q)
    ref = host_ref(q, x)
    s, got = run_buyi(z, bdev, x, configure=(lambda b: b.speedMode()) if speed else None)
    np.testing.assert_array_equal(ref[0], got[0])
    b = BuyiBackend(s.backends[0])
    keys = [r.key for r in b.deployment.runs]
    assert set(keys) == {8, 16}
    hard = {op.op_id: op for op in z.ops if op.op_type == "HardOp"}
    for r in b.deployment.runs:
        assert {b.run_key(hard[o]) for o in r.op_ids} == {r.key}
    if speed:
        assert len(b.deployment.runs) < len(hard)
    s.close()


@pytest.mark.parametrize("bits", [8, 16])
def test_tiny_cnn_bit_exact_and_bindings(bdev, bits):
    q, z = compiled("tiny_cnn", bits=bits)
    x = rand_x(q)
    ref = host_ref(q, x)
    s, got = run_buyi(z, bdev, x)
    np.testing.assert_array_equal(ref[0], got[0])
    binds = s.backendBindings()
    for op in z.ops:
        assert isinstance(binds[op.op_id], BuyiBackend) == (op.op_type == "HardOp")
        if op.op_type == "HardOp":
            assert op.compile_target == "@buyi"
    b = BuyiBackend(s.backends[0])
    assert b.precheck()
    assert bdev.dtype() == bits  # the runtime set the NPU's data type
    s.close()


@pytest.mark.parametrize("bits", [8, 16])
def test_mmu_off_relocates_instructions_with_identical_results(bdev, bits):
    q, z = compiled("tiny_cnn", bits=bits)
    x = rand_x(q)
    s_on, on = run_buyi(z, bdev, x)
    words_on = dict(s_on.backends[0].deployment.instr_words)
    bdev.mmuModeSwitch(False)
    s_off, off = run_buyi(z, bdev, x)
    b = s_off.backends[0]
    assert not b.mmu_mode and b.precheck()
    np.testing.assert_array_equal(on[0], off[0])
    np.testing.assert_array_equal(host_ref(q, x)[0], off[0])
    # the addresses in the instructions are now physical (ETM at 0x4000_0000), not logical
    assert any(not np.array_equal(words_on[k], b.deployment.instr_words[k]) for k in words_on)
    # switching the MMU back after apply is caught at the next run
    bdev.mmuModeSwitch(True)
    with pytest.raises(CallOrderError, match="MMU"):
        s_off.forward([x])


def test_merge_and_ftmp_reuse_off_by_default_and_switched_on(bdev):
    q, z = compiled("tiny_cnn")
    x = rand_x(q)
    s, base = run_buyi(z, bdev, x)
    b = s.backends[0]
    assert not b.is_mergeHardop and not b.is_etmOptimize
    hard = [op for op in z.ops if op.op_type == "HardOp"]
    assert len(b.deployment.runs) == len(hard)  # one icoreCalc per HardOp
    ftmp_plain = b.logic_segment_map[SegmentType.FTMP].byte_size

    def fast(bk):
        bk.speedMode()
        bk.compressFtmp()

    s2, got = run_buyi(z, bdev, x, configure=fast)
    b2 = s2.backends[0]
    assert b2.is_mergeHardop and b2.is_etmOptimize
    assert len(b2.deployment.runs) < len(hard)
    assert b2.logic_segment_map[SegmentType.FTMP].byte_size < ftmp_plain
    assert b2.etmTotalBytes() < b.etmTotalBytes()
    np.testing.assert_array_equal(base[0], got[0])
    with pytest.raises(CallOrderError):
        b2.speedMode()  # after apply


def test_no_ocm_option_and_zg330_options_refused(bdev):
    q, z = compiled("tiny_cnn")
    s = Session.Create([BuyiBackend, HostBackend], z.view(0), [bdev, HostDevice.Default()])
    b = s.backends[0]
    assert b.ocmopt == OcmOpt.NONE
    for name in ("ocmOptimize", "disableMergeHardOp", "disableEtmOptimize"):
        assert not hasattr(b, name)  # the Buyi exposes only its own vendor methods
        with pytest.raises(UnsupportedOpError, match=name):
            getattr(b, name)


def test_ocm_decided_by_the_compiled_network_and_ocm_tensors_not_dumpable(bdev):
    from buyibackend.lowering import adapt, lower

    q, _ = compiled("tiny_cnn")
    z = lower(adapt(q), {"ocm": 1})
    assert z.tags["buyi"]["ocm"] == 1
    x = rand_x(q)
    s, got = run_buyi(z, bdev, x)
    b = s.backends[0]
    assert b.ocmopt == OcmOpt.OPTION1 and any(vi.is_ocm for vi in b.value_info.values())
    np.testing.assert_array_equal(host_ref(q, x)[0], got[0])
    s.setDumpOutputs(True, tempfile.mkdtemp())
    with pytest.raises(UnsupportedOpError, match="OCM tensor"):
        s.forward([x])
    ocm_v = next(v for v, vi in b.value_info.items() if vi.is_ocm)
    t = b._forwarder.tensor_of(b.value_info[ocm_v].value, b)
    assert isinstance(t, OcmTensor)
    with pytest.raises(UnsupportedOpError):
        t.numpy()


def test_user_outputs_not_supported(bdev):
    q, z = compiled("tiny_cnn")
    x = rand_x(q)
    s, got = run_buyi(z, bdev, x)
    assert BuyiBackend.supports_user_outputs is False and ZG330Backend.supports_user_outputs
    # through the session: the results are copied into the caller's tensors
    out = Tensor(np.zeros_like(got[0]))
    assert s.forward([x], [out]) is None
    np.testing.assert_array_equal(np.asarray(out), got[0])
    # the backend itself refuses to write into caller-provided outputs
    hard = next(op for op in z.ops if op.op_type == "HardOp")
    with pytest.raises(UnsupportedOpError, match="caller-provided output"):
        s.backends[0].forwardHardOp(hard, [], [object()])


def test_connect_network_requires_the_io_order(bdev):
    q, z = compiled("tiny_cnn")
    s = Session.Create([BuyiBackend, HostBackend], z.view(0), [bdev, HostDevice.Default()])
    b = s.backends[0]
    outs = b.io_order(SegmentType.OUTPUT)
    ins = b.io_order(SegmentType.INPUT)
    assert ins and outs
    region = bdev.defaultMemRegion()
    chunk = region.malloc(1 << 20, True, 4096)
    if len(outs) > 1:
        with pytest.raises(InvalidArgumentError, match="order"):
            b.userConnectNetwork(chunk, outs[1])
    b.userConnectNetwork(chunk, ins[0])  # in order: accepted
    with pytest.raises(InvalidArgumentError, match="order"):
        b.userConnectNetwork(region.malloc(1 << 20, True, 4096), ins[0])  # twice: out of order
    x = rand_x(q)
    s.apply()
    got = [np.asarray(t).copy() for t in s.forward([x])]
    np.testing.assert_array_equal(host_ref(q, x)[0], got[0])


def test_only_buyi_hardops_and_devices_bind(bdev):
    from zg330backend.lowering import adapt, lower

    q, _ = compiled("tiny_cnn")
    zg = lower(adapt(q))
    hard = next(op for op in zg.ops if op.op_type == "HardOp")
    with pytest.raises(UnsupportedOpError, match="@buyi"):
        BuyiBackend().isOpSupported(hard)
    _, z = compiled("tiny_cnn")
    zdev = Device.Open("sim://zg330")
    with pytest.raises(Exception, match="device"):
        Session.Create([BuyiBackend, HostBackend], z.view(0), [zdev, HostDevice.Default()])
    with pytest.raises(Exception, match="device"):
        Session.Create([ZG330Backend, HostBackend], zg.view(0), [bdev, HostDevice.Default()])
    Device.Close(zdev)


@pytest.mark.parametrize("chip", ["buyi", "zg330"])
def test_converter_cast_is_lowered_and_runs_on_the_chip(bdev, chip):
    """An int8 -> int16 Cast (the data-type converter at a mixed-precision edge) between two
    layers is lowered into a HardOp: it runs through the hardware model, its cycles come from
    the cycle model, and the result equals the HostBackend's integer reference. Only the
    float <-> integer edge Casts stay on the host."""
    from xir.builder import NetworkBuilder
    from xir.types import INT8, INT16, QuantizedType, TensorType
    from xrt import Device

    shape = (1, 4, 4, 8)

    def q(storage, scale):
        return TensorType(QuantizedType(storage, [scale], [0]), shape, "NHWC")

    b = NetworkBuilder("cvt")
    x = b.input(shape)
    q8 = b.op("Cast", [x], out_types=[q(INT8, 0.05)])
    r8 = b.op("Relu", [q8], out_types=[q(INT8, 0.05)])
    q16 = b.op("Cast", [r8], out_types=[q(INT16, 0.001)])
    r16 = b.op("Relu", [q16], out_types=[q(INT16, 0.001)])
    b.output(b.op("Cast", [r16], out_types=[TensorType(x.dtype.element_dtype, shape, "NHWC")]))
    net = b.build()
    if chip == "buyi":
        from buyibackend.lowering import adapt, lower
        backend, dev = BuyiBackend, bdev
    else:
        from zg330backend import ZG330Backend
        from zg330backend.lowering import adapt, lower
        backend, dev = ZG330Backend, Device.Open("sim://zg330")
    z = lower(adapt(net))
    cast_id = q16.producer.op_id
    hard = [op for op in z.ops if op.op_type == "HardOp" and cast_id in op.origin_ops_id]
    assert hard and cast_id not in {op.op_id for op in z.ops if op.op_type == "Cast"}
    assert str(cast_id) not in z.tags[chip]["host_ops"]
    xin = np.random.default_rng(1).normal(size=shape).astype(np.float32)
    s = Session.Create([backend, HostBackend], z.view(0), [dev, HostDevice.Default()])
    s.enableTimeProfile(True)
    s.apply()
    got = [np.asarray(t).copy() for t in s.forward([xin])]
    np.testing.assert_array_equal(host_ref(net, xin)[0], got[0])
    prof = s.backends[0].profileInfo()
    assert prof[hard[0].op_id]["cycles"] > 0  # counted by the cycle model
    s.close()
    if chip == "zg330":
        dev.close()


@pytest.mark.slow
@pytest.mark.parametrize("name, kw", [("resnet18", {}), ("mobilenet_v2", {}),
                                      ("yolov5s", {"input_size": 320})])
@pytest.mark.parametrize("bits", [8, 16])
def test_zoo_bit_exact(bdev, name, kw, bits):
    q, z = compiled(name, bits=bits, **kw)
    x = rand_x(q)
    ref = host_ref(q, x)
    s, got = run_buyi(z, bdev, x)
    for a, b in zip(ref, got):
        np.testing.assert_array_equal(a, b)
    s.close()


def test_mmu_entries_limit_only_an_mmu_on_deployment():
    """With the MMU off the MMU table is not used, so a device with fewer entries than the
    network's buffers still deploys (the instructions hold physical addresses); with it on,
    the INPUT/OUTPUT buffers are packed into one entry per segment."""
    import dataclasses

    from buyibackend import BUYI_CONFIG, BuyiDevice

    q, z = compiled("yolov5s", input_size=160)
    x = rand_x(q)
    dev = BuyiDevice("sim://buyi", config=dataclasses.replace(BUYI_CONFIG, mmu_entries=4))
    try:
        s_on, on = run_buyi(z, dev, x)
        assert s_on.backends[0].deployment.packed_io and len(s_on.backends[0].deployment.mmu) == 4
        s_on.close()
        dev.mmuModeSwitch(False)
        s_off, off = run_buyi(z, dev, x)
        b = s_off.backends[0]
        assert not b.mmu_mode and not b.deployment.packed_io and len(b.deployment.mmu) > 4
        for a, c, r in zip(on, off, host_ref(q, x)):
            np.testing.assert_array_equal(a, r)
            np.testing.assert_array_equal(c, r)
        s_off.close()
    finally:
        dev.close()


@pytest.mark.parametrize("mmu,where", [(True, "sim"), (False, "sim"), (True, "socket"),
                                       (False, "socket")])
def test_manual_backend_create_on_the_whole_view(bdev, mmu, where):
    """The manual's direct construction, `Backend.Create(BuyiBackend, network.view(0),
    device)`, on a whole compiled network (Input/Cast/... included): the backend takes the
    HardOps, a Session over it and a HostBackend runs them bit-exactly, MMU on or off, on
    sim:// and through socket://."""
    from buyibackend import BuyiBackend
    from xrt import Backend, Device
    from xrt.remote.server import DeviceServer

    q, z = compiled("tiny_cnn")
    x = rand_x(q)
    srv = None
    if where == "socket":
        srv = DeviceServer(Device.Open("sim://buyi"), close_device=True).start()
        host_, port = srv.address
        bdev = Device.Open(f"socket://buyi@{host_}:{port}")
    bdev.mmuModeSwitch(mmu)
    try:
        backend = Backend.Create(BuyiBackend, z.view(0), bdev)
        assert {op.op_type for op in BuyiBackend(backend).network_view.ops} == {"HardOp"}
        host = Backend.Create(HostBackend, z.view(0), HostDevice.Default())
        sess = Session.CreateWithBackends(z.view(0), [backend, host])
        sess.apply()
        got = [np.asarray(t).copy() for t in sess.forward([x])]
        assert all(sess.backendBindings()[op.op_id] is backend
                   for op in z.ops if op.op_type == "HardOp")
        np.testing.assert_array_equal(got[0], host_ref(q, x)[0])
        sess.close()
    finally:
        bdev.mmuModeSwitch(True)
        if srv is not None:
            bdev.close()
            srv.shutdown()

"""The ZG330Backend manual's Python examples, nearly verbatim (sections 2.2.2 "构造ZG330Backend"
and 2.3.1 "userReuseSegment 内存复用"): a backend constructed directly on the whole compiled
network view takes its HardOps; a Session over it and a HostBackend then runs bit-exactly."""

from __future__ import annotations

import numpy as np
import pytest
from test_zg330_lowering_lib import compiled_zoo

import xir
from host_backend import HostBackend
from xrt import Backend, Device, HostDevice, Session
from xrt.errors import UnsupportedOpError
from zg330backend import SegmentType, ZG330Backend


@pytest.fixture(scope="module")
def served():
    """A device server on loopback: the manual's examples with a socket:// URL."""
    from xrt.remote.server import DeviceServer

    srv = DeviceServer(Device.Open("sim://zg330"), close_device=True).start()
    host, port = srv.address
    yield f"socket://zg330@{host}:{port}"
    srv.shutdown()


def _url(url, served):
    return served if url == "socket" else url


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    q, z = compiled_zoo("tiny_cnn")
    d = tmp_path_factory.mktemp("manual")
    z.save(str(d / "tiny_ZG.json"))
    x = np.random.default_rng(0).normal(size=q.inputs()[0].shape).astype(np.float32)
    return d, x


def _reference(network, device, x):
    s = Session.Create([ZG330Backend, HostBackend], network.view(0),
                       [device, HostDevice.Default()])
    s.apply()
    out = [np.asarray(t).copy() for t in s.forward([x])]
    s.close()
    return out


def _run_with(network, backend, x):
    host = Backend.Create(HostBackend, network.view(0), HostDevice.Default())
    sess = Session.CreateWithBackends(network.view(0), [backend, host])
    sess.apply()
    return [np.asarray(t).copy() for t in sess.forward([x])], sess


@pytest.mark.parametrize("url", ["sim://zg330", "socket"])
def test_manual_2_2_2_backend_create_on_the_whole_view(saved, served, url):
    d, x = saved
    device = Device.Open(_url(url, served))
    network = xir.Network.CreateFromJsonFile(str(d / "tiny_ZG.json"))
    network.loadParamsFromFile(str(d / "tiny_ZG.raw"))
    backend = Backend.Create(ZG330Backend, network.view(0), device)
    zg330_backend = ZG330Backend(backend)
    assert {op.op_type for op in zg330_backend.network_view.ops} == {"HardOp"}
    got, sess = _run_with(network, backend, x)
    assert all(sess.backendBindings()[op.op_id] is backend
               for op in network.ops if op.op_type == "HardOp")
    for a, b in zip(got, _reference(network, device, x)):
        np.testing.assert_array_equal(a, b)
    sess.close()
    device.close()


@pytest.mark.parametrize("url", ["sim://zg330", "mock://zg330", "socket"])
def test_manual_2_3_1_user_reuse_segment(saved, served, url):
    d, x = saved
    device = Device.Open(_url(url, served))
    network = xir.Network.CreateFromJsonFile(str(d / "tiny_ZG.json"))
    network.loadParamsFromFile(str(d / "tiny_ZG.raw"))
    backend1 = Backend.Create(ZG330Backend, network.view(0), device)
    backend2 = Backend.Create(ZG330Backend, network.view(0), device)
    zg330_backend1 = ZG330Backend(backend1)
    zg330_backend2 = ZG330Backend(backend2)
    instr_bytesize = zg330_backend1.logic_segment_map[SegmentType.INSTR].byte_size
    weight_bytesize = zg330_backend1.logic_segment_map[SegmentType.WEIGHT].byte_size
    ftmp_bytesize = zg330_backend1.logic_segment_map[SegmentType.FTMP].byte_size
    weight_chunk = device.defaultMemRegion().malloc(weight_bytesize, True, 4096)
    instr_chunk = device.defaultMemRegion().malloc(instr_bytesize, True, 4096)
    ftmp_chunk = device.defaultMemRegion().malloc(ftmp_bytesize, True, 4096)
    zg330_backend1.userReuseSegment(weight_chunk, SegmentType.WEIGHT)
    zg330_backend2.userReuseSegment(weight_chunk, SegmentType.WEIGHT)
    zg330_backend1.userReuseSegment(instr_chunk, SegmentType.INSTR)
    zg330_backend2.userReuseSegment(instr_chunk, SegmentType.INSTR)
    zg330_backend1.userReuseSegment(ftmp_chunk, SegmentType.FTMP)
    zg330_backend2.userReuseSegment(ftmp_chunk, SegmentType.FTMP)
    backend1.apply()
    backend2.apply()
    for b in (zg330_backend1, zg330_backend2):
        assert b.phy_segment_map[SegmentType.WEIGHT].single_chunk.memChunk.addr == \
            weight_chunk.addr
    if not url.startswith("mock"):
        want = _reference(network, device, x)
        for backend in (backend1, backend2):
            got, sess = _run_with(network, backend, x)
            for a, b in zip(got, want):
                np.testing.assert_array_equal(a, b)
    for b in (backend1, backend2):
        b.deinit()
    device.close()


def test_a_view_without_hardops_is_refused(saved):
    q, _ = compiled_zoo("tiny_cnn")
    device = Device.Open("sim://zg330")
    with pytest.raises(UnsupportedOpError, match="no HardOp"):
        Backend.Create(ZG330Backend, q.view(0), device)
    device.close()

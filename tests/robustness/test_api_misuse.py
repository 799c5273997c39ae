"""Public API misuse: every argument of the runtime's user-facing calls, replaced in turn by a
hostile value (None, a float, a string, a huge or negative integer, NaN, a list, an object),
either works or raises a project error (xrt.XrtError / xir.XirError) -- never a TypeError,
OverflowError, AttributeError, a silent truncation or a crash.

Each row of CALLS is a call with good arguments; the test checks that the good call works, then
runs every (argument, hostile value) pair. The count and the escapes are printed.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from mutation import Outcomes

import xrt
from xrt import Device, MemPtr, Session, Tensor

pytest.importorskip("zg330backend")

HOSTILE = [None, -1, 2**70, 2.5, float("nan"), "a", "", b"x", [], [1, 2], {}, True,
           np.float32(1.0), object(), np.zeros(3, np.uint8)]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from host_backend import HostBackend
    from xcompile import zoo

    tmp = tmp_path_factory.mktemp("misuse")
    cwd = os.getcwd()
    os.chdir(tmp)  # hostile paths ('a', '') land in the test's folder
    dev = Device.Open("sim://zg330")
    host = Device.Open("host://")
    region = dev.defaultMemRegion()
    chunk = region.malloc(4096, True, 64)
    other = region.malloc(4096, True, 64)
    net = zoo.build("tiny_cnn")
    sess = Session.Create([HostBackend], net.view(0), [host])
    sess.apply()
    x = np.zeros(net.inputs()[0].shape, np.float32)
    w = {"dev": dev, "host": host, "region": region, "chunk": chunk, "other": other,
         "net": net, "sess": sess, "x": x, "tmp": tmp, "HostBackend": HostBackend}
    yield w
    sess.close()
    dev.close()
    host.close()
    os.chdir(cwd)


def _calls(w) -> list[tuple[str, object, list]]:
    c, r, s = w["chunk"], w["region"], w["sess"]
    buf = np.zeros(64, np.uint8)
    snap = os.fspath(w["tmp"] / "s.snap")
    return [
        ("MemRegion.malloc", r.malloc, [64, True, 64]),
        ("Device.malloc", lambda n, a: w["dev"].malloc(n, alignment=a), [64, 64]),
        ("MemChunk.fill", c.fill, [7, 0, 64]),
        ("MemChunk.write", c.write, [0, buf, 64]),
        ("MemChunk.read", c.read, [buf, 0, 64]),
        ("MemChunk.copyFrom", c.copyFrom, [0, w["other"], 0, 64]),
        ("MemChunk.view", c.view, [0, 64]),
        ("MemPtr", MemPtr, [4096]),
        ("Device.Open", Device.Open, ["sim://zg330"]),
        ("Device.readReg", w["dev"].readReg, [0x9000_0000]),
        ("Device.setWaitTime", w["dev"].setWaitTime, [1000]),
        ("Device.getMemRegion", w["dev"].getMemRegion, ["etm"]),
        ("Tensor", lambda a, lay: Tensor(a, lay), [w["x"], "NHWC"]),
        ("Session.Create", lambda t, n, d: Session.Create(t, n, d),
         [[w["HostBackend"]], w["net"].view(0), [w["host"]]]),
        ("Session.forward", s.forward, [[w["x"]]]),
        ("Session.enableTimeProfile", s.enableTimeProfile, [True]),
        ("Session.setDumpOutputs", s.setDumpOutputs, [False, "", "SFB"]),
        ("Session.dumpSnapshot", s.dumpSnapshot, [snap]),
        ("Session.sub", s.sub, [0, 3]),
        ("Session.clone", s.clone, [1]),
    ]


def _close(result) -> None:
    for obj in result if isinstance(result, (list, tuple)) else [result]:
        if isinstance(obj, Device) and obj.is_open:
            obj.close()
        elif isinstance(obj, Session):
            obj.close()


def test_good_calls_work(world):
    for name, fn, args in _calls(world):
        _close(fn(*args)), name


def test_hostile_arguments_raise_project_errors(world):
    out = Outcomes()
    for name, fn, args in _calls(world):
        for k in range(len(args)):
            for bad in HOSTILE:
                call = list(args)
                call[k] = bad
                out.run(lambda fn=fn, call=call: _close(fn(*call)), f"{name} arg {k} = {bad!r}")
    print("\n" + out.report())
    assert not out.escapes, out.report()
    assert out.refused > out.accepted


def test_the_reported_misuses_are_refused(world):
    """The cases found from outside, one by one, with the argument named."""
    c, r = world["chunk"], world["region"]
    with pytest.raises(xrt.InvalidArgumentError, match="fill value is 300"):
        c.fill(300)
    with pytest.raises(xrt.InvalidArgumentError, match="fill value must be an integer"):
        c.fill("a")
    with pytest.raises(xrt.InvalidArgumentError, match="alignment must be an integer"):
        r.malloc(64, True, None)
    with pytest.raises(xrt.InvalidArgumentError, match="alignment must be an integer"):
        r.malloc(64, True, 2.5)
    with pytest.raises(xrt.InvalidArgumentError, match="write offset"):
        c.write(None, np.zeros(4, np.uint8))
    with pytest.raises(xrt.InvalidArgumentError, match="Session.Create: the network"):
        Session.Create([world["HostBackend"]], None, [world["host"]])
    missing = world["tmp"] / "no" / "such" / "a.snap"
    with pytest.raises(xrt.SnapshotError, match=f"'{missing}'") as info:
        world["sess"].dumpSnapshot(missing)
    assert ".tmp" not in str(info.value)
    with pytest.raises(xrt.TensorError, match="laid out NHWC, the tensor says NCHW"):
        world["sess"].forward([Tensor(world["x"], "NCHW")])
    world["sess"].forward([Tensor(world["x"], "NHWC")])  # the right layout, or none, runs


def test_a_closed_session_refuses_to_run_and_holds_no_device_memory(world):
    from xcompile import zoo
    from xcompile.quant.quantize import quantize_network
    from zg330backend import ZG330Backend
    from zg330backend.lowering import adapt, lower

    q = quantize_network(zoo.build("tiny_cnn"), zoo.calibration_set("tiny_cnn", count=2),
                         bits=8, method="minmax", weight_rounding="nearest")
    z = lower(adapt(q))
    with Device.Open("sim://zg330") as d:
        s = Session.Create([ZG330Backend, world["HostBackend"]], z.view(0), [d, world["host"]])
        s.apply()
        s.forward([world["x"]])
        backend = s.backends[0]
        s.close()
        assert d.defaultMemRegion().used_bytes == 0  # at once, not when the GC runs
        with pytest.raises(xrt.CallOrderError, match="after close"):
            s.forward([world["x"]])
        hard = next(op for op in z.ops if op.op_type == "HardOp")
        with pytest.raises(xrt.CallOrderError, match="after deinit"):
            backend.forwardHardOp(hard, [], [])

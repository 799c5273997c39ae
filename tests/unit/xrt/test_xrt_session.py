"""Session: binding by priority, forward, stepTo, sub, callbacks, dumps, profiles, misuse."""

from __future__ import annotations

import io
import os

import numpy as np
import pytest

import xir
from host_backend import HostBackend
from xrt import (
    Backend,
    CallOrderError,
    HostDevice,
    Session,
    Tensor,
    TensorError,
    UnsupportedOpError,
)


def reference(net: xir.Network, x: np.ndarray) -> np.ndarray:
    """The small_cnn forward computed directly in numpy (NHWC)."""
    conv = net.ops[1]
    w, b = conv.inputs[1].data, conv.inputs[2].data
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    y = np.zeros((1, 8, 8, 4), np.float64)
    for i in range(3):
        for j in range(3):
            y += np.einsum("nhwc,co->nhwo", xp[:, i:i + 8, j:j + 8, :], w[i, j])
    y = np.maximum(y + b, 0)
    p = y.reshape(1, 4, 2, 4, 2, 4).max(axis=(2, 4))
    z = np.concatenate([p[..., 1:], p[..., :1]], axis=-1)
    return z.mean(axis=(1, 2)).reshape(1, -1)


def host_session(net, **kw) -> Session:
    sess = Session.Create([HostBackend], net.view(0), [HostDevice.Default()], **kw)
    sess.apply()
    return sess


def test_forward_matches_numpy_reference(cnn, rng):
    x = rng.standard_normal((1, 8, 8, 3)).astype(np.float32)
    out = host_session(cnn).forward([Tensor(x)])
    assert len(out) == 1
    np.testing.assert_allclose(np.asarray(out[0]), reference(cnn, x), rtol=1e-5, atol=1e-6)


def test_forward_accepts_numpy_arrays_and_checks_them(cnn, rng):
    sess = host_session(cnn)
    x = rng.standard_normal((1, 8, 8, 3)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(sess.forward([x])[0]), reference(cnn, x), rtol=1e-5,
                               atol=1e-6)
    with pytest.raises(TensorError, match=r"shape \[1, 8, 8, 3\]"):
        sess.forward([np.zeros((1, 8, 8, 4), np.float32)])
    with pytest.raises(TensorError, match="float32"):
        sess.forward([np.zeros((1, 8, 8, 3), np.float64)])
    with pytest.raises(TensorError, match="takes 1 inputs"):
        sess.forward([])


def test_forward_before_apply_and_apply_twice(cnn):
    sess = Session.Create([HostBackend], cnn.view(0), [HostDevice.Default()])
    with pytest.raises(CallOrderError, match="apply"):
        sess.forward([np.zeros((1, 8, 8, 3), np.float32)])
    sess.apply()
    with pytest.raises(CallOrderError, match="already"):
        sess.apply()


def test_caller_allocated_outputs(cnn, rng):
    x = rng.standard_normal((1, 8, 8, 3)).astype(np.float32)
    sess = host_session(cnn)
    out = Tensor(np.zeros((1, 4), np.float32))
    assert sess.forward([x], [out]) is None
    np.testing.assert_allclose(np.asarray(out), reference(cnn, x), rtol=1e-5, atol=1e-6)


class ReluOnly(Backend):
    """A third backend type that runs Relu only."""

    name = "ReluOnly"

    @staticmethod
    def _relu(op, inputs, outputs, backend):
        return [Tensor(np.maximum(np.asarray(inputs[0]), 0))]

    FORWARDS = {"Relu": _relu}


def test_binding_by_priority_and_strict_mode(cnn):
    host = HostDevice.Default()
    sess = Session.Create([ReluOnly, HostBackend], cnn.view(0), [host, host])
    kinds = {op.op_type: type(b).__name__ for op in cnn.ops
             for oid, b in sess.backendBindings().items() if oid == op.op_id}
    assert kinds["Relu"] == "ReluOnly"
    assert kinds["Conv2d"] == "HostBackend"
    assert [op.op_type for op in sess.backends[0].network_view.ops] == ["Relu"]
    with pytest.raises(UnsupportedOpError, match="falls back"):
        Session.Create([ReluOnly, HostBackend], cnn.view(0), [host, host], strict=True)
    with pytest.raises(UnsupportedOpError, match="tried ReluOnly"):
        Session.Create([ReluOnly], cnn.view(0), [host])


def test_step_to_remembers_position_and_sub_shares_backends(cnn, rng):
    x = rng.standard_normal((1, 8, 8, 3)).astype(np.float32)
    sess = host_session(cnn)
    relu_id, pool_id = cnn.ops[2].op_id, cnn.ops[3].op_id
    (r,) = sess.stepTo(relu_id, [x])
    assert (np.asarray(r) >= 0).all() and r.shape == (1, 8, 8, 4)
    (p,) = sess.stepTo(pool_id)  # continues from the relu, no inputs needed
    np.testing.assert_array_equal(np.asarray(p),
                                  np.asarray(r).reshape(1, 4, 2, 4, 2, 4).max(axis=(2, 4)))
    tail = sess.sub(3)
    assert tail.backends[0] is sess.backends[0]
    assert [op.op_id for op in tail.network_view.ops] == [op.op_id for op in cnn.ops[3:]]
    out = tail.forward([r])
    np.testing.assert_allclose(np.asarray(out[0]), reference(cnn, x), rtol=1e-5, atol=1e-6)


def test_callbacks_profile_and_log(cnn, rng, capsys):
    seen = []
    sess = host_session(cnn)
    sess.setPreCallBack(lambda s, op, b, ins: seen.append(("pre", op.op_type, len(ins))))
    sess.setPostCallBack(lambda s, op, b, outs: seen.append(("post", op.op_type, len(outs))))
    sess.enableTimeProfile(True)
    sess.setLogTime(True)
    sess.forward([rng.standard_normal((1, 8, 8, 3)).astype(np.float32)])
    assert ("pre", "Conv2d", 1) in seen and ("post", "Split", 2) in seen
    prof = sess.timeProfileResults()
    assert set(prof) == {op.op_id for op in cnn.ops}
    for wall, memcpy, hard, other in prof.values():
        assert wall >= 0 and memcpy >= 0 and hard == 0 and other >= 0
        assert abs(wall - memcpy - hard - other) < 1e-6
    assert sess.totalTime() >= sum(p[0] for p in prof.values()) * 0.5
    assert "Conv2d" in capsys.readouterr().out


def test_dump_outputs_formats(cnn, rng, tmp_path):
    sess = host_session(cnn)
    sess.setDumpOutputs(True, str(tmp_path), "SFT")
    sess.forward([rng.standard_normal((1, 8, 8, 3)).astype(np.float32)])
    files = sorted(os.listdir(tmp_path))
    assert len(files) == sum(len(op.outputs) for op in cnn.ops)
    conv_out = cnn.ops[1].outputs[0]
    text = (tmp_path / f"{conv_out.v_id}.SFT").read_text().split()
    assert len(text) == conv_out.dtype.numel()
    with pytest.raises(Exception, match="three letters"):
        sess.setDumpOutputs(True, str(tmp_path), "XYZ")


def test_tensor_moves_between_regions_count_as_memcpy(cnn, rng):
    """A backend whose memory is a separate region forces Tensor.to, timed as memcpy."""
    from xrt.memory import MemRegion

    class FarRelu(ReluOnly):
        name = "FarRelu"
        region = None

        def memRegion(self):
            if FarRelu.region is None:
                FarRelu.region = MemRegion("far", HostDevice.Default(), 0x1000, 1 << 20)
            return FarRelu.region

        @staticmethod
        def _relu(op, inputs, outputs, backend):
            assert inputs[0].isOn(backend.memRegion())
            out = Tensor(inputs[0].dtype()).mallocOn(backend.memRegion())
            np.asarray(out)[...] = np.maximum(np.asarray(inputs[0]), 0)
            return [out]

        FORWARDS = {"Relu": _relu}

    host = HostDevice.Default()
    sess = Session.Create([FarRelu, HostBackend], cnn.view(0), [host, host])
    sess.apply()
    sess.enableTimeProfile(True)
    x = rng.standard_normal((1, 8, 8, 3)).astype(np.float32)
    out = sess.forward([x])
    np.testing.assert_allclose(np.asarray(out[0]), reference(cnn, x), rtol=1e-5, atol=1e-6)
    prof = sess.timeProfileResults()
    relu_id, pool_id = cnn.ops[2].op_id, cnn.ops[3].op_id
    assert prof[relu_id][1] > 0  # moved onto the far region
    assert prof[pool_id][1] > 0  # and back to host memory


def test_tensor_dump_rejects_illegal_conversions():
    t = Tensor(np.ones((2, 2), np.float32))
    buf = io.BytesIO()
    t.dump(buf, "SFB")
    assert buf.getvalue() == np.ones((2, 2), np.float32).tobytes()
    with pytest.raises(Exception, match="only H->S"):
        t.dump(io.BytesIO(), "HFB")
    with pytest.raises(Exception, match="only Q->F"):
        t.dump(io.BytesIO(), "SQB")


def test_tensor_dump_to_an_unwritable_target_raises_a_project_error(tmp_path):
    from xrt import DumpTargetError, XrtError

    t = Tensor(np.ones((2, 2), np.float32))
    closed = open(tmp_path / "t.bin", "wb")  # noqa: SIM115 - closed on purpose
    closed.close()
    with pytest.raises(DumpTargetError, match="t.bin") as err:
        t.dump(closed, "SFB")
    assert isinstance(err.value, XrtError) and isinstance(err.value, OSError)
    with open(tmp_path / "t.bin", "rb") as read_only, pytest.raises(DumpTargetError):
        t.dump(read_only, "SFT")
    with pytest.raises(DumpTargetError, match="StringIO"):
        t.dump(io.StringIO(), "SFB")  # a text stream


def test_tensor_dump_untiles_and_dequantizes():
    q = np.arange(2 * 3 * 16, dtype=np.int64).astype(np.int8).reshape(1, 2, 1, 3, 16)
    ttype = xir.TensorType(xir.QuantizedType(xir.INT8, 0.5), q.shape, "NCHWc16")
    t = Tensor(q, ttype)
    buf = io.BytesIO()
    t.dump(buf, "SFB")
    got = np.frombuffer(buf.getvalue(), np.float32).reshape(1, 32, 1, 3)
    want = np.concatenate([q[:, 0], q[:, 1]], axis=-1).transpose(0, 3, 1, 2) * 0.5
    np.testing.assert_array_equal(got, want)
    raw = io.BytesIO()
    t.dump(raw, "")  # natural format: HQB
    assert raw.getvalue() == q.tobytes()


def test_profile_is_recorded_only_when_enabled(cnn, rng):
    """Decided (README, "Using it the vendor's way"): without enableTimeProfile(True) nothing
    is measured per op and timeProfileResults() is empty; totalTime() is always measured."""
    sess = host_session(cnn)
    x = rng.standard_normal((1, 8, 8, 3)).astype(np.float32)
    sess.forward([x])
    assert sess.timeProfileResults() == {} and sess.totalTime() > 0
    sess.enableTimeProfile(True)
    sess.forward([x])
    assert set(sess.timeProfileResults()) == {op.op_id for op in cnn.ops}


def test_session_clone(cnn, rng):
    """clone() shares the deployed backends and keeps its own values and profile; a deep clone
    copies the backends, before apply only."""
    sess = host_session(cnn)
    twin = sess.clone()
    assert isinstance(twin, Session) and twin is not sess
    assert twin.backends == sess.backends and twin.backends[0] is sess.backends[0]
    x = rng.standard_normal((1, 8, 8, 3)).astype(np.float32)
    a, b = np.asarray(sess.forward([x])[0]), np.asarray(twin.forward([x * 2])[0])
    np.testing.assert_allclose(a, reference(cnn, x), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b, reference(cnn, x * 2), rtol=1e-5, atol=1e-6)
    with pytest.raises(CallOrderError, match="before apply"):
        sess.clone(2)
    fresh = Session.Create([HostBackend], cnn.view(0), [HostDevice.Default()])
    deep = fresh.clone(2)
    assert deep.backends[0] is not fresh.backends[0]
    assert deep.backends[0].device is fresh.backends[0].device
    deep.apply()
    np.testing.assert_allclose(np.asarray(deep.forward([x])[0]), a, rtol=1e-6)
    assert not fresh.backends[0].is_applied


def test_ptrtype_name_is_a_property_on_the_class_too():
    from xrt import PtrType

    assert PtrType.name is not None  # vendor: `property name` of the pybind11 enum class
    assert PtrType.ADDR.name == "ADDR" and PtrType(2) is PtrType.BOTH


def test_align_and_prune_that_change_nothing_pass_their_input_on(rng):
    """The AlignAxis/PruneAxis the NPU targets put around every Cast cost nothing on the host
    when the channels are already aligned (the input array is the result); one that pads or
    cuts still does."""
    b = xir.NetworkBuilder("align_prune")
    x = b.input([1, 4, 4, 32], layout="NHWC")
    same = b.op("PruneAxis", [b.op("AlignAxis", [x], align_unit=16, axis=-1)], size=32,
                axis=-1)
    padded = b.op("AlignAxis", [same], align_unit=64, axis=-1)
    b.output(same, b.op("PruneAxis", [padded], size=20, axis=-1))
    sess = host_session(b.build())
    data = rng.standard_normal((1, 4, 4, 32)).astype(np.float32)
    whole, cut = (np.asarray(t) for t in sess.forward([Tensor(data)]))
    assert np.shares_memory(whole, data)
    np.testing.assert_array_equal(whole, data)
    assert cut.shape == (1, 4, 4, 20) and not np.shares_memory(cut, data)
    np.testing.assert_array_equal(cut, data[..., :20])

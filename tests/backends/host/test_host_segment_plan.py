"""The HostBackend's segment plan (`HostBackend.forwardSegment`): each op's forward function
and value ids found once, a network's edge Casts (one-scale quantize / dequantize of an
untiled map) straight on `cast.edge_cast` -- the same bytes as the op-by-op path and as
`cast.cast`, the general path where the array does not fit, the same errors."""

from __future__ import annotations

import numpy as np
import pytest

from host_backend import HostBackend
from host_backend.ops import cast as cast_mod
from xir import NetworkBuilder
from xir.types import QuantizedType, ScalarType, TensorType
from xrt import HostDevice, Session, Tensor
from xrt.errors import XrtError

SHAPE = [1, 64, 128]
FP32 = ScalarType("fp", 32)


def _qtype(bits: int, scale: float, shape=SHAPE) -> TensorType:
    return TensorType(QuantizedType(ScalarType("sint", bits), scale=scale), shape)


def _net(bits: int = 16, scale: float = 0.00026):
    """Input -> AlignAxis -> Cast (quantize) -> Relu -> Cast (dequantize) -> Output, as a
    compiled network's host edges around its chip segment."""
    b = NetworkBuilder("edges")
    x = b.input(SHAPE)
    a = b.op("AlignAxis", [x], out_types=[TensorType(FP32, SHAPE)], axis=2, align_unit=1)
    q = b.op("Cast", [a], out_types=[_qtype(bits, scale)])
    r = b.op("Relu", [q])
    f = b.op("Cast", [r], out_types=[TensorType(FP32, SHAPE)])
    b.output(f)
    return b.build()


def _session(net):
    s = Session.Create([HostBackend], net.view(0), [HostDevice.Default()])
    s.apply()
    return s


@pytest.fixture
def general_casts(monkeypatch):
    """Counts the Casts that took `cast.cast` (the general path)."""
    seen = []
    real = cast_mod.cast

    def spy(*args, **kwargs):
        seen.append(1)
        return real(*args, **kwargs)

    from host_backend import ops

    monkeypatch.setitem(ops.INT_KERNELS, "Cast", spy)
    return seen


@pytest.mark.parametrize("bits", [8, 16])
def test_edge_casts_run_without_the_general_path_and_give_its_bytes(bits, general_casts):
    scale = 0.00026 if bits == 16 else 0.03
    net = _net(bits, scale)
    ft, qt = TensorType(FP32, SHAPE), _qtype(bits, scale)
    rng = np.random.default_rng(bits)
    s = _session(net)
    for _ in range(3):
        x = (rng.normal(0, 3, SHAPE)).astype(np.float32)
        x.reshape(-1)[:5] = [np.inf, -np.inf, 0.5 * scale, -0.0, 1e30]
        (got,) = [t.numpy() for t in s.forward([Tensor(x)])]
        assert not general_casts
        (q,) = cast_mod.cast([x], {}, [ft], [qt])
        (ref,) = cast_mod.cast([np.maximum(q, 0)], {}, [qt], [ft])
        assert got.dtype == np.float32 and got.tobytes() == ref.tobytes()


def test_fake_qf_casts_take_the_general_path(general_casts):
    net = _net()
    host = HostBackend()
    host.setFakeQf(True)
    s = Session.Create([host], net.view(0), [HostDevice.Default()])
    s.apply()
    x = np.random.default_rng(2).normal(0, 3, SHAPE).astype(np.float32)
    (got,) = [t.numpy() for t in s.forward([Tensor(x)])]
    assert len(general_casts) == 2
    np.testing.assert_allclose(got, np.maximum(x, 0), rtol=1e-6)  # no rounding in fakeQf


def test_edge_cast_is_the_general_casts_function():
    ft, qt = TensorType(FP32, SHAPE), _qtype(16, 0.0003)
    q_of = cast_mod.edge_cast(ft, qt)
    f_of = cast_mod.edge_cast(qt, ft)
    x = np.random.default_rng(1).normal(0, 5, SHAPE).astype(np.float32)
    q = q_of(x)
    assert q.dtype == np.int16 and q.flags.c_contiguous
    assert q.tobytes() == cast_mod.cast([x], {}, [ft], [qt])[0].tobytes()
    assert f_of(q).tobytes() == cast_mod.cast([q], {}, [qt], [ft])[0].tobytes()
    assert q_of(x[..., :7]) is None  # not the type's map: the general path decides
    # a per-channel scale or a quantized -> quantized Cast is no edge Cast
    per_axis = TensorType(QuantizedType(ScalarType("sint", 8), scale=np.full(128, 0.1),
                                        axis=2), SHAPE)
    assert cast_mod.edge_cast(ft, per_axis) is None
    assert cast_mod.edge_cast(qt, _qtype(8, 0.1)) is None


def test_a_nan_is_refused_on_the_planned_path_as_on_the_general_one():
    s = _session(_net())
    x = np.zeros(SHAPE, dtype=np.float32)
    x[0, 3, 5] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        cast_mod.cast([x], {}, [TensorType(FP32, SHAPE)], [_qtype(16, 0.00026)])
    with pytest.raises(ValueError, match="NaN"):
        s.forward([Tensor(x)])


def test_a_missing_value_is_named_on_the_planned_path():
    net = _net()
    host = HostBackend()
    host.init(net.view(0), HostDevice.Default())
    host.apply()
    ops = tuple(op for op in net.view(0).ops if op.op_type not in ("Input", "Output"))
    relu = ops[2]
    with pytest.raises(XrtError, match=f"op {ops[0].op_id} \\(AlignAxis\\) reads value"):
        host.forwardSegment(ops, {}, (ops[-1].outputs[0].v_id,))
    with pytest.raises(XrtError, match=f"op {relu.op_id} \\(Relu\\) reads value"):
        host.forwardSegment(ops[2:], {}, (ops[-1].outputs[0].v_id,))


def test_a_list_of_ops_runs_as_the_tuple_does():
    net = _net()
    host = HostBackend()
    host.init(net.view(0), HostDevice.Default())
    host.apply()
    ops = [op for op in net.view(0).ops if op.op_type not in ("Input", "Output")]
    x = np.random.default_rng(4).normal(0, 2, SHAPE).astype(np.float32)
    feeds = {ops[0].inputs[0].v_id: Tensor(x)}
    want = (ops[-1].outputs[0].v_id,)
    (a,) = host.forwardSegment(ops, feeds, want)
    (b,) = host.forwardSegment(tuple(ops), feeds, want)
    assert a.numpy().tobytes() == b.numpy().tobytes()

"""xir.ops.reduce and xir.ops.index: shapes, element types, attribute checks, json + raw."""

from __future__ import annotations

import numpy as np
import pytest
from op_family_nets import reduce_index_net as build_net

import xir
from xir import INT8, INT64, QuantizedType, TensorType
from xir.errors import FieldTypeError, ShapeMismatchError
from xir.ops.base import OP_REGISTRY
from xir.serialize import load_network, save_network
from xir.types import ScalarType
from xir.values import Value

REDUCE_INDEX_OPS = {"Reduce", "ArgReduce", "TopK", "CumSum", "CumProd", "Hardmax", "LogSoftmax",
                    "Expand", "Tile", "Gather", "GatherElements", "GatherND", "ScatterElements",
                    "ScatterND", "OneHot", "Range", "Trilu", "ReverseSequence", "Convert",
                    "Col2Im"}


def val(shape, dtype=np.float32) -> Value:
    return Value(0, TensorType(dtype, shape))


def types(op_type: str, ins: list[Value], **attrs) -> list[TensorType]:
    return OP_REGISTRY[op_type](ins, [], **attrs).infer_types([v.dtype for v in ins])


def shapes(op_type: str, ins: list[Value], **attrs) -> list[tuple[int, ...]]:
    return [t.shape for t in types(op_type, ins, **attrs)]


def test_every_op_is_registered():
    assert REDUCE_INDEX_OPS <= set(xir.OP_REGISTRY)


@pytest.mark.parametrize("axes, keep, want", [
    ([1], True, (2, 1, 4)), ([1], False, (2, 4)), ([-1, 0], False, (3,)),
    ([], True, (1, 1, 1)), ([], False, ()),
])
def test_reduce_shapes(axes, keep, want):
    assert shapes("Reduce", [val((2, 3, 4))], func="sum", axes=axes, keepdims=keep) == [want]


def test_reduce_keeps_the_element_type_and_refuses_bad_attributes():
    assert types("Reduce", [val((2, 3), np.int32)], func="max", axes=[0])[0].element_dtype == \
        ScalarType("sint", 32)
    with pytest.raises(FieldTypeError, match="func"):
        OP_REGISTRY["Reduce"]([val((2,))], [], func="median")
    with pytest.raises(ShapeMismatchError, match="out of range"):
        shapes("Reduce", [val((2, 3))], func="sum", axes=[2])
    with pytest.raises(ShapeMismatchError, match="repeated"):
        shapes("Reduce", [val((2, 3))], func="sum", axes=[1, -1])


def test_arg_reduce_and_topk_give_int64_indices():
    t = types("ArgReduce", [val((2, 5, 3))], func="max", axis=1, keepdims=False)
    assert t[0].shape == (2, 3) and t[0].element_dtype == INT64
    v, i = types("TopK", [val((2, 5, 3), np.float16)], k=2, axis=1)
    assert v.shape == i.shape == (2, 2, 3)
    assert v.element_dtype == ScalarType("fp", 16) and i.element_dtype == INT64
    with pytest.raises(ShapeMismatchError, match="k = 6"):
        shapes("TopK", [val((2, 5))], k=6, axis=1)
    with pytest.raises(ShapeMismatchError, match="empty"):
        shapes("ArgReduce", [val((2, 0))], func="min", axis=1)
    with pytest.raises(FieldTypeError):
        OP_REGISTRY["ArgReduce"]([val((2,))], [], func="mean")


def test_gathers_and_scatters_shapes():
    i64 = np.int64
    assert shapes("Gather", [val((5, 4, 3)), val((2, 6), i64)], axis=1) == [(5, 2, 6, 3)]
    assert shapes("Gather", [val((5, 4)), val((), i64)], axis=0) == [(4,)]
    assert shapes("GatherElements", [val((3, 4)), val((2, 4), i64)], axis=0) == [(2, 4)]
    assert shapes("GatherND", [val((2, 3, 4)), val((2, 5, 1), i64)], batch_dims=1) == \
        [(2, 5, 4)]
    assert shapes("GatherND", [val((2, 3, 4)), val((7, 3), i64)]) == [(7,)]
    assert shapes("ScatterElements", [val((3, 4)), val((2, 4), i64), val((2, 4))],
                  axis=0, reduction="add") == [(3, 4)]
    assert shapes("ScatterND", [val((4, 5)), val((3, 1), i64), val((3, 5))]) == [(4, 5)]
    with pytest.raises(ShapeMismatchError, match="integer"):
        types("Gather", [val((5,)), val((2,))])
    with pytest.raises(ShapeMismatchError, match="updates"):
        shapes("ScatterND", [val((4, 5)), val((3, 1), i64), val((3, 4))])
    with pytest.raises(FieldTypeError, match="reduction"):
        OP_REGISTRY["ScatterND"]([], [], reduction="mean")


def test_shape_ops():
    assert shapes("Expand", [val((3, 1))], shape=[2, 1, 4]) == [(2, 3, 4)]
    with pytest.raises(ShapeMismatchError, match="broadcast"):
        shapes("Expand", [val((3, 2))], shape=[4])
    assert shapes("Tile", [val((2, 3))], repeats=[2, 0]) == [(4, 0)]
    oh = types("OneHot", [val((2, 3), np.int64), val((2,), np.int32)], depth=5, axis=1)
    assert oh[0].shape == (2, 5, 3) and oh[0].element_dtype == ScalarType("sint", 32)
    assert shapes("Range", [val(()), val(()), val(())], size=7) == [(7,)]
    with pytest.raises(ShapeMismatchError, match="rank >= 2"):
        shapes("Trilu", [val((4,))])
    assert shapes("ReverseSequence", [val((5, 3, 2)), val((3,), np.int64)]) == [(5, 3, 2)]
    with pytest.raises(ShapeMismatchError, match="lens"):
        shapes("ReverseSequence", [val((5, 3, 2)), val((5,), np.int64)])
    cv = types("Convert", [val((2, 3))], to="@bool(8)")
    assert cv[0].element_dtype == ScalarType("bool", 8) and cv[0].shape == (2, 3)
    with pytest.raises(FieldTypeError, match="to"):
        OP_REGISTRY["Convert"]([val((2,))], [], to="float8")
    with pytest.raises(FieldTypeError, match="bfloat16"):
        OP_REGISTRY["Convert"]([val((2,))], [], to="@bf(16)")
    with pytest.raises(ShapeMismatchError, match="quantized values go through Cast"):
        types("Convert", [Value(0, TensorType(QuantizedType(INT8, 0.1), [2]))], to="@fp(32)")


def test_col2im_shapes():
    assert shapes("Col2Im", [val((2, 12, 24))], image_shape=[6, 7], block_shape=[3, 2],
                  strides=[2, 1], pads=[1, 0, 1, 2]) == [(2, 2, 6, 7)]
    with pytest.raises(ShapeMismatchError, match="columns"):
        shapes("Col2Im", [val((2, 12, 23))], image_shape=[6, 7], block_shape=[3, 2],
               strides=[2, 1], pads=[1, 0, 1, 2])
    with pytest.raises(ShapeMismatchError, match="spatial rank"):
        shapes("Col2Im", [val((2, 12, 20))], image_shape=[6, 7], block_shape=[3, 2, 1])


def test_pad_knows_wrap():
    assert shapes("Pad", [val((2, 3))], pad_before=[1, 0], pad_after=[0, 4], mode="wrap") == \
        [(3, 7)]
    with pytest.raises(ShapeMismatchError, match="mode"):
        shapes("Pad", [val((2, 3))], pad_before=[1, 0], pad_after=[0, 4], mode="circular")


def test_json_raw_round_trip(tmp_path):
    net = build_net()
    assert REDUCE_INDEX_OPS <= {op.op_type for op in net.ops}
    save_network(net, tmp_path / "n.json")
    back = load_network(tmp_path / "n.json")
    back.validate()
    for a, b in zip(net.ops, back.ops):
        assert a.op_type == b.op_type and a.attrs == b.attrs
        assert [v.dtype.element_dtype for v in a.outputs] == \
            [v.dtype.element_dtype for v in b.outputs]
        assert [v.shape for v in a.outputs] == [v.shape for v in b.outputs]


def test_round_tripped_network_runs_the_same(tmp_path):
    host = pytest.importorskip("host_backend")
    from xrt import HostDevice, Session, Tensor

    net = build_net()
    save_network(net, tmp_path / "n.json")
    back = load_network(tmp_path / "n.json")
    x = np.random.default_rng(0).standard_normal((2, 5, 4)).astype(np.float32)
    outs = []
    for n in (net, back):
        sess = Session.Create([host.HostBackend], n.view(0), [HostDevice.Default()])
        sess.apply()
        outs.append([np.asarray(t) for t in sess.forward([Tensor(x)])])
    assert len(outs[0]) == 14
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a, b)
    assert outs[0][-2].dtype == np.int16 and outs[0][-1].shape == (1, 1, 3, 6)

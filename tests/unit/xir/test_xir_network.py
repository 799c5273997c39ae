"""Network and NetworkView: builder shape inference, lookups, views, edits, validation."""

from __future__ import annotations

import numpy as np
import pytest

import xir
from xir.errors import (
    CycleError,
    DanglingReferenceError,
    DuplicateIdError,
    GraphEditError,
    MissingFieldError,
    OpAttributeError,
    OpNotFoundError,
    ShapeMismatchError,
    ValueNotFoundError,
)


def chain(n: int = 4) -> xir.Network:
    b = xir.NetworkBuilder("chain")
    x = b.input([1, 4, 4, 2], layout="NHWC")
    for _ in range(n):
        x = b.relu(x)
    b.output(x)
    return b.build()


def test_builder_infers_shapes_and_layouts():
    b = xir.NetworkBuilder("shapes")
    x = b.input([1, 15, 17, 6], layout="NHWC")
    w = np.zeros((3, 3, 3, 8), np.float32)
    c = b.conv2d(x, w, stride_height=2, stride_width=2, pad_top=1, pad_bottom=1, pad_left=1,
                 pad_right=0, groups=2)
    assert c.shape == (1, 8, 8, 8) and c.dtype.layout.spec == "NHWC"
    d = b.conv_transpose2d(c, np.zeros((4, 4, 8, 2), np.float32), stride_height=2,
                           stride_width=2, pad_top=1, pad_bottom=1, pad_left=1, pad_right=1,
                           groups=2)
    assert d.shape == (1, 16, 16, 4)
    p = b.max_pool2d(d, pool_height=3, pool_width=3, stride_height=2, stride_width=2,
                     ceil_mode=True)
    assert p.shape == (1, 8, 8, 4)
    u = b.upsample(p)
    assert u.shape == (1, 16, 16, 4)
    r = b.resize(u, out_height=5, out_width=7, mode="bilinear")
    assert r.shape == (1, 5, 7, 4)
    s = b.slice(r, begin=[0, -3, 0, 1], end=[1, 5, 7, 4], step=[1, 1, 2, 1])
    assert s.shape == (1, 3, 4, 3)
    t = b.transpose(s, perm=[0, 3, 1, 2])
    assert t.shape == (1, 3, 3, 4) and t.dtype.layout.spec == "NCHW"
    m = b.matmul(b.reshape(t, shape=[0, -1]), np.zeros((36, 5), np.float32),
                 np.zeros(5, np.float32))
    assert m.shape == (1, 5)
    a1, a2 = b.split(b.align_axis(r, axis=-1, align_unit=16), axis=-1, sections=[10, 6])
    assert a1.shape == (1, 5, 7, 10) and a2.shape == (1, 5, 7, 6)
    assert b.prune_axis(a1, axis=-1, size=4).shape == (1, 5, 7, 4)
    assert b.squeeze(b.unsqueeze(m, axes=[0]), axes=[0]).shape == (1, 5)
    assert b.pad(m, pad_before=[0, 1], pad_after=[2, 0]).shape == (3, 6)
    assert b.avg_pool2d(r, is_global=True).shape == (1, 1, 1, 4)


@pytest.mark.parametrize("make, field", [
    (lambda b, x: b.conv2d(x, np.zeros((3, 3, 5, 8), np.float32)), "groups"),
    (lambda b, x: b.conv2d(x, np.zeros((3, 3, 3, 8), np.float32), np.zeros(4, np.float32)),
     "inputs"),
    (lambda b, x: b.add(x, b.input([1, 2, 2, 3])), "inputs"),
    (lambda b, x: b.reshape(x, shape=[5, -1]), "shape"),
    (lambda b, x: b.transpose(x, perm=[0, 1, 1, 2]), "perm"),
    (lambda b, x: b.split(x, sections=[1, 1]), "sections"),
    (lambda b, x: b.concat(x, b.input([1, 3, 8, 3]), axis=1 + 1), "inputs"),
    (lambda b, x: b.max_pool2d(x, pool_height=9, pool_width=9), "inputs"),
    (lambda b, x: b.softmax(x, axis=4), "axis"),
    (lambda b, x: b.prune_axis(x, size=7), "size"),
    (lambda b, x: b.layer_norm(x, np.ones(4, np.float32)), "inputs"),
    (lambda b, x: b.layer_norm(x, np.ones((2, 3), np.float32), axis=2), "inputs"),
    (lambda b, x: b.layer_norm(x, np.ones(3, np.float32), axis=4), "axis"),
])
def test_shape_errors_name_the_field(make, field):
    b = xir.NetworkBuilder("bad")
    x = b.input([1, 8, 8, 3], layout="NHWC")
    with pytest.raises(ShapeMismatchError) as info:
        make(b, x)
    assert info.value.field == field


def test_layer_norm_shapes_and_stats_outputs():
    b = xir.NetworkBuilder("ln")
    x = b.input([2, 7, 16])
    y = b.layer_norm(x, np.ones(16, np.float32), np.zeros(16, np.float32))
    assert y.shape == (2, 7, 16)
    y2, mean, inv = b.layer_norm(x, np.ones((7, 1), np.float32), axis=1, stats=True)
    assert (y2.shape, mean.shape, inv.shape) == ((2, 7, 16), (2, 1, 1), (2, 1, 1))


def test_attribute_errors():
    b = xir.NetworkBuilder("attrs")
    x = b.input([1, 4, 4, 3])
    with pytest.raises(OpAttributeError, match="stride_heigth"):
        b.conv2d(x, np.zeros((1, 1, 3, 3), np.float32), stride_heigth=2)
    with pytest.raises(MissingFieldError, match="perm"):
        b.transpose(x)
    with pytest.raises(xir.errors.FieldTypeError, match="stride_height"):
        b.conv2d(x, np.zeros((1, 1, 3, 3), np.float32), stride_height="2")
    with pytest.raises(OpAttributeError, match="no op method"):
        b.no_such_op(x)


def test_lookups_producers_consumers():
    net = chain(3)
    relu0 = net.ops[1]
    v = relu0.outputs[0]
    assert net.getOpById(relu0.op_id) is relu0
    assert net.getValueById(v.v_id) is v
    assert net.producer(v.v_id) is relu0
    assert net.consumers(v) == [net.ops[2]]
    assert net.inputs() == net.ops[0].outputs
    assert net.outputs() == net.ops[-1].inputs
    assert v.storageBytes() == 1 * 4 * 4 * 2 * 4
    with pytest.raises(OpNotFoundError):
        net.getOpById(999)
    with pytest.raises(ValueNotFoundError):
        net.getValueById(999)


def test_views_by_position_ids_and_exclusion():
    net = chain(4)  # Input, 4 x Relu, Output
    ids = net.opIds()
    assert net.view(0).opIds() == ids
    assert net.view(1, -1).opIds() == ids[1:-1]
    assert net.view(-2).opIds() == ids[-2:]
    assert net.view([ids[2], ids[1]]).opIds() == ids[1:3]  # execution order kept
    assert net.view(exclude=[ids[0], ids[-1]]).opIds() == ids[1:-1]
    assert net.viewByIdRange(ids[2], ids[3]).opIds() == ids[2:4]
    mid = net.view(2, 4)
    assert mid.inputs() == net.ops[1].outputs  # produced outside the view
    assert mid.outputs() == net.ops[3].outputs  # read outside the view
    assert mid.view(1).opIds() == [ids[3]]  # a view of a view
    assert mid.getOpById(ids[2]) is net.ops[2]
    with pytest.raises(OpNotFoundError):
        mid.getOpById(ids[0])
    with pytest.raises(OpNotFoundError):
        net.view([12345])
    with pytest.raises(OpNotFoundError):
        net.view(10)


def test_graph_edits():
    net = chain(2)
    first, second = net.ops[1], net.ops[2]
    # insert a Sigmoid between the two relus
    v = net.newValue(first.outputs[0].dtype)
    sig = xir.ops.Sigmoid([first.outputs[0]], [v])
    net.insertOpAfter(first.op_id, sig)
    second.inputs = [v]
    net.relink()
    net.validate()
    assert [op.op_type for op in net.ops] == ["Input", "Relu", "Sigmoid", "Relu", "Output"]
    assert net.consumers(first.outputs[0]) == [sig]
    # replace it by a Silu with the same id
    silu = xir.ops.Silu([first.outputs[0]], [v])
    net.replaceOpById(sig.op_id, silu)
    assert silu.op_id == sig.op_id and net.getOpById(sig.op_id) is silu
    with pytest.raises(GraphEditError, match="read by ops"):
        net.removeOpById(silu.op_id)
    second.inputs = [first.outputs[0]]
    net.relink()
    net.removeOpById(silu.op_id)
    net.validate()
    with pytest.raises(DuplicateIdError):
        net.addOp(xir.ops.Relu([v], [net.newValue(v.dtype)], op_id=first.op_id))


def test_validation_catches_order_dangling_and_duplicates():
    net = chain(2)
    net.ops[1], net.ops[2] = net.ops[2], net.ops[1]
    with pytest.raises(CycleError, match="produced later"):
        net.validate()
    net = chain(2)
    stray = xir.Value(777, net.ops[1].outputs[0].dtype)
    net.ops[2].inputs = [stray]
    with pytest.raises(DanglingReferenceError, match="777"):
        net.validate()
    net = chain(2)
    net.ops[2].op_id = net.ops[1].op_id
    with pytest.raises(DuplicateIdError):
        net.validate()
    net = chain(2)
    net.ops[2].outputs[0].dtype = net.ops[2].outputs[0].dtype.with_shape([1, 4, 4, 3])
    with pytest.raises(ShapeMismatchError, match="declared"):
        net.validate()


def test_types_and_layouts():
    t = xir.TensorType(xir.FP32, [1, 2, 3, 4, 16], "NCHWc16")
    assert t.storageBytes() == 2 * 3 * 4 * 16 * 4
    assert t.layout.is_tiled() and t.layout.untiled().spec == "NCHW"
    with pytest.raises(xir.errors.FieldTypeError, match="tile"):
        xir.TensorType(xir.FP32, [1, 2, 3, 4, 8], "NCHWc16")
    q = xir.QuantizedType(xir.INT8, [0.1, 0.2], axis=3)
    assert q.qmin == -128 and q.qmax == 127 and q.numpy_dtype == np.int8
    assert xir.TensorType(q, [3, 3, 4, 2]).storageBytes() == 72
    with pytest.raises(xir.errors.FieldTypeError):
        xir.QuantizedType(xir.FP32, 0.1)
    with pytest.raises(xir.errors.FieldTypeError):
        xir.QuantizedType(xir.INT8, [0.1, -1.0], axis=0)
    assert xir.ScalarType.parse("@sint(16)") == xir.INT16
    assert xir.Layout.parse("@layout(HWIO)").axis("O") == 3
    assert xir.MemType.parse("@etm(0x40)").addr == 64
    assert xir.MemType.parse("@chunk(3@0x10)").encode() == "@chunk(3@0x10)"

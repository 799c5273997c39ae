"""xir.ops.pointwise: Unary, Binary, Where and PRelu (types, shapes, attribute checks, json +
raw round trips) and the lookup tables of quantised Unary functions."""

from __future__ import annotations

import numpy as np
import pytest

import xir
from xir import FP32, NetworkBuilder
from xir.ops.pointwise import (
    BINARY_FUNCS,
    UNARY_FUNCS,
    UNARY_LUT_FUNCS,
    unary_lut,
    unary_lut_function,
)
from xir.serialize import load_network, save_network
from xir.types import ScalarType

BOOL = ScalarType("bool", 8)


def _net():
    b = NetworkBuilder("pointwise")
    x = b.input([1, 4, 4, 8], layout="NHWC", name="x")
    return b, x


def test_registered_under_their_names():
    for name in ("Unary", "Binary", "Where", "PRelu"):
        assert name in xir.OP_REGISTRY
    assert {"max", "min", "mod", "fmod", "pow", "equal", "shift_left", "div"} <= \
        set(BINARY_FUNCS)
    assert {"exp", "log", "isinf", "mish", "shrink", "bitwise_not"} <= set(UNARY_FUNCS)


def test_unary_keeps_dtype_and_layout_predicates_give_bool():
    b, x = _net()
    y = b.op("Unary", [x], func="exp")
    assert y.dtype.element_dtype == FP32 and y.shape == (1, 4, 4, 8)
    assert y.dtype.layout == x.dtype.layout
    nan = b.op("Unary", [x], func="isnan")
    inf = b.op("Unary", [x], func="isinf", detect_negative=False)
    assert nan.dtype.element_dtype == BOOL and inf.dtype.element_dtype == BOOL
    i = b.input([3, 5], dtype=np.dtype(np.int64), name="i")
    assert b.op("Unary", [i], func="neg").dtype.numpy_dtype == np.int64
    b.output(y, nan, inf)
    b.build()


def test_binary_broadcasts_comparisons_give_bool():
    b, x = _net()
    c = b.params(np.ones(8, np.float32), "c")
    m = b.op("Binary", [x, c], func="max")
    assert m.shape == (1, 4, 4, 8) and m.dtype.element_dtype == FP32
    e = b.op("Binary", [x, c], func="less_equal")
    assert e.dtype.element_dtype == BOOL
    w = b.op("Where", [e, x, c])
    assert w.shape == (1, 4, 4, 8) and w.dtype.element_dtype == FP32
    with pytest.raises(xir.ShapeMismatchError, match="do not broadcast"):
        b.op("Binary", [x, b.params(np.ones(3, np.float32))], func="min")
    with pytest.raises(xir.ShapeMismatchError, match="takes 3 inputs"):
        b.op("Where", [e, x])
    with pytest.raises(xir.ShapeMismatchError, match="takes 2 inputs"):
        b.op("Binary", [x], func="max")


def test_prelu_slope_broadcasts_to_x_only():
    b, x = _net()
    p = b.op("PRelu", [x, b.params(np.full(8, 0.25, np.float32))])
    assert p.shape == x.shape
    with pytest.raises(xir.ShapeMismatchError, match="does not broadcast to x"):
        b.op("PRelu", [x, b.params(np.ones((2, 4, 4, 8), np.float32))])


def test_attribute_values_are_checked():
    b, x = _net()
    with pytest.raises(xir.FieldTypeError, match="func must be one of"):
        b.op("Unary", [x], func="cbrt")
    with pytest.raises(xir.FieldTypeError, match="func must be one of"):
        b.op("Binary", [x, x], func="hypot")
    with pytest.raises(xir.MissingFieldError, match="func"):
        b.op("Unary", [x])
    with pytest.raises(xir.FieldTypeError, match="NaN"):
        b.op("Unary", [x], func="elu", alpha=float("nan"))
    with pytest.raises(xir.FieldTypeError, match="celu's alpha"):
        b.op("Unary", [x], func="celu", alpha=0.0)
    with pytest.raises(xir.FieldTypeError, match="detect_positive"):
        b.op("Unary", [x], func="isinf", detect_positive=1)


def test_json_raw_round_trip(tmp_path):
    b, x = _net()
    i = b.input([2, 3], dtype=np.dtype(np.uint8), name="i")
    y = b.op("Unary", [x], func="selu", alpha=1.5, gamma=1.1)
    y = b.op("Unary", [y], func="isinf", detect_positive=False)
    s = b.op("Binary", [i, b.params(np.array([1, 2, 3], np.uint8), "sh")], func="shift_left")
    w = b.op("Where", [y, x, b.params(np.zeros(8, np.float32), "zero")])
    p = b.op("PRelu", [w, b.params(np.linspace(0, 1, 8).astype(np.float32), "slope")])
    b.output(p, s)
    net = b.build()
    save_network(net, tmp_path / "n.json")
    back = load_network(tmp_path / "n.json")
    got = {op.op_type: op for op in back.ops}
    assert {"Unary", "Binary", "Where", "PRelu"} <= set(got)
    unary = [op for op in back.ops if op.op_type == "Unary"]
    assert unary[0].attrs["func"] == "selu" and unary[0].attrs["gamma"] == 1.1
    assert unary[1].attrs["detect_positive"] is False
    assert unary[1].outputs[0].dtype.element_dtype == BOOL
    assert got["Binary"].attrs["func"] == "shift_left"
    assert got["Binary"].outputs[0].dtype.numpy_dtype == np.uint8
    np.testing.assert_array_equal(got["PRelu"].inputs[1].data,
                                  np.linspace(0, 1, 8).astype(np.float32))


@pytest.mark.parametrize("func", sorted(UNARY_LUT_FUNCS))
def test_unary_tables_are_finite_and_follow_the_function(func):
    attrs = {"func": func, "alpha": 0.5, "beta": 0.1, "gamma": 1.2}
    s_in, s_out = 0.04, 0.05
    table = unary_lut(attrs, s_in, s_out, np.int8, np.int8)
    assert table.shape == (256,) and table.dtype == np.int8
    x = np.arange(-128, 128) * s_in
    with np.errstate(all="ignore"):
        real = unary_lut_function(attrs)(x)
    assert np.isfinite(real).all()
    want = np.clip(np.sign(real) * np.floor(np.abs(real) / s_out + 0.5), -128, 127)
    np.testing.assert_array_equal(table, want.astype(np.int8))


def test_unary_table_parameters_matter():
    t1 = unary_lut({"func": "elu", "alpha": 1.0}, 0.05, 0.05, np.int8, np.int8)
    t2 = unary_lut({"func": "elu", "alpha": 0.2}, 0.05, 0.05, np.int8, np.int8)
    assert (t1[:128] != t2[:128]).any() and (t1[128:] == t2[128:]).all()
    t16 = unary_lut({"func": "exp"}, 1e-3, 1e-3, np.int16, np.int16)
    assert t16.shape == (65536,) and t16[-1] == np.iinfo(np.int16).max  # exp(32.8) saturates
    with pytest.raises(xir.FieldTypeError, match="int8 or int16"):
        unary_lut({"func": "exp"}, 0.1, 0.1, np.uint8, np.int8)

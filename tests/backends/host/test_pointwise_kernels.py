"""HostBackend kernels of xir.ops.pointwise (Unary, Binary, Where, PRelu) against onnxruntime
on random data of several dtypes, and their integer forms against the float reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import helper  # noqa: E402

from host_backend.ops import FLOAT_KERNELS, INT_KERNELS  # noqa: E402
from host_backend.ops import pointwise as pw  # noqa: E402
from xir.ops.pointwise import UNARY_LUT_FUNCS, unary_lut  # noqa: E402
from xir.types import INT8, INT16, QuantizedType, TensorType  # noqa: E402

RNG = np.random.default_rng(1)


def _ort_node(op_type: str, arrays: list[np.ndarray], opset: int = 21, **attrs) -> np.ndarray:
    """One ONNX node run by onnxruntime on these inputs (by onnx.reference where onnxruntime
    registers no kernel for the dtype: bool Where, integer and float64 PRelu)."""
    names = [f"i{k}" for k in range(len(arrays))]
    node = helper.make_node(op_type, names, ["y"], **attrs)
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
           for n, a in zip(names, arrays)]
    out = helper.make_empty_tensor_value_info("y")
    model = helper.make_model(helper.make_graph([node], "g", ins, [out]),
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    try:
        sess = ort.InferenceSession(model.SerializeToString(), opts,
                                    providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - onnxruntime's NotImplemented has no public type
        if "NOT_IMPLEMENTED" not in str(exc):
            raise
        from onnx.reference import ReferenceEvaluator

        return ReferenceEvaluator(model).run(None, dict(zip(names, arrays)))[0]
    return sess.run(None, dict(zip(names, arrays)))[0]


def _data(dtype, shape, lo=-50, hi=50) -> np.ndarray:
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return RNG.integers(0, 2, shape).astype(np.bool_)
    if dt.kind == "u":
        return RNG.integers(0, min(hi, np.iinfo(dt).max) + 1, shape).astype(dt)
    if dt.kind == "i":
        return RNG.integers(max(lo, np.iinfo(dt).min), hi + 1, shape).astype(dt)
    return (RNG.standard_normal(shape) * 3).astype(dt)


def _same(got: np.ndarray, want: np.ndarray, rtol=1e-5, atol=1e-5) -> None:
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape
    if want.dtype.kind in "iub":
        np.testing.assert_array_equal(got, want)
    else:
        tol = 1e-3 if want.dtype == np.float16 else rtol
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                   rtol=tol, atol=max(atol, tol), equal_nan=True)


def test_registered():
    for name in ("Unary", "Binary", "Where", "PRelu"):
        assert FLOAT_KERNELS[name] is getattr(pw, name.lower())
    assert INT_KERNELS["PRelu"] is pw.prelu_int
    assert INT_KERNELS["Binary"] is pw.binary_int
    assert INT_KERNELS["Unary"] is pw.unary_int


# --- Unary -----------------------------------------------------------------------------------

FLOAT_UNARY = [("Exp", "exp"), ("Log", "log"), ("Abs", "abs"), ("Neg", "neg"),
               ("Reciprocal", "reciprocal"), ("Floor", "floor"), ("Ceil", "ceil"),
               ("Round", "round"), ("Sign", "sign"), ("Sin", "sin"), ("Cos", "cos"),
               ("Tan", "tan"), ("Atan", "atan"), ("Sinh", "sinh"), ("Cosh", "cosh"),
               ("Asinh", "asinh"), ("Softplus", "softplus"), ("Softsign", "softsign")]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("onnx_op,func", FLOAT_UNARY)
def test_unary_float_against_ort(onnx_op, func, dtype):
    x = _data(dtype, (3, 4, 5))
    if func == "log":
        x = np.abs(x) + dtype(0.1)
    want = _ort_node(onnx_op, [x])
    _same(pw.unary([x], {"func": func})[0], want)


def test_unary_domains_and_half_to_even():
    x = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 0.4999], np.float32)
    np.testing.assert_array_equal(pw.unary([x], {"func": "round"})[0],
                                  [0, 2, 2, -0, -2, 0])
    x = np.array([-0.5, 0.0, 0.5, 2.0], np.float32)
    for func, onnx_op in (("asin", "Asin"), ("acos", "Acos"), ("atanh", "Atanh"),
                          ("acosh", "Acosh")):
        _same(pw.unary([x], {"func": func})[0], _ort_node(onnx_op, [x]))


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64])
@pytest.mark.parametrize("onnx_op,func", [("Abs", "abs"), ("Neg", "neg"), ("Sign", "sign")])
def test_unary_int_exact(onnx_op, func, dtype):
    info = np.iinfo(dtype)
    x = np.concatenate([_data(dtype, (20,)), np.array([info.min, info.max, 0], dtype)])
    if onnx_op == "Abs":
        x = x[x != info.min]  # onnxruntime's abs(min) is undefined behaviour in C
    _same(pw.unary([x], {"func": func})[0], _ort_node(onnx_op, [x]))


def test_unary_predicates_and_logic():
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -1.5], np.float32)
    _same(pw.unary([x], {"func": "isnan"})[0], _ort_node("IsNaN", [x]))
    for pos in (0, 1):
        for neg in (0, 1):
            got = pw.unary([x], {"func": "isinf", "detect_positive": bool(pos),
                                 "detect_negative": bool(neg)})[0]
            _same(got, _ort_node("IsInf", [x], detect_positive=pos, detect_negative=neg))
    b = _data(np.bool_, (4, 5))
    _same(pw.unary([b], {"func": "not"})[0], _ort_node("Not", [b]))
    for dt in (np.int8, np.uint8, np.int32, np.uint64):
        v = _data(dt, (7,))
        _same(pw.unary([v], {"func": "bitwise_not"})[0], _ort_node("BitwiseNot", [v]))
    with pytest.raises(ValueError, match="bool or integer"):
        pw.unary([x], {"func": "not"})


ACTIVATIONS = [
    ("Elu", "elu", {"alpha": 0.7}, {"alpha": 0.7}),
    ("Selu", "selu", {"alpha": 1.5, "gamma": 1.1}, {"alpha": 1.5, "gamma": 1.1}),
    ("Celu", "celu", {"alpha": 2.0}, {"alpha": 2.0}),
    ("ThresholdedRelu", "thresholded_relu", {"alpha": 0.3}, {"alpha": 0.3}),
    ("Shrink", "shrink", {"lambd": 1.2, "bias": 0.4}, {"alpha": 1.2, "beta": 0.4}),
    ("Mish", "mish", {}, {}),
    ("Softplus", "softplus", {}, {}),
    ("Softsign", "softsign", {}, {}),
]


@pytest.mark.parametrize("onnx_op,func,onnx_attrs,attrs", ACTIVATIONS)
def test_activations_against_ort(onnx_op, func, onnx_attrs, attrs):
    x = _data(np.float32, (2, 3, 8, 8))
    x.flat[:4] = [0.0, -0.0, 50.0, -50.0]
    _same(pw.unary([x], {"func": func, **attrs})[0], _ort_node(onnx_op, [x], **onnx_attrs))


def test_swish_and_integer_shrink():
    x = _data(np.float32, (64,))
    want = x / (1 + np.exp(-0.5 * x))  # ONNX Swish (opset 24): x * sigmoid(alpha * x)
    np.testing.assert_allclose(pw.unary([x], {"func": "swish", "alpha": 0.5})[0], want,
                               rtol=1e-6, atol=1e-6)
    xi = np.arange(-6, 7, dtype=np.int32)
    _same(pw.unary([xi], {"func": "shrink", "alpha": 2.0, "beta": 1.0})[0],
          _ort_node("Shrink", [xi], lambd=2.0, bias=1.0))


# --- Binary ----------------------------------------------------------------------------------

INT_TYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
NUM_TYPES = INT_TYPES + [np.float16, np.float32, np.float64]


@pytest.mark.parametrize("dtype", NUM_TYPES)
@pytest.mark.parametrize("onnx_op,func", [("Max", "max"), ("Min", "min"), ("Add", "add"),
                                          ("Sub", "sub"), ("Mul", "mul"), ("Div", "div"),
                                          ("Equal", "equal"), ("Less", "less"),
                                          ("Greater", "greater"),
                                          ("LessOrEqual", "less_equal"),
                                          ("GreaterOrEqual", "greater_equal")])
def test_binary_against_ort(onnx_op, func, dtype):
    a = _data(dtype, (2, 3, 4))
    b = _data(dtype, (3, 1))
    if func == "div":
        b[b == 0] = 3
    want = _ort_node(onnx_op, [a, b])
    _same(pw.binary([a, b], {"func": func})[0], want)


def test_max_min_nan_propagates():
    a = np.array([np.nan, 1.0, 2.0], np.float32)
    b = np.array([0.0, np.nan, 1.0], np.float32)
    for func, op in (("max", "Max"), ("min", "Min")):
        _same(pw.binary([a, b], {"func": func})[0], _ort_node(op, [a, b]))


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.uint8])
@pytest.mark.parametrize("fmod", [0, 1])
def test_mod_sign_rules_against_ort(dtype, fmod):
    a = _data(dtype, (50,))
    b = _data(dtype, (50,))
    b[b == 0] = 7
    want = _ort_node("Mod", [a, b], fmod=fmod)
    _same(pw.binary([a, b], {"func": "fmod" if fmod else "mod"})[0], want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_mod_both_rules(dtype):
    a = np.array([-4.5, 4.5, -3.0, 5.25, 0.0], dtype)
    b = np.array([2.0, -2.0, 2.0, -0.5, 3.0], dtype)
    _same(pw.binary([a, b], {"func": "fmod"})[0], _ort_node("Mod", [a, b], fmod=1))
    np.testing.assert_array_equal(pw.binary([a, b], {"func": "mod"})[0], np.mod(a, b))


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(np.int32, 16, elements=st.integers(-1000, 1000)),
       hnp.arrays(np.int32, 16, elements=st.integers(-40, 40).filter(lambda v: v != 0)))
def test_integer_div_truncates_toward_zero(a, b):
    got = pw.binary([a, b], {"func": "div"})[0]
    want = np.array([int(x / y) for x, y in zip(a.tolist(), b.tolist())], np.int32)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, _ort_node("Div", [a, b]))


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(np.int64, 12, elements=st.integers(-2 ** 62, 2 ** 62)),
       hnp.arrays(np.int64, 12, elements=st.integers(-999, 999).filter(lambda v: v != 0)))
def test_integer_mod_sign_rules(a, b):
    """fmod=0 takes the divisor's sign (Python %), fmod=1 the dividend's (C fmod), exactly
    (int64 values beyond float64's 2**53 included)."""
    import math

    mod = pw.binary([a, b], {"func": "mod"})[0]
    fmod = pw.binary([a, b], {"func": "fmod"})[0]
    assert mod.tolist() == [x % y for x, y in zip(a.tolist(), b.tolist())]
    assert fmod.tolist() == [int(math.copysign(abs(x) % abs(y), x)) if x % y else 0
                             for x, y in zip(a.tolist(), b.tolist())]


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64])
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bitshift_against_ort(dtype, direction):
    bits = np.dtype(dtype).itemsize * 8
    a = RNG.integers(0, np.iinfo(dtype).max, 32, dtype=dtype, endpoint=True)
    b = RNG.integers(0, bits, 32).astype(dtype)
    func = "shift_left" if direction == "LEFT" else "shift_right"
    _same(pw.binary([a, b], {"func": func})[0], _ort_node("BitShift", [a, b],
                                                          direction=direction))
    # shifting by the width or more empties the value (C's undefined case, ONNX's reference)
    big = np.full(32, bits + 3, dtype)
    assert not pw.binary([a, big], {"func": func})[0].any()


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.uint16, np.uint64])
def test_bitwise_and_logic_against_ort(dtype):
    a, b = _data(dtype, (3, 4)), _data(dtype, (4,))
    for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor"):
        _same(pw.binary([a, b], {"func": "bitwise_" + op[7:].lower()})[0],
              _ort_node(op, [a, b]))
    p, q = _data(np.bool_, (3, 4)), _data(np.bool_, (3, 1))
    for op in ("And", "Or", "Xor"):
        _same(pw.binary([p, q], {"func": op.lower()})[0], _ort_node(op, [p, q]))
    with pytest.raises(ValueError, match="integer operands"):
        pw.binary([a.astype(np.float32), b], {"func": "bitwise_and"})


def test_pow_feature_map_and_integer_exponents():
    x = np.abs(_data(np.float32, (2, 5))) + 0.5
    e = _data(np.float32, (2, 5)) / 3
    _same(pw.binary([x, e], {"func": "pow"})[0], _ort_node("Pow", [x, e]))
    ei = RNG.integers(0, 4, (5,)).astype(np.int64)
    _same(pw.binary([x, ei], {"func": "pow"})[0], _ort_node("Pow", [x, ei]))
    xi = RNG.integers(-5, 6, (2, 5)).astype(np.int32)
    _same(pw.binary([xi, ei.astype(np.int32)], {"func": "pow"})[0],
          _ort_node("Pow", [xi, ei.astype(np.int32)]))
    xl = RNG.integers(-5, 6, (2, 5)).astype(np.int64)
    ef = np.array([0.5, 2.0, 1.0, 3.0, 0.0], np.float32)
    # an integer base to a float power: float64, truncated (onnx.reference, onnxruntime)
    _same(pw.binary([np.abs(xl), ef], {"func": "pow"})[0], _ort_node("Pow", [np.abs(xl), ef]))


# --- Where, PRelu ----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8, np.bool_, np.float16])
def test_where_against_ort(dtype):
    c = _data(np.bool_, (2, 1, 4))
    x, y = _data(dtype, (3, 4)), _data(dtype, (2, 3, 1))
    _same(pw.where([c, x, y], {})[0], _ort_node("Where", [c, x, y]))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int32, np.int64])
def test_prelu_per_channel_against_ort(dtype):
    x = _data(dtype, (1, 4, 5, 6))
    slope = _data(dtype, (4, 1, 1)) if np.dtype(dtype).kind == "f" else \
        RNG.integers(-3, 4, (4, 1, 1)).astype(dtype)
    _same(pw.prelu([x, slope], {})[0], _ort_node("PRelu", [x, slope]))


def test_outputs_never_alias_inputs():
    x = _data(np.int32, (3, 4))
    for y in (pw.unary([x], {"func": "floor"})[0], pw.binary([x, x[:1]], {"func": "max"})[0],
              pw.where([np.ones((3, 4), bool), x, x], {})[0]):
        assert not np.shares_memory(x, y) and y.flags.c_contiguous


# --- integer kernels -------------------------------------------------------------------------

def _qt(shape, scale, storage=INT8) -> TensorType:
    return TensorType(QuantizedType(storage, scale), shape)


def test_prelu_int_matches_the_float_reference():
    x = RNG.integers(-128, 128, (1, 6, 6, 8)).astype(np.int8)
    slope = (RNG.standard_normal(8) * 0.3).astype(np.float32)
    s_in, s_out = 0.05, 0.04
    got = pw.prelu_int([x, slope], {}, [_qt(x.shape, s_in), TensorType(np.float32, [8])],
                       [_qt(x.shape, s_out)])[0]
    real = np.where(x > 0, x * s_in, x * s_in * slope)
    want = np.clip(np.round(real / s_out), -128, 127)
    assert got.dtype == np.int8
    assert np.abs(got.astype(np.int64) - want).max() <= 1
    # a quantized slope reads its codes times its scale; fakeQf gives the unrounded reals
    sq = np.round(slope / 0.01).astype(np.int8)
    got_q = pw.prelu_int([x, sq], {}, [_qt(x.shape, s_in), _qt([8], 0.01)],
                         [_qt(x.shape, s_out)])[0]
    real_q = np.where(x > 0, x * s_in, x * s_in * sq * 0.01)
    assert np.abs(got_q - np.clip(np.round(real_q / s_out), -128, 127)).max() <= 1
    fake = pw.prelu_int([x.astype(np.float64), slope], {},
                        [_qt(x.shape, s_in), TensorType(np.float32, [8])],
                        [_qt(x.shape, s_out)], fake=True)[0]
    np.testing.assert_allclose(fake, real / s_out, rtol=1e-4)  # quantized multipliers


def test_max_min_int_rescale_then_compare():
    a = RNG.integers(-128, 128, (4, 9)).astype(np.int8)
    b = RNG.integers(-128, 128, (9,)).astype(np.int8)
    s_a, s_b, s_out = 0.03, 0.05, 0.04
    for func, np_fn in (("max", np.maximum), ("min", np.minimum)):
        got = pw.binary_int([a, b], {"func": func}, [_qt(a.shape, s_a), _qt(b.shape, s_b)],
                            [_qt(a.shape, s_out)])[0]
        ra = np.clip(np.floor(a * (s_a / s_out) + 0.5), -128, 127)
        rb = np.clip(np.floor(b * (s_b / s_out) + 0.5), -128, 127)
        np.testing.assert_array_equal(got, np_fn(ra, rb).astype(np.int8))
        # the same scale on every side: the codes' max / min exactly
        same = pw.binary_int([a, b], {"func": func}, [_qt(a.shape, s_a), _qt(b.shape, s_a)],
                             [_qt(a.shape, s_a)])[0]
        np.testing.assert_array_equal(same, np_fn(a, b))
    with pytest.raises(ValueError, match="only max and min"):
        pw.binary_int([a, b], {"func": "pow"}, [_qt(a.shape, s_a)] * 2, [_qt(a.shape, s_a)])


@pytest.mark.parametrize("storage", [INT8, INT16])
@pytest.mark.parametrize("func", ["exp", "log", "elu", "softplus", "mish", "abs", "reciprocal",
                                  "round"])
def test_unary_int_is_a_table_of_the_float_function(func, storage):
    dt = storage.numpy_dtype
    info = np.iinfo(dt)
    q = RNG.integers(info.min, info.max + 1, 500).astype(dt)
    s_in, s_out = 8.0 / info.max, 16.0 / info.max
    attrs = {"func": func, "alpha": 1.0}
    got = pw.unary_int([q], attrs, [_qt(q.shape, s_in, storage)],
                       [_qt(q.shape, s_out, storage)])[0]
    table = unary_lut(attrs, s_in, s_out, dt, dt)
    np.testing.assert_array_equal(got, table[q.astype(np.int64) - info.min])
    x = q.astype(np.float64) * s_in
    with np.errstate(all="ignore"):
        real = UNARY_LUT_FUNCS[func](x, 1.0, 0.0, 1.0)
    with np.errstate(all="ignore"):
        ok = np.isfinite(real) & (np.abs(real / s_out) < info.max)
    want = np.floor(np.abs(real[ok] / s_out) + 0.5) * np.sign(real[ok])
    np.testing.assert_array_equal(got[ok], want.astype(dt))
    with pytest.raises(ValueError, match="no lookup-table form"):
        pw.unary_int([q], {"func": "bitwise_not"}, [_qt(q.shape, s_in, storage)],
                     [_qt(q.shape, s_out, storage)])

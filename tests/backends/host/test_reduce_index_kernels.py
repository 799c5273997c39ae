"""HostBackend kernels of xir.ops.reduce / xir.ops.index against onnxruntime, several dtypes.

Each case runs one ONNX node on onnxruntime and the matching kernel with the attributes the
importer would give it; integer and bool results must be equal, float ones close.
"""

from __future__ import annotations

import numpy as np
import pytest

from host_backend.ops import FLOAT_KERNELS
from xrt.errors import TensorError

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import helper, numpy_helper  # noqa: E402

IR_VERSION = 10


def run_ort(op_type: str, inputs: list[np.ndarray], attrs: dict, n_out: int = 1,
            opset: int = 18, consts: dict[int, np.ndarray] | None = None) -> list[np.ndarray]:
    """One `op_type` node on onnxruntime; inputs listed in `consts` are initializers."""
    consts = consts or {}
    names = [f"i{k}" for k in range(len(inputs))]
    feeds = {n: a for k, (n, a) in enumerate(zip(names, inputs)) if k not in consts}
    graph_in = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                              list(a.shape)) for n, a in feeds.items()]
    inits = [numpy_helper.from_array(np.asarray(consts[k]), names[k]) for k in consts]
    outs = [f"o{k}" for k in range(n_out)]
    node = helper.make_node(op_type, names, outs, **attrs)
    graph = helper.make_graph([node], "t", graph_in,
                              [helper.make_empty_tensor_value_info(o) for o in outs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = IR_VERSION
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    so.log_severity_level = 3
    try:
        sess = ort.InferenceSession(model.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - onnxruntime has no kernel for this type
        if "NOT_IMPLEMENTED" in str(exc) or "Could not find an implementation" in str(exc):
            pytest.skip(f"onnxruntime has no {op_type} for these types")
        raise
    return sess.run(outs, feeds)


def kernel(op: str, inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """Call a kernel; inputs must come back untouched and outputs must not alias them."""
    saved = [np.array(x, copy=True) for x in inputs]
    outs = FLOAT_KERNELS[op](inputs, attrs)
    for x, s in zip(inputs, saved):
        np.testing.assert_array_equal(x, s)
    for y in outs:
        assert not any(np.shares_memory(y, x) for x in inputs)
    return outs


def same(got: np.ndarray, ref: np.ndarray) -> None:
    got = np.asarray(got)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    if ref.dtype.kind in "biu":
        np.testing.assert_array_equal(got.astype(ref.dtype), ref)
    else:
        tol = 2e-3 if ref.dtype == np.float16 else 1e-5
        np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), rtol=tol,
                                   atol=tol)


def data(dtype, shape, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.random(shape) < 0.5
    if dt.kind == "u":
        return rng.integers(0, 9, shape).astype(dt)
    if dt.kind == "i":
        return rng.integers(-9, 9, shape).astype(dt)
    return (rng.standard_normal(shape) * 2).astype(dt)


# --------------------------------------------------------------------------- reductions

REDUCE = {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max", "ReduceMin": "min",
          "ReduceProd": "prod", "ReduceL1": "l1", "ReduceL2": "l2", "ReduceLogSum": "log_sum",
          "ReduceLogSumExp": "log_sum_exp", "ReduceSumSquare": "sum_square"}
FLOAT_ONLY = {"ReduceLogSum", "ReduceLogSumExp"}


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32, np.int64])
@pytest.mark.parametrize("onnx_op", sorted(REDUCE))
@pytest.mark.parametrize("axes, keep", [([1], 1), ([0, 2], 0), ([-1], 1), ([], 0)])
def test_reduce(onnx_op, dtype, axes, keep):
    if onnx_op in FLOAT_ONLY and np.dtype(dtype).kind != "f":
        pytest.skip("float only")
    x = data(dtype, (3, 4, 5))
    if onnx_op == "ReduceLogSum":
        x = np.abs(x) + dtype(0.5)
    if onnx_op == "ReduceProd" and x.dtype.kind == "f":
        x = (x / 4 + 1).astype(dtype)
    consts = {1: np.array(axes, np.int64)} if axes else {}
    ins = [x, np.array(axes, np.int64)] if axes else [x]
    ref = run_ort(onnx_op, ins, {"keepdims": keep}, consts=consts)[0]
    got = kernel("Reduce", [x], {"func": REDUCE[onnx_op], "axes": axes,
                                 "keepdims": bool(keep)})[0]
    assert got.dtype == ref.dtype
    same(got, ref)


@pytest.mark.parametrize("func, fill", [("sum", 0), ("prod", 1), ("max", -np.inf),
                                        ("min", np.inf), ("log_sum", -np.inf),
                                        ("log_sum_exp", -np.inf), ("l2", 0)])
def test_empty_reduction_gives_the_identity(func, fill):
    x = np.zeros((2, 0, 3), np.float32)
    got = kernel("Reduce", [x], {"func": func, "axes": [1], "keepdims": True})[0]
    np.testing.assert_array_equal(got, np.full((2, 1, 3), fill, np.float32))
    got = kernel("Reduce", [np.zeros((2, 0), np.int32)], {"func": "max", "axes": [1],
                                                         "keepdims": False})[0]
    np.testing.assert_array_equal(got, np.full(2, np.iinfo(np.int32).min))


def test_reduce_bool_max_min_and_log_sum_exp_of_infinities():
    x = np.array([[True, False], [False, False]])
    assert kernel("Reduce", [x], {"func": "max", "axes": [1]})[0].tolist() == [[True], [False]]
    assert kernel("Reduce", [x], {"func": "min", "axes": [0]})[0].tolist() == [[False, False]]
    y = np.array([[1e4, 1e4], [-np.inf, -np.inf], [np.inf, 0.0]], np.float32)
    got = kernel("Reduce", [y], {"func": "log_sum_exp", "axes": [1], "keepdims": False})[0]
    np.testing.assert_allclose(got, [1e4 + np.log(2), -np.inf, np.inf])


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint8, np.float64, np.int64])
@pytest.mark.parametrize("onnx_op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis, keep, last", [(0, 1, 0), (1, 0, 1), (-1, 1, 1), (2, 0, 0)])
def test_arg_reduce(onnx_op, dtype, axis, keep, last):
    x = data(dtype, (3, 4, 5)) // (3 if np.dtype(dtype).kind in "iu" else 1)  # many ties
    ref = run_ort(onnx_op, [x], {"axis": axis, "keepdims": keep, "select_last_index": last})[0]
    got = kernel("ArgReduce", [x], {"func": onnx_op[3:].lower(), "axis": axis,
                                    "keepdims": bool(keep), "select_last_index": bool(last)})[0]
    assert got.dtype == np.int64
    same(got, ref)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("k, axis, largest", [(3, 1, 1), (1, -1, 0), (4, 0, 0), (5, 2, 1),
                                              (0, 1, 1)])
def test_topk_values_indices_and_tie_order(dtype, k, axis, largest):
    x = data(dtype, (4, 6, 5), seed=2)
    x = (x // 2 if np.dtype(dtype).kind in "iu" else np.round(x)).astype(dtype)  # ties
    ref_v, ref_i = run_ort("TopK", [x, np.array([k], np.int64)],
                           {"axis": axis, "largest": largest}, n_out=2,
                           consts={1: np.array([k], np.int64)})
    v, i = kernel("TopK", [x], {"k": k, "axis": axis, "largest": bool(largest)})
    same(v, ref_v)
    same(i, ref_i)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("exclusive, reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("axis", [0, -1])
def test_cumsum(dtype, exclusive, reverse, axis):
    x = data(dtype, (4, 5))
    ref = run_ort("CumSum", [x, np.array(axis, np.int64)],
                  {"exclusive": exclusive, "reverse": reverse},
                  consts={1: np.array(axis, np.int64)})[0]
    got = kernel("CumSum", [x], {"axis": axis, "exclusive": bool(exclusive),
                                 "reverse": bool(reverse)})[0]
    assert got.dtype == x.dtype
    same(got, ref)


def test_cumprod_exclusive_reverse():
    x = np.array([[1, 2, 3], [4, 5, 6]], np.int32)
    got = kernel("CumProd", [x], {"axis": 1, "exclusive": True, "reverse": True})[0]
    np.testing.assert_array_equal(got, [[6, 3, 1], [30, 6, 1]])
    assert got.dtype == np.int32


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("op", ["Hardmax", "LogSoftmax"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_row_ops(op, dtype, axis):
    x = np.round(data(dtype, (3, 4, 5)))  # ties for Hardmax
    ref = run_ort(op, [x], {"axis": axis}, opset=13)[0]
    got = kernel(op, [x], {"axis": axis})[0]
    assert got.dtype == x.dtype
    same(got, ref)


# --------------------------------------------------------------------------- index ops

ALL_TYPES = [np.float32, np.float16, np.float64, np.int8, np.uint8, np.int32, np.int64, np.bool_]


@pytest.mark.parametrize("dtype", ALL_TYPES)
def test_expand_and_tile(dtype):
    x = data(dtype, (3, 1))
    ref = run_ort("Expand", [x, np.array([2, 1, 4], np.int64)], {},
                  consts={1: np.array([2, 1, 4], np.int64)})[0]
    same(kernel("Expand", [x], {"shape": [2, 1, 4]})[0], ref)
    ref = run_ort("Tile", [x, np.array([2, 3], np.int64)], {},
                  consts={1: np.array([2, 3], np.int64)})[0]
    same(kernel("Tile", [x], {"repeats": [2, 3]})[0], ref)


@pytest.mark.parametrize("dtype", ALL_TYPES)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather(dtype, axis):
    x = data(dtype, (4, 5, 3))
    n = x.shape[axis]
    idx = np.array([[0, -1], [n - 1, -n], [1, 1]], np.int64)
    ref = run_ort("Gather", [x, idx], {"axis": axis})[0]
    same(kernel("Gather", [x, idx], {"axis": axis})[0], ref)
    ref = run_ort("Gather", [x, np.array(2, np.int32)], {"axis": axis})[0]
    same(kernel("Gather", [x, np.array(2, np.int32)], {"axis": axis})[0], ref)


def test_gather_out_of_range_is_a_tensor_error():
    with pytest.raises(TensorError, match="Gather: index 5 is outside"):
        kernel("Gather", [np.zeros((5, 2)), np.array([0, 5])], {"axis": 0})
    with pytest.raises(TensorError, match="integers"):
        kernel("Gather", [np.zeros((5, 2)), np.array([0.0])], {"axis": 0})


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_, np.uint8])
@pytest.mark.parametrize("axis", [0, 1])
def test_gather_elements(dtype, axis):
    x = data(dtype, (4, 5))
    rng = np.random.default_rng(1)
    idx = rng.integers(-x.shape[axis], x.shape[axis], (3, 4)).astype(np.int64)
    ref = run_ort("GatherElements", [x, idx], {"axis": axis})[0]
    same(kernel("GatherElements", [x, idx], {"axis": axis})[0], ref)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_])
@pytest.mark.parametrize("b, idx", [
    (0, [[0, 1], [3, -1]]),
    (0, [[[2]], [[0]]]),
    (1, [[1], [0], ]),
    (1, [[[0, 2], [1, -1]], [[2, 0], [0, 0]]]),
])
def test_gather_nd(dtype, b, idx):
    x = data(dtype, (4, 3, 2) if b == 0 else (2, 3, 3))
    idx = np.array(idx, np.int64)
    ref = run_ort("GatherND", [x, idx], {"batch_dims": b}, opset=13)[0]
    same(kernel("GatherND", [x, idx], {"batch_dims": b})[0], ref)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
def test_scatter_elements(reduction, dtype):
    x = data(dtype, (4, 5))
    idx = np.array([[1, 0, 3, -1, 2], [0, 2, 1, 3, 3]], np.int64)  # no repeats per column
    upd = data(dtype, (2, 5), seed=5)
    attrs = {"axis": 0} | ({} if reduction == "none" else {"reduction": reduction})
    ref = run_ort("ScatterElements", [x, idx, upd], attrs, opset=18)[0]
    got = kernel("ScatterElements", [x, idx, upd], {"axis": 0, "reduction": reduction})[0]
    same(got, ref)


def test_scatter_repeated_indices_combine_in_order():
    x = np.zeros((1, 3), np.float32)
    idx = np.array([[1, 1, 1]], np.int64)
    upd = np.array([[2, 3, 4]], np.float32)
    for red, want in (("add", 9), ("mul", 0), ("max", 4), ("none", 4)):
        got = kernel("ScatterElements", [x, idx, upd], {"axis": 1, "reduction": red})[0]
        assert got[0, 1] == want, red


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_scatter_nd(reduction, dtype):
    x = data(dtype, (4, 3, 2))
    idx = np.array([[0, 1], [3, -1], [2, 0]], np.int64)
    upd = data(dtype, (3, 2), seed=3)
    attrs = {} if reduction == "none" else {"reduction": reduction}
    ref = run_ort("ScatterND", [x, idx, upd], attrs, opset=18)[0]
    same(kernel("ScatterND", [x, idx, upd], {"reduction": reduction})[0], ref)


@pytest.mark.parametrize("vdtype", [np.float32, np.int32, np.int64])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_one_hot(vdtype, axis):
    idx = np.array([[0, 3, -1], [5, -6, 2]], np.int64)  # 5 and -6 are outside [-5, 5)
    vals = np.array([2, 7], vdtype)
    ref = run_ort("OneHot", [idx, np.array(5, np.int64), vals], {"axis": axis},
                  consts={1: np.array(5, np.int64)})[0]
    got = kernel("OneHot", [idx, vals], {"depth": 5, "axis": axis})[0]
    assert got.dtype == vdtype
    same(got, ref)


@pytest.mark.parametrize("start, limit, delta, dtype", [
    (1, 10, 3, np.int64), (10, 1, -2, np.int32), (0.5, 3.3, 0.7, np.float32),
    (2.0, 2.0, 1.0, np.float64)])
def test_range(start, limit, delta, dtype):
    ins = [np.array(v, dtype) for v in (start, limit, delta)]
    ref = run_ort("Range", ins, {}, opset=11)[0]
    same(kernel("Range", ins, {"size": len(ref)})[0], ref)
    with pytest.raises(TensorError, match="built for"):
        kernel("Range", ins, {"size": len(ref) + 1})


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
@pytest.mark.parametrize("upper, k", [(1, 0), (0, 0), (1, -1), (0, 2), (1, 7)])
def test_trilu(dtype, upper, k):
    x = data(dtype, (2, 4, 5))
    ref = run_ort("Trilu", [x, np.array(k, np.int64)], {"upper": upper}, opset=14,
                  consts={1: np.array(k, np.int64)})[0]
    same(kernel("Trilu", [x], {"upper": bool(upper), "k": k})[0], ref)


@pytest.mark.parametrize("b_ax, t_ax", [(0, 1), (1, 0)])
def test_reverse_sequence(b_ax, t_ax):
    x = data(np.float32, (4, 4, 2) if b_ax == 0 else (5, 4, 2))
    lens = np.array([1, 4, 0, 3], np.int64)
    if b_ax == 1:
        lens = np.array([1, 5, 2, 3], np.int64)
    attrs = {"batch_axis": b_ax, "time_axis": t_ax}
    ref = run_ort("ReverseSequence", [x, lens], attrs, opset=10)[0]
    same(kernel("ReverseSequence", [x, lens], attrs)[0], ref)


@pytest.mark.parametrize("src", [np.float32, np.float64, np.float16, np.int32, np.uint8,
                                 np.int64, np.bool_])
@pytest.mark.parametrize("dst", [np.float32, np.float16, np.int8, np.int32, np.int64,
                                 np.uint8, np.bool_, np.float64])
def test_convert_is_onnx_cast(src, dst):
    from xir.types import ScalarType

    x = data(src, (3, 7)) * (np.array(3, src) if src != np.bool_ else True)
    if np.dtype(src).kind == "f" and np.dtype(dst).kind in "iu":
        x = np.clip(x, 0 if np.dtype(dst).kind == "u" else -100, 100).astype(src)
    ref = run_ort("Cast", [x], {"to": helper.np_dtype_to_tensor_dtype(np.dtype(dst))},
                  opset=13)[0]
    got = kernel("Convert", [x], {"to": ScalarType.from_numpy(dst).encode()})[0]
    assert got.dtype == dst
    same(got, ref)


@pytest.mark.parametrize("image, block, attrs", [
    ([5, 5], [2, 2], {}),
    ([6, 7], [3, 2], {"strides": [2, 1], "pads": [1, 0, 1, 2]}),
    ([7, 6], [2, 3], {"dilations": [2, 1], "pads": [0, 1, 1, 0], "strides": [1, 2]}),
    ([4, 3, 5], [2, 2, 2], {"strides": [2, 1, 2], "pads": [1, 0, 1, 1, 1, 0]}),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_col2im(image, block, attrs, dtype):
    from xir.ops.index import col2im_blocks

    nd = len(image)
    blocks = col2im_blocks(image, block, attrs.get("dilations", [1] * nd),
                           attrs.get("pads", [0] * 2 * nd), attrs.get("strides", [1] * nd))
    x = data(dtype, (2, 3 * int(np.prod(block)), int(np.prod(blocks))))
    consts = {1: np.array(image, np.int64), 2: np.array(block, np.int64)}
    ref = run_ort("Col2Im", [x, consts[1], consts[2]], attrs, consts=consts)[0]
    got = kernel("Col2Im", [x], {"image_shape": image, "block_shape": block, **attrs})[0]
    assert got.dtype == x.dtype
    same(got, ref)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_pad_every_mode(mode, dtype):
    x = data(dtype, (3, 4, 5))
    pads = np.array([1, 0, 2, 2, 3, 1], np.int64)
    attrs = {"mode": mode}
    ref = run_ort("Pad", [x, pads], attrs, consts={1: pads})[0]
    got = FLOAT_KERNELS["Pad"]([x], {"pad_before": [1, 0, 2], "pad_after": [2, 3, 1],
                                     "mode": mode})[0]
    same(got, ref)


# --------------------------------------------------------------------------- integer forms

def test_code_moving_ops_run_on_codes_with_the_scale_passing_through():
    from host_backend.ops import INT_KERNELS
    from xir.types import INT8, INT64, QuantizedType, TensorType

    q_in, q_out = QuantizedType(INT8, 0.05), QuantizedType(INT8, 0.1)
    x = np.random.default_rng(4).integers(-128, 128, (3, 4, 5)).astype(np.int8)
    t_in = TensorType(q_in, x.shape)
    idx = np.array([2, 0, -1], np.int64)
    t_idx = TensorType(INT64, idx.shape)
    # same scale: codes move exactly
    got = INT_KERNELS["Gather"]([x, idx], {"axis": 1}, [t_in, t_idx],
                                [TensorType(q_in, (3, 3, 5))])[0]
    np.testing.assert_array_equal(got, np.take(x, idx, axis=1))
    # another output scale: rescaled (0.05 -> 0.1 halves the codes, rounded)
    got = INT_KERNELS["Tile"]([x], {"repeats": [1, 2, 1]}, [t_in],
                              [TensorType(q_out, (3, 8, 5))])[0]
    np.testing.assert_allclose(got.astype(float) * 0.1, np.tile(x, (1, 2, 1)) * 0.05,
                               atol=0.05 + 1e-9)
    v, i = INT_KERNELS["TopK"]([x], {"k": 2, "axis": 2}, [t_in],
                               [TensorType(q_in, (3, 4, 2)), TensorType(INT64, (3, 4, 2))])
    rv, ri = FLOAT_KERNELS["TopK"]([x.astype(np.float32) * 0.05], {"k": 2, "axis": 2})
    np.testing.assert_array_equal(i, ri)
    np.testing.assert_allclose(v * 0.05, rv, rtol=1e-6)
    a = INT_KERNELS["ArgReduce"]([x], {"func": "min", "axis": 0}, [t_in],
                                 [TensorType(INT64, (1, 4, 5))])[0]
    np.testing.assert_array_equal(a, np.argmin(x, axis=0)[None])
    m = INT_KERNELS["Reduce"]([x], {"func": "max", "axes": [1]}, [t_in],
                              [TensorType(q_in, (3, 1, 5))])[0]
    np.testing.assert_array_equal(m, x.max(axis=1, keepdims=True))
    with pytest.raises(ValueError, match="no integer form"):
        INT_KERNELS["Reduce"]([x], {"func": "sum", "axes": [1]}, [t_in],
                              [TensorType(q_in, (3, 1, 5))])
    # scatter: updates at another scale are moved to the data's first
    upd = np.full((3, 1, 5), 40, np.int8)
    sidx = np.zeros((3, 1, 5), np.int64)
    got = INT_KERNELS["ScatterElements"](
        [x, sidx, upd], {"axis": 1, "reduction": "none"},
        [t_in, TensorType(INT64, sidx.shape), TensorType(q_out, upd.shape)], [t_in])[0]
    assert (got[:, 0] == 80).all() and (got[:, 1:] == x[:, 1:]).all()

"""Host kernels of xir.ops.reduce: Reduce, ArgReduce, TopK, CumSum/CumProd, Hardmax, LogSoftmax.

After onnx/reference: each result has the input's element type (ArgReduce and TopK's indices
int64). Integer sums and products wrap in the input's type, as ONNX's do; float16 inputs
accumulate in float32 and round once at the end (float32 and float64 stay themselves).
Empty reductions give the function's identity. Integer (quantized) forms where the op picks
codes (Reduce max / min, ArgReduce, TopK) and for Reduce mean (the sum requantized by 1 / n).
"""

from __future__ import annotations

import numpy as np

from xrt.errors import TensorError

from ._common import require
from .index import moves_codes


def _axes(attrs: dict, ndim: int) -> tuple[int, ...]:
    axes = attrs.get("axes") or []
    if not axes:
        return tuple(range(ndim))
    return tuple(sorted(int(a) % ndim for a in axes))


def _wide(x: np.ndarray) -> np.ndarray:
    """Floats narrower than 32 bits widened to float32 for accumulation."""
    return x.astype(np.float32) if x.dtype == np.float16 else x


def _lowest(dtype: np.dtype):
    if dtype == np.bool_:
        return False
    return np.iinfo(dtype).min if np.issubdtype(dtype, np.integer) else -np.inf


def _highest(dtype: np.dtype):
    if dtype == np.bool_:
        return True
    return np.iinfo(dtype).max if np.issubdtype(dtype, np.integer) else np.inf


def _sum(x, ax, keep):
    w = _wide(x)
    return np.sum(w, axis=ax, keepdims=keep, dtype=w.dtype if w.dtype != np.bool_ else None)


def _mean(x, ax, keep):
    w = _wide(x)
    if np.issubdtype(w.dtype, np.integer):
        n = int(np.prod([x.shape[a] for a in ax]))
        s = np.sum(w, axis=ax, keepdims=keep, dtype=w.dtype)
        return np.trunc(s / n) if n else s  # numpy's integer mean: truncated quotient
    return np.mean(w, axis=ax, keepdims=keep, dtype=w.dtype)


def _max(x, ax, keep):
    if x.size == 0:
        return _filled(x, ax, keep, _lowest(x.dtype))
    return np.maximum.reduce(x, axis=ax, keepdims=keep)


def _min(x, ax, keep):
    if x.size == 0:
        return _filled(x, ax, keep, _highest(x.dtype))
    return np.minimum.reduce(x, axis=ax, keepdims=keep)


def _prod(x, ax, keep):
    w = _wide(x)
    return np.prod(w, axis=ax, keepdims=keep, dtype=w.dtype)


def _l1(x, ax, keep):
    return _sum(np.abs(x), ax, keep)


def _sum_square(x, ax, keep):
    w = _wide(x)
    return _sum(w * w, ax, keep)


def _l2(x, ax, keep):
    w = _wide(x)
    s = np.sum(w * w, axis=ax, keepdims=keep)
    return np.sqrt(s.astype(np.float64) if np.issubdtype(s.dtype, np.integer) else s)


def _log_sum(x, ax, keep):
    if x.size == 0:
        return _filled(x, ax, keep, -np.inf)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(_sum(x, ax, keep))


def _log_sum_exp(x, ax, keep):
    """log(sum(exp(x))) with the largest finite entry taken out first (no overflow)."""
    if x.size == 0:
        return _filled(x, ax, keep, -np.inf)
    w = _wide(x)
    finite = np.where(np.isfinite(w), w, -np.inf)
    mx = np.max(finite, axis=ax, keepdims=True)
    mx = np.where(np.isfinite(mx), mx, 0).astype(w.dtype)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        s = np.sum(np.exp(w - mx), axis=ax, keepdims=True)
        out = np.log(s) + mx
    return out if keep else np.squeeze(out, axis=ax)


def _filled(x, ax, keep, value):
    shape = tuple(1 if i in ax else d for i, d in enumerate(x.shape)) if keep else \
        tuple(d for i, d in enumerate(x.shape) if i not in ax)
    return np.full(shape, value, dtype=x.dtype if x.dtype != np.float16 else np.float32)


_FUNCS = {"sum": _sum, "mean": _mean, "max": _max, "min": _min, "prod": _prod, "l1": _l1,
          "l2": _l2, "log_sum": _log_sum, "log_sum_exp": _log_sum_exp,
          "sum_square": _sum_square}


def reduce(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """`func` over `axes` (empty: all), keepdims; the result in the input's element type."""
    x = np.asarray(inputs[0])
    func = str(require(attrs, "func", "Reduce"))
    if func not in _FUNCS:
        raise ValueError(f"Reduce: func {func!r} is not one of {sorted(_FUNCS)}")
    ax = _axes(attrs, x.ndim)
    y = _FUNCS[func](x, ax, bool(attrs.get("keepdims", True)))
    y = np.asarray(y)
    if y.dtype != x.dtype:
        with np.errstate(invalid="ignore", over="ignore"):
            y = y.astype(x.dtype)
    return [np.asarray(y, order="C")]


def arg_reduce(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """int64 index of the max/min along `axis`; ties: first, or last with select_last_index."""
    x = np.asarray(inputs[0])
    func = str(require(attrs, "func", "ArgReduce"))
    if func not in ("max", "min"):
        raise ValueError(f"ArgReduce: func {func!r} is not 'max' or 'min'")
    axis = int(attrs.get("axis", 0)) % max(x.ndim, 1)
    pick = np.argmax if func == "max" else np.argmin
    if attrs.get("select_last_index", False):
        n = x.shape[axis]
        idx = n - 1 - pick(np.flip(x, axis=axis), axis=axis)
    else:
        idx = pick(x, axis=axis)
    idx = idx.astype(np.int64)
    if attrs.get("keepdims", True):
        idx = np.expand_dims(idx, axis)
    return [np.asarray(idx, order="C")]


def topk(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """The k largest/smallest along `axis`, sorted; equal values keep index order."""
    x = np.asarray(inputs[0])
    k = int(require(attrs, "k", "TopK"))
    axis = int(attrs.get("axis", -1)) % x.ndim
    n = x.shape[axis]
    if not 0 <= k <= n:
        raise ValueError(f"TopK: k = {k} outside 0..{n}")
    if attrs.get("largest", True):
        # a stable ascending sort of the reversed axis, read backwards: descending values,
        # and among equal values the smaller original index first
        order = np.argsort(np.flip(x, axis=axis), axis=axis, kind="stable")
        order = n - 1 - np.flip(order, axis=axis)
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    idx = np.take(order, np.arange(k), axis=axis).astype(np.int64)
    vals = np.take_along_axis(x, idx, axis=axis)
    return [np.asarray(vals, order="C"), np.asarray(idx, order="C")]


def cumsum(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """Running sum along `axis` in the input's type (exclusive / reverse as ONNX CumSum)."""
    return [_running(inputs, attrs, np.cumsum, 0, "CumSum")]


def cumprod(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """Running product along `axis` in the input's type (exclusive / reverse as CumProd)."""
    return [_running(inputs, attrs, np.cumprod, 1, "CumProd")]


def _running(inputs: list[np.ndarray], attrs: dict, scan, identity: int, op: str) -> np.ndarray:
    """scan (np.cumsum / np.cumprod) along the axis (the second input's number, else the
    attribute); exclusive starts from `identity`."""
    x = np.asarray(inputs[0])
    axis = int(np.asarray(inputs[1]).reshape(-1)[0]) if len(inputs) > 1 else \
        int(attrs.get("axis", 0))
    if not -x.ndim <= axis < x.ndim:
        raise TensorError(f"{op}: axis {axis} is out of range for rank {x.ndim}")
    axis %= x.ndim
    reverse = bool(attrs.get("reverse", False))
    w = _wide(x)
    if reverse:
        w = np.flip(w, axis=axis)
    if attrs.get("exclusive", False):
        head = [slice(None)] * x.ndim
        head[axis] = slice(0, max(x.shape[axis] - 1, 0))
        first = np.full_like(np.take(w, [0], axis=axis), identity) if x.shape[axis] else w
        w = np.concatenate([first, w[tuple(head)]], axis=axis)
    y = scan(w, axis=axis, dtype=w.dtype)
    if reverse:
        y = np.flip(y, axis=axis)
    return np.asarray(y.astype(x.dtype, copy=False), order="C")


def hardmax(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """1 at the first largest entry along `axis`, 0 elsewhere."""
    x = np.asarray(inputs[0])
    axis = int(attrs.get("axis", -1)) % x.ndim
    y = np.zeros_like(x)
    if x.size:
        idx = np.expand_dims(np.argmax(x, axis=axis), axis)
        np.put_along_axis(y, idx, 1, axis=axis)
    return [y]


def log_softmax(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """x - max - log(sum(exp(x - max))) along `axis`."""
    x = np.asarray(inputs[0])
    axis = int(attrs.get("axis", -1)) % x.ndim
    w = _wide(x)
    if x.size == 0:
        return [x.copy()]
    z = w - np.max(w, axis=axis, keepdims=True)
    with np.errstate(divide="ignore"):
        y = z - np.log(np.sum(np.exp(z), axis=axis, keepdims=True))
    return [np.asarray(y.astype(x.dtype, copy=False), order="C")]


def _reduce_codes(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    func = str(attrs.get("func"))
    if func not in ("max", "min"):
        raise ValueError(f"Reduce: func {func!r} has no integer form (max / min move codes, "
                         f"mean requantizes a sum)")
    return reduce(inputs, attrs)


_reduce_moves = moves_codes(_reduce_codes, "reduce")


def reduce_int(inputs, attrs, in_types, out_types, *, fake=False):
    """Reduce on integer codes. max / min pick codes (the scale passes through, or one rescale
    to the output's). mean, as AvgPool2d: the exact int64 sum of the `n` reduced codes, then
    `requantize(sum, requant_multiplier(s_in, 1.0 / n, s_out))` (docs/quantization.md,
    "Integer ops")."""
    if str(attrs.get("func")) != "mean":
        return _reduce_moves(inputs, attrs, in_types, out_types, fake=fake)
    from xir.quant.fixed_point import requant_multiplier

    from ._common import rq_any, scale1

    x = np.asarray(inputs[0])
    ax = _axes(attrs, x.ndim)
    n = int(np.prod([x.shape[a] for a in ax]))
    if n == 0:
        raise ValueError("Reduce mean over an empty axis has no integer form (the float mean "
                         "is NaN)")
    acc = (x.astype(np.float64) if fake else x.astype(np.int64)).sum(
        axis=ax, keepdims=bool(attrs.get("keepdims", True)))
    m, s = requant_multiplier(scale1(in_types[0]), 1.0 / n, scale1(out_types[0]))
    return [rq_any(acc, m, s, out_types[0].numpy_dtype, fake=fake)]


FLOAT_KERNELS: dict = {
    "Reduce": reduce,
    "ArgReduce": arg_reduce,
    "TopK": topk,
    "CumSum": cumsum,
    "CumProd": cumprod,
    "Hardmax": hardmax,
    "LogSoftmax": log_softmax,
}
#: integer forms of the reductions that only pick codes (a positive scale keeps the order),
#: and of Reduce mean (a requantized sum, as AvgPool2d)
INT_KERNELS: dict = {
    "Reduce": reduce_int,
    "ArgReduce": moves_codes(arg_reduce, "arg_reduce"),
    "TopK": moves_codes(topk, "topk"),
}

"""The op catalogue of the conformance kit: one small network per op type, on random shapes,
each with seeded inputs, as the onnx package's backend test suite gives every backend the same
node tests. A backend is checked on the cases whose op it claims (`isOpSupported`).

Every case is a function `(rng, dtype) -> Case` building the network with `xir.NetworkBuilder`
in the NHWC layout the runtime uses; `dtype` is a numpy float dtype name the backend declares
(`Backend.conformance_dtypes`, default float32).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class Case:
    """One network around the op under test (`op_type`), with inputs to feed it."""

    op_type: str
    network: Any
    inputs: list[np.ndarray]
    description: str

    def op(self) -> Any:
        """The op under test (the network's only op of that type)."""
        return next(op for op in self.network.ops if op.op_type == self.op_type)


def _element(dtype: str) -> Any:
    from xir.types import ScalarType

    from .result import ConformanceError

    try:
        kind = np.dtype(dtype)
    except TypeError:
        raise ConformanceError(f"conformance dtype {dtype!r} is not a numpy dtype") from None
    if kind.kind != "f":
        raise ConformanceError(f"the op catalogue makes float cases; {dtype} is not a float "
                               f"dtype")
    bits = kind.itemsize * 8
    return ScalarType("fp", bits)


def _nhwc(rng: np.random.Generator, lo: int = 2, hi: int = 9, cmax: int = 6) -> list[int]:
    return [1, int(rng.integers(lo, hi)), int(rng.integers(lo, hi)), int(rng.integers(1, cmax))]


def _data(rng: np.random.Generator, shape: list[int], dtype: str) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


def _start(name: str, dtype: str) -> Any:
    import xir

    return xir.NetworkBuilder(f"conformance_{name}_{dtype}")


def conv2d(rng: np.random.Generator, dtype: str) -> Case:
    shape = _nhwc(rng, 3, 10)
    k = int(rng.choice([1, 3]))
    stride = int(rng.integers(1, 3))
    pad = int(rng.integers(0, k // 2 + 1))
    cout = int(rng.integers(1, 7))
    act = str(rng.choice(["none", "relu"]))
    b = _start("conv2d", dtype)
    x = b.input(shape, _element(dtype), layout="NHWC")
    w = _data(rng, [k, k, shape[3], cout], dtype)
    y = b.conv2d(x, w, _data(rng, [cout], dtype), stride_height=stride, stride_width=stride,
                 pad_top=pad, pad_bottom=pad, pad_left=pad, pad_right=pad, act=act)
    b.output(y)
    return Case("Conv2d", b.build(), [_data(rng, shape, dtype)],
                f"{shape} k{k} s{stride} p{pad} -> {cout} ch, act {act}")


def relu(rng: np.random.Generator, dtype: str) -> Case:
    shape = _nhwc(rng)
    b = _start("relu", dtype)
    b.output(b.relu(b.input(shape, _element(dtype), layout="NHWC")))
    return Case("Relu", b.build(), [_data(rng, shape, dtype)], f"{shape}")


def _binary(name: str, method: str) -> Callable[[np.random.Generator, str], Case]:
    def make(rng: np.random.Generator, dtype: str) -> Case:
        shape = _nhwc(rng)
        b = _start(method, dtype)
        x = b.input(shape, _element(dtype), layout="NHWC")
        y = b.input(shape, _element(dtype), layout="NHWC")
        b.output(getattr(b, method)(x, y))
        return Case(name, b.build(), [_data(rng, shape, dtype), _data(rng, shape, dtype)],
                    f"{shape} {name.lower()} {shape}")
    make.__name__ = method
    return make


def _pool(name: str, method: str) -> Callable[[np.random.Generator, str], Case]:
    def make(rng: np.random.Generator, dtype: str) -> Case:
        shape = _nhwc(rng, 4, 11)
        k = int(rng.integers(2, 4))
        s = int(rng.integers(1, 3))
        b = _start(method, dtype)
        x = b.input(shape, _element(dtype), layout="NHWC")
        b.output(getattr(b, method)(x, pool_height=k, pool_width=k, stride_height=s,
                                    stride_width=s))
        return Case(name, b.build(), [_data(rng, shape, dtype)], f"{shape} {k}x{k} s{s}")
    make.__name__ = method
    return make


def _unary(name: str, method: str) -> Callable[[np.random.Generator, str], Case]:
    def make(rng: np.random.Generator, dtype: str) -> Case:
        shape = _nhwc(rng)
        b = _start(method, dtype)
        b.output(getattr(b, method)(b.input(shape, _element(dtype), layout="NHWC")))
        return Case(name, b.build(), [_data(rng, shape, dtype)], f"{shape}")
    make.__name__ = method
    return make


def matmul(rng: np.random.Generator, dtype: str) -> Case:
    m, k, n = (int(rng.integers(1, 9)) for _ in range(3))
    b = _start("matmul", dtype)
    x = b.input([m, k], _element(dtype))
    b.output(b.matmul(x, _data(rng, [k, n], dtype)))
    return Case("Matmul", b.build(), [_data(rng, [m, k], dtype)], f"[{m}, {k}] x [{k}, {n}]")


def concat(rng: np.random.Generator, dtype: str) -> Case:
    a, c = _nhwc(rng), int(rng.integers(1, 6))
    b = _start("concat", dtype)
    x = b.input(a, _element(dtype), layout="NHWC")
    y = b.input(a[:3] + [c], _element(dtype), layout="NHWC")
    b.output(b.concat(x, y, axis=-1))
    return Case("Concat", b.build(), [_data(rng, a, dtype), _data(rng, a[:3] + [c], dtype)],
                f"{a} ++ {a[:3] + [c]} on C")


def softmax(rng: np.random.Generator, dtype: str) -> Case:
    shape = [int(rng.integers(1, 4)), int(rng.integers(2, 12))]
    b = _start("softmax", dtype)
    b.output(b.softmax(b.input(shape, _element(dtype)), axis=-1))
    return Case("Softmax", b.build(), [_data(rng, shape, dtype)], f"{shape} on the last axis")


#: op type -> the case builder; the kit runs the cases of the ops a backend claims
CASES: dict[str, Callable[[np.random.Generator, str], Case]] = {
    "Conv2d": conv2d,
    "Relu": relu,
    "Add": _binary("Add", "add"),
    "Sub": _binary("Sub", "sub"),
    "Multiply": _binary("Multiply", "multiply"),
    "MaxPool2d": _pool("MaxPool2d", "max_pool2d"),
    "AvgPool2d": _pool("AvgPool2d", "avg_pool2d"),
    "Sigmoid": _unary("Sigmoid", "sigmoid"),
    "Tanh": _unary("Tanh", "tanh"),
    "Matmul": matmul,
    "Concat": concat,
    "Softmax": softmax,
}


def make_case(op_type: str, seed: int, trial: int, dtype: str) -> Case:
    """The `trial`-th random case of `op_type` (the same for the same seed)."""
    rng = np.random.default_rng([seed, trial, sum(map(ord, op_type)), len(op_type)])
    return CASES[op_type](rng, dtype)

"""Lookup tables for activations that do not fold into requantization (SiLU, Sigmoid, ...).

A table maps every input code to an output code, so the hardware executes the activation
exactly: the simulators and the HostBackend integer reference index the same table.

Hardware indexing: the table address is the input code's two's-complement bit pattern with
the sign bit inverted (offset binary), i.e. ``index = q_in - qmin = q_in + 2**(bits-1)``.
Entry 0 belongs to the most negative input (-128 or -32768), entry ``2**(bits-1)`` to 0.
An int8 table has 256 entries, an int16 table 65536.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from xir.quant.fixed_point import qrange, quantize

__all__ = ["LUT_FUNCTIONS", "LUT_OPS", "build_lut", "apply_lut", "lut_function", "lut_params"]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))  # never overflows
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _silu(x: np.ndarray) -> np.ndarray:
    return x * _sigmoid(x)


def _hardswish(x: np.ndarray) -> np.ndarray:
    return x * np.clip(x + 3.0, 0.0, 6.0) / 6.0


def _hardsigmoid(x: np.ndarray) -> np.ndarray:
    return np.clip(x / 6.0 + 0.5, 0.0, 1.0)


def _exp(x: np.ndarray) -> np.ndarray:
    # exp(709.78) is the float64 limit; anything above saturates the table anyway
    return np.exp(np.minimum(x, 709.0))


_erf = np.frompyfunc(math.erf, 1, 1)


def _gelu(x: np.ndarray, tanh: float = 0.0) -> np.ndarray:
    if tanh:  # the tanh form (approximate="tanh")
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)).astype(np.float64))


def _power(x: np.ndarray, power: float, scale: float = 1.0, shift: float = 0.0) -> np.ndarray:
    # a negative base to a fractional power has no real value: 0 there; a zero base to a
    # negative power saturates the table
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.power(shift + scale * x, power)
    return np.nan_to_num(y, nan=0.0, posinf=np.finfo(np.float64).max,
                         neginf=np.finfo(np.float64).min)


#: Float64 definitions of the table functions, by the name used in ``build_lut``; the ones
#: with parameters take them after ``x`` (``lut_params`` reads them from an op's attributes).
LUT_FUNCTIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "sigmoid": _sigmoid,
    "silu": _silu,
    "hardswish": _hardswish,
    "hardsigmoid": _hardsigmoid,
    "tanh": np.tanh,
    "exp": _exp,
    "gelu": _gelu,
    "power": _power,
}


#: Ops that compute as a lookup table once quantized: op type -> table function name.
LUT_OPS = {"Sigmoid": "sigmoid", "Tanh": "tanh", "Silu": "silu", "Hardswish": "hardswish",
           "Gelu": "gelu", "Power": "power"}

def lut_params(op_type: str, attrs: dict) -> tuple[float, ...]:
    """The parameters of `op_type`'s table function after ``x``, read from the op's attributes:
    Power's (power, scale, shift), GELU's tanh-form flag."""
    if op_type == "Power":
        return tuple(float(attrs[k]) for k in ("power", "scale", "shift"))
    if op_type == "Gelu" and attrs.get("approximate", "none") == "tanh":
        return (1.0,)
    return ()


def lut_function(fn_name: str, params: tuple[float, ...] = ()
                 ) -> Callable[[np.ndarray], np.ndarray]:
    """The float64 function behind a table name with its parameters bound (``ValueError`` for
    an unknown name)."""
    try:
        fn = LUT_FUNCTIONS[fn_name.lower()]
    except KeyError:
        raise ValueError(
            f"no lookup-table function {fn_name!r}; known: {', '.join(sorted(LUT_FUNCTIONS))}"
        ) from None
    return (lambda x: fn(x, *params)) if params else fn


def build_lut(
    fn_name: str,
    in_scale: float,
    out_scale: float,
    in_dtype: Any = np.int8,
    out_dtype: Any = None,
    params: tuple[float, ...] = (),
) -> np.ndarray:
    """Table of ``saturate(round_half_away(fn(q_in * in_scale) / out_scale))`` for every input code.

    ``fn_name`` is one of :data:`LUT_FUNCTIONS` (sigmoid, silu, hardswish, hardsigmoid, tanh,
    exp, gelu, power), ``params`` its parameters (`lut_params`). ``out_dtype`` defaults to
    ``in_dtype``. Entry ``i`` holds the output for ``q_in = i + qmin`` (see the module
    docstring for the hardware addressing). All arithmetic is float64; the result is an array
    of ``out_dtype`` with ``2**bits(in_dtype)`` entries.
    """
    fn = lut_function(fn_name, params)
    in_dt = np.dtype(in_dtype)
    if in_dt not in (np.dtype(np.int8), np.dtype(np.int16)):
        raise TypeError(f"lookup tables take int8 or int16 inputs, not {in_dt}")
    out_dt = in_dt if out_dtype is None else np.dtype(out_dtype)
    qmin, qmax = qrange(in_dt)
    codes = np.arange(qmin, qmax + 1, dtype=np.int64)
    x = codes.astype(np.float64) * np.float64(in_scale)
    return quantize(fn(x), out_scale, out_dt)


def apply_lut(q: np.ndarray, lut: np.ndarray, in_dtype: Any = None) -> np.ndarray:
    """``lut[q - qmin]``: run a table built by :func:`build_lut` on integer codes ``q``.

    ``in_dtype`` (defaults to ``q.dtype``) fixes the table size the codes address; codes
    outside its range raise ``ValueError``.
    """
    qa = np.asarray(q)
    if qa.dtype.kind not in "iu":
        raise TypeError(f"apply_lut expects integer codes, got {qa.dtype}")
    in_dt = qa.dtype if in_dtype is None else np.dtype(in_dtype)
    qmin, qmax = qrange(in_dt)
    lut = np.asarray(lut)
    if lut.ndim != 1 or lut.shape[0] != qmax - qmin + 1:
        raise ValueError(
            f"table has shape {lut.shape}; a {in_dt} table needs ({qmax - qmin + 1},) entries"
        )
    idx = qa.astype(np.int64) - qmin
    if idx.size and (idx.min() < 0 or idx.max() > qmax - qmin):
        raise ValueError(f"codes outside the {in_dt} range [{qmin}, {qmax}]")
    return lut[idx]

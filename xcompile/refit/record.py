"""What the quantize stage freezes for a refit: per layer with constant weights whose
provenance is known, the op (type, name, attributes), its feature input's and output's
quantized types (the activation scales and bits a refit keeps), the weight granularity and
bits, the bias's accumulator type, and the expressions of its float weight and bias over ONNX
initializers (`xcompile.refit.provenance`).

`layer_records(quantized)` returns them as json (``{op_id: record}``); the quantize stage keeps
them in the network's tags under `RECORDS_TAG`, which every later stage copies (adapt, the
targets' lowering), so a lowered network -- the one a session deploys -- still knows them
although its HardOps hold only packed bytes. `rebuild_op` makes the quantized op back from a
record and new integer parameters: what the target's lowering rule packs again.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from xir.ops.base import OP_REGISTRY, Operation
from xir.types import Layout, QuantizedType, ScalarType, TensorType
from xir.values import Params, Value

from .provenance import src_of

__all__ = ["RECORDS_TAG", "LAYER_OPS", "layer_records", "rebuild_op", "attrs_from_json"]

#: the network tag holding the records
RECORDS_TAG = "refit"
#: the op types whose constant weights a refit updates
LAYER_OPS = frozenset({"Conv2d", "ConvTranspose2d", "Matmul"})


def _el_name(el: Any) -> str:
    return str(np.dtype(el.numpy_dtype))


def _value(v: Any) -> dict[str, Any]:
    el = v.dtype.element_dtype
    out: dict[str, Any] = {"v": int(v.v_id), "shape": [int(d) for d in v.shape],
                           "layout": v.dtype.layout.spec}
    if isinstance(el, QuantizedType):
        out["dtype"] = _el_name(el.storage)
        out["scale"] = [float(s) for s in np.asarray(el.scale).reshape(-1)]
    else:
        out["dtype"] = str(np.dtype(v.dtype.numpy_dtype))
    return out


def _param(p: Any) -> dict[str, Any]:
    out = _value(p)
    out.pop("v")
    out.pop("scale", None)  # recomputed from the new weights
    el = p.dtype.element_dtype
    if isinstance(el, QuantizedType):
        out["axis"] = None if el.axis is None else int(el.axis)
    out["src"] = src_of(p)
    return out


def _json_attr(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return {"float": repr(x)}
    if isinstance(x, (list, tuple)):
        return [_json_attr(i) for i in x]
    if isinstance(x, np.generic):
        return x.item()
    return x


def attrs_from_json(attrs: dict[str, Any]) -> dict[str, Any]:
    """The op attributes a record keeps, back in Python form (inf restored)."""

    def back(x: Any) -> Any:
        if isinstance(x, dict) and set(x) == {"float"}:
            return float(x["float"])
        if isinstance(x, list):
            return [back(i) for i in x]
        return x

    return {k: back(v) for k, v in attrs.items()}


def layer_records(q: Any) -> dict[str, dict[str, Any]]:
    """``{str(op_id): record}`` for every Conv2d / ConvTranspose2d / Matmul of quantized network
    `q` whose weight is a constant with a known provenance (its bias too, if it has one)."""
    out: dict[str, dict[str, Any]] = {}
    for op in q.ops:
        if op.op_type not in LAYER_OPS or len(op.inputs) < 2:
            continue
        w = op.inputs[1]
        if src_of(w) is None or w.data is None:
            continue
        b = op.inputs[2] if len(op.inputs) > 2 else None
        if b is not None and (not b.is_params or src_of(b) is None):
            continue  # a bias of unknown origin: the layer cannot be recomputed
        out[str(op.op_id)] = {
            "type": op.op_type, "name": op.name,
            "attrs": {k: _json_attr(v) for k, v in op.attrs.items()},
            "x": _value(op.inputs[0]), "y": _value(op.outputs[0]),
            "w": _param(w), "b": None if b is None else _param(b),
            "integer": isinstance(w.dtype.element_dtype, QuantizedType)}
    return out


def _tensor_type(d: dict[str, Any], scale: Any = None, axis: int | None = None) -> TensorType:
    st = ScalarType.from_numpy(np.dtype(d["dtype"]))
    el = st if scale is None else QuantizedType(st, scale, axis=axis)
    shape = tuple(d["shape"])
    lay = d.get("layout") or ""
    layout = Layout(lay) if lay and len(Layout(lay).tokens) == len(shape) else \
        Layout.any(len(shape))
    return TensorType(el, shape, layout)


def rebuild_op(op_id: int, rec: dict[str, Any], w: np.ndarray, w_scale: Any,
               b: np.ndarray | None, b_scale: Any) -> Operation:
    """The layer of record `rec` with weight `w` and bias `b` (integer codes with their scales
    for an integer layer; float arrays, scales None, for a float one), its input and output
    values at the frozen quantized types: the op a target's lowering rule reads."""
    x = Value(rec["x"]["v"], _tensor_type(rec["x"], rec["x"].get("scale")), f"v{rec['x']['v']}")
    y = Value(rec["y"]["v"], _tensor_type(rec["y"], rec["y"].get("scale")), f"v{rec['y']['v']}")
    wr = rec["w"]
    wt = _tensor_type({**wr, "dtype": str(w.dtype)}, w_scale, wr.get("axis"))
    ins: list[Any] = [x, Params(-1, wt, w, f"{rec['name']}.weight")]
    if b is not None:
        br = rec["b"]
        b_axis = 0 if b_scale is not None and np.asarray(b_scale).size > 1 else None
        bt = _tensor_type({**br, "dtype": str(b.dtype)}, b_scale, b_axis)
        ins.append(Params(-2, bt, b, f"{rec['name']}.bias"))
    return OP_REGISTRY[rec["type"]](ins, [y], op_id=int(op_id), name=rec["name"],
                                    **attrs_from_json(rec["attrs"]))

"""Per-file decoding state (`Reader`): json objects -> types, values and ops, with the v_id table
and the file version's strictness (unknown keys are errors, or skipped and reported)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import DuplicateIdError, FieldTypeError, UnknownTypeKeyError, XirError
from ...ops.base import HOST_TARGET, OP_REGISTRY, Operation, check_target
from ...types import Layout, QuantizedType, ScalarType, TensorType
from ...values import HOSTM, MemType, Params, Value
from .fields import expect, get_int, get_list, get_str, get_tags, need, short, sub, tname, type_key
from .schema import (
    FREE_LIST_ATTRS,
    HARDOP_FIELDS,
    ID_MAX,
    MAX_SUB_DEPTH,
    OP_FIELDS,
    PARAMS_KEY,
    PREFIX,
    QUANT_FIELDS,
    QUANT_KEY,
    TENSOR_FIELDS,
    TENSOR_KEY,
    VALUE_FIELDS,
    VALUE_KEY,
    is_known,
)


class Reader:
    """Per-file decoding state: the v_id table and the version's strictness."""

    def __init__(self, file: str | None, strict: bool, vendor: bool = False) -> None:
        self.file = file
        self.strict = strict  # unknown keys are errors (file is not newer than this reader)
        self.vendor = vendor  # a file of the vendor's toolchain: its rules (docs/xir-format.md)
        self.values: dict[int, Value] = {}
        self.max_op_id = -1
        self.ignored: dict[str, set[str]] = {}  # what -> unknown keys skipped (lenient mode)

    def check_keys(self, obj: dict, allowed: Any, what: str) -> None:
        extra = [k for k in obj if k not in allowed]
        if not extra:
            return
        if self.strict:
            raise FieldTypeError(f"{what} has unknown field '{extra[0]}'", field=str(extra[0]))
        self.ignored.setdefault(what, set()).update(str(k) for k in extra)

    # --- types -----------------------------------------------------------------------------
    def element(self, obj: Any) -> ScalarType | QuantizedType:
        if isinstance(obj, str):
            return ScalarType.parse(obj)
        if not isinstance(obj, dict):
            raise FieldTypeError(f"element_dtype must be a string like '@fp(32)' or a "
                                 f"QuantizedType object, not {tname(obj)}")
        expect(obj, QUANT_KEY, "quantized element type")
        self.check_keys(obj, QUANT_FIELDS, "QuantizedType")
        storage = ScalarType.parse(get_str(obj, "storage", "QuantizedType"))
        if not storage.is_int():
            raise FieldTypeError(f"quantized storage must be an integer type, not "
                                 f"{storage.encode()}", field="storage")
        scale = get_list(obj, "scale", "QuantizedType")
        if not scale or not all(isinstance(s, (int, float)) and not isinstance(s, bool)
                                for s in scale):
            raise FieldTypeError("scale must be a non-empty array of numbers", field="scale")
        zp = obj.get("zero_point", [0])
        if isinstance(zp, int) and not isinstance(zp, bool):
            zp = [zp]
        if not isinstance(zp, list) or not all(
                isinstance(z, int) and not isinstance(z, bool) for z in zp):
            raise FieldTypeError("zero_point must be an array of integers", field="zero_point")
        if storage.kind != "sint":
            # the integer kernels and both chips compute signed fixed point only
            # (docs/quantization.md): an unsigned storage would reach them at forward time
            raise FieldTypeError(f"quantized storage must be a signed integer type "
                                 f"(@sint(8|16|32|64)), not {storage.encode()}", field="storage")
        info = np.iinfo(storage.numpy_dtype)
        if any(not info.min <= z <= info.max for z in zp):
            raise FieldTypeError(f"zero_point {short(zp)} outside the range of "
                                 f"{storage.encode()}", field="zero_point")
        axis = obj.get("axis")
        if axis is not None and (not isinstance(axis, int) or isinstance(axis, bool)):
            raise FieldTypeError(f"axis must be an integer or null, not {tname(axis)}",
                                 field="axis")
        if axis is not None and len(zp) not in (1, len(scale)):
            raise FieldTypeError(f"{len(zp)} zero points for {len(scale)} scales",
                                 field="zero_point")
        return QuantizedType(storage, [_to_float(s, "scale") for s in scale], zp, axis)

    def tensor_type(self, obj: Any) -> TensorType:
        expect(obj, TENSOR_KEY, "dtype")
        self.check_keys(obj, TENSOR_FIELDS, "TensorType")
        element = sub("element_dtype", self.element, need(obj, "element_dtype", "TensorType"))
        shape = get_list(obj, "shape", "TensorType")
        if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise FieldTypeError(f"shape must be an array of non-negative integers, not "
                                 f"{short(shape)}", field="shape")
        layout = None
        if obj.get("layout") is not None:
            layout = Layout.parse(obj["layout"])
        return TensorType(element, shape, layout)

    # --- values ----------------------------------------------------------------------------
    def value(self, obj: Any, want: str | tuple[str, ...] = (VALUE_KEY, PARAMS_KEY)) -> Value:
        key = expect(obj, want, "value")
        self.check_keys(obj, VALUE_FIELDS, "Value")
        v_id = get_int(obj, "v_id", "value", lo=0, hi=ID_MAX)
        dtype = sub("dtype", self.tensor_type, need(obj, "dtype", f"value {v_id}"))
        name = get_str(obj, "name", f"value {v_id}", "")
        mtype = MemType.parse(obj["mtype"]) if "mtype" in obj else HOSTM
        tags = get_tags(obj, f"value {v_id}")
        cls = Params if key == PARAMS_KEY else Value
        old = self.values.get(v_id)
        if old is not None:
            diff = [what for what, same in (
                ("kind (Value/Params)", type(old) is cls), ("dtype", old.dtype == dtype),
                ("name", old.name == (name or f"v{v_id}")), ("mtype", old.mtype == mtype),
                ("tags", old.tags == tags)) if not same]
            if diff:
                raise DuplicateIdError(
                    f"v_id {v_id} is defined again with a different {', '.join(diff)}: two "
                    f"different values share a v_id", field="v_id")
            return old
        v = cls(v_id, dtype, name=name, mtype=mtype, tags=tags)
        self.values[v_id] = v
        return v

    def value_list(self, obj: dict, key: str, want: Any = (VALUE_KEY, PARAMS_KEY)) -> list:
        items = get_list(obj, key, "op")
        return [sub(f"{key}[{i}]", self.value, x, want) for i, x in enumerate(items)]

    # --- ops -------------------------------------------------------------------------------
    def op(self, obj: Any, depth: int = 0) -> Operation:
        key = type_key(obj, "op")
        name = key[len(PREFIX):] if key.startswith(PREFIX) else None
        cls = OP_REGISTRY.get(name) if name is not None else None
        if cls is None:
            if is_known(key):
                raise FieldTypeError(f"expected an op, found a {key}", field="_type_key")
            vendor = " (an op of the vendor's toolchain this reader does not implement)" \
                if self.vendor else ""
            raise UnknownTypeKeyError(f"unknown op _type_key {key!r}{vendor}: this reader "
                                      f"knows {len(OP_REGISTRY)} op types (see docs/ops.md)",
                                      field="_type_key")
        extra = HARDOP_FIELDS if cls.op_type == "HardOp" else ()
        self.check_keys(obj, set(OP_FIELDS) | set(extra) | set(cls.ATTRS), cls.op_type)
        op_id = get_int(obj, "op_id", "op", lo=0, hi=ID_MAX)
        self.max_op_id = max(self.max_op_id, op_id)
        try:
            return self._op_body(cls, obj, op_id, depth)
        except XirError as err:
            raise err.located(file=self.file, op_id=op_id) from err.__cause__

    def _op_body(self, cls: type[Operation], obj: dict, op_id: int, depth: int) -> Operation:
        name = get_str(obj, "name", "op", "")
        target = check_target(obj.get("compile_target", HOST_TARGET))
        tags = get_tags(obj, "op")
        inputs = self.value_list(obj, "inputs")
        outputs = self.value_list(obj, "outputs")
        attrs = {k: self.attr(cls, k, obj[k], depth) for k in cls.ATTRS if k in obj}
        kw: dict[str, Any] = {}
        if cls.op_type == "HardOp":
            instr = obj.get("instr")
            kw["instr"] = None if instr is None else sub("instr", self.value, instr,
                                                          PARAMS_KEY)
            kw["params"] = self.value_list(obj, "params", PARAMS_KEY) if "params" in obj \
                else []
        op = cls(inputs, outputs, op_id=op_id, name=name, compile_target=target, tags=tags,
                 **kw, **attrs)
        return op

    def attr(self, cls: type[Operation], key: str, x: Any, depth: int) -> Any:
        kind, default = cls.ATTRS[key]
        if kind is float:
            if isinstance(x, str) and x in ("inf", "-inf", "nan"):
                return float(x)
            if isinstance(x, (int, float)) and not isinstance(x, bool):
                return _to_float(x, key)
            raise FieldTypeError(f"{cls.op_type} attribute '{key}' must be a number (or "
                                 f"\"inf\"/\"-inf\"), not {tname(x)} ({short(x)})", field=key)
        if kind is int:
            if isinstance(x, int) and not isinstance(x, bool):
                return x
        elif kind is bool:
            if isinstance(x, bool):
                return x
        elif kind is str:
            if isinstance(x, str):
                return x
        elif kind is dict:
            if isinstance(x, dict):
                return x
        elif kind is list:
            if isinstance(x, list):
                return self.list_attr(cls, key, x, depth)
        else:  # Any or an unknown kind: pass through, the op checks it
            return x
        raise FieldTypeError(f"{cls.op_type} attribute '{key}' must be "
                             f"{_KIND_NAMES.get(kind, kind.__name__)}, not {tname(x)} "
                             f"({short(x)})", field=key)

    def list_attr(self, cls: type[Operation], key: str, x: list, depth: int) -> list:
        if key in FREE_LIST_ATTRS:
            if depth >= MAX_SUB_DEPTH:
                raise FieldTypeError(f"{key} nested deeper than {MAX_SUB_DEPTH}", field=key)
            out = []
            for i, item in enumerate(x):
                if isinstance(item, dict) and "_type_key" in item:
                    out.append(sub(f"{key}[{i}]", self.op, item, depth + 1))
                else:
                    out.append(item)
            return out
        item_type = getattr(cls, "LIST_ITEMS", {}).get(key, int)
        for i, item in enumerate(x):
            ok = not isinstance(item, bool) and (
                isinstance(item, int) if item_type is int else
                isinstance(item, (int, float)) if item_type is float else
                isinstance(item, item_type))
            if not ok:
                raise FieldTypeError(f"{cls.op_type} attribute '{key}' must be an array of "
                                     f"{_KIND_NAMES.get(item_type, item_type.__name__)}s; item "
                                     f"{i} is {tname(item)} ({short(item)})", field=key)
        return [_to_float(i, key) for i in x] if item_type is float else list(x)


def _to_float(x: int | float, field: str) -> float:
    try:
        return float(x)
    except OverflowError:
        raise FieldTypeError(f"number {short(x)} is too large for a float", field=field) \
            from None


_KIND_NAMES = {int: "an integer", float: "a number", bool: "a boolean", str: "a string",
               list: "an array", dict: "an object"}

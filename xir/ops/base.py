"""The Operation base class and the op registry.

An op type declares its attributes (name -> (type, default)), how many inputs it takes and how
its output shapes follow from its input shapes. Everything else — json, views, backends — is
generic over that declaration.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any, ClassVar

from ..errors import FieldTypeError, MissingFieldError, OpAttributeError, ShapeMismatchError
from ..types import Layout, QuantizedType, TensorType
from ..values import Value

REQUIRED = object()
"""Default of an attribute that has none: the user must give it."""

OP_REGISTRY: dict[str, type[Operation]] = {}

#: A compile target is "@name" or "@name(N)": "@hostt" for the host, the rest is whatever the
#: installed compile targets declare (the chips register theirs through xrt's target hook; the
#: IR knows none of them).
_TARGET_RE = re.compile(r"^@[A-Za-z_][A-Za-z0-9_]*(\(\d+\))?$")
HOST_TARGET = "@hostt"


def register_op(cls: type[Operation]) -> type[Operation]:
    """Class decorator: make `cls` known under its `op_type` (and json `_type_key`)."""
    OP_REGISTRY[cls.op_type] = cls
    return cls


def check_target(target: str) -> str:
    if not isinstance(target, str) or not _TARGET_RE.match(target):
        raise FieldTypeError(
            f"compile_target must be '@name' or '@name(N)' (e.g. {HOST_TARGET}), not {target!r}",
            field="compile_target")
    return target


def _coerce(name: str, kind: type, value: Any) -> Any:
    """Check an attribute value against its declared type; ints pass as floats."""
    if kind is Any:
        return value
    if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if kind is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind is bool and isinstance(value, bool):
        return value
    if kind is str and isinstance(value, str):
        return value
    if kind is list and isinstance(value, (list, tuple)):
        return list(value)
    if kind is dict and isinstance(value, dict):
        return dict(value)
    if kind is float and value in ("inf", "-inf"):
        return float(value)
    raise FieldTypeError(
        f"attribute '{name}' must be {kind.__name__}, not {type(value).__name__} ({value!r})",
        field=name)


class Operation:
    """A node of the network: inputs, outputs, attributes, compile target and tags."""

    op_type: ClassVar[str] = "Operation"
    ATTRS: ClassVar[dict[str, tuple[type, Any]]] = {}
    #: attribute name -> the values it may take (checked when the op is made or loaded)
    CHOICES: ClassVar[dict[str, tuple[Any, ...]]] = {"act": ("none", "relu")}
    MIN_INPUTS: ClassVar[int] = 1
    MAX_INPUTS: ClassVar[int | None] = 1
    N_OUTPUTS: ClassVar[int | None] = 1  # None: decided by the attributes (Split)
    KEEPS_LAYOUT: ClassVar[bool] = True  # outputs keep the first input's axis letters

    def __init__(
        self,
        inputs: Sequence[Value] = (),
        outputs: Sequence[Value] = (),
        *,
        op_id: int = -1,
        name: str = "",
        compile_target: str = HOST_TARGET,
        tags: dict[str, Any] | None = None,
        **attrs: Any,
    ) -> None:
        self.op_id = int(op_id)
        self.name = name
        self.compile_target = check_target(compile_target)
        self.tags: dict[str, Any] = dict(tags or {})
        self.inputs: list[Value] = list(inputs)
        self.outputs: list[Value] = list(outputs)
        self.attrs: dict[str, Any] = {}
        for key, value in attrs.items():
            if key not in self.ATTRS:
                raise OpAttributeError(
                    f"{self.op_type} has no attribute '{key}' (it has: "
                    f"{', '.join(self.ATTRS) or 'none'})", op_id=self.op_id, field=key)
            self.attrs[key] = _coerce(key, self.ATTRS[key][0], value)
        for key, (_, default) in self.ATTRS.items():
            if key not in self.attrs:
                if default is REQUIRED:
                    raise MissingFieldError(f"{self.op_type} needs attribute '{key}'",
                                            op_id=self.op_id, field=key)
                self.attrs[key] = list(default) if isinstance(default, list) else default
        self.check_attr_values()

    def check_attr_values(self) -> None:
        """Refuse attribute values no kernel can run: a value outside the attribute's CHOICES,
        a fused activation's NaN or negative clip bound (a Pad value may well be NaN)."""
        for key, value in self.attrs.items():
            allowed = self.CHOICES.get(key)
            if allowed is not None and value not in allowed:
                raise FieldTypeError(
                    f"{key} must be one of {', '.join(map(repr, allowed))}, not {value!r}",
                    op_id=self.op_id, field=key)
        for key in ("act_alpha", "act_max"):
            if key in self.attrs and math.isnan(self.attrs[key]):
                raise FieldTypeError(f"{key} must be a number, not NaN", op_id=self.op_id,
                                     field=key)
        if self.attrs.get("act_max", 0.0) < 0:
            raise FieldTypeError(f"act_max must be >= 0, not {self.attrs['act_max']}",
                                 op_id=self.op_id, field="act_max")

    # --- identity -------------------------------------------------------------------------
    @property
    def type_key(self) -> str:
        return f"icraft::xir::{self.op_type}"

    def typeKey(self) -> str:
        return self.type_key

    @property
    def label(self) -> str:
        """What a placement summary or a profile calls the op: its type, unless the op type
        carries something more telling (an OnnxGraph names the ONNX ops it runs)."""
        return self.op_type

    def __getattr__(self, key: str) -> Any:
        attrs = self.__dict__.get("attrs")
        if attrs is not None and key in attrs:
            return attrs[key]
        raise OpAttributeError(f"{type(self).__name__} has no attribute '{key}'", field=key)

    def __repr__(self) -> str:
        return f"{self.op_type}(op_id={self.op_id}, in={[v.v_id for v in self.inputs]}, " \
               f"out={[v.v_id for v in self.outputs]})"

    # --- semantics ------------------------------------------------------------------------
    def n_outputs(self) -> int:
        return self.N_OUTPUTS if self.N_OUTPUTS is not None else 1

    def feature_inputs(self) -> list[Value]:
        """Inputs that are not constant Params."""
        return [v for v in self.inputs if not v.is_params]

    def infer_shapes(self, shapes: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        """Output shapes for these input shapes; raises ShapeMismatchError when they don't fit."""
        return [shapes[0]]

    def infer_types(self, types: list[TensorType]) -> list[TensorType]:
        """Output types: inferred shapes, the first input's element type, a fitting layout."""
        shapes = self.infer_shapes([t.shape for t in types])
        first = types[0]
        out = []
        for shape in shapes:
            layout = self.output_layout(first.layout, len(shape))
            out.append(TensorType(first.element_dtype, shape, layout))
        return out

    def output_layout(self, layout: Layout, rank: int) -> Layout | None:
        """The layout of an output of `rank` given the first input's; None = don't care."""
        if self.KEEPS_LAYOUT and layout.rank == rank and not layout.is_tiled():
            return layout
        return None

    def check_arity(self) -> None:
        n = len(self.inputs)
        if n < self.MIN_INPUTS or (self.MAX_INPUTS is not None and n > self.MAX_INPUTS):
            want = f"{self.MIN_INPUTS}" if self.MAX_INPUTS == self.MIN_INPUTS else \
                f"{self.MIN_INPUTS}..{self.MAX_INPUTS if self.MAX_INPUTS is not None else 'n'}"
            raise ShapeMismatchError(f"{self.op_type} takes {want} inputs, got {n}",
                                     op_id=self.op_id, field="inputs")
        if len(self.outputs) != self.n_outputs():
            raise ShapeMismatchError(
                f"{self.op_type} has {self.n_outputs()} outputs, got {len(self.outputs)}",
                op_id=self.op_id, field="outputs")

    def check_types(self) -> None:
        """Verify declared output shapes against the inferred ones."""
        self.check_arity()
        try:
            shapes = self.infer_shapes([v.shape for v in self.inputs])
        except ShapeMismatchError as err:
            raise err.located(op_id=self.op_id) from err.__cause__
        for i, (value, shape) in enumerate(zip(self.outputs, shapes)):
            if tuple(value.shape) != tuple(shape):
                raise ShapeMismatchError(
                    f"{self.op_type} output {i} (v_id {value.v_id}) is declared "
                    f"{list(value.shape)} but its inputs give {list(shape)}",
                    op_id=self.op_id, field="outputs")

    def is_quantized(self) -> bool:
        return any(isinstance(v.dtype.element_dtype, QuantizedType)
                   for v in self.inputs + self.outputs)

    def clone_with(self, inputs: Sequence[Value], outputs: Sequence[Value]) -> Operation:
        """A copy of this op (same attributes) on other values."""
        return type(self)(inputs, outputs, op_id=self.op_id, name=self.name,
                          compile_target=self.compile_target, tags=self.tags, **self.attrs)


# --- small helpers for shape functions -----------------------------------------------------

def fail(op: Operation, message: str, field: str | None = None) -> ShapeMismatchError:
    return ShapeMismatchError(f"{op.op_type}: {message}", op_id=op.op_id, field=field)


def norm_axis(op: Operation, axis: int, rank: int, field: str = "axis") -> int:
    if not -rank <= axis < rank:
        raise fail(op, f"axis {axis} out of range for rank {rank}", field)
    return axis % rank


def need_rank(op: Operation, shape: tuple[int, ...], rank: int, what: str = "input") -> None:
    if len(shape) != rank:
        raise fail(op, f"{what} must have rank {rank} (NHWC), got shape {list(shape)}", "inputs")


def broadcast(op: Operation, a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    out = []
    for i in range(max(len(a), len(b))):
        da = a[len(a) - 1 - i] if i < len(a) else 1
        db = b[len(b) - 1 - i] if i < len(b) else 1
        if da != db and 1 not in (da, db):
            raise fail(op, f"shapes {list(a)} and {list(b)} do not broadcast", "inputs")
        out.append(db if da == 1 else da)
    return tuple(reversed(out))


def prod(shape: Sequence[int]) -> int:
    return math.prod(shape)

"""Element types, layouts and tensor types, with the vendor's string encodings.

Scalars encode as `@fp(32)`, `@bf(16)`, `@sint(8)`, `@uint(8)`; layouts as `@layout(NHWC)`;
a quantized element type is a json object carrying its storage type, scales and zero points.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from .errors import FieldTypeError

_SCALAR_RE = re.compile(r"^@(fp|bf|sint|uint|bool)\((\d+)\)$")
_NUMPY_OF = {
    ("fp", 16): np.float16,
    ("fp", 32): np.float32,
    ("fp", 64): np.float64,
    ("bf", 16): np.uint16,  # raw bfloat16 bits
    ("sint", 8): np.int8,
    ("sint", 16): np.int16,
    ("sint", 32): np.int32,
    ("sint", 64): np.int64,
    ("uint", 8): np.uint8,
    ("uint", 16): np.uint16,
    ("uint", 32): np.uint32,
    ("uint", 64): np.uint64,
    ("bool", 8): np.bool_,
}
_DTYPE_OF = {key: np.dtype(t) for key, t in _NUMPY_OF.items()}


class ScalarType:
    """A scalar element type: kind (fp, bf, sint, uint, bool) and bit width."""

    __slots__ = ("kind", "bits")

    def __init__(self, kind: str, bits: int) -> None:
        if (kind, bits) not in _NUMPY_OF:
            raise FieldTypeError(f"unsupported scalar type {kind}{bits}", field="dtype")
        self.kind = kind
        self.bits = int(bits)

    @classmethod
    def parse(cls, text: str) -> ScalarType:
        """Parse `@fp(32)` style text."""
        m = _SCALAR_RE.match(text) if isinstance(text, str) else None
        if not m:
            raise FieldTypeError(f"not a scalar type encoding: {text!r}", field="dtype")
        return cls(m.group(1), int(m.group(2)))

    @classmethod
    def from_numpy(cls, dtype: Any) -> ScalarType:
        """The scalar type of a numpy dtype (bool and every int/float width numpy has)."""
        dt = np.dtype(dtype)
        for (kind, bits), npt in _NUMPY_OF.items():
            if np.dtype(npt) == dt and kind != "bf":
                return cls(kind, bits)
        raise FieldTypeError(f"numpy dtype {dt} has no xir scalar type", field="dtype")

    def encode(self) -> str:
        return f"@{self.kind}({self.bits})"

    @property
    def numpy_dtype(self) -> np.dtype:
        return _DTYPE_OF[(self.kind, self.bits)]

    @property
    def byte_size(self) -> int:
        return max(1, self.bits // 8)

    @property
    def storage(self) -> ScalarType:
        return self

    def is_float(self) -> bool:
        return self.kind in ("fp", "bf")

    def is_int(self) -> bool:
        return self.kind in ("sint", "uint")

    is_quantized = False

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ScalarType) and (self.kind, self.bits) == (other.kind, other.bits)

    def __hash__(self) -> int:
        return hash((self.kind, self.bits))

    def __repr__(self) -> str:
        return self.encode()


FP32 = ScalarType("fp", 32)
FP16 = ScalarType("fp", 16)
BF16 = ScalarType("bf", 16)
INT8 = ScalarType("sint", 8)
INT16 = ScalarType("sint", 16)
INT32 = ScalarType("sint", 32)
INT64 = ScalarType("sint", 64)
UINT8 = ScalarType("uint", 8)
UINT16 = ScalarType("uint", 16)
UINT64 = ScalarType("uint", 64)


class QuantizedType:
    """A fixed-point element type: storage scalar, scales and zero points.

    Real value = (q - zero_point) * scale, per tensor (`axis is None`, one scale) or per axis
    (one scale per entry along `axis`). Buyi-style `m * 2^-exp` scales are plain scales here.
    """

    __slots__ = ("storage", "scale", "zero_point", "axis")

    def __init__(
        self,
        storage: ScalarType,
        scale: float | Sequence[float] | np.ndarray,
        zero_point: int | Sequence[int] | np.ndarray = 0,
        axis: int | None = None,
    ) -> None:
        if not isinstance(storage, ScalarType) or not storage.is_int():
            raise FieldTypeError(f"quantized storage must be an integer type, not {storage!r}",
                                 field="storage")
        self.storage = storage
        self.scale = np.atleast_1d(np.asarray(scale, dtype=np.float64)).copy()
        zp = np.atleast_1d(np.asarray(zero_point, dtype=np.int64)).copy()
        if zp.size == 1 and self.scale.size > 1:
            zp = np.full(self.scale.shape, int(zp[0]), dtype=np.int64)
        self.zero_point = zp
        self.axis = None if axis is None else int(axis)
        if self.scale.ndim != 1 or self.scale.size == 0:
            raise FieldTypeError("quantized scale must be a non-empty 1-D list", field="scale")
        if self.zero_point.shape != self.scale.shape:
            raise FieldTypeError(
                f"{self.zero_point.size} zero points for {self.scale.size} scales",
                field="zero_point")
        if self.axis is None and self.scale.size != 1:
            raise FieldTypeError("a per-tensor quantized type has exactly one scale", field="scale")
        if not np.all(np.isfinite(self.scale)) or np.any(self.scale <= 0):
            raise FieldTypeError("quantized scales must be finite and positive", field="scale")

    @property
    def numpy_dtype(self) -> np.dtype:
        return self.storage.numpy_dtype

    @property
    def byte_size(self) -> int:
        return self.storage.byte_size

    @property
    def bits(self) -> int:
        return self.storage.bits

    @property
    def kind(self) -> str:
        return self.storage.kind

    @property
    def qmin(self) -> int:
        return int(np.iinfo(self.numpy_dtype).min)

    @property
    def qmax(self) -> int:
        return int(np.iinfo(self.numpy_dtype).max)

    is_quantized = True

    def is_float(self) -> bool:
        return False

    def is_int(self) -> bool:
        return True

    def per_tensor(self) -> bool:
        return self.axis is None

    def encode(self) -> dict:
        return {
            "_type_key": "icraft::xir::QuantizedType",
            "storage": self.storage.encode(),
            "scale": [float(s) for s in self.scale],
            "zero_point": [int(z) for z in self.zero_point],
            "axis": self.axis,
        }

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, QuantizedType)
            and self.storage == other.storage
            and self.axis == other.axis
            and np.array_equal(self.scale, other.scale)
            and np.array_equal(self.zero_point, other.zero_point)
        )

    def __hash__(self) -> int:
        return hash((self.storage, self.axis, self.scale.tobytes()))

    def __repr__(self) -> str:
        sc = f"{self.scale[0]:.6g}" if self.scale.size == 1 else f"[{self.scale.size} scales]"
        ax = "" if self.axis is None else f", axis={self.axis}"
        return f"Q({self.storage.encode()}, scale={sc}{ax})"


ElementType = ScalarType | QuantizedType

_LAYOUT_TOKEN = re.compile(r"([A-Z*])|([a-z])(\d+)")


class Layout:
    """Axis letters of a tensor, e.g. NHWC, OIHW, HWIO, or a tiled one such as NCHWc16.

    Uppercase letters are axes, `*` is an axis whose meaning does not matter, and a lowercase
    letter with a length is a tile of the uppercase axis of the same letter (NCHWc16: C split into
    ceil(C/16) blocks of 16, the tile innermost). A tensor's shape has one entry per token.
    """

    __slots__ = ("spec", "tokens")

    def __init__(self, spec: str = "") -> None:
        if not isinstance(spec, str):
            raise FieldTypeError(f"layout must be a string, not {type(spec).__name__}",
                                 field="layout")
        tokens: list[tuple[str, int]] = []
        pos = 0
        while pos < len(spec):
            m = _LAYOUT_TOKEN.match(spec, pos)
            if not m:
                raise FieldTypeError(f"bad layout {spec!r} at character {pos}", field="layout")
            if m.group(1):
                tokens.append((m.group(1), 0))
            else:
                n = int(m.group(3))
                if n <= 0:
                    raise FieldTypeError(f"layout {spec!r}: tile length must be positive",
                                         field="layout")
                tokens.append((m.group(2), n))
            pos = m.end()
        self.spec = spec
        self.tokens = tuple(tokens)

    @classmethod
    def parse(cls, text: str) -> Layout:
        """Parse `@layout(NHWC)`."""
        if not isinstance(text, str) or not (text.startswith("@layout(") and text.endswith(")")):
            raise FieldTypeError(f"not a layout encoding: {text!r}", field="layout")
        return cls(text[len("@layout("):-1])

    @classmethod
    def any(cls, rank: int) -> Layout:
        """A layout of `rank` don't-care axes."""
        return cls("*" * rank)

    def encode(self) -> str:
        return f"@layout({self.spec})"

    @property
    def rank(self) -> int:
        return len(self.tokens)

    def is_tiled(self) -> bool:
        return any(t for _, t in self.tokens)

    def axis(self, letter: str) -> int:
        """Position of an axis letter, or -1."""
        for i, (ch, tile) in enumerate(self.tokens):
            if ch == letter and not tile:
                return i
        return -1

    def untiled(self) -> Layout:
        """The software layout: tiles dropped (NCHWc16 -> NCHW)."""
        return Layout("".join(ch for ch, t in self.tokens if not t))

    def check_shape(self, shape: Sequence[int]) -> str | None:
        """Why `shape` does not fit this layout, or None if it does."""
        if self.rank and len(shape) != self.rank:
            return f"layout {self.spec} has {self.rank} axes but the shape has {len(shape)}"
        for (ch, tile), dim in zip(self.tokens, shape):
            if tile and dim != tile:
                return f"tile axis {ch}{tile} of layout {self.spec} has length {dim}"
        return None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Layout) and self.spec == other.spec

    def __hash__(self) -> int:
        return hash(self.spec)

    def __repr__(self) -> str:
        return f"Layout({self.spec!r})"


def parse_element(obj: Any) -> ScalarType | QuantizedType:
    """Parse an element dtype encoding: `@fp(32)` text or a quantized-type object."""
    if isinstance(obj, str):
        return ScalarType.parse(obj)
    if isinstance(obj, dict):
        for key in ("storage", "scale"):
            if key not in obj:
                from .errors import MissingFieldError

                raise MissingFieldError(f"quantized element type lacks '{key}'", field=key)
        try:
            return QuantizedType(
                ScalarType.parse(obj["storage"]),
                obj["scale"],
                obj.get("zero_point", 0),
                obj.get("axis"),
            )
        except (TypeError, ValueError, OverflowError) as exc:
            if isinstance(exc, FieldTypeError):
                raise
            raise FieldTypeError(f"bad quantized element type: {exc}",
                                 field="element_dtype") from exc
    raise FieldTypeError(f"not an element dtype: {obj!r}", field="element_dtype")


class TensorType:
    """Element type, shape and layout of a tensor; `storageBytes()` is its size in memory."""

    __slots__ = ("element_dtype", "shape", "layout")

    def __init__(
        self,
        element_dtype: ScalarType | QuantizedType | Any,
        shape: Sequence[int],
        layout: Layout | str | None = None,
    ) -> None:
        if not isinstance(element_dtype, (ScalarType, QuantizedType)):
            element_dtype = ScalarType.from_numpy(element_dtype)
        try:
            dims = tuple(int(d) for d in shape)
        except (TypeError, ValueError) as exc:
            raise FieldTypeError(f"shape must be a list of integers, not {shape!r}",
                                 field="shape") from exc
        if any(d < 0 for d in dims):
            raise FieldTypeError(f"negative dimension in shape {list(dims)}", field="shape")
        if layout is None:
            layout = Layout.any(len(dims))
        elif isinstance(layout, str):
            layout = Layout(layout)
        why = layout.check_shape(dims) if layout.rank else None
        if why:
            raise FieldTypeError(why, field="layout")
        self.element_dtype = element_dtype
        self.shape = dims
        self.layout = layout

    # vendor-style getters
    def getShape(self) -> list[int]:
        return list(self.shape)

    def getLayout(self) -> Layout:
        return self.layout

    def getElementDtype(self) -> ScalarType | QuantizedType:
        return self.element_dtype

    def getStorageType(self) -> ScalarType:
        return self.element_dtype.storage

    @property
    def numpy_dtype(self) -> np.dtype:
        return self.element_dtype.numpy_dtype

    @property
    def rank(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return math.prod(self.shape)

    def storageBytes(self) -> int:
        """Bytes this tensor occupies (tiled layouts include their padding in the shape)."""
        return self.numel() * self.element_dtype.byte_size

    def is_quantized(self) -> bool:
        return isinstance(self.element_dtype, QuantizedType)

    def with_shape(self, shape: Sequence[int], layout: Layout | str | None = None) -> TensorType:
        return TensorType(self.element_dtype, shape, layout)

    def with_element(self, element: ScalarType | QuantizedType) -> TensorType:
        return TensorType(element, self.shape, self.layout)

    def encode(self) -> dict:
        el = self.element_dtype
        return {
            "_type_key": "icraft::xir::TensorType",
            "element_dtype": el.encode(),
            "shape": list(self.shape),
            "layout": self.layout.encode(),
        }

    @classmethod
    def decode(cls, obj: Any) -> TensorType:
        if not isinstance(obj, dict):
            raise FieldTypeError(f"tensor type must be an object, not {type(obj).__name__}",
                                 field="dtype")
        from .errors import MissingFieldError

        for key in ("element_dtype", "shape"):
            if key not in obj:
                raise MissingFieldError(f"tensor type lacks '{key}'", field=key)
        shape = obj["shape"]
        if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) for d in shape
        ):
            raise FieldTypeError(f"shape must be a list of integers, not {shape!r}", field="shape")
        layout = Layout.parse(obj["layout"]) if obj.get("layout") is not None else None
        return cls(parse_element(obj["element_dtype"]), shape, layout)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, TensorType)
            and self.shape == other.shape
            and self.element_dtype == other.element_dtype
            and self.layout == other.layout
        )

    def __hash__(self) -> int:
        return hash((self.shape, self.element_dtype, self.layout))

    def __repr__(self) -> str:
        return f"TensorType({self.element_dtype!r}, {list(self.shape)}, {self.layout.spec!r})"

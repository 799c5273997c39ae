"""Values (the edges of a network), Params (values with data) and memory types."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import FieldTypeError
from .types import TensorType

if TYPE_CHECKING:
    from .ops.base import Operation

_MTYPE_RE = re.compile(r"^@(hostm|etm|ocm|chunk)(?:\(([^)]*)\))?$")


class MemType:
    """Where a value lives: `@hostm`, `@etm(addr)`, `@ocm(addr)` or `@chunk(id@offset)`."""

    __slots__ = ("kind", "addr", "chunk_id")

    def __init__(self, kind: str = "hostm", addr: int = 0, chunk_id: int = 0) -> None:
        if kind not in ("hostm", "etm", "ocm", "chunk"):
            raise FieldTypeError(f"unknown memory type {kind!r}", field="mtype")
        self.kind = kind
        self.addr = int(addr)
        self.chunk_id = int(chunk_id)

    @classmethod
    def parse(cls, text: str) -> MemType:
        m = _MTYPE_RE.match(text) if isinstance(text, str) else None
        if not m:
            raise FieldTypeError(f"not a memory type encoding: {text!r}", field="mtype")
        kind, arg = m.group(1), m.group(2)
        try:
            if kind == "hostm":
                if arg:
                    raise ValueError(arg)
                return cls()
            if kind == "chunk":
                cid, _, off = (arg or "").partition("@")
                return cls("chunk", int(off, 0), int(cid, 0))
            return cls(kind, int(arg or "", 0))
        except ValueError as exc:
            raise FieldTypeError(f"bad address in memory type {text!r}", field="mtype") from exc

    def encode(self) -> str:
        if self.kind == "hostm":
            return "@hostm"
        if self.kind == "chunk":
            return f"@chunk({self.chunk_id}@{self.addr:#x})"
        return f"@{self.kind}({self.addr:#x})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MemType) and (self.kind, self.addr, self.chunk_id) == (
            other.kind, other.addr, other.chunk_id)

    def __hash__(self) -> int:
        return hash((self.kind, self.addr, self.chunk_id))

    def __repr__(self) -> str:
        return self.encode()


HOSTM = MemType()


class Value:
    """An edge of the network: one tensor produced by one op and read by any number of ops."""

    is_params = False

    def __init__(
        self,
        v_id: int,
        dtype: TensorType,
        name: str = "",
        mtype: MemType | None = None,
        tags: dict[str, Any] | None = None,
    ) -> None:
        if not isinstance(dtype, TensorType):
            raise FieldTypeError(f"value {v_id}: dtype must be a TensorType", field="dtype")
        self.v_id = int(v_id)
        self.dtype = dtype
        self.name = name or f"v{v_id}"
        self.mtype = mtype or HOSTM
        self.tags: dict[str, Any] = dict(tags or {})
        self.producer: Operation | None = None
        self.consumers: list[Operation] = []

    @property
    def shape(self) -> tuple[int, ...]:
        return self.dtype.shape

    @property
    def tensorType(self) -> TensorType:  # vendor-style accessor
        return self.dtype

    def storageBytes(self) -> int:
        return self.dtype.storageBytes()

    def getUsesOp(self) -> list[Operation]:
        """The ops that read this value (the vendor's name)."""
        return list(self.consumers)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(v_id={self.v_id}, {self.dtype!r})"


class Params(Value):
    """A value with constant data (weights, biases, instructions) stored in the .raw file."""

    is_params = True

    def __init__(
        self,
        v_id: int,
        dtype: TensorType,
        data: np.ndarray | None = None,
        name: str = "",
        mtype: MemType | None = None,
        tags: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(v_id, dtype, name, mtype, tags)
        self._data: np.ndarray | None = None
        if data is not None:
            self.setData(data)

    @classmethod
    def from_array(cls, v_id: int, array: np.ndarray, name: str = "",
                   layout: Any = None, element: Any = None) -> Params:
        """Params holding `array`, its type read off the array."""
        arr = np.asarray(array, order="C")  # keeps a 0-d array 0-d
        dtype = TensorType(element if element is not None else arr.dtype, arr.shape, layout)
        return cls(v_id, dtype, arr, name)

    @property
    def data(self) -> np.ndarray | None:
        return self._data

    def hasData(self) -> bool:
        return self._data is not None

    def setData(self, data: np.ndarray) -> None:
        """Attach data; it must match the declared shape and storage type exactly."""
        arr = np.asarray(data)
        want = self.dtype.numpy_dtype
        if arr.dtype != want:
            raise FieldTypeError(
                f"params {self.v_id}: data is {arr.dtype}, the type says {want}", field="data")
        if tuple(arr.shape) != self.dtype.shape:
            raise FieldTypeError(
                f"params {self.v_id}: data shape {list(arr.shape)} != type shape "
                f"{list(self.dtype.shape)}", field="data")
        self._data = np.asarray(arr, order="C")

    def byteData(self) -> bytes:
        if self._data is None:
            raise FieldTypeError(f"params {self.v_id} has no data loaded", field="data")
        return self._data.tobytes()

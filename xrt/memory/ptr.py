"""`PtrType` and `MemPtr`: where a chunk of memory begins.

A MemPtr carries a C pointer (here: a Python buffer such as a numpy array), a physical address,
or both, as in the vendor API. Host chunks get BOTH (their numpy buffer and a synthetic address);
device chunks get ADDR.
"""

from __future__ import annotations

import enum
import numbers
from typing import Any

import numpy as np

from xrt.errors import InvalidPointerError


class _VendorEnumType(enum.EnumType):
    """pybind11 enums (the vendor's) show `name` on the class as well, as a property object;
    a Python enum hides it there."""

    @property
    def name(cls) -> Any:
        return enum.Enum.__dict__["name"]


class PtrType(enum.IntEnum, metaclass=_VendorEnumType):
    """Which parts a MemPtr holds: a C pointer, a physical address, or both."""

    CPTR = 0
    ADDR = 1
    BOTH = 2

    def __str__(self) -> str:
        return f"PtrType.{self.name}"


def as_uint8_view(buf: Any, what: str = "buffer") -> np.ndarray:
    """A flat, zero-copy uint8 numpy view of a C-contiguous buffer (numpy array, bytearray, ...).

    Read-only buffers (bytes) give a read-only view. Non-contiguous buffers are refused, since a
    view of them cannot be one flat byte range.
    """
    if isinstance(buf, np.ndarray):
        if not buf.flags.c_contiguous:
            raise InvalidPointerError(
                f"{what} is a non-contiguous numpy array (shape {buf.shape}, strides "
                f"{buf.strides}); pass np.ascontiguousarray(...) instead"
            )
        if buf.dtype.hasobject:
            raise InvalidPointerError(f"{what} is an object array; pass an array of plain numbers")
        return buf.reshape(-1).view(np.uint8)
    try:
        mv = memoryview(buf)
    except TypeError:
        raise InvalidPointerError(
            f"{what} of type {type(buf).__name__} does not support the buffer protocol; "
            "pass a numpy array, bytearray or memoryview"
        ) from None
    if not mv.c_contiguous:
        raise InvalidPointerError(f"{what} is a non-contiguous memoryview; pass a contiguous one")
    return np.frombuffer(mv.cast("B") if mv.ndim != 1 or mv.format != "B" else mv, np.uint8)


def _data_address(buf: Any) -> int:
    """Address of the first byte of a buffer (for equality and repr only)."""
    return int(as_uint8_view(buf).__array_interface__["data"][0])


class MemPtr:
    """Start of a memory range: a C pointer (buffer), a physical address, or both.

    Overloads, chosen by argument type as in the vendor API:
      MemPtr()             -> null pointer (same as MemPtr.NullPtr())
      MemPtr(addr: int)    -> PtrType.ADDR
      MemPtr(cptr)         -> PtrType.CPTR (any C-contiguous buffer, e.g. a numpy array)
      MemPtr(cptr, addr)   -> PtrType.BOTH

    Unlike the vendor's `cptr() -> str`, `cptr()` returns the buffer object itself, which is what
    Python code can use; `cptr_address()` gives the numeric C pointer.
    """

    __slots__ = ("_cptr", "_addr", "_null")

    def __init__(self, cptr: Any = None, addr: int | None = None) -> None:
        if addr is None and isinstance(cptr, numbers.Integral) and not isinstance(cptr, bool):
            cptr, addr = None, cptr
        if addr is not None:
            if isinstance(addr, bool) or not isinstance(addr, numbers.Integral):
                raise InvalidPointerError(
                    f"MemPtr address must be an int, got {type(addr).__name__}"
                )
            addr = int(addr)
            if not 0 <= addr < 1 << 64:
                raise InvalidPointerError(f"MemPtr address {addr} is outside the 64-bit "
                                          f"address space")
        if cptr is not None:
            as_uint8_view(cptr, "MemPtr cptr")  # validate early: contiguous buffer
        self._cptr = cptr
        self._addr = addr
        self._null = cptr is None and addr is None

    @staticmethod
    def Init() -> MemPtr:
        """An initialised (non-null) pointer: physical address 0."""
        return MemPtr(0)

    @staticmethod
    def NullPtr() -> MemPtr:
        """A null pointer."""
        return MemPtr()

    def isNull(self) -> bool:
        """True for a null pointer (MemPtr() / NullPtr()); address 0 is not null."""
        return self._null

    def ptype(self) -> PtrType:
        """The pointer kind; a null pointer reports ADDR."""
        if self._cptr is not None and self._addr is not None:
            return PtrType.BOTH
        return PtrType.CPTR if self._cptr is not None else PtrType.ADDR

    def addr(self) -> int:
        """The physical address; raises InvalidPointerError for a CPTR-only or null pointer."""
        if self._addr is None:
            kind = "null" if self._null else "CPTR-only"
            raise InvalidPointerError(
                f"{self!r} is {kind} and has no physical address; build it as MemPtr(addr) or "
                "MemPtr(cptr, addr)"
            )
        return self._addr

    def cptr(self) -> Any:
        """The C pointer (buffer object); raises InvalidPointerError for ADDR-only or null."""
        if self._cptr is None:
            kind = "null" if self._null else "ADDR-only"
            raise InvalidPointerError(
                f"{self!r} is {kind} and has no C pointer; build it as MemPtr(cptr) or "
                "MemPtr(cptr, addr)"
            )
        return self._cptr

    def cptr_address(self) -> int:
        """The numeric address of the C pointer's first byte."""
        return _data_address(self.cptr())

    def has_addr(self) -> bool:
        """True when the pointer carries a physical address."""
        return self._addr is not None

    def has_cptr(self) -> bool:
        """True when the pointer carries a C pointer (buffer)."""
        return self._cptr is not None

    def clone(self, depth: int = 1) -> MemPtr:
        """An equal MemPtr; the buffer is shared at every depth (a pointer never owns data)."""
        return MemPtr(self._cptr, self._addr)

    def _key(self) -> tuple[bool, int | None, int | None]:
        cp = _data_address(self._cptr) if self._cptr is not None else None
        return (self._null, self._addr, cp)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MemPtr):
            return NotImplemented
        return self.ptype() == other.ptype() and self._key() == other._key()

    def __hash__(self) -> int:
        return hash((self.ptype(), self._key()))

    def __repr__(self) -> str:
        if self._null:
            return "MemPtr(null)"
        parts = []
        if self._cptr is not None:
            parts.append(f"cptr={_data_address(self._cptr):#x}")
        if self._addr is not None:
            parts.append(f"addr={self._addr:#x}")
        return f"MemPtr({self.ptype().name}, {', '.join(parts)})"

"""Tensor: a typed view of bytes in a memory chunk, with zero-copy numpy interop.

`Tensor(np_array)` wraps a C-contiguous host array without copying; `tensor.numpy()` and
`np.asarray(tensor)` view the chunk's bytes in place wherever the memory is local (host or a
simulated device), and copy only across a remote link. `to(region)` moves data between memories.
"""

from __future__ import annotations

import datetime as _dt
import math
import time
from collections.abc import Callable
from typing import Any, BinaryIO

import numpy as np

import xir
from xir.tiling import untile
from xir.types import Layout, QuantizedType, TensorType

from .device import HostDevice
from .errors import DumpFormatError, DumpTargetError, TensorError
from .memory import MemChunk, MemPtr

CheckFunc = Callable[[Any], bool]


def _target_name(stream: Any) -> str:
    """A stream's file name for messages, or its type."""
    name = getattr(stream, "name", None)
    return repr(name) if isinstance(name, (str, bytes)) else f"a {type(stream).__name__}"


def check_dump_format(fmt: str) -> str:
    """Validate a three-letter dump format (layout H/S, value F/Q, serialization B/T)."""
    if not isinstance(fmt, str) or len(fmt) != 3 or fmt[0] not in "HS" or fmt[1] not in "FQ" \
            or fmt[2] not in "BT":
        raise DumpFormatError(f"dump format {fmt!r} must be three letters: H|S (hardware or "
                              f"software layout), F|Q (float or quantized), B|T (binary or "
                              f"text), e.g. 'SFB'")
    return fmt


def dequantize(array: np.ndarray, element: QuantizedType) -> np.ndarray:
    """Real values of quantized integers: (q - zero_point) * scale, per tensor or per axis."""
    q = array.astype(np.float64)
    if element.axis is None:
        return ((q - element.zero_point[0]) * element.scale[0]).astype(np.float32)
    shape = [1] * q.ndim
    shape[element.axis] = -1
    return ((q - element.zero_point.reshape(shape)) * element.scale.reshape(shape)
            ).astype(np.float32)


class Tensor:
    """A tensor: TensorType + MemChunk + offset (the xrt Python reference, class
    `xrt.Tensor`).

    A tensor made from a host array takes its host chunk only when something asks for it
    (`chunk()`, `data()`, a copy to or from another memory): a HostBackend op's output is read
    as the array it is, so the chunk, its allocation and its finalizer are not paid per op."""

    #: (array, host region) of a host tensor whose chunk is not made yet
    _lazy: tuple[np.ndarray, Any] | None = None
    _chunk_: MemChunk | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._dtype: TensorType | None = None
        self._chunk: MemChunk | None = None
        self._offset = 0
        self._check: CheckFunc | None = None
        self._ready = True
        if not args and not kwargs:
            return
        first = args[0] if args else kwargs.pop("b", kwargs.pop("dtype", None))
        rest = list(args[1:])
        if isinstance(first, Tensor):  # cast / share: one chunk for both
            first._chunk  # noqa: B018 -- made now, so both tensors hold the same one
            self.__dict__.update(first.__dict__)
            return
        if isinstance(first, xir.Value):
            self._dtype = first.dtype
            if first.is_params and first.data is not None:
                self._wrap(first.data, first.dtype)
            return
        if isinstance(first, TensorType):
            self._dtype = first
            chunk = rest.pop(0) if rest and isinstance(rest[0], MemChunk) else \
                kwargs.pop("chunk", None)
            if chunk is not None:
                offset = rest.pop(0) if rest and isinstance(rest[0], int) else \
                    kwargs.pop("offset", 0)
                self.setData(chunk, offset)
            check = rest.pop(0) if rest else kwargs.pop("check_func", None)
            if check is not None:
                self.setCheckFunc(check)
            return
        # a buffer: (b, layout) or (b, dtype)
        arr = np.asarray(first)
        spec = rest.pop(0) if rest else kwargs.pop("layout", None)
        if spec is None:
            spec = kwargs.pop("dtype", None)
        if isinstance(spec, TensorType):
            dtype = spec
        else:
            layout = Layout(spec) if isinstance(spec, str) else spec
            if layout is not None and not isinstance(layout, Layout):
                raise TensorError(f"a tensor's layout is a string such as 'NHWC', an "
                                  f"xir.Layout or a TensorType, not {type(spec).__name__}")
            if layout is not None and layout.rank and layout.rank != arr.ndim:
                raise TensorError(f"layout {layout.spec} has {layout.rank} axes, the array "
                                  f"has {arr.ndim}")
            dtype = TensorType(xir.ScalarType.from_numpy(arr.dtype), arr.shape, layout)
        self._wrap(arr, dtype)

    @classmethod
    def over_array(cls, arr: np.ndarray, dtype: TensorType, region: Any) -> Tensor:
        """A tensor over `arr` (C-contiguous, writeable, of `dtype`'s numpy dtype and size) on
        the host `region`, unchecked and without a copy: a host kernel's fresh result (the
        backend made `arr` fit; `Tensor(arr, dtype)` checks and is the user's constructor)."""
        t = cls.__new__(cls)
        t._dtype, t._offset, t._check, t._ready = dtype, 0, None, True
        t._lazy, t._keep = (arr, region), arr
        return t

    @classmethod
    def over_chunk(cls, dtype: TensorType, chunk: MemChunk, offset: int) -> Tensor:
        """A tensor of `dtype` over `chunk` at `offset`, unchecked: a runtime handing out a
        result where it checked once that the type fits (a forward's output buffer)."""
        t = cls.__new__(cls)
        t._dtype, t._offset, t._check, t._ready = dtype, offset, None, True
        t._chunk_ = chunk
        return t

    def _wrap(self, arr: np.ndarray, dtype: TensorType) -> None:
        if arr.dtype != dtype.numpy_dtype:
            raise TensorError(f"buffer is {arr.dtype}, the tensor type says "
                              f"{dtype.element_dtype!r} ({dtype.numpy_dtype})")
        if arr.nbytes != dtype.storageBytes():
            raise TensorError(f"buffer has {arr.nbytes} bytes, type {list(dtype.shape)} "
                              f"{dtype.element_dtype!r} needs {dtype.storageBytes()}")
        if not (arr.flags.c_contiguous and arr.flags.writeable):
            arr = np.ascontiguousarray(arr).copy()
        self._dtype = dtype
        self._lazy = (arr, HostDevice.MemRegion())
        self._offset = 0
        self._keep = arr  # the chunk views this array's memory

    @property
    def _chunk(self) -> MemChunk | None:
        lazy = self._lazy
        if lazy is not None:
            self._lazy = None
            raw = lazy[0].reshape(-1).view(np.uint8)
            self._chunk_ = lazy[1].malloc(MemPtr(raw), raw.nbytes)
        return self._chunk_

    @_chunk.setter
    def _chunk(self, chunk: MemChunk | None) -> None:
        self._lazy = None
        self._chunk_ = chunk

    # --- construction helpers -----------------------------------------------------------
    @staticmethod
    def Init() -> Tensor:
        return Tensor()

    @classmethod
    def empty(cls, dtype: TensorType, region: Any = None) -> Tensor:
        """A tensor of `dtype` with fresh memory on `region` (host by default)."""
        t = cls(dtype)
        if region is None:
            region = HostDevice.MemRegion()
        return t.mallocOn(region)

    # --- vendor API -----------------------------------------------------------------------
    def dtype(self) -> TensorType:
        self._require_type("dtype")
        return self._dtype  # type: ignore[return-value]

    def setDType(self, dtype: TensorType) -> Tensor:
        if self._chunk is not None and dtype.storageBytes() > self._chunk.byte_size - self._offset:
            raise TensorError(f"type {dtype!r} needs {dtype.storageBytes()} bytes, the chunk "
                              f"has {self._chunk.byte_size - self._offset} from offset "
                              f"{self._offset}")
        self._dtype = dtype
        return self

    def chunk(self) -> MemChunk:
        self._require_data("chunk")
        return self._chunk  # type: ignore[return-value]

    def offset(self) -> int:
        return self._offset

    def data(self) -> MemPtr:
        """Pointer to the first byte of the tensor's data."""
        chunk = self.chunk()
        begin = chunk.begin
        if begin.ptype().name == "CPTR":
            return MemPtr(self._bytes())
        addr = begin.addr() + self._offset
        return MemPtr(addr)

    def hasData(self) -> bool:
        return self._lazy is not None or self._chunk_ is not None

    def setData(self, chunk: MemChunk, offset: int = 0) -> Tensor:
        self._require_type("setData")
        need = self._dtype.storageBytes()  # type: ignore[union-attr]
        if offset < 0 or offset + need > chunk.byte_size:
            raise TensorError(f"tensor of {need} bytes does not fit chunk of "
                              f"{chunk.byte_size} bytes at offset {offset}")
        self._chunk = chunk
        self._offset = int(offset)
        return self

    def mallocOn(self, mregion: Any) -> Tensor:
        """Give the tensor fresh memory on `mregion` (replacing any it had)."""
        self._require_type("mallocOn")
        self._chunk = mregion.malloc(max(1, self._dtype.storageBytes()))  # type: ignore
        self._offset = 0
        return self

    def memRegion(self) -> Any:
        return self.chunk().region

    def isOn(self, mregion: Any) -> bool:
        if self._lazy is not None:
            return self._lazy[1] is mregion
        return self._chunk is not None and self._chunk.isOn(mregion)

    def to(self, mregion: Any) -> Tensor:
        """This tensor on `mregion`: itself if it is there already, else a copy."""
        if self.isOn(mregion):
            return self
        self._require_data("to")
        dtype = self._dtype
        if mregion is HostDevice.MemRegion():
            # a copy to the host is a fresh array, its chunk made only when asked (as a host
            # kernel's result): no allocation and finalizer per device -> host crossing. The
            # bytes come from the store's own copying read (no view handed out, no argument
            # checks beyond the chunk's range: this tensor's type and offset are its own)
            n = dtype.storageBytes()
            chunk = self._chunk
            st = chunk._live()  # type: ignore[union-attr]
            at = self._offset
            if at < 0 or at + n > st.size:  # (the chunk's own message)
                st, at = chunk._range(at, n, "read")  # type: ignore[union-attr]
            raw = st.region.storage.read(st.addr + at, n) if n and st.region is not None \
                else None
            if not (isinstance(raw, np.ndarray) and raw.dtype == np.uint8 and raw.size == n
                    and raw.flags.writeable and raw.flags.c_contiguous):
                out = np.empty(n, dtype=np.uint8)
                if raw is not None:
                    out[:] = np.frombuffer(raw, np.uint8) if isinstance(raw, (bytes, bytearray,
                                                                              memoryview)) \
                        else raw
                raw = out
            return Tensor.over_array(raw.view(dtype.numpy_dtype).reshape(dtype.shape), dtype,
                                     mregion)
        out = Tensor(dtype).mallocOn(mregion)
        out.copyFrom(0, self, 0, dtype.storageBytes())  # type: ignore[union-attr]
        return out

    def copyFrom(self, dest_offset: int, src_tensor: Tensor, src_offset: int, byte_size: int
                 ) -> None:
        self._require_data("copyFrom")
        src_tensor._require_data("copyFrom (source)")
        self._check_range(dest_offset, byte_size)
        src_tensor._check_range(src_offset, byte_size)
        self._chunk.copyFrom(self._offset + dest_offset, src_tensor._chunk,  # type: ignore
                             src_tensor._offset + src_offset, byte_size)

    def copyData(self, b: Any) -> None:
        """Copy a buffer of exactly the tensor's size into it."""
        arr = np.ascontiguousarray(np.asarray(b)).reshape(-1).view(np.uint8)
        need = self.dtype().storageBytes()
        if arr.nbytes != need:
            raise TensorError(f"copyData: buffer has {arr.nbytes} bytes, tensor needs {need}")
        self.write(0, arr, need)

    def read(self, dest: Any, src_offset: int, byte_size: int) -> None:
        self._require_data("read")
        self._check_range(src_offset, byte_size)
        self._chunk.read(dest, self._offset + src_offset, byte_size)  # type: ignore[union-attr]

    def write(self, dest_offset: int, src: Any, byte_size: int) -> None:
        self._require_data("write")
        self._check_range(dest_offset, byte_size)
        self._chunk.write(self._offset + dest_offset, src, byte_size)  # type: ignore

    def fill(self, f: Callable[[int], Any]) -> Tensor:
        """Fill element i with f(i) (allocating host memory if the tensor has none)."""
        dtype = self.dtype()
        if self._chunk is None:
            self.mallocOn(HostDevice.MemRegion())
        values = np.fromiter((f(i) for i in range(dtype.numel())), dtype=dtype.numpy_dtype,
                             count=dtype.numel())
        self.copyData(values)
        return self

    def setCheckFunc(self, check_func: CheckFunc) -> Tensor:
        if not callable(check_func):
            raise TensorError("check_func must be callable(device) -> bool")
        self._check = check_func
        return self

    def setReady(self, ready: bool) -> Tensor:
        self._ready = bool(ready)
        return self

    def isReady(self) -> bool:
        if self._check is not None:
            dev = self._chunk.region.device() if self._chunk is not None else None
            return bool(self._check(dev))
        return self._ready

    def waitForReady(self, timeout: _dt.timedelta | float,
                     sleep: _dt.timedelta | float = _dt.timedelta(0)) -> bool:
        """Poll isReady() until true or `timeout` passes (timedelta or ms)."""
        limit = _seconds(timeout)
        pause = _seconds(sleep)
        end = time.monotonic() + limit
        while True:
            if self.isReady():
                return True
            if time.monotonic() >= end:
                return False
            time.sleep(pause if pause > 0 else 0.0005)

    def clone(self, depth: int = 1) -> Tensor:
        """depth 1 shares memory; depth > 1 copies the data into fresh memory of its region."""
        if depth <= 1 or self._chunk is None:
            return Tensor(self)
        return Tensor(self._dtype).mallocOn(self._chunk.region)._copied_from(self)

    def _copied_from(self, other: Tensor) -> Tensor:
        self.copyFrom(0, other, 0, other.dtype().storageBytes())
        return self

    def dump(self, os: BinaryIO, format: str = "") -> None:
        """Write the data to a binary stream in a three-letter format (see check_dump_format).

        Allowed conversions are hardware -> software layout and quantized -> float only.
        """
        dtype = self.dtype()
        tiled = dtype.layout.is_tiled()
        quant = dtype.is_quantized()
        fmt = format or f"{'H' if tiled else 'S'}{'Q' if quant else 'F'}B"
        check_dump_format(fmt)
        if fmt[0] == "H" and not tiled:
            raise DumpFormatError(f"cannot dump a software-layout tensor ({dtype.layout.spec}) "
                                  f"in hardware layout: only H->S is allowed")
        if fmt[1] == "Q" and not (quant or dtype.element_dtype.is_int()):
            raise DumpFormatError(f"cannot dump a float tensor ({dtype.element_dtype!r}) as "
                                  f"quantized: only Q->F is allowed")
        arr = self.numpy()
        if fmt[0] == "S" and tiled:
            arr = untile(arr, dtype.layout)
        if fmt[1] == "F" and quant:
            arr = dequantize(arr, dtype.element_dtype)  # type: ignore[arg-type]
        data = np.ascontiguousarray(arr).tobytes() if fmt[2] == "B" else \
            ("\n".join(_fmt_value(x) for x in arr.reshape(-1).tolist()) + "\n").encode()
        try:
            os.write(data)
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            # a closed file (ValueError), a text-mode or read-only stream, a full disk
            raise DumpTargetError(f"cannot dump {self.dtype().element_dtype!r} tensor "
                                  f"{list(self.dtype().shape)} to {_target_name(os)}: "
                                  f"{type(exc).__name__}: {exc}") from exc

    # --- numpy interop ------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """The data as a numpy array; a zero-copy view wherever the memory is local."""
        lazy = self._lazy
        if lazy is not None:  # a host array as it came: itself, when the type still fits it
            arr, dtype = lazy[0], self._dtype
            if arr.dtype == dtype.numpy_dtype and arr.shape == dtype.shape:
                return arr
        dtype = self.dtype()
        raw = self._bytes()
        return raw.view(dtype.numpy_dtype).reshape(dtype.shape)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        arr = self.numpy()
        if dtype is not None and np.dtype(dtype) != arr.dtype:
            if copy is False:
                raise ValueError("Tensor.__array__: a dtype change needs a copy")
            return arr.astype(dtype)
        return arr.copy() if copy else arr

    def _bytes(self) -> np.ndarray:
        self._require_data("numpy")
        n = self._dtype.storageBytes()  # type: ignore[union-attr]
        if self._lazy is not None:
            return self._lazy[0].reshape(-1).view(np.uint8)[self._offset:self._offset + n]
        view = self._chunk.view(self._offset, n)  # type: ignore[union-attr]
        if view is None:  # remote memory: read a copy
            view = np.empty(n, dtype=np.uint8)
            self._chunk.read(view, self._offset, n)  # type: ignore[union-attr]
        return view

    @property
    def shape(self) -> tuple[int, ...]:
        return self.dtype().shape

    def __repr__(self) -> str:
        if self._dtype is None:
            return "Tensor()"
        where = self._chunk.region.name if self._chunk is not None else "no data"
        return f"Tensor({self._dtype.element_dtype!r}, {list(self._dtype.shape)}, " \
               f"{self._dtype.layout.spec!r}, on {where})"

    # --- checks -------------------------------------------------------------------------
    def _require_type(self, what: str) -> None:
        if self._dtype is None:
            raise TensorError(f"Tensor.{what}: the tensor has no dtype (construct it with a "
                              f"TensorType or a buffer)")

    def _require_data(self, what: str) -> None:
        self._require_type(what)
        if not self.hasData():
            raise TensorError(f"Tensor.{what}: the tensor has no data; mallocOn(region) or "
                              f"setData(chunk) first")

    def _check_range(self, offset: int, byte_size: int) -> None:
        n = self._dtype.storageBytes()  # type: ignore[union-attr]
        if offset < 0 or byte_size < 0 or offset + byte_size > n:
            raise TensorError(f"range [{offset}, {offset + byte_size}) is outside the tensor's "
                              f"{n} bytes")


def _seconds(t: _dt.timedelta | float) -> float:
    if isinstance(t, _dt.timedelta):
        return t.total_seconds()
    return float(t) / 1e3


def _fmt_value(x: Any) -> str:
    if isinstance(x, float):
        return repr(x) if math.isfinite(x) else str(x)
    return str(x)

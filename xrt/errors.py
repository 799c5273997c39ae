"""The xrt exception hierarchy: one root, with standard-library mixins.

Every error derives from `XrtError`, and also from the built-in exception a generic handler would
expect (`MemoryError` for out-of-memory, `IndexError` for out-of-bounds access, ...), so both
`except XrtError` and `except MemoryError` work. Messages name the object at fault and say what
to do about it. Keep this a flat list: one class per failure kind.
"""

from __future__ import annotations


class XrtError(Exception):
    """Root of every error raised by xrt."""


# --- memory -----------------------------------------------------------------------------------


class OutOfDeviceMemoryError(XrtError, MemoryError):
    """A region has no free block large enough for a request (after alignment)."""


class MemoryAccessError(XrtError, IndexError):
    """A read or write falls outside a chunk, a region's storage or a register region."""


class DoubleFreeError(XrtError, RuntimeError):
    """An address (or chunk) was freed twice, or an address never allocated was freed."""


class UseAfterFreeError(XrtError, RuntimeError):
    """A freed chunk was read, written or otherwise used."""


class ChunkInUseError(XrtError, RuntimeError):
    """A chunk was freed while a deployment still uses it (a user segment shared between
    sessions, `MemChunk.pin`): close those sessions first."""


class AlignmentError(XrtError, ValueError):
    """An alignment is not a positive power of two, or an address is not aligned as required."""


class AddressInUseError(XrtError, ValueError):
    """A fixed-address request (`reserve`, `malloc(MemPtr, ...)`) overlaps a live allocation."""


class InvalidArgumentError(XrtError, ValueError):
    """An argument has the right type but a value the API cannot accept (negative size, ...)."""


class InvalidPointerError(InvalidArgumentError):
    """A `MemPtr` lacks what the call needs: null, or no address / no C pointer for its type."""


# --- devices ----------------------------------------------------------------------------------


class DeviceError(XrtError, RuntimeError):
    """A device failed, is closed, or was asked for something it does not have."""


class DeviceUrlError(XrtError, ValueError):
    """A device URL is malformed or names a scheme no plugin claims."""


class CallOrderError(XrtError, RuntimeError):
    """API calls came in an order the object does not allow (e.g. configure after apply)."""


class UnsupportedOpError(XrtError, NotImplementedError):
    """An operation (or op type) is not supported by the chosen backend or device."""


class ProtocolError(DeviceError):
    """A socket peer sent a frame that breaks the device protocol (magic, version, length,
    payload); see docs/socket-protocol.md."""


class XrtTimeoutError(XrtError, TimeoutError):
    """A device did not answer within its wait time (see `Device.setWaitTime`)."""


TimeoutError_ = XrtTimeoutError


# --- tensors and plugins ----------------------------------------------------------------------


class TensorError(XrtError, ValueError):
    """A tensor has the wrong shape, dtype or layout for what it is used for."""


class DumpFormatError(TensorError):
    """A tensor dump file is malformed or does not match the expected tensor."""


class DumpTargetError(XrtError, OSError):
    """A tensor or file could not be written to its target: a closed, read-only or text-mode
    stream, an unwritable path, a full disk."""


class PluginError(XrtError, RuntimeError):
    """A plugin failed to load, or registered something invalid."""


class SnapshotError(XrtError, ValueError):
    """A snapshot file is unreadable (truncated, corrupted, wrong magic or version) or does not
    match the backends and devices it is loaded onto."""

"""xrt: the Icraft runtime API (Device, memory, Tensor, Backend, Session) on simulated NPUs.

Vendor-style use: `from xrt import *`. Backends come from plugins (`from host_backend import *`).
"""

from . import errors as _errors
from .backend import Backend
from .device import Device, HostDevice
from .errors import *  # noqa: F403 - the hierarchy is part of the public API
from .errors import XrtError
from .hookspecs import hookimpl
from .memory import HostMemRegion, MemChunk, MemManager, MemPtr, MemRegion, PtrType
from .regs import RegRegion
from .session import Session
from .tensor import Tensor

__version__ = "0.1.0"

__all__ = [
    "Backend", "Device", "HostDevice", "HostMemRegion", "MemChunk", "MemManager", "MemPtr",
    "MemRegion", "PtrType", "RegRegion", "Session", "Tensor", "hookimpl",
] + sorted(n for n, c in vars(_errors).items()  # every class of the error hierarchy
           if isinstance(c, type) and issubclass(c, XrtError))

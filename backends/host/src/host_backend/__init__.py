"""HostBackend: the CPU reference backend of icraft-xrt-sim (float and exact integer).

Vendor-style import: `from host_backend import *` gives `HostBackend`.
"""

from .backend import HostBackend

__all__ = ["HostBackend"]
__version__ = "0.1.0"

"""xrt-numpy-cpu: an example xrt backend plugin (a CPU backend with its own numpy kernels)."""

from .backend import NumpyCpuBackend
from .device import NumpyCpuDevice

__all__ = ["NumpyCpuBackend", "NumpyCpuDevice"]
__version__ = "0.1.0"

"""Numba compute kernels of the NPU model (module-level ``@njit(cache=True)``).

`mpe`: convolution and matmul on the MPE array; `vector`: element-wise, pools, LUT, upsample,
copy. Every kernel is a pure function of flat memory views, layout integers and parameter
vectors: no config object, no globals, so `NUMBA_DISABLE_JIT=1` runs them as plain numpy.
"""

from . import mpe, vector

__all__ = ["mpe", "vector"]

"""Numba compute kernels of the NPU model (module-level, compiled as `jit` says).

`mpe`: convolution on the MPE array; `matmul`: its matmuls of two feature maps; `igemm`: the
integer GEMM both use; `vector`: element-wise, pools, LUT, upsample, copy. Every kernel is a
pure function of flat memory views, layout integers and parameter vectors: no config object,
no globals, so `NUMBA_DISABLE_JIT=1` runs them as plain numpy.
"""

from . import igemm, matmul, mpe, vector

__all__ = ["igemm", "matmul", "mpe", "vector"]

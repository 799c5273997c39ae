"""How the NPU model's Numba kernels are compiled: three decorators instead of ``@njit(...)``.

A fresh install compiles every kernel a network uses on its first forward (issue 30, item 4:
within 4x of a warm start). Numba compiles, for each function, besides its native code, a
CPython wrapper (to be called from Python) and a C wrapper (to be passed as a first-class
function); both are lowered, optimised and turned into machine code like the function itself
and stored in the cache. The kernels never use the C wrapper, and the helpers that only
other kernels call never use the CPython one. A helper is also compiled twice over: on its
own (optimised and turned into machine code that no one calls) and again, linked in, inside
every kernel that calls it. So:

* `kernel` (entry points called from Python: `core`, `pool.Split`, the tests): the native
  function and its CPython wrapper; ``nogil=True`` where the thread pool runs it.
* `helper` (called from other kernels only): the native function alone. Calling one from
  Python raises `HelperCallError` (without the wrapper Numba would jump into nothing); its
  ``py_func`` still runs as plain Python.
* `inline` (a helper with one call site in each kernel that uses it): inlined into the
  caller's Numba IR, never compiled on its own. Not for helpers called from several places
  in one kernel: each call site is typed again, which costs more than the separate compile
  (measured: ``_requant_row``, ``_tiled``, ``_cp`` inlined made ``mpe`` compile 2 s slower).

A kernel passes a helper ``np.int64(0)``, never a bare ``0``: Numba types a literal argument
as ``Literal[int](0)`` and compiles the helper again for it (``gemm_pairs`` with its micro
kernels twice, ``_requant_tile`` three times, before). Arrays are C-contiguous and scalars
int64, so each kernel compiles once per operand dtype (the test below checks).

All keep ``cache=True``; with ``NUMBA_DISABLE_JIT=1`` all leave the functions as they are.
``benchmarks/bench_startup.py`` measures the cold start; `tests/backends/npu_model/
test_kernels_startup.py` holds the kernels to these forms.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from numba import config, njit
from numba.core.registry import CPUDispatcher

from xir.errors import XirError

F = TypeVar("F", bound=Callable[..., Any])


class HelperCallError(XirError, TypeError):
    """A kernel helper (`helper`, `inline`) called from Python: only kernels may call it."""


class _HelperDispatcher(CPUDispatcher):
    """A Numba dispatcher compiled without a CPython wrapper: kernels call it, Python may not
    (a call would run a wrapper that was never compiled)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        name = f"{self.py_func.__module__}.{self.py_func.__qualname__}"
        raise HelperCallError(f"{name} is a kernel helper, compiled for other kernels only; "
                              f"call a kernel, or {name}.py_func for the plain Python")

_KERNEL = njit(cache=True, no_cfunc_wrapper=True)
_KERNEL_NOGIL = njit(cache=True, nogil=True, no_cfunc_wrapper=True)
_HELPER_OPTIONS = {"nopython": True, "no_cpython_wrapper": True, "no_cfunc_wrapper": True}


def _helper(func: F, **options: Any) -> Any:
    if config.DISABLE_JIT:
        return func
    disp = _HelperDispatcher(py_func=func, locals={},
                             targetoptions=dict(_HELPER_OPTIONS, **options))
    disp.enable_caching()
    return disp


def kernel(func: F | None = None, *, nogil: bool = False) -> Any:
    """A Numba kernel called from Python (``@kernel`` or ``@kernel(nogil=True)``)."""
    if func is None:
        return _KERNEL_NOGIL if nogil else _KERNEL
    return (_KERNEL_NOGIL if nogil else _KERNEL)(func)


def helper(func: F) -> Any:
    """A Numba kernel that only other kernels call: no wrapper for Python is compiled."""
    return _helper(func)


def inline(func: F) -> Any:
    """A helper inlined into its callers' Numba IR, never compiled on its own."""
    return _helper(func, inline="always")

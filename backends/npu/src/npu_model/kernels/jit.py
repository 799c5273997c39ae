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
All compile with 512-bit vectors on AVX-512 hosts (`xir.numba_target`: its compiler and disk
cache; ``XRT_NUMBA_WIDE_VECTORS=0`` turns that off).

`Tiered` is the fourth form, for kernels whose calls are often small: the deploy planners and
the cycle model, which a network's deploy and first run call a few dozen times on a few dozen
buffers. Compiling them costs seconds on a fresh install; running their Python functions on
small problems costs milliseconds. A `Tiered` kernel runs compiled when that costs no compile
(compiled in this process already, or in Numba's on-disk cache), else interpreted while the
call is small (a predicate on its arguments) and the interpreted calls have not yet cost as
much CPU time as a compile (`TIER_BUDGET_S`), else compiled. Interpreted means the kernel's own
Python function with the kernels and helpers it calls interpreted too (`interpreted`): the same
code, so the same results, which the tests check on real plans (integer arithmetic and IEEE
float64 operations in the same order; no ``np.exp``-style functions whose numpy and libm
versions may differ in the last bit).

``benchmarks/bench_startup.py`` measures the cold start; `tests/backends/npu_model/
test_kernels_startup.py` holds the kernels to these forms.
"""
from __future__ import annotations

import sys
import time
import types
from collections.abc import Callable
from typing import Any, TypeVar

from numba.core.dispatcher import Dispatcher

from xir.errors import XirError
from xir.numba_target import WideDispatcher, wide_dispatcher

from . import compile_pool

F = TypeVar("F", bound=Callable[..., Any])


class HelperCallError(XirError, TypeError):
    """A kernel helper (`helper`, `inline`) called from Python: only kernels may call it."""


class _KernelDispatcher(WideDispatcher):
    """A Numba dispatcher that, before compiling, waits for a worker process compiling the
    same kernel into the disk cache (`compile_pool`), then loads it from there."""

    #: the kernel's numpy form (`twin_of`), run instead while a worker compiles the kernel
    twin: Callable[..., Any] | None = None

    def compile(self, sig: Any) -> Any:
        if compile_pool._jobs:
            compile_pool.wait(self, tuple(sig) if isinstance(sig, (tuple, list)) else sig)
        return super().compile(sig)

    def _compile_for_args(self, *args: Any, **kws: Any) -> Any:
        # Numba calls this for arguments no compiled version takes, then calls what it
        # returns with them: the twin, while a worker has the kernel queued or in hand
        if self.twin is not None and not kws and compile_pool.compiling(self, args):
            return self.twin
        return super()._compile_for_args(*args, **kws)


class _HelperDispatcher(_KernelDispatcher):
    """A Numba dispatcher compiled without a CPython wrapper: kernels call it, Python may not
    (a call would run a wrapper that was never compiled)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        name = f"{self.py_func.__module__}.{self.py_func.__qualname__}"
        raise HelperCallError(f"{name} is a kernel helper, compiled for other kernels only; "
                              f"call a kernel, or {name}.py_func for the plain Python")

_KERNEL_OPTIONS = {"nopython": True, "no_cfunc_wrapper": True}
_HELPER_OPTIONS = {"nopython": True, "no_cpython_wrapper": True, "no_cfunc_wrapper": True}


def _dispatcher(cls: type, func: F, options: dict[str, Any]) -> Any:
    """What ``xir.numba_target.njit(cache=True, **options)`` makes, as a `cls` dispatcher."""
    return wide_dispatcher(func, options, cls)


def _helper(func: F, **options: Any) -> Any:
    return _dispatcher(_HelperDispatcher, func, dict(_HELPER_OPTIONS, **options))


def kernel(func: F | None = None, *, nogil: bool = False) -> Any:
    """A Numba kernel called from Python (``@kernel`` or ``@kernel(nogil=True)``)."""
    options = dict(_KERNEL_OPTIONS, nogil=True) if nogil else _KERNEL_OPTIONS
    if func is None:
        return lambda f: _dispatcher(_KernelDispatcher, f, options)
    return _dispatcher(_KernelDispatcher, func, options)


def twin_of(kernel: Any) -> Callable[[F], F]:
    """Registers the decorated numpy function as `kernel`'s twin: the same results from the
    same arguments, run instead of the kernel while a worker process compiles it (a fresh
    install's first forward does not wait for that compile; `twins`)."""

    def register(fn: F) -> F:
        kernel.twin = fn
        return fn

    return register


def helper(func: F) -> Any:
    """A Numba kernel that only other kernels call: no wrapper for Python is compiled."""
    return _helper(func)


def inline(func: F) -> Any:
    """A helper inlined into its callers' Numba IR, never compiled on its own."""
    return _helper(func, inline="always")


# --- tiered kernels: interpreted while small and not compiled ---------------------------------

#: CPU seconds of interpreted calls a `Tiered` kernel spends before it compiles (about what
#: compiling one planner kernel with its helpers costs)
TIER_BUDGET_S = 0.5
#: False: every `Tiered` kernel runs compiled (tests of the compiled forms set it)
TIERING = True

#: module name -> its globals with every Numba kernel replaced by its interpreted function
_INTERPRETED: dict[str, dict[str, Any]] = {}


def _interpreted_globals(module: str) -> dict[str, Any]:
    g = _INTERPRETED.get(module)
    if g is None:
        src = vars(sys.modules[module])
        g = _INTERPRETED[module] = dict(src)  # first: kernels of this module call each other
        try:
            for name, obj in src.items():
                if isinstance(obj, Dispatcher):
                    g[name] = interpreted(obj)
        except BaseException:
            del _INTERPRETED[module]  # never leave a half-replaced copy behind
            raise
    return g


def interpreted(func: Any) -> Callable[..., Any]:
    """The Python function of Numba kernel `func` in which the kernels and helpers it calls
    run as Python too (what ``NUMBA_DISABLE_JIT=1`` runs, for this one kernel): a copy of the
    function over a copy of its module's globals (taken at the first call) whose kernels are
    replaced the same way. A plain function is returned as it is."""
    py = getattr(func, "py_func", None)
    if py is None:
        return func
    g = _interpreted_globals(py.__module__)
    f = types.FunctionType(py.__code__, g, py.__name__, py.__defaults__, py.__closure__)
    f.__qualname__, f.__doc__ = py.__qualname__, py.__doc__
    return f


def compiled_for(func: Any, args: tuple) -> bool:
    """Whether calling kernel `func` with `args` runs compiled code without compiling it:
    compiled in this process for their types, or in Numba's on-disk cache (its index file
    holds the entry the dispatcher would load). True for a plain function (nothing to
    compile)."""
    if not isinstance(func, Dispatcher):
        return True
    try:
        sig = tuple(func.typeof_pyval(a) for a in args)
        if sig in func.overloads:
            return True
        cache = func._cache
        key = cache._index_key(sig, func.targetctx.codegen())
        return key in cache._cache_file._load_index()
    except Exception:  # a cache Numba cannot read (or no cache): it would compile
        return False


class Tiered:
    """Kernel `kernel` (a `kernel`-form dispatcher) called compiled when that costs no
    compile, else as Python while ``small(*args)`` holds and the interpreted calls have cost
    less than `budget_s` CPU seconds in all, else compiled (see the module docstring). Both
    tiers run the same code: the result is the same either way.

    Numba's disk cache is looked at once, at the first call: after that, the kernel counts as
    compiled once this process has compiled (or loaded) it for any argument types."""

    __slots__ = ("kernel", "small", "budget_s", "spent_s", "calls", "_state", "_py",
                 "__name__")

    def __init__(self, kernel: Any, small: Callable[..., bool] | None = None,
                 budget_s: float | None = None) -> None:
        self.kernel = kernel
        self.small = small
        self.budget_s = TIER_BUDGET_S if budget_s is None else budget_s
        self.spent_s = 0.0  # CPU seconds of interpreted calls so far
        self.calls = [0, 0]  # interpreted, compiled
        # 0: not looked at, 1: not compiled (disk looked at), 2: compiled
        self._state = 0 if isinstance(kernel, Dispatcher) else 2
        self._py: Callable[..., Any] | None = None
        self.__name__ = getattr(kernel, "__name__", "tiered")

    def __call__(self, *args: Any) -> Any:
        if self._state != 2 and TIERING:
            if self._state == 0:
                self._state = 2 if compiled_for(self.kernel, args) else 1
            elif self.kernel.overloads:
                self._state = 2
            if (self._state == 1 and self.spent_s < self.budget_s
                    and (self.small is None or self.small(*args))):
                return self._interpret(args)
        self.calls[1] += 1
        out = self.kernel(*args)
        self._state = 2
        return out

    def will_compile(self, *args: Any) -> bool:
        """Whether a call with `args` now would compile the kernel (not compiled, and not run
        as Python): what a caller may hand to `compile_pool.prefetch` beforehand."""
        if self._state == 2 or compiled_for(self.kernel, args):
            return False
        return not (TIERING and self.spent_s < self.budget_s
                    and (self.small is None or self.small(*args)))

    def _interpret(self, args: tuple) -> Any:
        py = self._py
        if py is None:
            py = self._py = interpreted(self.kernel)
        t0 = time.thread_time()
        try:
            return py(*args)
        finally:
            self.spent_s += time.thread_time() - t0
            self.calls[0] += 1


def tiered(kernel: Any, small: Callable[..., bool] | None = None,
           budget_s: float | None = None) -> Tiered:
    """`Tiered` over `kernel`: ``small(*args)`` says when a call is cheap enough to run as
    Python (None: every call, within the budget)."""
    return Tiered(kernel, small, budget_s)

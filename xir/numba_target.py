"""How the project's Numba kernels are compiled for this CPU: 512-bit vectors on AVX-512 hosts.

LLVM tunes code for Intel's server CPUs since Ice Lake (this machine: Emerald Rapids) with the
``prefer-256-bit`` feature: its loop vectoriser then uses 256-bit ``ymm`` vectors although the
CPU has 512-bit ``zmm`` ones, and the back end splits hand-written 512-bit vector IR in two.
The NPU model's kernels are bound by such loops (requantization, element-wise, depthwise):
512-bit vectors run them about 25% faster and a simulated forward 7-10% faster, with the same
results (integer code, and float code compiled without ``fastmath`` does the same IEEE
operations in the same order whatever the vector width).

The setting is per function, not per process: the LLVM function attribute
``"prefer-vector-width"="512"`` (what clang's ``-mprefer-vector-width=512`` sets), put on every
function a kernel compiled by `njit` (or with `WideCompiler` as its ``pipeline_class``) lowers,
before LLVM optimises it. Numba functions of the user's own, compiled in the same process,
keep LLVM's default (``NUMBA_CPU_FEATURES`` would change them all, and the order of imports
would decide which kernels a process compiled under which setting).

Numba's disk cache keys an entry on the CPU name and features, not on function attributes:
`WideFunctionCache` adds the vector width to the key, so entries compiled before (or with the
setting off) are never loaded in its place, and both can live in the cache side by side.

In force where the CPU has AVX-512 (``avx512f`` in LLVM's host features) and the user left
Numba's code generation alone (neither ``NUMBA_CPU_NAME`` nor ``NUMBA_CPU_FEATURES`` set);
``XRT_NUMBA_WIDE_VECTORS=0`` turns it off. Decided once per process, at the first compile.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from numba import config
from numba.core import typed_passes
from numba.core.caching import FunctionCache
from numba.core.compiler import Compiler
from numba.core.compiler_machinery import register_pass
from numba.core.lowering import Lower
from numba.core.registry import CPUDispatcher

from .errors import XirError

#: the environment variable that turns 512-bit vectors off ("0")
ENV_SWITCH = "XRT_NUMBA_WIDE_VECTORS"
#: the LLVM function attribute set on the kernels' functions
ATTRIBUTE = '"prefer-vector-width"="512"'

_WIDE: bool | None = None


def _host_has_avx512() -> bool:
    import llvmlite.binding as ll
    ll.initialize_native_target()
    try:
        features = ll.get_host_cpu_features()
    except RuntimeError:  # LLVM cannot read this host's features
        return False
    return bool(features.get("avx512f", False))


def wide_vectors() -> bool:
    """Whether the kernels compile with 512-bit vectors in this process (decided at the first
    call: AVX-512 host, Numba's CPU name and features not set by the user, and
    ``XRT_NUMBA_WIDE_VECTORS`` not ``0``)."""
    global _WIDE
    if _WIDE is None:
        _WIDE = (os.environ.get(ENV_SWITCH, "1").strip() != "0"
                 and config.CPU_NAME is None and config.CPU_FEATURES is None
                 and _host_has_avx512())
    return _WIDE


class _WideLower(Lower):
    """Numba's lowering, with the 512-bit preference on each function it defines."""

    def pre_lower(self) -> None:
        super().pre_lower()
        # llvmlite's FunctionAttributes checks names against LLVM's enum attributes; a string
        # attribute ("key"="value") goes into the set as written and is printed as it is
        set.add(self.builder.function.attributes, ATTRIBUTE)


@register_pass(mutates_CFG=True, analysis_only=False)
class _WideNativeLowering(typed_passes.NativeLowering):
    _name = "xir_wide_native_lowering"

    @property
    def lowering_class(self) -> type:
        return _WideLower


class WideCompiler(Compiler):
    """Numba's default compiler whose lowering marks functions ``prefer-vector-width=512``
    when `wide_vectors` holds (the plain default compiler otherwise)."""

    def define_pipelines(self) -> list:
        pipelines = super().define_pipelines()
        if not wide_vectors():
            return pipelines
        for pm in pipelines:
            swapped = [(_WideNativeLowering, desc) if cls is typed_passes.NativeLowering
                       else (cls, desc) for cls, desc in pm.passes]
            if swapped != pm.passes:
                pm.passes[:] = swapped
                pm.finalize()
        return pipelines


class WideFunctionCache(FunctionCache):
    """Numba's per-function disk cache whose index key also holds the vector width: an entry
    compiled under the other setting is never loaded in place of this one."""

    def _index_key(self, sig: Any, codegen: Any) -> tuple:
        key = super()._index_key(sig, codegen)
        return key + (("prefer-vector-width", 512),) if wide_vectors() else key


class WideDispatcher(CPUDispatcher):
    """Numba's CPU dispatcher whose disk cache is a `WideFunctionCache`
    (``enable_caching()``)."""

    def enable_caching(self) -> None:
        self._cache = WideFunctionCache(self.py_func)


def njit(func: Callable | None = None, **options: Any) -> Any:
    """``numba.njit`` for the project's kernels: `WideCompiler`, `WideFunctionCache` when
    ``cache=True``. Left as the plain function under ``NUMBA_DISABLE_JIT=1``."""
    if func is not None and not callable(func):
        raise XirError(f"xir.numba_target.njit compiles lazily, for the argument types of each "
                       f"call: it takes no signature ({func!r})")

    def make(f: Callable) -> Any:
        opts = dict(options)
        cache = opts.pop("cache", False)
        return wide_dispatcher(f, dict(opts, nopython=True), cache=cache)
    return make if func is None else make(func)


def wide_dispatcher(func: Callable, options: dict[str, Any], cls: type = WideDispatcher,
                    cache: bool = True) -> Any:
    """A `cls` dispatcher (a `WideDispatcher`) of `func` compiled by `WideCompiler` with
    Numba's target `options` (``locals`` among them), its disk cache on when `cache`; the
    plain function under ``NUMBA_DISABLE_JIT=1``."""
    if config.DISABLE_JIT:
        return func
    opts = dict(options)
    disp = cls(py_func=func, locals=opts.pop("locals", {}), targetoptions=opts,
               pipeline_class=WideCompiler)
    if cache:
        disp.enable_caching()
    return disp

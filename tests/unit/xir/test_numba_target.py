"""The project's Numba kernels compile with 512-bit vectors on AVX-512 hosts
(`xir.numba_target`), per function, with their own disk-cache key, and
``XRT_NUMBA_WIDE_VECTORS=0`` turns that off."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import numba
import numpy as np
import pytest

from xir import numba_target
from xir.numba_target import WideCompiler, WideFunctionCache

AVX512 = numba_target._host_has_avx512()
USER_SET = bool(os.environ.get("NUMBA_CPU_NAME") or os.environ.get("NUMBA_CPU_FEATURES"))
needs_avx512 = pytest.mark.skipif(not AVX512 or USER_SET,
                                  reason="512-bit vectors need AVX-512 (and Numba's CPU "
                                         "settings left alone)")


def _axpy(a, b, out):
    for i in range(a.size):
        out[i] = (a[i] * np.int64(3) + b[i]) >> np.int64(2)


def _affine(x, out):
    for i in range(x.size):
        out[i] = x[i] * 1.5 + 0.25


def _zmm(disp) -> int:
    return len(re.findall(r"%zmm", "".join(disp.inspect_asm().values())))


@needs_avx512
def test_kernels_use_zmm_and_plain_numba_does_not():
    wide, plain = numba_target.njit(_axpy), numba.njit(_axpy)
    a = np.arange(4096, dtype=np.int64)
    b = a[::-1].copy()
    o1, o2 = np.empty_like(a), np.empty_like(a)
    wide(a, b, o1)
    plain(a, b, o2)
    assert numba_target.wide_vectors()
    assert np.array_equal(o1, o2)
    assert _zmm(wide) > 0
    # the user's own Numba code keeps LLVM's tuning (256 bits on this CPU, or 512 if its
    # tuning has no prefer-256-bit): the setting is per function, not per process
    import llvmlite.binding as ll
    if ll.get_host_cpu_features().get("prefer-256-bit", False):
        assert _zmm(plain) == 0


@needs_avx512
def test_npu_kernel_decorator_compiles_wide(tmp_path, monkeypatch):
    from npu_model.kernels import jit, vector
    # an empty disk cache: a kernel loaded from an earlier run's cache has no assembly to read
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path))
    k = jit.kernel(_axpy)
    a = np.arange(1000, dtype=np.int64)
    out = np.empty_like(a)
    k(a, a, out)
    assert _zmm(k) > 0
    # the project's kernels are built with the same compiler and cache
    for disp in (vector.eltw, vector.maxpool):
        assert disp._compiler.pipeline_class is WideCompiler
        assert isinstance(disp._cache, WideFunctionCache)


def test_float_results_identical_bit_for_bit():
    x = np.random.default_rng(0).standard_normal(10007)
    o1, o2 = np.empty_like(x), np.empty_like(x)
    numba_target.njit(_affine)(x, o1)
    numba.njit(_affine)(x, o2)
    assert o1.tobytes() == o2.tobytes()


def test_cache_key_holds_the_width(monkeypatch):
    disp = numba_target.njit(_axpy, cache=True)
    cache = disp._cache
    assert isinstance(cache, WideFunctionCache)
    sig = (numba.int64[::1],) * 3
    codegen = disp.targetctx.codegen()
    monkeypatch.setattr(numba_target, "_WIDE", True)
    wide_key = cache._index_key(sig, codegen)
    monkeypatch.setattr(numba_target, "_WIDE", False)
    plain_key = cache._index_key(sig, codegen)
    assert wide_key != plain_key
    assert wide_key[:len(plain_key)] == plain_key
    # off, the key is Numba's own: entries compiled before the switch are the ones loaded
    from numba.core.caching import FunctionCache
    assert plain_key == FunctionCache(_axpy)._index_key(sig, codegen)


_CHILD = """
import re, numpy as np
from xir import numba_target
def f(a, b, out):
    for i in range(a.size):
        out[i] = (a[i] * np.int64(3) + b[i]) >> np.int64(2)
k = numba_target.njit(f)
a = np.arange(1000, dtype=np.int64); o = np.empty_like(a); k(a, a, o)
print(numba_target.wide_vectors(), len(re.findall("%zmm", "".join(k.inspect_asm().values()))))
"""


@needs_avx512
@pytest.mark.parametrize("switch,wide", [("0", False), ("1", True)])
def test_env_switch(switch, wide):
    env = dict(os.environ, XRT_NUMBA_WIDE_VECTORS=switch)
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True,
                         text=True, timeout=300, check=True).stdout.split()
    assert out[0] == str(wide)
    import llvmlite.binding as ll
    if wide:
        assert int(out[1]) > 0
    elif ll.get_host_cpu_features().get("prefer-256-bit", False):
        assert int(out[1]) == 0


def test_user_cpu_settings_win():
    env = dict(os.environ, NUMBA_CPU_FEATURES="", NUMBA_CPU_NAME="generic")
    env.pop("NUMBA_CPU_FEATURES")
    out = subprocess.run([sys.executable, "-c", "from xir import numba_target; "
                          "print(numba_target.wide_vectors())"], env=env, capture_output=True,
                         text=True, timeout=300, check=True).stdout.split()
    assert out == ["False"]


def test_signatures_are_refused():
    from xir.errors import XirError
    with pytest.raises(XirError, match="no signature"):
        numba_target.njit("int64(int64)")

"""Numba kernels that call kernels of other files declare them with a source stamp.

Numba's `cache=True` invalidates a cached kernel only when the kernel's own file changes; a
kernel that calls into another file would keep running stale compiled code after that file is
edited. Every such kernel module lists its outside dependencies in `NUMBA_DEPENDS`; this test
recomputes the stamps, so editing a dependency fails here until the caller's stamp is updated,
which edits the caller's file and so refreshes its cache.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import pkgutil

import pytest

PACKAGES = ("xir", "xcompile", "host_backend", "npu_model", "npu_runtime", "zg330backend",
            "buyibackend")


def _is_kernel(obj) -> bool:
    return hasattr(obj, "py_func") and callable(obj)


def _is_intrinsic(obj) -> bool:
    """A Numba intrinsic: its code generator is Python the cache cannot see either."""
    return hasattr(obj, "_defn") and callable(obj)


def source_stamp(func) -> str:
    """sha256 (16 hex digits) of a Numba kernel's source and of every kernel it calls from its
    module's globals, recursively."""
    seen: dict[str, str] = {}

    def walk(f) -> None:
        if _is_intrinsic(f):  # stamped by its whole module (its generator may use helpers)
            mod = inspect.getmodule(f._defn)
            seen[f"{mod.__name__}:module"] = inspect.getsource(mod)
            return
        py = getattr(f, "py_func", f)
        key = f"{py.__module__}.{py.__qualname__}"
        if key in seen:
            return
        seen[key] = inspect.getsource(py)
        for name in py.__code__.co_names:
            g = py.__globals__.get(name)
            if _is_kernel(g) or _is_intrinsic(g):
                walk(g)

    walk(func)
    h = hashlib.sha256()
    for key in sorted(seen):
        h.update(key.encode() + b"\n" + seen[key].encode())
    return h.hexdigest()[:16]


def _modules():
    for pkg_name in PACKAGES:
        pkg = importlib.import_module(pkg_name)
        yield pkg
        for info in pkgutil.walk_packages(pkg.__path__, f"{pkg_name}."):
            yield importlib.import_module(info.name)


def _cross_file_calls(mod) -> set[str]:
    """Kernels of other modules that this module's kernels call."""
    out = set()
    for obj in vars(mod).values():
        if _is_kernel(obj) and obj.py_func.__module__ == mod.__name__:
            for name in obj.py_func.__code__.co_names:
                g = obj.py_func.__globals__.get(name)
                if _is_kernel(g) and g.py_func.__module__ != mod.__name__:
                    out.add(f"{g.py_func.__module__}.{g.py_func.__qualname__}")
    return out


@pytest.mark.parametrize("mod", list(_modules()), ids=lambda m: m.__name__)
def test_cross_file_kernel_calls_are_declared_and_current(mod):
    declared = getattr(mod, "NUMBA_DEPENDS", {})
    assert _cross_file_calls(mod) == set(declared), (
        f"{mod.__name__}: declare the kernels of other files that its kernels call in "
        f"NUMBA_DEPENDS (or keep them in one file)")
    for dotted, stamp in declared.items():
        modname, _, name = dotted.rpartition(".")
        now = source_stamp(getattr(importlib.import_module(modname), name))
        assert stamp == now, (f"{dotted} changed: set its stamp in {mod.__file__} to {now!r} "
                              f"(this edit makes Numba recompile that file's cached kernels)")

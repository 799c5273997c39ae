"""The kernels' compile forms that keep a fresh install's first forward short (issue 30, item 4;
`npu_model.kernels.jit`): no C wrappers, no CPython wrappers on helpers, and one
specialisation per operand type (C-contiguous arrays, int64 scalars: no literal or layout
variants), checked after a stream of every MPE kernel in int8 and int16."""

from __future__ import annotations

import numpy as np
import pytest
from npu_testlib import Harness, rand_requant
from numba.core import types

from npu_model import asm
from npu_model.kernels import (
    bgemm,
    depthwise,
    grouped,
    igemm,
    interleave,
    jit,
    matmul,
    mpe,
    pool,
    rownorm,
    vector,
)
from npu_model.kernels.jit import HelperCallError
from xir.errors import XirError

MODULES = (bgemm, depthwise, grouped, igemm, interleave, matmul, mpe, rownorm, vector)


def _dispatchers():
    for mod in MODULES:
        for name, obj in vars(mod).items():
            if hasattr(obj, "py_func") and obj.py_func.__module__ == mod.__name__:
                yield f"{mod.__name__}.{name}", obj


def test_kernels_compile_no_unused_wrappers():
    found = dict(_dispatchers())
    assert len(found) > 30, sorted(found)
    for name, d in found.items():
        opts = d.targetoptions
        assert opts.get("no_cfunc_wrapper"), f"{name} compiles a C wrapper no one calls"
        assert type(d._cache).__name__ != "NullCache", f"{name} is not cached on disk"
        if isinstance(d, jit._HelperDispatcher):  # kernels call it, Python may not
            assert opts.get("no_cpython_wrapper"), f"{name} compiles an unused CPython wrapper"
        else:  # Python calls it; private names are for helpers
            assert not opts.get("no_cpython_wrapper"), f"{name} is called from Python"
            assert not name.rsplit(".", 1)[1].startswith("_"), f"{name}: make it a helper"


def test_a_helper_is_not_callable_from_python():
    dst, src = np.zeros(4, np.int16), np.arange(4, dtype=np.int8)
    mpe._cp.py_func(dst, src)  # the Python function still runs
    assert dst.tolist() == [0, 1, 2, 3]
    with pytest.raises(HelperCallError, match=r"npu_model\.kernels\.mpe\._cp is a kernel helper"):
        mpe._cp(dst, src)
    with pytest.raises(HelperCallError):  # an inlined one too
        vector._eltw_run(dst, dst, dst, 0, 1, 1, dst, dst, dst, dst, dst, dst, 0, 1)
    assert isinstance(HelperCallError("x"), XirError)


def _stream(hw, rng, dtype):
    """A padded 6x6 stem, a 3x3, a strided 3x3, a 1x1, a grouped 3x3, a depthwise and a
    dynamic matmul."""
    npdt = np.int16 if dtype == "int16" else np.int8
    info = np.iinfo(npdt)
    scale = 3000 if dtype == "int16" else 30

    def rand(*shape):
        return rng.integers(info.min, info.max + 1, shape).astype(npdt)

    def conv(x, cout, k, s, p, groups=1):
        h, w, cin = x.shape
        wq = rand(k, k, cin // groups, cout)
        m, sh = rand_requant(rng, cout, 2.0 / (k * k * cin // groups * scale))
        oh, ow = asm.conv_out_hw(h, w, (k, k), (s, s), (p,) * 4, (1, 1))
        return asm.Conv(hw.fmap_in(x), hw.fmap_out(oh, ow, cout, dtype),
                        hw.put(asm.pack_conv_weights(wq, groups, dtype, hw.cfg)),
                        hw.put(asm.pack_requant_params(7, m, sh)), kernel=(k, k),
                        stride=(s, s), pad=(p,) * 4, groups=groups, clip=(info.min, info.max))

    layers = [conv(rand(34, 34, 3), 16, 6, 2, 2), conv(rand(12, 12, 32), 48, 3, 1, 1),
              conv(rand(13, 13, 32), 24, 3, 2, 1), conv(rand(10, 10, 40), 72, 1, 1, 0),
              conv(rand(10, 10, 32), 32, 3, 1, 1, groups=4),
              conv(rand(16, 16, 48), 48, 3, 1, 1, groups=48)]
    a, b = rand(2, 16, 64), rand(2, 64, 24)
    m, sh = rand_requant(rng, 24, 1.0 / (64 * scale * 300))
    layers.append(asm.Matmul(hw.fmap_in(a), hw.fmap_out(2, 16, 24, dtype),
                             hw.put(asm.pack_requant_params(3, m, sh, n=24)), b=hw.fmap_in(b),
                             clip=(info.min, info.max)))
    return layers


def test_one_specialisation_per_operand_type():
    from xrt import Device

    pool.set_threads(1)
    try:
        for dtype in ("int8", "int16"):
            dev = Device.Open("sim://zg330")
            dev.sim.int_gemm = dev.sim.int_gemm16 = True
            hw = Harness(dev, size=32 << 20)
            hw.run(_stream(hw, np.random.default_rng(3), dtype))
            dev.close()
    finally:
        pool.set_threads(None)
    # the kernels Python calls (helpers show signatures only where this process compiled
    # them, i.e. with a cold cache)
    used = {n: d.signatures for n, d in _dispatchers() if d.signatures}
    tail = "_bytes" if bgemm.enabled() else ""
    dense8 = "conv_dense_int8_bytes" if tail else "conv_dense_int"
    dwise = "conv_depthwise_pairs" if tail else "conv_depthwise"
    for name in (dense8, "conv_dense_int16" + tail, dwise, "matmul_dynamic_int8_bytes"
                 if tail else "matmul_dynamic_int", "matmul_dynamic_int16" + tail):
        assert any(n.endswith("." + name) for n in used), (name, sorted(used))
    for name, sigs in used.items():
        by_arrays: dict[tuple, list] = {}
        for sig in sigs:
            for t in sig:
                assert not isinstance(t, (types.Literal, types.Omitted)), (name, sig)
                assert not isinstance(t, types.Array) or t.layout == "C", (name, sig)
            key = tuple(str(t.dtype) for t in sig if isinstance(t, types.Array))
            by_arrays.setdefault(key, []).append(sig)
        for key, group in by_arrays.items():
            assert len(group) == 1, f"{name}: {len(group)} specialisations for arrays {key}"


@pytest.mark.parametrize("dtype", ["int8", "int16"])
@pytest.mark.parametrize(("k", "cin_g", "cout", "groups"),
                         [(3, 5, 7, 1), (1, 40, 96, 4), (6, 3, 70, 1), (3, 33, 130, 2)])
def test_unpacked_weights_are_the_packed_ones(dtype, k, cin_g, cout, groups):
    """`mpe.unpack_conv_weights` (numpy, no Numba kernel) inverts `asm.pack_conv_weights`."""
    cfg = asm.DEFAULT
    npdt = np.int16 if dtype == "int16" else np.int8
    info = np.iinfo(npdt)
    w = np.random.default_rng(k + cin_g).integers(info.min + 1, info.max + 1,
                                                  (k, k, cin_g, cout)).astype(npdt)
    packed = asm.pack_conv_weights(w, groups, dtype, cfg).view(npdt)
    cout_g = cout // groups
    for form in (np.int16, np.float32, np.float64):
        wf = np.empty((groups, k * k * cin_g, cout_g), dtype=form)
        mpe.unpack_conv_weights(packed, groups, k, k, cin_g, cout_g, cfg.channel_unit(dtype),
                                cfg.oc_block(dtype), wf)
        want = w.reshape(k * k * cin_g, groups, cout_g).transpose(1, 0, 2)
        assert np.array_equal(wf, want.astype(form))


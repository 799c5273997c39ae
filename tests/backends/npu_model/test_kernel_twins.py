"""The numpy twins of the slowest kernels to compile (`npu_model.kernels.twins`, issue 30 item
4): each twin gives its kernel's bytes -- the layer's channels against numpy integers and every
channel of the output's pitch against the compiled kernel -- over the geometries the kernels'
own tests use; and on a fresh install (an empty Numba cache, a child process) a run calls the
twins while a worker compiles the kernels, never compiling them itself, with the same bytes as
the compiled kernels the next run loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import llvmlite.binding as ll
import numpy as np
import pytest
import test_vector as tv
from npu_testlib import Harness
from numba import config
from test_kernels_implicit import CASES, _conv

from npu_model.kernels import bgemm, depthwise, implicit, mpe, twins, vector

pytestmark = [
    pytest.mark.skipif(config.DISABLE_JIT, reason="NUMBA_DISABLE_JIT: no dispatchers"),
    pytest.mark.skipif(not ll.get_host_cpu_features().get("avx512vnni"),
                       reason="the implicit GEMM needs AVX-512 VNNI")]

SPLITS = {"implicit": implicit.CONV_IMPLICIT, "depthwise": mpe.CONV_DEPTHWISE,
          "depthwise_pairs": depthwise.CONV_DEPTHWISE_PAIRS}

DEPTHWISE = [
    dict(h=9, w=10, cin=16, cout=16),  # 3x3, unit stride: the fused-row (flat) path
    dict(h=11, w=13, cin=24, cout=24, stride=(2, 2)),
    dict(h=12, w=12, cin=40, cout=40, k=(5, 5), pad=(2, 2, 2, 2)),
    dict(h=13, w=9, cin=20, cout=20, k=(5, 5), stride=(2, 2), pad=(2, 2, 2, 2), leaky=True),
    dict(h=10, w=10, cin=16, cout=16, dilation=(2, 2), pad=(2, 2, 2, 2)),
    dict(h=7, w=8, cin=18, cout=18, in_pitch=32, out_pitch=48, out_c_off=5),  # pitched windows
    dict(h=6, w=3, cin=16, cout=16, pad=(0, 0, 0, 0)),  # one output column
    dict(h=5, w=2, cin=16, cout=16),  # narrower than the kernel's reach
    dict(h=9, w=9, cin=32, cout=32, relu=True, dtype="int16"),
    dict(h=8, w=11, cin=24, cout=24, stride=(2, 2), leaky=True, dtype="int16"),
]
#: beyond the implicit kernel's own cases: K above float32's exact bound (float64 GEMM)
WIDE = [dict(h=6, w=9, cin=128, cout=24), dict(h=5, w=6, cin=120, cout=40, leaky=True)]


def _ids(case: dict) -> str:
    return "-".join(f"{k}{v}" for k, v in case.items())


def _run(dev, case: dict, twin: bool, monkeypatch) -> tuple:
    """One layer of `case` on a fresh harness (seeded alike), its kernels or their twins:
    (the layer's channels, the numpy reference, every channel of the output's pitch)."""
    with monkeypatch.context() as m:
        if twin:
            for split in SPLITS.values():
                m.setattr(split, "kernel", split.kernel.twin)
        hw = Harness(dev)
        got, ref, fo = _conv(hw, np.random.default_rng(7), **case)
        return got, ref, hw.read(fo, all_channels=True)


def _dw_kind(case: dict) -> str:
    """Depthwise layers run on pairs of taps where `depthwise.fits` (with the byte GEMM's
    VNNI), else on `mpe.conv_depthwise`; both twins are `twins.conv_depthwise`."""
    kh, kw = case.get("k", (3, 3))
    pairs = bgemm.enabled() and depthwise.fits(case.get("dtype", "int8"), kh * kw)
    return "depthwise_pairs" if pairs else "depthwise"


def _depthwise(case: dict) -> dict:
    c = case["cin"]
    kh, kw = case.get("k", (3, 3))
    info = np.iinfo(np.int16 if case.get("dtype") == "int16" else np.int8)
    wq = np.random.default_rng(c).integers(info.min, info.max + 1, (kh, kw, 1, c))
    return dict(case, groups=c, wq=wq.astype(info.dtype))


@pytest.mark.parametrize(("kind", "case"), [("implicit", c) for c in CASES]
                         + [(_dw_kind(c), _depthwise(c)) for c in DEPTHWISE],
                         ids=[f"implicit-{_ids(c)}" for c in CASES]
                         + [f"depthwise-{_ids(c)}" for c in DEPTHWISE])
def test_twin_gives_its_kernels_bytes(dev, kind, case, monkeypatch):
    ran = []
    split = SPLITS[kind]
    real = split.kernel.twin
    monkeypatch.setattr(split.kernel, "twin", lambda *a: ran.append(1) or real(*a))
    got, ref, every = _run(dev, case, True, monkeypatch)
    assert ran, "the layer did not run on the twin"
    np.testing.assert_array_equal(got, ref)
    _, _, compiled = _run(dev, case, False, monkeypatch)
    np.testing.assert_array_equal(every, compiled)


@pytest.mark.parametrize("cin", [1024, 1028])  # K = 1024: float32's last exact K; then float64
@pytest.mark.parametrize("k", [(1, 1), (2, 2)])
def test_implicit_twin_at_its_sums_bound(dev, monkeypatch, cin, k):
    """Every product at its largest (-128 x -128), K on either side of the float32 bound."""
    cin = cin // (k[0] * k[1])
    x = np.full((3, 5, cin), -128, np.int8)
    wq = np.full((*k, cin, 8), -128, np.int8)
    wq[..., 1] = 127  # and one channel at the negative end
    case = dict(h=3, w=5, cin=cin, cout=8, k=k, pad=(0, 0, 0, 0), x=x, wq=wq)
    got, ref, every = _run(dev, case, True, monkeypatch)
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(every, _run(dev, case, False, monkeypatch)[2])


def test_twin_takes_part_ranges(dev, monkeypatch):
    """The thread pool's parts (output rows ``lo..hi``) on the twin make the whole layer."""
    case = dict(h=17, w=9, cin=12, cout=20, stride=(2, 1))
    whole = _run(dev, case, False, monkeypatch)[2]
    real = implicit.conv_implicit_int8.twin

    def in_parts(*args):
        lo, hi = args[-2:]
        for r in range(lo, hi):
            real(*args[:-2], r, r + 1)
        return args[15]

    monkeypatch.setattr(implicit.CONV_IMPLICIT, "kernel", in_parts)
    hw = Harness(dev)
    _, _, fo = _conv(hw, np.random.default_rng(7), **case)
    np.testing.assert_array_equal(hw.read(fo, all_channels=True), whole)


#: the vector unit's own tests (test_vector.py, against numpy integers) and the kernel each runs
VECTOR = ([(tv.test_eltw, dict(op=o, dtype=d), "eltw") for o in ("add", "sub", "mul")
           for d in ("int8", "int16")]
          + [(tv.test_eltw_leaky_and_broadcast, {}, "eltw"),
             (tv.test_add_with_host_style_large_multipliers, {}, "eltw")]
          + [(tv.test_maxpool, dict(k=k, s=st, p=p, d=d), "maxpool")
             for k, st, p, d in [((2, 2), (2, 2), (0, 0, 0, 0), (1, 1)),
                                 ((5, 5), (1, 1), (2, 2, 2, 2), (1, 1)),
                                 ((3, 2), (2, 1), (1, 0, 0, 1), (2, 1))]]
          + [(tv.test_avgpool, dict(include_pad=i, dtype=d), "avgpool") for i in (False, True)
             for d in ("int8", "int16")]
          + [(tv.test_global_avgpool, {}, "avgpool"),
             (tv.test_upsample_into_concat_slice, {}, "upsample_nearest")])


@pytest.mark.parametrize(("test", "kw", "name"), VECTOR,
                         ids=[f"{t.__name__}-{'-'.join(map(str, k.values()))}"
                              for t, k, _ in VECTOR])
def test_vector_twins_pass_the_kernels_tests(hw, rng, monkeypatch, test, kw, name):
    ran = []
    for kernel in ("eltw", "maxpool", "avgpool", "upsample_nearest"):
        real = getattr(vector, kernel).twin
        monkeypatch.setattr(vector, kernel,
                            lambda *a, _f=real, _k=kernel: ran.append(_k) or _f(*a))
    test(hw, rng, **kw)
    assert ran and set(ran) == {name}


CHILD = textwrap.dedent("""
    import json
    import numpy as np
    from numba.core import event
    from npu_testlib import Harness
    from test_kernels_implicit import _conv
    from npu_model.kernels import compile_pool
    from xrt import Device

    here = []
    class Compiles(event.Listener):
        def on_start(self, e):
            pass
        def on_end(self, e):
            here.append(e.data["dispatcher"].py_func.__name__)
    event.register("numba:compile", Compiles())

    dev = Device.Open("sim://zg330")
    c = 16
    wq = np.random.default_rng(1).integers(-127, 128, (3, 3, 1, c)).astype(np.int8)
    out = []
    for run in range(2):  # the first while the worker compiles, the second after
        hw = Harness(dev)
        rng = np.random.default_rng(5)
        got = [_conv(hw, rng, 12, 14, 3, c, stride=(2, 2), in_pitch=16)[0],
               _conv(hw, rng, 9, 10, c, c, groups=c, wq=wq)[0]]
        out.append([g.tolist() for g in got])
        if run == 0:
            first = dict(compile_pool.stats)
            for w in compile_pool._workers:
                w.proc.wait()
    dev.close()
    print(json.dumps(dict(first=first, here=here, out=out)))
""")


def test_a_fresh_install_runs_the_twins_while_a_worker_compiles(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"), XRT_COMPILE_WORKERS="1")
    here = os.path.dirname(__file__)
    env["PYTHONPATH"] = os.pathsep.join([here, os.path.join(here, "..", "..", "support"),
                                         env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["first"]["twinned"] >= 2 and got["first"]["workers"] == 1
    # the caller ran the twins and loaded the worker's compiles: it compiled neither kernel
    assert "conv_implicit_int8" not in got["here"] and "conv_depthwise" not in got["here"]
    assert got["out"][0] == got["out"][1]  # the twins' bytes, then the compiled kernels'


def test_every_twin_is_registered():
    assert implicit.conv_implicit_int8.twin is twins.conv_implicit_int8
    assert mpe.conv_depthwise.twin is twins.conv_depthwise
    assert depthwise.conv_depthwise_pairs.twin is depthwise.twin  # twins.conv_depthwise's
    for name in ("eltw", "maxpool", "avgpool", "upsample_nearest"):
        assert getattr(vector, name).twin is getattr(twins, name)

"""The implicit GEMM's range over (channel group, output row) units (`implicit.channel_groups`):
a layer whose weights outweigh its input (resnet50's 7x7 and 14x14 stages) is cut over its
output channels as well as its rows, so that a part streams only its own panels' weights.
Every way of cutting the range gives the numpy integers' bytes, on the kernel and its twin, at
1, 2 and 4 threads."""

from __future__ import annotations

import inspect

import llvmlite.binding as ll
import numpy as np
import pytest
from test_kernels_implicit import _conv

from npu_model.kernels import implicit, pool, twins

pytestmark = pytest.mark.skipif(not ll.get_host_cpu_features().get("avx512vnni"),
                                reason="the implicit GEMM needs AVX-512 VNNI")

#: weight-heavy layers (past `implicit.WEIGHT_BYTES`): several channel groups each
HEAVY = [
    dict(h=7, w=7, cin=384, cout=320),  # 3x3 over a 7x7 map, ten panels
    dict(h=5, w=9, cin=400, cout=296, leaky=True, out_pitch=320, out_c_off=20),
    dict(h=7, w=7, cin=1024, cout=1056, k=(1, 1), pad=(0, 0, 0, 0)),  # 1x1 (`_pointwise`)
    dict(h=11, w=11, cin=384, cout=320, stride=(2, 2)),
    dict(h=6, w=6, cin=512, cout=260, relu=True),  # a last panel of 4 channels
]

_CG = getattr(implicit.channel_groups, "py_func", implicit.channel_groups)


def _ids(case: dict) -> str:
    return "-".join(f"{k}{v}" for k, v in case.items())


def test_channel_groups_follow_the_weights_to_input_ratio():
    # resnet50: 7x7 3x3 512 -> 512 (2.4 MB of weights, 41 KB of input) one group a panel
    assert _CG(9, 9, 7, 3, 3, 512, 512, 32) == 16
    assert _CG(14, 14, 7, 1, 1, 1024, 2048, 32) == 64  # the stride-2 1x1 into that stage
    # weights an L2 holds, whatever the input: rows only
    assert _CG(7, 7, 7, 1, 1, 2048, 512, 32) == 1  # 1 MB
    assert _CG(16, 16, 14, 3, 3, 256, 256, 32) == 1  # 590 KB
    # 20x20 3x3 512 -> 512 (yolov5s): 2.4 MB of weights, 247 KB of input
    assert _CG(22, 22, 20, 3, 3, 512, 512, 32) == 16
    # weights past L2 but not 4x the input (a wide map): rows only
    assert _CG(58, 58, 56, 3, 3, 256, 512, 32) == 1
    # a stem: 3 channels, 64 outputs over a 224x224 map
    assert _CG(224, 224, 112, 7, 7, 3, 64, 32) == 1
    # one output row (a classifier's 1x1 map): rows are all there is to cut, and there is one
    assert _CG(1, 1, 1, 1, 1, 2048, 1000, 32) == 1


def _record(hw, rng, case, monkeypatch):
    """Run the layer once; return (its bytes, the numpy reference, the kernel's arguments,
    the output memory before the layer wrote it)."""
    seen = []
    real = implicit.CONV_IMPLICIT.kernel

    def spy(*args):
        if not seen:
            seen.append((args[:-2], args[15].copy()))
        return real(*args)

    monkeypatch.setattr(implicit.CONV_IMPLICIT, "kernel", spy)
    got, ref, _ = _conv(hw, rng, **case)
    monkeypatch.setattr(implicit.CONV_IMPLICIT, "kernel", real)
    assert seen, "the layer did not run on the implicit GEMM"
    return got, ref, *seen[0]


def _cuts(total: int, rng: np.random.Generator, each: bool) -> list[list[int]]:
    """Ways to cut ``0..total``: whole, unit by unit (`each`), and random cuts."""
    out = [[0, total]] + ([list(range(total + 1))] if each else [])
    for _ in range(3):
        inner = sorted(rng.choice(np.arange(1, total), size=min(total - 1, 5), replace=False))
        out.append([0, *map(int, inner), total])
    return out


@pytest.mark.parametrize("case", HEAVY, ids=_ids)
def test_every_cut_of_the_units_gives_the_layer(hw, rng, case, monkeypatch):
    got, ref, args, before = _record(hw, rng, case, monkeypatch)
    np.testing.assert_array_equal(got, ref)
    params = list(inspect.signature(implicit.conv_implicit_int8.py_func).parameters)
    arg = dict(zip(params, args))
    cg = _CG(*[arg[n] for n in ("ih_n", "iw_n", "oh_n", "kh", "kw", "cin", "cout", "nr")])
    assert cg == -(-arg["cout"] // arg["nr"]) > 1  # a group a panel
    total = implicit.CONV_IMPLICIT.total(args)
    assert total == cg * arg["oh_n"]
    y = arg["y"]
    whole = y.copy()
    for kernel in (implicit.conv_implicit_int8, twins.conv_implicit_int8):
        for bounds in _cuts(total, rng, each=kernel is implicit.conv_implicit_int8):
            y[:] = before
            for a, b in zip(bounds, bounds[1:]):
                kernel(*args, a, b)
            np.testing.assert_array_equal(y, whole, err_msg=f"{kernel.__module__} {bounds}")
    y[:] = whole


@pytest.mark.parametrize("case", HEAVY, ids=_ids)
def test_the_same_bytes_at_1_2_and_4_threads(hw, rng, case, monkeypatch):
    monkeypatch.setattr(pool, "INLINE_S", 0.0)  # cut by work count: every layer cut
    monkeypatch.setattr(implicit.CONV_IMPLICIT, "min_work", 1)
    outs = []
    try:
        for n in (1, 2, 4):
            pool.set_threads(n)
            got, ref, _ = _conv(hw, np.random.default_rng(3), **case)
            np.testing.assert_array_equal(got, ref)
            outs.append(got.tobytes())
    finally:
        pool.set_threads(None)
    assert outs[0] == outs[1] == outs[2]

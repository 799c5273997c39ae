"""ELTW add / sub of int16 operands scaled past int32 with one requantization for both signs
(`vector._eltw_run1`: a transformer's residual Add) and dense maps taken as one run, against
numpy integers: full-range operands, both ops, dense and pitched maps, int8 and int16 results,
the channels around a window untouched."""

from __future__ import annotations

import numpy as np
import pytest
from npu_testlib import ref_requant

from npu_model import asm
from npu_model.kernels import vector


@pytest.mark.parametrize("op", ["add", "sub"])
@pytest.mark.parametrize("out", ["int16", "int8"])
@pytest.mark.parametrize("pitched", [False, True])
def test_wide_one_sided_add(hw, rng, op, out, pitched):
    h, w, c = 3, 64, 128
    a = rng.integers(-32768, 32768, (h, w, c)).astype(np.int16)
    b = rng.integers(-32768, 32768, (h, w, c)).astype(np.int16)
    a[0, 0, :4] = b[0, 0, :4] = -32768
    a[0, 1, :4] = b[0, 1, :4] = 32767
    ka, kb, m, s = 57832, 16649, 1, 16 if out == "int16" else 22
    assert 32768 * (ka + kb) >= 2**31  # past the int32 form
    lo, hi = (-32768, 32767) if out == "int16" else (-128, 127)
    fa = hw.fmap_in(a, pitch=c + 16 if pitched else None)
    fo = hw.fmap_out(h, w, c, out, pitch=c + 32 if pitched else None, c_off=8 if pitched else 0)
    hw.run([asm.Eltw(fa, hw.fmap_in(b), fo, op, ka, kb, m, s, clip=(lo, hi))])
    va, vb = a.astype(np.int64) * ka, b.astype(np.int64) * kb
    acc = va + vb if op == "add" else va - vb
    np.testing.assert_array_equal(hw.read(fo), ref_requant(acc, m, s, lo, hi))
    if pitched:
        whole = hw.read(fo, all_channels=True)
        rest = np.concatenate([whole[:, :, :8], whole[:, :, 8 + c:]], axis=2)
        assert (rest.view(np.uint8) == 0x5A).all()


def test_a_dense_map_is_one_run_of_the_same_bytes(rng):
    """The kernel called directly: a dense map (one run) and the same map with pixels and rows
    a channel apart (a run per pixel) give the same values."""
    h, w, c = 2, 5, 9
    a = rng.integers(-32768, 32768, h * w * c).astype(np.int16)
    b = rng.integers(-32768, 32768, h * w * c).astype(np.int16)
    args = (0, 3 * 10**5, 7, 1, 11, 1, 10, -32768, 32767)
    dense = np.zeros(h * w * c, np.int16)
    vector.eltw(a, w * c, c, 0, b, w * c, c, 0, False, dense, w * c, c, 0, h, w, c, *args)
    pitched = np.zeros(h * w * (c + 1), np.int16)
    vector.eltw(a, w * c, c, 0, b, w * c, c, 0, False, pitched, w * (c + 1), c + 1, 0, h, w, c,
                *args)
    acc = a.astype(np.int64) * 3 * 10**5 + b.astype(np.int64) * 7
    want = ref_requant(acc, 1, 11, -32768, 32767)
    assert dense.tobytes() == want.astype(np.int16).tobytes()
    assert pitched.reshape(h * w, c + 1)[:, :c].tobytes() == dense.tobytes()

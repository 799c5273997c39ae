"""Depthwise layers whose 3-tap kernel rows run fused (`npu_model.kernels.mpe._dw_row3`), at
the widths, pads and dilations where the taps' reach differs, against int64 numpy."""

from __future__ import annotations

import numpy as np
import pytest
from npu_testlib import Harness, rand_requant, ref_conv_acc, ref_requant

from npu_model import asm


@pytest.mark.parametrize("dtype", ["int8", "int16"])
@pytest.mark.parametrize(("w", "pad", "dil"), [(1, 1, 1), (2, 1, 1), (7, 0, 1), (9, 1, 1),
                                               (3, 2, 2), (11, 2, 2), (6, 3, 3), (20, 1, 4)])
@pytest.mark.parametrize("c", [32, 64])
def test_depthwise_kernel_rows_fused(dtype, w, pad, dil, c):
    """3-tap kernel rows of a unit-stride depthwise layer in one pass (`mpe._dw_row3`): the run
    every tap reaches and the ends only some reach, against int64 numpy."""
    from xrt import Device

    npdt = np.int16 if dtype == "int16" else np.int8
    info = np.iinfo(npdt)
    rng = np.random.default_rng(w * 10 + pad + dil)
    h = 5  # c a multiple of the channel unit: pixels dense, the fused (flat) case
    x = rng.integers(info.min, info.max + 1, (h, w, c)).astype(npdt)
    wq = rng.integers(info.min, info.max + 1, (3, 3, 1, c)).astype(npdt)
    bias = rng.integers(-500, 500, c)
    m, s = rand_requant(rng, c, 2.0 / (9 * (3000 if dtype == "int16" else 30)))
    oh, ow = asm.conv_out_hw(h, w, (3, 3), (1, 1), (pad,) * 4, (dil, dil))
    if oh < 1 or ow < 1:
        pytest.skip("no output")
    dev = Device.Open("sim://zg330")
    try:
        hw = Harness(dev, size=8 << 20)
        fo = hw.fmap_out(oh, ow, c, dtype)
        hw.run([asm.Conv(hw.fmap_in(x), fo, hw.put(asm.pack_conv_weights(wq, c, dtype, hw.cfg)),
                         hw.put(asm.pack_requant_params(bias, m, s)), kernel=(3, 3),
                         pad=(pad,) * 4, dilation=(dil, dil), groups=c,
                         clip=(info.min, info.max))])
        acc = ref_conv_acc(x, wq, bias, (1, 1), (pad,) * 4, (dil, dil), c)
        np.testing.assert_array_equal(hw.read(fo), ref_requant(acc, m, s, info.min, info.max))
    finally:
        dev.close()

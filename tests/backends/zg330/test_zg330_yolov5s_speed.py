"""All 60 yolov5s (v6) convolution shapes at 640x640 as one instruction stream: bit-exact, and
the simulation time printed (slow; run with -m slow)."""

from __future__ import annotations

import time

import numpy as np
import pytest
from npu_testlib import Harness

from npu_model import asm
from xir.quant.fixed_point import quantize_multiplier
from xrt import Device


def yolov5s_convs(size: int = 640) -> list[tuple[int, int, int, int, int]]:
    """(h_in, cin, cout, k, stride) of the 60 yolov5s v6 convolutions (8.2 GMAC at 640)."""
    s = size

    def c3(h, cin, cout, n):
        c_ = cout // 2
        out = [(h, cin, c_, 1, 1), (h, cin, c_, 1, 1)]
        for _ in range(n):
            out += [(h, c_, c_, 1, 1), (h, c_, c_, 3, 1)]
        return out + [(h, 2 * c_, cout, 1, 1)]

    L = [(s, 3, 32, 6, 2), (s // 2, 32, 64, 3, 2)]
    L += c3(s // 4, 64, 64, 1) + [(s // 4, 64, 128, 3, 2)] + c3(s // 8, 128, 128, 2)
    L += [(s // 8, 128, 256, 3, 2)] + c3(s // 16, 256, 256, 3) + [(s // 16, 256, 512, 3, 2)]
    L += c3(s // 32, 512, 512, 1) + [(s // 32, 512, 256, 1, 1), (s // 32, 1024, 512, 1, 1)]
    L += [(s // 32, 512, 256, 1, 1)] + c3(s // 16, 512, 256, 1) + [(s // 16, 256, 128, 1, 1)]
    L += c3(s // 8, 256, 128, 1) + [(s // 8, 128, 128, 3, 2)] + c3(s // 16, 256, 256, 1)
    L += [(s // 16, 256, 256, 3, 2)] + c3(s // 32, 512, 512, 1)
    L += [(s // 8, 128, 255, 1, 1), (s // 16, 256, 255, 1, 1), (s // 32, 512, 255, 1, 1)]
    return L


def _exact_ref(x, w, bias, m, s, k, stride, pad):
    """Float64 im2col GEMM (exact: |sums| << 2**53) plus numpy requantization."""
    h, _, cin = x.shape
    xp = np.pad(x.astype(np.float64), ((pad, pad), (pad, pad), (0, 0)))
    oh = (h + 2 * pad - k) // stride + 1
    cols = np.empty((oh, oh, k, k, cin))
    for ky in range(k):
        for kx in range(k):
            cols[:, :, ky, kx] = xp[ky: ky + (oh - 1) * stride + 1: stride,
                                    kx: kx + (oh - 1) * stride + 1: stride]
    acc = (cols.reshape(oh * oh, -1) @ w.reshape(-1, w.shape[-1]).astype(np.float64))
    acc = acc.astype(np.int64).reshape(oh, oh, -1) + bias
    p = acc * m.astype(np.int64)
    r = (p + (np.int64(1) << (s.astype(np.int64) - 1))) >> s.astype(np.int64)
    return np.clip(r, 0, 127).astype(np.int8)


@pytest.mark.slow
def test_yolov5s_conv_stack_bit_exact_and_fast():
    shapes = yolov5s_convs()
    assert len(shapes) == 60
    dev = Device.Open("sim://zg330")
    hw = Harness(dev, 600 << 20)
    rng = np.random.default_rng(0)
    layers, data, macs = [], [], 0
    for h, cin, cout, k, stride in shapes:
        pad = 2 if k == 6 else k // 2
        oh = (h + 2 * pad - k) // stride + 1
        x = rng.integers(-128, 128, (h, h, cin)).astype(np.int8)
        w = rng.integers(-127, 128, (k, k, cin, cout)).astype(np.int8)
        bias = rng.integers(-1000, 1000, cout)
        m, s = quantize_multiplier(np.full(cout, 1.0 / (k * k * cin * 20)))
        fo = hw.fmap_out(oh, oh, cout, pitch=asm.align(cout, 32))
        layers.append(asm.Conv(hw.fmap_in(x), fo, hw.put(asm.pack_conv_weights(w)),
                               hw.put(asm.pack_requant_params(bias, m, s)), kernel=k,
                               stride=stride, pad=pad, clip=(0, 127)))
        data.append((x, w, bias, m, s, k, stride, pad, fo))
        macs += oh * oh * cout * k * k * cin
    assert 8.1e9 < macs < 8.3e9
    hw.run(layers)  # warm-up (compiles or loads the Numba cache)
    best = 1e9
    for _ in range(2):
        t0 = time.perf_counter()
        hw.run(layers)
        best = min(best, time.perf_counter() - t0)
    print(f"\nyolov5s 60 convs, {macs / 1e9:.2f} GMAC: {best:.3f} s wall, "
          f"simulated {dev.calcTime():.3f} ms")
    for x, w, bias, m, s, k, stride, pad, fo in data:
        np.testing.assert_array_equal(hw.read(fo), _exact_ref(x, w, bias, m, s, k, stride, pad))
    assert best < 10.0  # generous: shared CI machines; ~0.5 s on one idle core
    dev.close()

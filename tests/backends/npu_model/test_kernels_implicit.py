"""Dense int8 convolutions on the implicit byte GEMM (`npu_model.kernels.implicit`, AVX-512 VNNI):
the layer really on that kernel (and not where it does not apply), byte-for-byte against numpy
integers over the geometries networks use (stems over 3 channels in a wider pitch, strides,
dilations, asymmetric pads, ConvTranspose's 2x2 over a zero-spread map, narrow and multi-panel
outputs, rows not a multiple of the micro tile, channel windows, 1x1 layers across map rows),
the int32 accumulators at their bound, and the same bytes at 1, 2 and 4 threads."""

from __future__ import annotations

import llvmlite.binding as ll
import numpy as np
import pytest
from npu_testlib import Harness, rand_requant, ref_conv_acc, ref_requant

from npu_model import asm
from npu_model.kernels import bgemm, depthwise, grouped, implicit, mpe, pool
from xir.quant.fixed_point import clip_bounds

pytestmark = pytest.mark.skipif(not ll.get_host_cpu_features().get("avx512vnni"),
                                reason="the implicit GEMM needs AVX-512 VNNI")


@pytest.fixture
def ran(monkeypatch):
    """Kernel name -> calls, for the implicit, the im2col and the grouped 1x1 byte-GEMM
    convolutions."""
    seen: dict[str, int] = {}
    for split in (implicit.CONV_IMPLICIT, mpe.CONV_INT8_BYTES, grouped.CONV_G1X1_INT8,
                  implicit.CONV_POINTWISE_INT16, mpe.CONV_INT16_BYTES,
                  implicit.DEPTHWISE_1X1, mpe.CONV_DEPTHWISE, depthwise.CONV_DEPTHWISE_PAIRS):
        def spy(*args, _k=split.kernel, _name=split.__name__):
            if args[-2] == 0:
                seen[_name] = seen.get(_name, 0) + 1
            return _k(*args)

        monkeypatch.setattr(split, "kernel", spy)
    return seen


def _conv(hw, rng, h, w, cin, cout, k=(3, 3), stride=(1, 1), pad=(1, 1, 1, 1),
          dilation=(1, 1), in_pitch=None, out_pitch=None, out_c_off=0, relu=False, leaky=False,
          x=None, wq=None, spread=None, groups=1, dtype="int8"):
    npdt = np.int16 if dtype == "int16" else np.int8
    info = np.iinfo(npdt)
    scale = 3000 if dtype == "int16" else 30
    if x is None:
        x = rng.integers(info.min, info.max + 1, (h, w, cin)).astype(npdt)
    if spread is not None:  # ConvTranspose's UPSAMPLE ZERO: pixels `spread` apart, zeros between
        z = np.zeros(((h - 1) * spread + 1, (w - 1) * spread + 1, cin), npdt)
        z[::spread, ::spread] = x
        x = z
        h, w = x.shape[:2]
    if wq is None:
        wq = rng.integers(-info.max, info.max + 1, (k[0], k[1], cin // groups, cout)).astype(npdt)
    bias = rng.integers(-5000, 5000, cout)
    m, s = rand_requant(rng, cout, 2.0 / (k[0] * k[1] * cin // groups * scale))
    mn, sn = (rand_requant(rng, cout, 0.1 / (k[0] * k[1] * cin * scale)) if leaky
              else (None, None))
    lo, hi = clip_bounds(npdt, relu=relu)
    fi = hw.fmap_in(x, pitch=in_pitch)
    oh, ow = asm.conv_out_hw(h, w, k, stride, pad, dilation)
    fo = hw.fmap_out(oh, ow, cout, dtype, pitch=out_pitch, c_off=out_c_off)
    layer = asm.Conv(fi, fo, hw.put(asm.pack_conv_weights(wq, groups, dtype, hw.cfg)),
                     hw.put(asm.pack_requant_params(bias, m, s, mn, sn)), kernel=k,
                     stride=stride, pad=pad, dilation=dilation, groups=groups, clip=(lo, hi))
    hw.run([layer])
    ref = ref_requant(ref_conv_acc(x, wq, bias, stride, pad, dilation, groups), m, s, lo, hi,
                      mn, sn)
    return hw.read(fo), ref, fo


CASES = [
    dict(h=9, w=17, cin=20, cout=40),  # channels not a quad multiple, two panels, 17 columns
    dict(h=26, w=26, cin=3, cout=32, k=(6, 6), stride=(2, 2), pad=(2, 2, 2, 2),
         in_pitch=32),  # yolov5s's stem: 3 channels in a 32-channel pitch
    dict(h=24, w=30, cin=3, cout=16, stride=(2, 2), in_pitch=3),  # dense RGB pixels
    dict(h=8, w=16, cin=24, cout=1, k=(2, 2), pad=(1, 1, 1, 1), spread=2),  # ConvTranspose
    dict(h=6, w=12, cin=24, cout=24, k=(2, 2), pad=(1, 1, 1, 1), spread=2),
    dict(h=12, w=12, cin=12, cout=16, dilation=(2, 3), pad=(2, 2, 3, 3)),  # dilated columns
    dict(h=10, w=12, cin=8, cout=8, k=(3, 2), stride=(2, 1), pad=(2, 0, 1, 0)),
    dict(h=11, w=21, cin=16, cout=33, stride=(2, 2)),
    dict(h=9, w=8, cin=96, cout=24, relu=True),  # rows a multiple of the tile: several a tile
    dict(h=7, w=9, cin=18, cout=9, leaky=True, out_pitch=48, out_c_off=7),  # channel window
    dict(h=5, w=40, cin=64, cout=100, k=(1, 3), pad=(0, 0, 1, 1)),
    dict(h=16, w=8, cin=32, cout=64, k=(5, 1), pad=(2, 2, 0, 0), dilation=(2, 1)),
    # 1x1 layers: pixels across map rows in tiles (`_pointwise`)
    dict(h=8, w=8, cin=16, cout=32, k=(1, 1), pad=(0, 0, 0, 0)),
    dict(h=13, w=11, cin=18, cout=40, k=(1, 1), pad=(0, 0, 0, 0), in_pitch=32, leaky=True),
    dict(h=40, w=37, cin=64, cout=255, k=(1, 1), pad=(0, 0, 0, 0), out_pitch=256),
    dict(h=1, w=1, cin=24, cout=6, k=(1, 1), pad=(0, 0, 0, 0)),  # a squeeze-excite conv
    dict(h=5, w=7, cin=3, cout=9, k=(1, 1), pad=(0, 0, 0, 0), out_pitch=32, out_c_off=20),
    dict(h=12, w=60, cin=256, cout=300, k=(1, 1), pad=(0, 0, 0, 0)),  # wide: a bigger tile
    dict(h=9, w=10, cin=16, cout=32, k=(1, 1), stride=(2, 2), pad=(0, 0, 0, 0)),  # strided
    dict(h=9, w=7, cin=16, cout=16),  # rows shorter than the micro tile
    dict(h=7, w=7, cin=64, cout=96, leaky=True),  # several padded rows a tile, LeakyReLU
    dict(h=3, w=2, cin=8, cout=8, k=(3, 3), pad=(1, 1, 1, 1)),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_implicit_conv_is_exact_and_runs_there(hw, rng, ran, case):
    got, ref, _ = _conv(hw, rng, **case)
    np.testing.assert_array_equal(got, ref)
    assert ran == {"conv_implicit_int8": 1}


def test_grouped_convolutions_keep_the_im2col_gemm(hw, rng, ran):
    got, ref, _ = _conv(hw, rng, 9, 10, 24, 36, groups=3)
    np.testing.assert_array_equal(got, ref)
    assert ran == {"conv_dense_int8_bytes": 1}


@pytest.mark.parametrize("leaky", [False, True])
def test_grouped_pointwise_takes_one_gather(hw, rng, ran, leaky):
    """A grouped 1x1 layer (ShuffleNet's) runs on `grouped.CONV_G1X1_INT8`."""
    got, ref, _ = _conv(hw, rng, 9, 10, 24, 36, k=(1, 1), pad=(0, 0, 0, 0), groups=3,
                        leaky=leaky)
    np.testing.assert_array_equal(got, ref)
    assert ran == {"conv_grouped_1x1_int8": 1}


@pytest.mark.parametrize("case", [dict(h=8, w=16, cin=192, cout=192),
                                  dict(h=13, w=11, cin=16, cout=16, in_pitch=32, out_pitch=48,
                                       out_c_off=9, leaky=True),
                                  dict(h=3, w=100, cin=40, cout=40, relu=True)],
                         ids=["wide", "pitched-window-leaky", "long-rows"])
def test_depthwise_1x1_is_exact_and_runs_there(hw, rng, ran, case):
    c = case["cin"]
    wq = rng.integers(-128, 128, (1, 1, 1, c)).astype(np.int8)
    wq[0, 0, 0, 0] = -128
    got, ref, _ = _conv(hw, rng, k=(1, 1), pad=(0, 0, 0, 0), groups=c, wq=wq, **case)
    np.testing.assert_array_equal(got, ref)
    assert ran == {"depthwise_1x1_int8": 1}


def test_other_depthwise_layers_keep_their_kernel(hw, rng, ran):
    got, ref, _ = _conv(hw, rng, 9, 10, 16, 16, groups=16)
    np.testing.assert_array_equal(got, ref)
    assert ran == {"conv_depthwise_pairs": 1}  # int8 on VNNI: pairs of taps


CASES16 = [dict(h=64, w=30, cin=16, cout=32),  # PP-OCRv4 detector's int16 1x1, smaller
            dict(h=9, w=13, cin=7, cout=40, in_pitch=16, out_pitch=48, out_c_off=5),
            dict(h=5, w=6, cin=300, cout=20, leaky=True),
            dict(h=1, w=1, cin=24, cout=6)]


@pytest.mark.parametrize("case", CASES16, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_int16_pointwise_is_exact_and_runs_there(hw, rng, ran, case):
    got, ref, _ = _conv(hw, rng, k=(1, 1), pad=(0, 0, 0, 0), dtype="int16", **case)
    np.testing.assert_array_equal(got, ref)
    assert ran == {"conv_pointwise_int16": 1}


@pytest.mark.parametrize(("xv", "wv"), [(-32768, -32767), (32767, 32767), (-1, 256)])
def test_int16_pointwise_at_full_scale(hw, rng, ran, xv, wv):
    """Every byte boundary of x and w at a long K: sums far past int32."""
    cin = 2000
    x = np.full((2, 9, cin), xv, np.int16)
    wq = np.full((1, 1, cin, 3), wv, np.int16)
    got, ref, _ = _conv(hw, rng, 2, 9, cin, 3, k=(1, 1), pad=(0, 0, 0, 0), dtype="int16", x=x,
                        wq=wq)
    np.testing.assert_array_equal(got, ref)
    assert ran == {"conv_pointwise_int16": 1}


def test_other_int16_convolutions_keep_their_kernel(hw, rng, ran):
    got, ref, _ = _conv(hw, rng, 9, 10, 16, 24, dtype="int16")
    np.testing.assert_array_equal(got, ref)
    assert ran == {"conv_dense_int16_bytes": 1}


@pytest.mark.parametrize(("xv", "wv"), [(-128, -127), (-128, 127), (127, 127), (127, -127)])
def test_int32_accumulators_at_their_bound(hw, rng, ran, xv, wv):
    """The longest K the kernel takes (every byte of x + 128 at 0 or 255, every weight at
    +-127): the int32 sums hold, as on the im2col GEMM."""
    cin = bgemm.MAX_K8 // 9 // 4 * 4
    x = np.full((3, 10, cin), xv, np.int8)
    wq = np.full((3, 3, cin, 2), wv, np.int8)
    assert 9 * cin * 255 * 127 < 2**31
    got, ref, _ = _conv(hw, rng, 3, 10, cin, 2, x=x, wq=wq)
    np.testing.assert_array_equal(got, ref)
    assert ran == {"conv_implicit_int8": 1}


@pytest.mark.parametrize(("split", "case"), [
    (implicit.CONV_IMPLICIT, dict(h=96, w=96, cin=3, cout=32, k=(6, 6), stride=(2, 2),
                                  pad=(2, 2, 2, 2), in_pitch=32)),
    (implicit.CONV_POINTWISE_INT16, dict(h=96, w=64, cin=48, cout=64, k=(1, 1),
                                         pad=(0, 0, 0, 0), dtype="int16")),
    (implicit.DEPTHWISE_1X1, dict(h=128, w=64, cin=64, cout=64, k=(1, 1), pad=(0, 0, 0, 0),
                                  groups=64))],
    ids=["int8-stem", "int16-pointwise", "depthwise-1x1"])
def test_same_bytes_at_any_thread_count(monkeypatch, split, case):
    """Output rows cut into parts by work count (no timing) at 2 and 4 threads: the bytes of
    one thread's run."""
    from xrt import Device

    monkeypatch.setattr(pool, "INLINE_S", 0.0)
    parts: list[int] = []
    kernel = split.kernel

    def spy(*args):
        parts.append(args[-2])
        return kernel(*args)

    monkeypatch.setattr(split, "kernel", spy)
    out = {}
    try:
        for n in (1, 2, 4):
            pool.set_threads(n)
            parts.clear()
            dev = Device.Open("sim://zg330")
            try:
                got, ref, _ = _conv(Harness(dev, size=32 << 20), np.random.default_rng(3),
                                    **case)
            finally:
                dev.close()
            np.testing.assert_array_equal(got, ref)
            assert (len(parts) > 1) == (n > 1), parts
            out[n] = got.tobytes()
    finally:
        pool.set_threads(None)
    assert out[1] == out[2] == out[4]

"""int16 layers on the integer-SIMD GEMM (issue 30, item 1) against the exact float64 path they
took before and against the same network in int8, interleaved in one process, single thread.

Three conv stacks as instruction streams on sim://zg330 (every layer int16, random weights at
full int16 scale, random requantization): one 3x3 layer of 128 -> 128 channels at 56x56
(K = 1152), a vgg19-style stack (its sixteen 3x3 convolutions at 112x112 input) and a
yolov5s-style backbone at 320x320 (6x6 stem, stride-2 3x3 downsamples, C3 bottlenecks of 1x1
and 3x3). Each stream is emitted and uploaded once and run repeatedly (the decoded program
replays), on four devices: int16 on the byte GEMM (`bgemm`, where the CPU has AVX-512 VNNI;
else on the digit GEMM), int16 on the digit GEMM (`igemm.gemm_pairs_wide`), int16 on the
float64 K-chunk path, and the same stack in int8 (on the byte GEMM where it runs).
The figures of record are the ratios (digit / byte, float64 / integer, int16 / int8), with
the load average beside them: the machine is shared.

    python -m pytest benchmarks/bench_int16.py --benchmark-only -s
"""

import numpy as np
import pytest
from helpers import interleaved_best, load_average

from npu_model import asm

pytest.importorskip("zg330backend")


def _vgg(h):
    """(cin, cout, k, stride, pad) of vgg19's 3x3 convolutions, 2x2 max pools as stride-2
    convs' resolution steps (the pools themselves are vector-unit work, not measured)."""
    cfg = [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
           512, 512, 512, 512]
    layers, cin, res = [], 3, h
    for v in cfg:
        if v == "M":
            res //= 2
            continue
        layers.append((res, cin, v, 3, 1, 1))
        cin = v
    return layers


def _yolo(h):
    """yolov5s v6 backbone-like convolutions: (input res, cin, cout, k, stride, pad)."""
    layers = [(h, 3, 32, 6, 2, 2)]
    res, cin = h // 2, 32
    for cout, n in ((64, 1), (128, 2), (256, 3), (512, 1)):
        layers.append((res, cin, cout, 3, 2, 1))
        res //= 2
        half = cout // 2
        layers += [(res, cout, half, 1, 1, 0), (res, cout, half, 1, 1, 0)]
        for _ in range(n):
            layers += [(res, half, half, 1, 1, 0), (res, half, half, 3, 1, 1)]
        layers.append((res, cout, cout, 1, 1, 0))
        cin = cout
    return layers


NETS = {"conv3x3-128-56": [(56, 128, 128, 3, 1, 1)], "vgg19-style-112": _vgg(112),
        "yolov5s-style-320": _yolo(320)}


def _program(dev, spec, dtype, rng):
    """Emit and upload `spec` as one stream (each layer reads a fresh random input map);
    returns a function running it and the MACs per run."""
    from npu_testlib import Harness, rand_requant

    npdt = np.int16 if dtype == "int16" else np.int8
    info = np.iinfo(npdt)
    hw = Harness(dev, size=256 << 20)
    layers, macs = [], 0
    for res, cin, cout, k, s, p in spec:
        x = rng.integers(info.min, info.max + 1, (res, res, cin)).astype(npdt)
        w = rng.integers(-info.max, info.max + 1, (k, k, cin, cout)).astype(npdt)
        m, sh = rand_requant(rng, cout, 2.0 / (k * k * cin * (3000 if dtype == "int16" else 30)))
        oh, ow = asm.conv_out_hw(res, res, (k, k), (s, s), (p,) * 4, (1, 1))
        layers.append(asm.Conv(hw.fmap_in(x), hw.fmap_out(oh, ow, cout, dtype),
                               hw.put(asm.pack_conv_weights(w, 1, dtype, hw.cfg)),
                               hw.put(asm.pack_requant_params(0, m, sh)), kernel=(k, k),
                               stride=(s, s), pad=(p,) * 4, clip=(info.min, info.max)))
        macs += oh * ow * cout * k * k * cin
    prog = asm.emit_program(layers, hw.cfg, end=True)
    addr = hw.put(prog)
    phys = hw.chunk.addr + (addr - 0x1000_0000)
    return (lambda: dev.icoreCalc(phys, prog.nbytes)), macs


@pytest.mark.parametrize("name", list(NETS))
def test_int16_vs_float64_and_int8(benchmark, name):
    from npu_model.kernels import bgemm
    from xrt import Device

    devs = [Device.Open("sim://zg330") for _ in range(4)]
    for d in devs:
        d.sim.int_gemm16 = True
    devs[1].sim.byte_gemm = False  # int16 on the digit GEMM (the path before the byte GEMM)
    devs[2].sim.int_gemm16 = False  # the float64 K-chunk path
    runs = []
    for dev, dtype in zip(devs, ("int16", "int16", "int16", "int8"), strict=True):
        run, macs = _program(dev, NETS[name], dtype, np.random.default_rng(0))
        runs.append(run)
    rounds = 5 if name.startswith("conv") else 3
    t_int, t_dig, t_f64, t_i8 = interleaved_best(runs, rounds=rounds, warmup=1)
    benchmark.pedantic(runs[0], rounds=1)
    for d in devs:
        d.close()
    gmac = macs / 1e9
    form = "byte GEMM" if bgemm.enabled() else "digit GEMM (no AVX-512 VNNI)"
    print(f"\n{name}: {gmac:.2f} GMAC; int16 on the {form} {t_int * 1e3:.0f} ms "
          f"({gmac / t_int:.1f} GMAC/s), digit GEMM {t_dig * 1e3:.0f} ms, float64 "
          f"{t_f64 * 1e3:.0f} ms, int8 {t_i8 * 1e3:.0f} ms; digit/{form.split()[0]} "
          f"{t_dig / t_int:.2f}x, float64/integer {t_f64 / t_int:.2f}x, int16/int8 "
          f"{t_int / t_i8:.2f}x ({load_average()})")
    benchmark.extra_info.update(int16_ms=t_int * 1e3, digits_ms=t_dig * 1e3,
                                float64_ms=t_f64 * 1e3, int8_ms=t_i8 * 1e3,
                                speedup=t_f64 / t_int, vs_digits=t_dig / t_int,
                                vs_int8=t_int / t_i8, load=load_average())
    assert t_int < t_f64, "int16 on the integer GEMM is not faster than the float64 path"

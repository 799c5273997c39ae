"""Cycle-model bounds: never faster than peak compute or than the memory bandwidth."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from npu_testlib import Harness

from npu_model import asm
from xrt import Device


def _conv_layer(hw, rng, h, cin, cout, k, s, groups=1, dtype="int8"):
    npdt = np.int8 if dtype == "int8" else np.int16
    x = np.zeros((h, h, cin), npdt)
    fi = hw.fmap_in(x)
    pad = k // 2
    oh, ow = asm.conv_out_hw(h, h, k, s, pad)
    fo = hw.fmap_out(oh, ow, cout, dtype)
    w = rng.integers(-3, 4, (k, k, cin // groups, cout)).astype(npdt)
    return asm.Conv(fi, fo, hw.put(asm.pack_conv_weights(w, groups, dtype)),
                    hw.put(asm.pack_requant_params(0, 1, 0, n=cout)), kernel=k, stride=s,
                    pad=pad, groups=groups)


def _profile(hw, layers):
    dev = hw.dev
    dev.reset(1)  # layer counter to 0: records land in slots 0..
    prof = dev.malloc(80 * len(layers))
    dev.configProfiler(prof)
    hw.run(layers)
    return dev.profile(0, len(layers))


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.data())
def test_cycles_respect_compute_and_bandwidth_bounds(hw, data):
    d = data.draw
    rng = np.random.default_rng(d(st.integers(0, 1000)))
    dtype = d(st.sampled_from(["int8", "int16"]))
    depthwise = d(st.booleans())
    cin = d(st.integers(1, 96))
    cout = cin if depthwise else d(st.integers(1, 96))
    g = cin if depthwise and cin > 1 else 1
    layer = _conv_layer(hw, rng, d(st.integers(3, 24)), cin, cout, d(st.sampled_from([1, 3])),
                        d(st.integers(1, 2)), g, dtype)
    p = _profile(hw, [layer])[0]
    cfg = hw.cfg
    peak = cfg.peak_macs_per_cycle(dtype)
    assert p["cycles"] >= p["macs"] / peak
    assert p["cycles"] >= p["compute"]
    etm_bw = cfg.etm_bytes_per_icore_cycle()
    assert p["cycles"] >= (p["etm_rd"] + p["etm_wr"]) / etm_bw
    util = p["macs"] / (p["cycles"] * peak)
    assert 0 <= util <= 1
    hw.off = 64


def test_big_conv_is_compute_bound_and_fewer_mpes_are_slower(rng):
    dev = Device.Open("sim://zg330")
    hw = Harness(dev, 64 << 20)
    layer = _conv_layer(hw, rng, 40, 256, 256, 3, 1)
    p = _profile(hw, [layer])[0]
    assert p["compute"] > p["dma"] * 0.5
    util = p["macs"] / (p["cycles"] * hw.cfg.peak_macs_per_cycle())
    assert 0.5 < util <= 1
    full = dev.calcTime()
    dev.setRowsCols(2, 2)
    hw.run([layer])
    assert dev.calcTime() > 2 * full
    dev.setRowsCols(4, 4)
    dev.setIcoreClkFreq(500_000_000)
    hw.run([layer])
    assert dev.calcTime() > full
    dev.close()


def test_ocm_is_faster_than_etm_for_a_memory_bound_layer(rng):
    dev = Device.Open("sim://zg330")
    hw = Harness(dev, 8 << 20)
    ocm = dev.malloc("ocm", 1 << 20)
    dev.mmuMap(1, 0x4000_0000, ocm.addr, ocm.byte_size)
    x = asm.FMap(hw.alloc(64 * 64 * 64), 64, 64, 64)
    y = asm.FMap(hw.alloc(64 * 64 * 64), 64, 64, 64)
    hw.run([asm.Copy(x, y)])
    t_etm = dev.calcTime()
    xo, yo = asm.FMap(0x4000_0000, 64, 64, 64), asm.FMap(0x4000_0000 + (1 << 19), 64, 64, 64)
    hw.run([asm.Copy(xo, yo)])
    assert dev.calcTime() < t_etm / 2
    dev.close()


def test_mock_config_counts_without_computing(rng):
    from npu_model import Icore, MemoryBus, MmuTable, NpuConfig, Segment
    from xrt.memory import ArenaStorage

    cfg = NpuConfig(etm_size=1 << 20).mock()
    etm = ArenaStorage(cfg.etm_base, cfg.etm_size)
    ocm = ArenaStorage(cfg.ocm_base, cfg.ocm_size)
    core = Icore(cfg, MemoryBus(cfg, etm, ocm))
    mmu = MmuTable([Segment(0, cfg.etm_size, cfg.etm_base, 0)])
    x, y = asm.FMap(0x1000, 8, 8, 32), asm.FMap(0x4000, 8, 8, 32)
    etm.fill(cfg.etm_base + 0x4000, 2048, 7)
    prog = asm.emit_program([asm.Copy(x, y)], cfg)
    etm.write(cfg.etm_base + 0x10000, prog.view(np.uint8))
    res = core.run(cfg.etm_base + 0x10000, prog.nbytes, mmu)
    assert res.syncs == 1 and res.cycles > 0
    assert (etm.view(cfg.etm_base + 0x4000, 2048) == 7).all()  # nothing computed
    assert core.stats()["etm_wr"] >= 2048

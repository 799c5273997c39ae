"""ZG330Device API: URLs, mock, registers, resets, counters, timer/profiler, faults."""

from __future__ import annotations

import numpy as np
import pytest
from npu_testlib import LOGICAL, Harness

from npu_model import asm
from npu_model.isa import F, Op, set_word, word
from npu_runtime import regs as R
from xrt import Device
from xrt.errors import (
    DeviceError,
    DeviceUrlError,
    InvalidArgumentError,
    MemoryAccessError,
    UnsupportedOpError,
)
from zg330backend import ZG330Device


def _small_conv(hw, rng, cout=16):
    x = rng.integers(-128, 128, (6, 6, 8)).astype(np.int8)
    w = rng.integers(-127, 128, (3, 3, 8, cout)).astype(np.int8)
    fi, fo = hw.fmap_in(x), hw.fmap_out(6, 6, cout)
    wa = hw.put(asm.pack_conv_weights(w))
    pa = hw.put(asm.pack_requant_params(0, 1 << 14, 22, n=cout))
    return asm.Conv(fi, fo, wa, pa, kernel=3, pad=1, tag=7), fo


@pytest.mark.parametrize("url", ["sim://zg330", "axi://zg330aiu?npu=0x40000000&dma=0x80000000",
                                 "mock://zg330"])
def test_urls_open_zg330(url):
    with Device.Open(url) as d:
        assert isinstance(d, ZG330Device)
        assert ZG330Device(d) is d
        assert d.getRowsCols() == (4, 4)
        assert d.defaultMemRegion().name == "etm"
        assert d.getMemRegion("ocm").size == 2 << 20
        assert d.mock == url.startswith("mock")
    if url.startswith("axi"):
        assert d.url_params == {"npu": "0x40000000", "dma": "0x80000000"}


def test_bad_host_is_refused():
    with pytest.raises(DeviceUrlError):
        Device.Open("sim://buyi9")


def test_vendor_import():
    import zg330backend

    ns: dict = {}
    exec("from zg330backend import *", ns)
    assert ns["ZG330Device"] is ZG330Device
    assert "ZG330Device" in zg330backend.__all__


def test_mock_allocates_but_cannot_compute(rng):
    d = Device.Open("mock://zg330")
    c = d.malloc(4096)
    c.write(0, np.arange(16, dtype=np.uint8))
    assert c.view(0, 16)[5] == 5
    with pytest.raises(UnsupportedOpError, match="mock"):
        d.icoreCalc(c.addr, 64)
    d.writeReg(REG(R.CTRL), R.CTRL_START)  # a raw START also refuses, through the status
    assert d.readReg(REG(R.ERR_CODE)) == R.ERR_MOCK
    d.close()


def REG(off: int) -> int:
    from npu_runtime.regs import REG_BASE

    return REG_BASE + off


def test_registers_and_mpe_banks(dev):
    assert dev.readReg(REG(R.ID)) == 0x03300001
    with pytest.raises(InvalidArgumentError, match="register ID .*read-only"):
        dev.writeReg(REG(R.ID), 0)
    assert dev.readReg(REG(R.ID)) == 0x03300001
    assert dev.readReg(0, 0, R.MPE_ID) == 0
    assert dev.readReg(3, 2, R.MPE_ID) == (3 << 8) | 2
    dev.writeReg(1, 2, R.MPE_SCRATCH, 0xDEAD)
    assert dev.readReg(1, 2, R.MPE_SCRATCH) == 0xDEAD
    assert dev.readReg("regs", R.mpe_bank(1, 2, 4) + R.MPE_SCRATCH, True) == 0xDEAD
    with pytest.raises(InvalidArgumentError):
        dev.readReg(4, 0, 0)
    with pytest.raises(InvalidArgumentError):
        dev.readReg(0, 0, 0x41)
    dev.setIcoreClkFreq(500_000_000)
    dev.setDDRClkFreq(1_000_000_000)
    assert dev.readReg(REG(R.ICORE_CLK_HZ)) == 500_000_000
    assert dev.readReg(REG(R.DDR_CLK_HZ)) == 1_000_000_000
    dev.setMasterCID(2)
    assert dev.readReg(REG(R.MASTER_CID)) == 2
    with pytest.raises(InvalidArgumentError):
        dev.setMasterCID(9)
    assert dev.clone() is dev
    assert "ZG330" in dev.version()["device"]
    assert dev.check(1)


@pytest.mark.parametrize("off, value, match", [
    (R.ICORE_CLK_HZ, 0, "ICORE_CLK_HZ .*below 1 kHz"),
    (R.DDR_CLK_HZ, 0, "DDR_CLK_HZ .*below 1 kHz"),
    (R.MPE_EN, 9 | 1 << 16, "MPE_EN .*the array is"),
    (R.CTRL, 0x80, "CTRL .*bits other than"),
    (R.MASTER_CID, 77, "MASTER_CID .*outside"),
    (R.INSTR_SIZE, 12, "INSTR_SIZE .*multiple of 8"),
    (R.STATUS, 0, "STATUS .*read-only"),
    (R.CYCLES_LO, 5, "CYCLES_LO .*read-only"),
    (R.RTILE_BASE, 1, "DMA tile counter"),
    (0x0070, 1, "no writable register"),
    (R.mmu_entry(3) + R.MMU_FLAGS, 7, r"MMU\[3\].FLAGS"),
    (R.mpe_bank(1, 1, 4) + R.MPE_MACS_LO, 1, "only SCRATCH"),
])
def test_illegal_register_writes_are_refused_and_not_stored(dev, off, value, match):
    """A raw register write outside a register's legal range is refused, naming the register,
    and the device keeps working (writeReg(ICORE_CLK_HZ, 0) used to break every forward)."""
    before = dev.readReg(REG(off))
    with pytest.raises(InvalidArgumentError, match=match):
        dev.writeReg(REG(off), value)
    assert dev.readReg(REG(off)) == before
    assert dev.calcTime() >= 0


def test_mpe_counters_add_per_run_whoever_reads_them(hw, rng):
    """The per-MPE MACS/BUSY counters (added lazily, `counter_regs`) read the same through
    readReg and a raw peek, grow by each run's MACs over the enabled MPEs, leave disabled
    MPEs alone and start again at a fast reset."""
    dev = hw.dev
    conv, _ = _small_conv(hw, rng)
    macs = 6 * 6 * 16 * 72
    rows, cols = dev.getRowsCols()
    bank = R.mpe_bank(cols - 1, rows - 1, rows) + R.MPE_MACS_LO

    def raw(off):
        return dev.defaultRegRegion().peek(off, relative=True)

    hw.run([conv])
    one = dev.readReg(0, 0, R.MPE_MACS_LO)
    assert one == macs // (rows * cols) and dev.readReg(0, 0, R.MPE_BUSY_LO) > 0
    hw.run([conv])
    hw.run([conv])
    assert raw(bank) == 3 * one and dev.readReg(cols - 1, rows - 1, R.MPE_MACS_LO) == 3 * one
    dev.setRowsCols(1, 1)
    hw.run([conv])
    assert raw(bank) == 3 * one  # disabled: unchanged
    assert dev.readReg(0, 0, R.MPE_MACS_LO) == 3 * one + macs
    hw.run([conv])
    dev.reset(1)
    assert raw(R.mpe_bank(0, 0, rows) + R.MPE_MACS_LO) == 0 and raw(bank) == 0
    dev.setRowsCols(rows, cols)
    hw.run([conv])
    assert dev.readReg(0, 0, R.MPE_MACS_LO) == one
    hw.run([conv])  # its adds are due when a batch of stores hits a counter word: they land
    dev.defaultRegRegion().poke_words({R.mpe_bank(0, 0, rows) + R.MPE_MACS_LO: 5})  # first
    assert dev.readReg(0, 0, R.MPE_MACS_LO) == 5 and raw(bank) == 2 * one


def test_run_counters_and_reset_levels(hw, rng, capsys):
    dev = hw.dev
    conv, _ = _small_conv(hw, rng)
    timer = dev.malloc(32 * 8)
    prof = dev.malloc(80 * 8)
    dev.configTimer(timer)
    dev.configProfiler(prof)
    hw.run([conv, conv])
    assert dev.layerCount() == 2
    assert dev.calcTime() > 0
    assert all(dev.rTileCount(c) > 0 and dev.wTileCount(c) > 0 for c in range(4))
    t = dev.layerTimes(0, 2)
    assert list(t["tag"]) == [7, 7] and (t["end"] > t["start"]).all()
    assert t["start"][1] == t["end"][0]
    p = dev.profile(0, 2)
    assert list(p["macs"]) == [6 * 6 * 16 * 9 * 8] * 2
    assert (p["cycles"] == t["end"] - t["start"]).all()
    dev.showLayerTime(0, 2)
    out = capsys.readouterr().out
    assert out.count("\n") == 3 and "cycles" in out
    s = dev.stats()
    assert s["layers"] == 2 and s["macs"] == 2 * 6 * 6 * 16 * 72
    dev.clear_stats()
    assert dev.stats()["layers"] == 0
    assert dev.readReg(0, 0, R.MPE_MACS_LO) > 0
    dev.setIcoreClkFreq(2_000_000_000 // 2)
    dev.reset(1)  # fast: counters go, configuration stays
    assert dev.layerCount() == 0 and dev.rTileCount(0) == 0 and dev.calcTime() == 0
    assert dev.readReg(0, 0, R.MPE_MACS_LO) == 0
    assert len(dev.mmu_table()) == 1 and dev.readReg(REG(R.TIMER_SIZE)) == 256
    hw.run([conv])  # MMU survived the fast reset
    assert dev.layerCount() == 1
    dev.setRowsCols(2, 2)
    dev.reset(0)  # full: configuration goes too
    assert len(dev.mmu_table()) == 0 and dev.readReg(REG(R.TIMER_SIZE)) == 0
    assert dev.getRowsCols() == (4, 4)
    assert dev.readReg(REG(R.ICORE_CLK_HZ)) == dev.config.icore_clk_hz
    with pytest.raises(InvalidArgumentError):
        dev.reset(2)


def test_layer_count_accumulates_over_runs_in_timer_slots(hw, rng):
    dev = hw.dev
    conv, _ = _small_conv(hw, rng)
    timer = dev.malloc(32 * 4)
    dev.configTimer(timer)
    hw.run([conv])
    hw.run([conv, conv])
    assert dev.layerCount() == 3
    assert list(dev.layerTimes(0, 4)["layer"]) == [0, 1, 2, 0]


def test_unmapped_address_faults(hw, rng):
    conv, _ = _small_conv(hw, rng)
    conv.weights_addr = LOGICAL + hw.chunk.byte_size + 4096  # outside every MMU segment
    with pytest.raises(DeviceError, match="MMU fault"):
        hw.run([conv])
    assert hw.dev.readReg(REG(R.ERR_CODE)) == R.ERR_MMU
    assert not hw.dev.check(1)


def test_illegal_opcode_faults(hw):
    prog = np.array([word(0x77, 0, 0)] + [0] * 7, dtype=np.uint64)
    addr = hw.put(prog)
    with pytest.raises(DeviceError, match="illegal opcode"):
        hw.dev.icoreCalc(hw.chunk.addr + addr - LOGICAL, prog.nbytes)
    assert hw.dev.readReg(REG(R.ERR_CODE)) == R.ERR_ILLEGAL


def test_missing_weight_upload_gives_wrong_result(hw, rng):
    """The simulator reads weights from memory: a skipped upload computes on zeros."""
    conv, fo = _small_conv(hw, rng)
    hw.run([conv])
    good = hw.read(fo)
    # same layer, weights at a fresh (never written) address
    conv.weights_addr = hw.alloc(asm.conv_weight_bytes(3, 3, 8, 16))
    hw.run([conv])
    bad = hw.read(fo)
    assert not np.array_equal(good, bad)
    assert (bad == 0).all()  # zero weights, zero bias -> zeros


def test_wrong_instruction_address_runs_other_bytes(hw, rng):
    """icoreCalc runs what is at the address it is given, not the program Python built."""
    conv, fo = _small_conv(hw, rng)
    prog = asm.emit_program([conv])
    addr = hw.put(prog)
    other = hw.put(asm.emit_program([]))  # an empty program (END + NOPs) somewhere else
    hw.dev.icoreCalc(hw.chunk.addr + other - LOGICAL, 64)
    assert hw.dev.layerCount() == 0
    assert (hw.read(fo).view(np.uint8) == 0x5A).all()  # output untouched
    hw.dev.icoreCalc(hw.chunk.addr + addr - LOGICAL, prog.nbytes)
    assert hw.dev.layerCount() == 1
    # an address off by one word decodes a different stream: the result differs or faults
    try:
        hw.dev.icoreCalc(hw.chunk.addr + addr - LOGICAL + 8, prog.nbytes - 8)
    except DeviceError:
        pass
    assert hw.dev.layerCount() >= 1


def test_instruction_fetch_outside_etm_faults(dev):
    with pytest.raises(DeviceError, match="instruction fetch"):
        dev.icoreCalc(0x10, 64)


def test_ocm_operands(dev, rng):
    """Feature maps in OCM, mapped through the MMU like ETM."""
    hw = Harness(dev, 1 << 20)
    ocm = dev.malloc("ocm", 64 * 1024)
    dev.mmuMap(1, 0x2000_0000, ocm.addr, ocm.byte_size)
    x = rng.integers(-128, 128, (4, 4, 32)).astype(np.int8)
    ocm.write(0, x.view(np.uint8).ravel())
    fi = asm.FMap(0x2000_0000, 4, 4, 32)
    fo = asm.FMap(0x2000_0000 + 4096, 4, 4, 32)
    hw.run([asm.Copy(fi, fo)])
    np.testing.assert_array_equal(ocm.view(4096, 512).view(np.int8).reshape(4, 4, 32), x)
    s = dev.stats()
    assert s["ocm_rd"] >= 512 and s["ocm_wr"] >= 512


def test_set_to_unknown_field_faults(hw):
    prog = np.array([word(Op.SET, 0x7E, 1), word(Op.END)] + [0] * 6, dtype=np.uint64)
    addr = hw.put(prog)
    with pytest.raises(DeviceError, match="unknown field"):
        hw.dev.icoreCalc(hw.chunk.addr + addr - LOGICAL, prog.nbytes)
    assert set_word(F.GROUPS, 3) >> 56 == Op.SET


def test_dropped_devices_are_freed_and_close_frees_at_once():
    """A sim:// device dropped without close() (holding auto-freed chunks and an applied
    session's memory) is collected; close() gives its arena back at once."""
    import gc
    import weakref

    from test_zg330_backend import _compiled, _zg

    q, z = _compiled("tiny_cnn")
    refs = []
    for _ in range(3):
        d = Device.Open("sim://zg330")
        chunk = d.defaultMemRegion().malloc(4096, True, 4096)
        s, _ = _zg(z, d, np.zeros(q.inputs()[0].shape, np.float32))
        refs.append(weakref.ref(d))
        del d, chunk, s
    gc.collect()
    assert sum(r() is not None for r in refs) == 0
    d = Device.Open("sim://zg330")
    for _ in range(2):  # a session dropped without close() on a device that stays open
        s, _ = _zg(z, d, np.zeros(q.inputs()[0].shape, np.float32))
        assert d.defaultMemRegion().used_bytes > 0
        del s
    gc.collect()
    assert d.defaultMemRegion().used_bytes == 0
    storage = d.defaultMemRegion().storage
    assert storage.arena is not None
    d.close()
    assert storage.arena is None
    with pytest.raises(MemoryAccessError, match="closed"):
        storage.view(storage.base, 8)


def test_a_register_region_reset_restores_the_power_on_clocks_and_invalidates_the_mmu():
    """`defaultRegRegion().reset()` once left ICORE_CLK_HZ at 0 (every later run divided by
    it) and the MMU table of the last generation cached."""
    with Device.Open("sim://zg330") as d:
        base = d.defaultRegRegion().base
        ic, ddr = d.readReg(base + R.ICORE_CLK_HZ), d.readReg(base + R.DDR_CLK_HZ)
        d.setIcoreClkFreq(500_000_000)
        gen = d.mmu_generation
        d.defaultRegRegion().reset()
        assert (d.readReg(base + R.ICORE_CLK_HZ), d.readReg(base + R.DDR_CLK_HZ)) == (ic, ddr)
        assert d.mmu_generation > gen
        assert d.calcTime() == 0.0  # a clock to divide by again

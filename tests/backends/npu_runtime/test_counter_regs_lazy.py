"""`CounterRegs`: a fast reset's zeros of the per-MPE counter words wait like the run adds and
land (zeros first, then the adds made since) when a counter word is loaded or stored: every
reader sees what the hardware would show, whatever the order of resets, runs and reads."""

from __future__ import annotations

from npu_runtime.counter_regs import CounterRegs

BASE = 0x4000
#: two MPEs' MACS lo/hi, BUSY lo/hi words, and a plain STATUS word at 0
MPE0 = (0x100, 0x104, 0x108, 0x10C)
MPE1 = (0x200, 0x204, 0x208, 0x20C)
CLEARS = (0x0, *MPE0, *MPE1)


def _regs() -> CounterRegs:
    return CounterRegs("regs", None, BASE, 0x1000, 4, {BASE + o for o in MPE0 + MPE1})


def _mpe(r: CounterRegs, offs) -> tuple[int, int]:
    lo_m, hi_m, lo_b, hi_b = (r.peek(o, relative=True) for o in offs)
    return lo_m | hi_m << 32, lo_b | hi_b << 32


def test_reset_zeros_then_adds_land_in_order():
    r = _regs()
    r.poke(0x0, 7, relative=True)
    r.add_counters(MPE0 + MPE1, 3 << 32 | 5, 11)  # a run on both MPEs, past 32 bits
    assert _mpe(r, MPE0) == (3 << 32 | 5, 11) and _mpe(r, MPE1) == (3 << 32 | 5, 11)
    r.clear_words(CLEARS)
    assert r.peek(0x0, relative=True) == 0  # the plain word at once
    r.add_counters(MPE0, 2, 3)  # a run on MPE 0 only
    r.clear_words(CLEARS)
    r.add_counters(MPE0, 4, 1)
    r.add_counters(MPE0, 4, 1)
    assert _mpe(r, MPE0) == (8, 2)  # only the adds since the last reset
    assert _mpe(r, MPE1) == (0, 0)  # zeroed, never added to since
    r.clear_words(CLEARS)
    r.add_counters(MPE1, 1, 1)
    r.write(0x100, 9, relative=True)  # a store into a counter word lands zeros and adds first
    assert _mpe(r, MPE0) == (9, 0) and _mpe(r, MPE1) == (1, 1)


def test_poke_words_and_full_reset_see_the_pending_zeros():
    r = _regs()
    r.add_counters(MPE0 + MPE1, 6, 6)
    r.read(0x100, relative=True)  # landed: 6
    r.clear_words(CLEARS)
    r.poke_words({0x104: 1})  # MACS hi of MPE 0
    assert _mpe(r, MPE0) == (1 << 32, 0) and _mpe(r, MPE1) == (0, 0)
    r.add_counters(MPE1, 2, 2)
    r.clear_words(CLEARS)
    r.reset()  # power-on values: nothing pending survives
    r.add_counters(MPE0, 1, 1)
    assert _mpe(r, MPE0) == (1, 1) and _mpe(r, MPE1) == (0, 0)

"""The icore's decoded programs under a moved MMU segment: the run replays on the new mapping
(operands read where the segment now lies), and a segment whose constants differ there, or one
that no longer covers an operand, makes the stream decode again -- and fault as it would."""

from __future__ import annotations

import numpy as np
import pytest
from npu_testlib import LOGICAL, rand_requant, ref_conv_acc, ref_requant

from npu_model import asm
from xrt.errors import DeviceError


def test_moved_segment_replays_or_decodes_again(dev, hw, rng, decodes):
    x = rng.integers(-128, 128, (6, 7, 20)).astype(np.int8)
    wq = rng.integers(-127, 128, (3, 3, 20, 24)).astype(np.int8)
    bias = rng.integers(-5000, 5000, 24)
    m, s = rand_requant(rng, 24, 2.0 / (9 * 20 * 30))
    fi, fo = hw.fmap_in(x), hw.fmap_out(6, 7, 24)
    wa = hw.put(asm.pack_conv_weights(wq, 1, "int8", hw.cfg))
    pa = hw.put(asm.pack_requant_params(bias, m, s))
    phys, nbytes = hw.run([asm.Conv(fi, fo, wa, pa, kernel=(3, 3), pad=(1, 1, 1, 1))])
    ref = lambda x: ref_requant(ref_conv_acc(x, wq, bias, pad=(1, 1, 1, 1)), m, s,  # noqa: E731
                                -128, 127)
    np.testing.assert_array_equal(hw.read(fo), ref(x))
    assert decodes[0] == 1
    size = hw.chunk.byte_size
    moved = dev.malloc(size)
    moved.copyFrom(0, hw.chunk, 0, size)
    hw.chunk, old = moved, hw.chunk  # the harness now reads and writes the moved copy
    out_before = old.view(fo.addr - LOGICAL, 6 * 7 * fo.pitch).copy()
    dev.mmuMap(0, LOGICAL, moved.addr, size)
    x2 = rng.integers(-128, 128, x.shape).astype(np.int8)
    buf = np.zeros((6, 7, fi.pitch), np.int8)
    buf[:, :, :20] = x2
    hw.write(fi.addr, buf)
    dev.reset(1)  # layer counter back to 0: the records go to the same slots
    dev.icoreCalc(phys, nbytes)  # the program still lies in the old chunk (physical address)
    np.testing.assert_array_equal(hw.read(fo), ref(x2))
    assert decodes[0] == 1  # replayed on the new mapping
    np.testing.assert_array_equal(old.view(fo.addr - LOGICAL, out_before.size), out_before)
    w = moved.view(wa - LOGICAL, 1)
    w[0] ^= 1  # one weight byte differs where the segment now lies
    dev.reset(1)
    dev.icoreCalc(phys, nbytes)
    assert decodes[0] == 2
    dev.mmuMap(0, LOGICAL, moved.addr, 64)  # the segment no longer covers the operands
    dev.reset(1)
    with pytest.raises(DeviceError, match="MMU fault"):
        dev.icoreCalc(phys, nbytes)
    assert decodes[0] == 3


def test_any_changed_constant_byte_decodes_again(dev, hw, rng, decodes):
    """The constants of a replayed run are checked in one pass over all their blocks: a single
    byte changed in any block (the first, a middle one, the last) is seen."""
    x = rng.integers(-128, 128, (4, 5, 16)).astype(np.int8)
    wq = rng.integers(-127, 128, (1, 1, 16, 16)).astype(np.int8)
    bias = rng.integers(-5000, 5000, 16)
    m, s = rand_requant(rng, 16, 2.0 / (16 * 30))
    fi, fo = hw.fmap_in(x), hw.fmap_out(4, 5, 16)
    packed = asm.pack_conv_weights(wq, 1, "int8", hw.cfg)
    wa = hw.put(packed)
    pa = hw.put(asm.pack_requant_params(bias, m, s))
    phys, nbytes = hw.run([asm.Conv(fi, fo, wa, pa, kernel=(1, 1))])
    good = hw.read(fo).copy()
    dev.reset(1)
    dev.icoreCalc(phys, nbytes)
    assert decodes[0] == 1  # replayed
    expected = 1
    for addr in (wa, wa + packed.size // 2 + 3, pa + 5):
        byte = hw.chunk.view(addr - LOGICAL, 1)
        byte[0] ^= 0x40
        dev.reset(1)
        dev.icoreCalc(phys, nbytes)
        expected += 1
        assert decodes[0] == expected  # the change was seen: decoded again
        byte[0] ^= 0x40
        dev.reset(1)
        dev.icoreCalc(phys, nbytes)
        expected += 1
        assert decodes[0] == expected
        np.testing.assert_array_equal(hw.read(fo), good)

"""The icore replays a decoded run only while the memory it was decoded from is unchanged:
the same results, records and counters as decoding again, a new decode after any byte of the
instructions or weights changed (tests/backends/npu_model/test_program_cache.py: a replay on
the new mapping when the MMU moved a segment)."""

from __future__ import annotations

import numpy as np
import pytest
from runtime_cases import host_ref, x_of

from npu_runtime import SegmentType
from xrt.errors import DeviceError


def _counters(s, dev):
    zb = s.backends[0]
    return (dev.calcCycles(), dev.layerCount(), dev.tile_counts(0),
            {k: dict(v) for k, v in zb.profileInfo().items()})


def test_replay_is_the_decode(chip, decodes):
    """Later forwards replay (no word-by-word decode) and give the integer reference's result
    for every input, with the cycles, layer count, tile counters and profile of the decode."""
    q, z = chip.compiled("tiny_cnn")
    s, _ = chip.session(z)
    first = np.asarray(s.forward([x_of(q, 0)])[0]).copy()
    runs = decodes[0]
    assert runs >= 1
    seen = _counters(s, chip.dev)
    for seed in (1, 2, 0):
        got = np.asarray(s.forward([x_of(q, seed)])[0])
        np.testing.assert_array_equal(got, host_ref(q, x_of(q, seed))[0])
        assert _counters(s, chip.dev) == seen
    np.testing.assert_array_equal(got, first)
    assert decodes[0] == runs  # every later run was a replay
    s.close()


def test_changed_bytes_are_decoded_again(chip, decodes):
    """One changed weight byte makes the run decode again; weights inverted change the result
    and an illegal word faults, though the stream ran (and was replayed) before."""
    q, z = chip.compiled("tiny_cnn")
    x = x_of(q, 3)
    s, _ = chip.session(z)
    good = np.asarray(s.forward([x])[0]).copy()
    s.forward([x])
    zb = s.backends[0]
    wchunk = zb.phy_segment_map[SegmentType.WEIGHT].single_chunk.memChunk
    w = wchunk.view(0, wchunk.byte_size)
    saved = w.copy()
    runs = decodes[0]
    w[0] ^= 1
    s.forward([x])
    assert decodes[0] > runs
    w[:] = ~saved
    assert not np.array_equal(np.asarray(s.forward([x])[0]), good)
    w[:] = saved
    np.testing.assert_array_equal(np.asarray(s.forward([x])[0]), good)
    instr = zb.phy_segment_map[SegmentType.INSTR].single_chunk.memChunk
    hard = [op for op in z.ops if op.op_type == "HardOp" and op.params]
    hi = zb.forward_info.hardop_map[hard[0].op_id]
    off = hi.instr_logic_addr - zb.logic_segment_map[SegmentType.INSTR].logic_addr
    instr.write(off, np.array([0x7F << 56], np.uint64).view(np.uint8))  # illegal opcode
    with pytest.raises(DeviceError, match="illegal opcode"):
        s.forward([x])
    s.close()

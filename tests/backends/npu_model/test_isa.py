"""The instruction words: encode/decode round trips, field ranges, the disassembler."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from npu_model import asm, isa
from npu_model.isa import FIELDS, F, Op


@given(st.data())
def test_set_roundtrip_every_field(data):
    fid = data.draw(st.sampled_from(list(F)))
    values = {}
    for s in FIELDS[fid]:
        lo, hi = ((-(1 << (s.width - 1)), (1 << (s.width - 1)) - 1) if s.signed
                  else (0, (1 << s.width) - 1))
        values[s.name] = data.draw(st.integers(lo, hi))
    w = isa.set_word(fid, **values)
    op, a, payload = isa.decode(w)
    assert op is Op.SET and a == fid
    assert isa.unpack_payload(fid, payload) == values
    ops, fids, pays = isa.decode_arrays(np.array([w], dtype=np.uint64))
    assert (ops[0], fids[0], pays[0]) == (Op.SET, fid, payload)


def test_field_layouts_do_not_overlap():
    for fid, subs in FIELDS.items():
        used = 0
        for s in subs:
            mask = ((1 << s.width) - 1) << s.lsb
            assert not used & mask, fid
            assert s.lsb + s.width <= 48, fid
            used |= mask


def test_range_checks():
    with pytest.raises(ValueError):
        isa.set_word(F.KERNEL, kh=256)
    with pytest.raises(ValueError):
        isa.set_word(F.CLIP, lo=-(1 << 23) - 1)
    with pytest.raises(ValueError):
        isa.set_word(F.KERNEL, bogus=1)
    with pytest.raises(ValueError):
        isa.decode(0x77 << 56)
    with pytest.raises(ValueError):
        isa.run_word(Op.SYNC)


def test_disassembler_lists_a_program():
    layer = asm.Conv(asm.FMap(0x1000, 8, 8, 3), asm.FMap(0x4000, 4, 4, 16), 0x8000, 0x9000,
                     kernel=3, stride=2, pad=1)
    prog = asm.emit_program([layer])
    assert prog.nbytes % 64 == 0
    text = isa.disassemble(prog)
    assert "SET KERNEL kh=3 kw=3 sh=2 sw=2 dh=1 dw=1" in text
    assert "CONV DENSE" in text and "SYNC tag=0" in text and "END" in text
    assert isa.disassemble(isa.to_bytes(prog)) == text
    assert ".word" in isa.disassemble_word(0x55 << 56)


def test_emitters_check_shapes():
    with pytest.raises(ValueError, match="conv output"):
        asm.emit(asm.Conv(asm.FMap(0, 8, 8, 3), asm.FMap(0, 8, 8, 4), 0, 0, kernel=3))
    with pytest.raises(ValueError, match="groups"):
        asm.emit(asm.Conv(asm.FMap(0, 8, 8, 6), asm.FMap(0, 8, 8, 4), 0, 0, groups=4))
    with pytest.raises(ValueError, match="pitch"):
        asm.emit(asm.Copy(asm.FMap(0, 2, 2, 8, 16, 10), asm.FMap(0, 2, 2, 8)))
    with pytest.raises(ValueError, match="dtypes"):
        asm.emit(asm.Copy(asm.FMap(0, 2, 2, 8), asm.FMap(0, 2, 2, 8, dtype="int16")))


def test_pack_conv_weights_layout():
    """Block [g][ob][ky][kx][ib][i][o]: spot-check element positions."""
    rng = np.random.default_rng(0)
    w = rng.integers(-127, 128, (2, 3, 40, 50)).astype(np.int8)
    p = asm.pack_conv_weights(w).view(np.int8)
    assert p.size == asm.conv_weight_bytes(2, 3, 40, 50)
    icb, ocb = 32, 32
    blk = p.reshape(1, 2, 2, 3, 2, icb, ocb)
    assert blk[0, 1, 1, 2, 1, 3, 17] == w[1, 2, 32 + 3, 32 + 17]
    assert blk[0, 0, 0, 0, 0, 0, 0] == w[0, 0, 0, 0]
    assert (blk[0, 1, :, :, :, :, 18:] == 0).all()  # padding output lanes
    assert (blk[0, :, :, :, 1, 8:, :] == 0).all()  # padding input lanes
    dw = rng.integers(-127, 128, (3, 3, 1, 40)).astype(np.int8)
    pd = asm.pack_conv_weights(dw, groups=40).view(np.int8).reshape(2, 3, 3, 32)
    assert pd[1, 2, 0, 5] == dw[2, 0, 0, 37]


def test_pack_requant_params_record():
    b = asm.pack_requant_params([1, -2], [16384, 20000], [20, 21], [100, 200], [3, 4])
    rec = b.view(asm.PARAM_RECORD)
    assert rec.itemsize == 24 and b.size == 48
    assert list(rec["bias"]) == [1, -2] and list(rec["shift_neg"]) == [3, 4]
    with pytest.raises(ValueError):
        asm.pack_requant_params(0, 1, 64, n=1)

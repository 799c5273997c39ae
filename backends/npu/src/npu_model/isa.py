"""The instruction set: 64-bit words, configure-then-run (docs/zg330-isa.md is the reference).

Every word is ``opcode[63:56] | a[55:48] | payload[47:0]``.

- ``SET field, value`` (opcode 0x01): loads the 48-bit ``value`` into layer-descriptor field
  ``a``. A field either holds one number (an address, a stride) or packs sub-fields
  (`FIELDS` lists their bit ranges). Fields keep their value until set again or until END, so
  consecutive layers only reload what changes; the emitters always write every field a layer
  uses, so a layer never depends on its predecessor.
- A run opcode (CONV, MATMUL, ELTW, POOL, LUT, UPSAMPLE, COPY, NORM) executes one layer from the
  descriptor; its payload carries a mode (``mode[7:0]``).
- ``SYNC`` ends a layer: the layer counter advances and timer/profiler records are written.
- ``NOP`` pads (each HardOp's instructions are padded to 64 bytes), ``END`` stops the stream.

Decoding a whole stream is vectorised (`decode_arrays`); the core then walks the words in
Python, which is cheap because a layer is tens of words.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import numpy as np

ISA_VERSION = 1
WORD_BYTES = 8
PAYLOAD_BITS = 48
PAYLOAD_MASK = (1 << PAYLOAD_BITS) - 1


class Op(IntEnum):
    """Opcodes (bits 63:56)."""

    NOP = 0x00
    SET = 0x01
    CONV = 0x10
    MATMUL = 0x11
    ELTW = 0x12
    POOL = 0x13
    LUT = 0x14
    UPSAMPLE = 0x15
    COPY = 0x16
    NORM = 0x17
    SYNC = 0x20
    END = 0x3F


RUN_OPS = frozenset({Op.CONV, Op.MATMUL, Op.ELTW, Op.POOL, Op.LUT, Op.UPSAMPLE, Op.COPY,
                     Op.NORM})


class ConvMode(IntEnum):
    DENSE = 0  #: dense or grouped convolution (packed blocked weights)
    DEPTHWISE = 1  #: one input and one output channel per group (packed lane weights)


class MatmulMode(IntEnum):
    DYNAMIC = 0  #: B is a feature map (IN1) stored h = batch, w = K, c = N; no weights
    DYNAMIC_BT = 1  #: B is a feature map stored transposed: h = batch, w = N, c = K (Q @ K^T)


class EltwMode(IntEnum):
    ADD = 0
    SUB = 1
    MUL = 2
    #: ``max(rq(a, RQ), rq(b, RQ_NEG))``: both moved to the output scale (saturating to OUT's
    #: dtype), then the larger; MIN the smaller (element-wise Max / Min, a clip by a constant)
    MAX = 3
    MIN = 4


class UpsampleMode(IntEnum):
    NEAREST = 0  #: ``y[h, w] = x[h // sh, w // sw]``
    ZERO = 1  #: zero insertion: ``y[h * sh, w * sw] = x[h, w]``, 0 elsewhere (transposed conv)
    #: resize by a tap table at PRM_ADDR (bilinear, or nearest at any sizes): per output row,
    #: then per output column, (i0, i1, w1) int32; ``r = q[i0] * (1024 - w1) + q[i1] * w1`` along
    #: H, then W, exact in int64, requantized with RQ
    TABLE = 2


class NormMode(IntEnum):
    """Row normalisations over a pixel's channels (`xir.quant.rownorm` defines the integers)."""

    #: exponential table of PRM_LEN int32 entries at PRM_ADDR, ``R``/``F`` in RQ mult/shift
    SOFTMAX = 0
    #: float64 block at PRM_ADDR: s_in, s_in**2, eps, then (gamma/s_out, beta/s_out) per channel
    LAYERNORM = 1


class CopyMode(IntEnum):
    DENSE = 0  #: ``y = x`` between layouts
    STRIDED_OUT = 1  #: input channel k goes to output channel ``k * CSTEP`` (channel shuffle)
    #: the DMA's axis permutation: output axis k runs along input axis ``PERM.a<k>``
    #: (``y[i0, i1, i2] = x[j]`` with ``j[a_k] = i_k``): Transpose of a feature map
    PERMUTE = 2


class PoolMode(IntEnum):
    MAX = 0
    AVG = 1
    AVG_INCLUDE_PAD = 2


class F(IntEnum):
    """Descriptor field ids (bits 55:48 of a SET word)."""

    IN_ADDR = 0x01
    IN1_ADDR = 0x02
    OUT_ADDR = 0x03
    WGT_ADDR = 0x04
    PRM_ADDR = 0x05
    IN_SHAPE = 0x08
    IN1_SHAPE = 0x09
    OUT_SHAPE = 0x0A
    IN_LAYOUT = 0x0B
    IN1_LAYOUT = 0x0C
    OUT_LAYOUT = 0x0D
    IN_RSTRIDE = 0x0E
    IN1_RSTRIDE = 0x0F
    OUT_RSTRIDE = 0x10
    KERNEL = 0x14
    PAD = 0x15
    GROUPS = 0x16
    CLIP = 0x17
    ELTW_KA = 0x18
    RQ = 0x19
    RQ_NEG = 0x1A
    SCALE = 0x1B
    TILE = 0x1C
    ELTW_KB = 0x1D
    CSTEP = 0x1E
    PRM_LEN = 0x1F
    PERM = 0x20


@dataclass(frozen=True)
class Sub:
    """A sub-field of a SET payload: bits [lsb, lsb + width), signed or not."""

    name: str
    lsb: int
    width: int
    signed: bool = False


#: Sub-field layout of every field. A field with one sub-field named "value" is a plain number.
FIELDS: dict[F, tuple[Sub, ...]] = {
    F.IN_ADDR: (Sub("value", 0, 48),),
    F.IN1_ADDR: (Sub("value", 0, 48),),
    F.OUT_ADDR: (Sub("value", 0, 48),),
    F.WGT_ADDR: (Sub("value", 0, 48),),
    F.PRM_ADDR: (Sub("value", 0, 48),),
    F.IN_SHAPE: (Sub("h", 0, 16), Sub("w", 16, 16), Sub("c", 32, 16)),
    F.IN1_SHAPE: (Sub("h", 0, 16), Sub("w", 16, 16), Sub("c", 32, 16)),
    F.OUT_SHAPE: (Sub("h", 0, 16), Sub("w", 16, 16), Sub("c", 32, 16)),
    F.IN_LAYOUT: (Sub("pitch", 0, 16), Sub("c_off", 16, 16), Sub("dtype", 32, 4)),
    F.IN1_LAYOUT: (Sub("pitch", 0, 16), Sub("c_off", 16, 16), Sub("dtype", 32, 4)),
    F.OUT_LAYOUT: (Sub("pitch", 0, 16), Sub("c_off", 16, 16), Sub("dtype", 32, 4)),
    F.IN_RSTRIDE: (Sub("value", 0, 48),),
    F.IN1_RSTRIDE: (Sub("value", 0, 48),),
    F.OUT_RSTRIDE: (Sub("value", 0, 48),),
    F.KERNEL: (Sub("kh", 0, 8), Sub("kw", 8, 8), Sub("sh", 16, 8), Sub("sw", 24, 8),
               Sub("dh", 32, 8), Sub("dw", 40, 8)),
    F.PAD: (Sub("pt", 0, 8), Sub("pb", 8, 8), Sub("pl", 16, 8), Sub("pr", 24, 8)),
    F.GROUPS: (Sub("value", 0, 16),),
    F.CLIP: (Sub("lo", 0, 24, True), Sub("hi", 24, 24, True)),
    F.ELTW_KA: (Sub("value", 0, 40, True),),
    F.ELTW_KB: (Sub("value", 0, 40, True),),
    F.RQ: (Sub("mult", 0, 32, True), Sub("shift", 32, 8)),
    F.RQ_NEG: (Sub("mult", 0, 32, True), Sub("shift", 32, 8)),
    F.SCALE: (Sub("sh", 0, 8), Sub("sw", 8, 8)),
    F.TILE: (Sub("rows", 0, 16), Sub("oc_blocks", 16, 16)),
    F.CSTEP: (Sub("out", 0, 16),),
    F.PRM_LEN: (Sub("value", 0, 48),),
    F.PERM: (Sub("a0", 0, 2), Sub("a1", 2, 2), Sub("a2", 4, 2)),
}


# --- encode --------------------------------------------------------------------------------------


def word(op: int, a: int = 0, payload: int = 0) -> int:
    """One instruction word as a Python int."""
    if not 0 <= payload <= PAYLOAD_MASK:
        raise ValueError(f"payload {payload:#x} does not fit 48 bits")
    return (int(op) & 0xFF) << 56 | (int(a) & 0xFF) << 48 | payload


def pack_payload(fid: F, **values: int) -> int:
    """Pack sub-field values of field `fid` into a 48-bit payload (range-checked)."""
    subs = FIELDS[F(fid)]
    names = {s.name for s in subs}
    unknown = set(values) - names
    if unknown:
        raise ValueError(f"field {F(fid).name} has no sub-field(s) {sorted(unknown)}")
    payload = 0
    for s in subs:
        v = int(values.get(s.name, 0))
        lo, hi = (-(1 << (s.width - 1)), (1 << (s.width - 1)) - 1) if s.signed else (
            0, (1 << s.width) - 1)
        if not lo <= v <= hi:
            raise ValueError(f"{F(fid).name}.{s.name} = {v} does not fit [{lo}, {hi}]")
        payload |= (v & ((1 << s.width) - 1)) << s.lsb
    return payload


def set_word(fid: F, value: int | None = None, **subs: int) -> int:
    """``SET fid`` with a plain value (``set_word(F.IN_ADDR, 0x1000)``) or sub-fields."""
    if value is not None:
        if subs:
            raise ValueError("pass either a plain value or sub-fields")
        subs = {"value": value}
    return word(Op.SET, fid, pack_payload(fid, **subs))


def run_word(op: Op, mode: int = 0) -> int:
    if Op(op) not in RUN_OPS:
        raise ValueError(f"{Op(op).name} is not a run opcode")
    return word(op, 0, int(mode) & 0xFF)


def sync_word(tag: int = 0) -> int:
    """SYNC; `tag` (e.g. the HardOp id) is stored in the timer/profiler record."""
    return word(Op.SYNC, 0, int(tag) & PAYLOAD_MASK)


def nop_word() -> int:
    return word(Op.NOP)


def end_word() -> int:
    return word(Op.END)


# --- decode --------------------------------------------------------------------------------------


def unpack_payload(fid: int, payload: int) -> dict[str, int]:
    """Sub-field values of a SET payload."""
    out = {}
    for s in FIELDS[F(fid)]:
        v = (int(payload) >> s.lsb) & ((1 << s.width) - 1)
        if s.signed and v >> (s.width - 1):
            v -= 1 << s.width
        out[s.name] = v
    return out


def decode_arrays(words: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Vectorised split of uint64 words into (opcode, a, payload) int64 arrays."""
    w = np.asarray(words, dtype=np.uint64)
    op = (w >> np.uint64(56)).astype(np.int64)
    a = ((w >> np.uint64(48)) & np.uint64(0xFF)).astype(np.int64)
    payload = (w & np.uint64(PAYLOAD_MASK)).astype(np.int64)
    return op, a, payload


def decode(w: int) -> tuple[Op, int, int]:
    """One word as (opcode, a, payload); raises ValueError on an unknown opcode or field."""
    w = int(w)
    op, a, payload = w >> 56, (w >> 48) & 0xFF, w & PAYLOAD_MASK
    try:
        opc = Op(op)
    except ValueError:
        raise ValueError(f"illegal opcode {op:#04x} in word {w:#018x}") from None
    if opc is Op.SET and a not in F._value2member_map_:
        raise ValueError(f"SET to unknown field {a:#04x} in word {w:#018x}")
    return opc, a, payload


def disassemble_word(w: int) -> str:
    """One word as assembler text, e.g. ``SET KERNEL kh=3 kw=3 sh=1 ...``."""
    try:
        op, a, payload = decode(w)
    except ValueError as exc:
        return f".word {int(w):#018x}  ; {exc}"
    if op is Op.SET:
        fid = F(a)
        subs = unpack_payload(fid, payload)
        if list(subs) == ["value"]:
            return f"SET {fid.name} {subs['value']:#x}"
        return f"SET {fid.name} " + " ".join(f"{k}={v}" for k, v in subs.items())
    if op in RUN_OPS:
        mode = payload & 0xFF
        names = {Op.CONV: ConvMode, Op.ELTW: EltwMode, Op.POOL: PoolMode, Op.MATMUL: MatmulMode,
                 Op.UPSAMPLE: UpsampleMode, Op.COPY: CopyMode}
        if op in names:
            try:
                return f"{op.name} {names[op](mode).name}"
            except ValueError:
                pass
        return f"{op.name} mode={mode}"
    if op is Op.SYNC:
        return f"SYNC tag={payload}"
    return op.name


def disassemble(words: np.ndarray | bytes, base: int = 0) -> str:
    """A listing: address, hex word, text; one line per word."""
    w = np.frombuffer(words, dtype="<u8") if isinstance(words, (bytes, bytearray)) else \
        np.asarray(words, dtype=np.uint64)
    lines = [f"{base + i * WORD_BYTES:#010x}: {int(x):016x}  {disassemble_word(int(x))}"
             for i, x in enumerate(w)]
    return "\n".join(lines)


def to_bytes(words: list[int] | np.ndarray) -> bytes:
    """Little-endian bytes of a word list (what is uploaded to ETM)."""
    return np.asarray(words, dtype="<u8").tobytes()

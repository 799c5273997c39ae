"""The register map both NPUs share (32-bit registers, offsets from `chip.REG_BASE`).

| offset | name | access | meaning |
|---|---|---|---|
| 0x0000 | ID | ro | the chip's identification (`Chip.device_id`: 0x03300001 ZG330, ISA version 1) |
| 0x0004 | VERSION | ro | simulator model version (major << 16 \\| minor) |
| 0x0008 | ROWS_COLS | ro | physical MPE array: rows [15:0], cols [31:16] |
| 0x000C | MPE_EN | rw | enabled MPE rows [15:0], cols [31:16] (`getRowsCols`); 0 = all |
| 0x0010 | CTRL | wo | bit 0 START (run INSTR_ADDR/INSTR_SIZE), bit 1 fast reset, bit 2 full reset |
| 0x0014 | STATUS | ro | bit 0 DONE, bit 1 BUSY, bit 2 ERROR |
| 0x0018 | ERR_CODE | ro | 0 ok, 1 illegal instruction / operand, 2 MMU fault, 3 mock device |
| 0x001C | MASTER_CID | rw | the MPE column that owns sync, timer and profiler write-back |
| 0x0020 | INSTR_ADDR_LO | rw | physical ETM address of the instruction stream, bits 31:0 |
| 0x0024 | INSTR_ADDR_HI | rw | bits 63:32 |
| 0x0028 | INSTR_SIZE | rw | bytes of instructions (multiple of 8) |
| 0x0030 | ICORE_CLK_HZ | rw | icore clock (`setIcoreClkFreq`) |
| 0x0034 | DDR_CLK_HZ | rw | DDR clock (`setDDRClkFreq`) |
| 0x0040 | CYCLES_LO | ro | icore cycles of the last run, bits 31:0 |
| 0x0044 | CYCLES_HI | ro | bits 63:32 |
| 0x0048 | LAYER_COUNT | ro | SYNCs executed since reset (`layerCount`) |
| 0x004C | RUN_COUNT | ro | runs (START) since reset |
| 0x0050 | TIMER_ADDR_LO/HI (0x54) | rw | physical address of the timer records (`configTimer`) |
| 0x0058 | TIMER_SIZE | rw | bytes available for timer records (0 = off) |
| 0x0060 | PROF_ADDR_LO/HI (0x64) | rw | physical address of the profiler records |
| 0x0068 | PROF_SIZE | rw | bytes available for profiler records (0 = off) |
| 0x0100 + 4 cid | RTILE[cid] | ro | DMA read tiles of channel (column) cid (`rTileCount`) |
| 0x0180 + 4 cid | WTILE[cid] | ro | DMA write tiles of channel cid (`wTileCount`) |
| 0x1000 + 32 i | MMU[i] | rw | entry i: +0 LOGIC_LO, +4 LOGIC_HI, +8 SIZE_LO, +0xC SIZE_HI, +0x10 PHYS_LO, +0x14 PHYS_HI, +0x18 FLAGS (bit 0 valid), +0x1C reserved |
| 0x4000 + 0x40 (cid * rows + rid) | MPE[cid][rid] | mixed | per-MPE bank (`readReg(cid, rid, offset)`): +0 ID (ro, cid << 8 \\| rid), +4 MACS_LO, +8 MACS_HI, +0xC BUSY_LO, +0x10 BUSY_HI (ro counters since reset), +0x14 SCRATCH (rw) |

Writes are checked (`write_checker`): a read-only register, an offset with no register, or a
value outside a register's legal range raises `InvalidArgumentError` naming the register, and
nothing is stored. Legal: MPE_EN rows in 1..rows (0 = all) and cols likewise; CTRL bits 0-2;
MASTER_CID below the columns; INSTR_SIZE a multiple of 8; the clocks in [1 kHz, 2**32) Hz; an
MMU FLAGS word 0 or 1; MPE banks: SCRATCH only.

Fast reset (level 1, CTRL bit 1) clears STATUS, ERR_CODE, CYCLES, LAYER_COUNT, RUN_COUNT, the tile
counters and the MPE counters; configuration (MPE_EN, clocks, MMU, timer/profiler, master) stays.
Full reset (level 0) clears every register and reloads the power-on defaults.
"""  # noqa: E501 - two rows of the register table above do not wrap

from __future__ import annotations

#: the register window of a device (32-bit registers)
REG_BASE = 0x9000_0000
REG_SIZE = 0x8000

ID = 0x0000
VERSION = 0x0004
ROWS_COLS = 0x0008
MPE_EN = 0x000C
CTRL = 0x0010
STATUS = 0x0014
ERR_CODE = 0x0018
MASTER_CID = 0x001C
INSTR_ADDR_LO = 0x0020
INSTR_ADDR_HI = 0x0024
INSTR_SIZE = 0x0028
ICORE_CLK_HZ = 0x0030
DDR_CLK_HZ = 0x0034
CYCLES_LO = 0x0040
CYCLES_HI = 0x0044
LAYER_COUNT = 0x0048
RUN_COUNT = 0x004C
TIMER_ADDR_LO = 0x0050
TIMER_ADDR_HI = 0x0054
TIMER_SIZE = 0x0058
PROF_ADDR_LO = 0x0060
PROF_ADDR_HI = 0x0064
PROF_SIZE = 0x0068
RTILE_BASE = 0x0100
WTILE_BASE = 0x0180
MAX_CHANNELS = 32

MMU_BASE = 0x1000
MMU_ENTRY_BYTES = 32
MMU_LOGIC_LO, MMU_LOGIC_HI, MMU_SIZE_LO, MMU_SIZE_HI, MMU_PHYS_LO, MMU_PHYS_HI, MMU_FLAGS = \
    0x00, 0x04, 0x08, 0x0C, 0x10, 0x14, 0x18
MMU_VALID = 1

MPE_BASE = 0x4000
MPE_BANK_BYTES = 0x40
MPE_ID, MPE_MACS_LO, MPE_MACS_HI, MPE_BUSY_LO, MPE_BUSY_HI, MPE_SCRATCH = \
    0x00, 0x04, 0x08, 0x0C, 0x10, 0x14

CTRL_START = 1
CTRL_FAST_RESET = 2
CTRL_FULL_RESET = 4

STATUS_DONE = 1
STATUS_BUSY = 2
STATUS_ERROR = 4

ERR_OK = 0
ERR_ILLEGAL = 1
ERR_MMU = 2
ERR_MOCK = 3

#: registers a fast reset (level 1) clears
FAST_RESET_CLEARS = (STATUS, ERR_CODE, CYCLES_LO, CYCLES_HI, LAYER_COUNT, RUN_COUNT)


#: every register a write may name (offset -> name); the others are read-only or absent
WRITABLE = {MPE_EN: "MPE_EN", CTRL: "CTRL", MASTER_CID: "MASTER_CID",
            INSTR_ADDR_LO: "INSTR_ADDR_LO", INSTR_ADDR_HI: "INSTR_ADDR_HI",
            INSTR_SIZE: "INSTR_SIZE", ICORE_CLK_HZ: "ICORE_CLK_HZ", DDR_CLK_HZ: "DDR_CLK_HZ",
            TIMER_ADDR_LO: "TIMER_ADDR_LO", TIMER_ADDR_HI: "TIMER_ADDR_HI",
            TIMER_SIZE: "TIMER_SIZE", PROF_ADDR_LO: "PROF_ADDR_LO",
            PROF_ADDR_HI: "PROF_ADDR_HI", PROF_SIZE: "PROF_SIZE"}
_READ_ONLY = {ID: "ID", VERSION: "VERSION", ROWS_COLS: "ROWS_COLS", STATUS: "STATUS",
              ERR_CODE: "ERR_CODE", CYCLES_LO: "CYCLES_LO", CYCLES_HI: "CYCLES_HI",
              LAYER_COUNT: "LAYER_COUNT", RUN_COUNT: "RUN_COUNT"}


def write_checker(cfg, base: int, who: str):
    """The `RegRegion.check_writes` callback of a device with config `cfg` whose registers
    start at `base`."""
    from xrt.errors import InvalidArgumentError

    mmu_end = MMU_BASE + MMU_ENTRY_BYTES * cfg.mmu_entries
    mpe_end = MPE_BASE + MPE_BANK_BYTES * cfg.mpe_cols * cfg.mpe_rows

    def refuse(off: int, name: str, why: str) -> None:
        raise InvalidArgumentError(f"{who}: register {name} ({base + off:#x}): {why}")

    def check(addr: int, value: int) -> None:
        off = addr - base
        if off in _READ_ONLY:
            refuse(off, _READ_ONLY[off], "is read-only")
        if MMU_BASE <= off < mmu_end:
            if off % MMU_ENTRY_BYTES == MMU_FLAGS and value not in (0, MMU_VALID):
                refuse(off, f"MMU[{(off - MMU_BASE) // MMU_ENTRY_BYTES}].FLAGS",
                       f"{value:#x} is not 0 or 1 (valid)")
            return
        if MPE_BASE <= off < mpe_end:
            if (off - MPE_BASE) % MPE_BANK_BYTES != MPE_SCRATCH:
                refuse(off, "MPE bank", "only SCRATCH (+0x14) is writable")
            return
        name = WRITABLE.get(off)
        if name is None:
            what = "a DMA tile counter" if RTILE_BASE <= off < WTILE_BASE + 4 * MAX_CHANNELS \
                else "no writable register"
            refuse(off, f"+{off:#x}", f"is {what}")
        if off == MPE_EN:
            rows, cols = value & 0xFFFF, value >> 16
            if rows > cfg.mpe_rows or cols > cfg.mpe_cols:
                refuse(off, name, f"{rows} rows x {cols} cols: the array is {cfg.mpe_rows} x "
                       f"{cfg.mpe_cols} (0 = all)")
        elif off == CTRL and value & ~(CTRL_START | CTRL_FAST_RESET | CTRL_FULL_RESET):
            refuse(off, name, f"{value:#x} sets bits other than START, FAST_RESET, FULL_RESET")
        elif off == MASTER_CID and value >= cfg.mpe_cols:
            refuse(off, name, f"column {value} is outside 0..{cfg.mpe_cols - 1}")
        elif off == INSTR_SIZE and value % 8:
            refuse(off, name, f"{value} bytes is not a multiple of 8")
        elif off in (ICORE_CLK_HZ, DDR_CLK_HZ) and value < 1_000:
            refuse(off, name, f"{value} Hz is below 1 kHz")

    return check


def mmu_entry(index: int) -> int:
    """Offset of MMU entry `index`."""
    return MMU_BASE + MMU_ENTRY_BYTES * index


def mpe_bank(cid: int, rid: int, rows: int) -> int:
    """Offset of the register bank of the MPE in column `cid`, row `rid`."""
    return MPE_BASE + MPE_BANK_BYTES * (cid * rows + rid)

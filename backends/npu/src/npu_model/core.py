"""The icore: fetches an instruction stream from simulated memory and executes it.

`Icore.run(instr_addr, nbytes, mmu, ...)` reads the words at physical ETM address `instr_addr`
(the instruction fetch unit reads DDR directly), walks them, and for every run word resolves its
operands through the MMU into views of the simulated ETM/OCM, calls the Numba kernel and the
Numba cycle model. Nothing is taken from Python objects: a wrong address or a missing upload
computes on whatever bytes are there, as the board would.

Per layer (the words up to a SYNC) it accumulates MACs, cycles, bytes and tiles; SYNC writes the
layer's timer record and profiler record into memory when those are configured (record formats
in docs/zg330-isa.md) and advances the layer counter.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from xir.ops.resize_taps import BILINEAR_FRAC_BITS

from . import cycles as cy
from . import prefetch
from .asm import AVG_RECORD, PARAM_RECORD, TAP_RECORD, conv_weight_bytes
from .config import CODE_DTYPES, NP_DTYPES, NpuConfig
from .dma import TileCounters
from .isa import (
    RUN_OPS,
    ConvMode,
    CopyMode,
    F,
    MatmulMode,
    NormMode,
    Op,
    PoolMode,
    UpsampleMode,
    decode_arrays,
    unpack_payload,
)
from .kernels import (
    bgemm,
    depthwise,
    grouped,
    igemm,
    implicit,
    matmul,
    mpe,
    pool,
    resize,
    rownorm,
    vector,
)
from .mmu import MEM_ETM, MEM_OCM, MmuFault, MmuTable
from .program import MAX_PROGRAMS, Program, Recording

log = logging.getLogger(__name__)

TIMER_RECORD = np.dtype([("tag", "<u8"), ("layer", "<u8"), ("start", "<u8"), ("end", "<u8")])
PROFILE_RECORD = np.dtype([("tag", "<u8"), ("layer", "<u8"), ("macs", "<u8"), ("cycles", "<u8"),
                           ("compute", "<u8"), ("dma", "<u8"), ("etm_rd", "<u8"),
                           ("etm_wr", "<u8"), ("ocm_rd", "<u8"), ("ocm_wr", "<u8")])


class NpuFault(RuntimeError):
    """The simulated NPU stopped: illegal instruction, bad operand, MMU fault."""


class MemoryBus:
    """Physical memory as the icore sees it: the ETM and OCM byte stores.

    `etm` / `ocm` are `xrt.memory.Storage` objects addressed physically (an `ArenaStorage`).
    """

    def __init__(self, cfg: NpuConfig, etm: Any, ocm: Any) -> None:
        self.cfg = cfg
        self.etm = etm
        self.ocm = ocm

    def mem_of(self, phys: int, n: int) -> int:
        c = self.cfg
        if c.etm_base <= phys and phys + n <= c.etm_base + c.etm_size:
            return MEM_ETM
        if c.ocm_base <= phys and phys + n <= c.ocm_base + c.ocm_size:
            return MEM_OCM
        raise MmuFault(f"physical range [{phys:#x}, {phys + n:#x}) is in neither ETM "
                       f"[{c.etm_base:#x}, +{c.etm_size:#x}) nor OCM [{c.ocm_base:#x}, "
                       f"+{c.ocm_size:#x})")

    def store(self, mem: int) -> Any:
        """The byte store of memory `mem`."""
        return self.etm if mem == MEM_ETM else self.ocm

    def view(self, mem: int, phys: int, n: int) -> np.ndarray:
        """A view the icore may write through (a feature map operand, a record area)."""
        v = self.store(mem).view(phys, n)
        if v is None:
            raise NpuFault("this memory store is remote; the simulator needs local memory")
        return v

    def peek(self, mem: int, phys: int, n: int) -> np.ndarray:
        """A view the icore only reads (instructions, constants): a store that watches its
        bytes for the decoded runs (``peek``) counts it as no write."""
        store = self.store(mem)
        return store.peek(phys, n) if hasattr(store, "peek") else self.view(mem, phys, n)

    def whole(self, mem: int) -> np.ndarray:
        """All of memory `mem` as one array (index = physical address - the memory's base)."""
        c = self.cfg
        if mem == MEM_ETM:
            return self.peek(mem, c.etm_base, c.etm_size)
        return self.peek(mem, c.ocm_base, c.ocm_size)


@dataclass
class Operand:
    arr: np.ndarray  # flat int8/int16 view starting at the buffer address
    rs: int  # row stride (elements)
    pitch: int
    coff: int
    h: int
    w: int
    c: int
    mem: int
    dtype: str
    nbytes: int


@dataclass
class RunResult:
    """What one `Icore.run` did."""

    cycles: int = 0
    syncs: int = 0
    words: int = 0
    layers: list[np.ndarray] = field(default_factory=list)  # PROFILE_RECORD rows
    macs: int = 0  # summed over the layers (the MPE counters the device adds)
    compute: int = 0  # compute cycles summed over the layers


_STAT_KEYS = ("runs", "layers", "instructions", "cycles", "macs", "compute_cycles", "dma_cycles",
              "etm_rd", "etm_wr", "ocm_rd", "ocm_wr", "rtiles", "wtiles")


class Icore:
    """The NPU's control core plus MPE array and vector unit of one device."""

    def __init__(self, cfg: NpuConfig, bus: MemoryBus) -> None:
        self.cfg = cfg
        self.bus = bus
        self.tiles = TileCounters(cfg.mpe_cols)
        self._stats = dict.fromkeys(_STAT_KEYS, 0)
        #: counters of replayed runs not yet added to `_stats` (added when they are read)
        self._unfolded: list[dict[str, int]] = []
        self._res = cy.new_result_vector()
        #: decoded runs by (address, size, MPE/clock settings, record areas, layer base)
        self._programs: dict[tuple, Program] = {}
        #: int8 convolutions on the integer-SIMD GEMM (else the exact float K-chunk path)
        self.int_gemm = igemm.enabled()
        #: int16 convolutions and matmuls on the integer GEMM's digit form (else float64)
        self.int_gemm16 = igemm.enabled_int16()
        #: integer convolutions on the byte GEMM (AVX-512 VNNI ``vpdpbusd``, `bgemm`) where K
        #: allows, before the two above
        self.byte_gemm = bgemm.enabled()
        self._rec = Recording()  # the run being interpreted records into this

    # --- counters -----------------------------------------------------------------------------

    def stats(self) -> dict[str, int]:
        """Cumulative counters since the last `clear_stats` (runs, layers, cycles, bytes...)."""
        self._fold()
        return dict(self._stats)

    def _fold(self) -> None:
        stats = self._stats
        for added in self._unfolded:
            for k, v in added.items():
                stats[k] += v
        self._unfolded.clear()

    def dry_copy(self, recording: Recording) -> Icore:
        """A shallow copy of this icore that decodes into `recording` with counters, tiles
        and results of its own (`prefetch`: a run's kernel calls listed without making them);
        nothing of this icore changes. `dry_decode` tells it apart from a real decode."""
        dry = copy.copy(self)
        dry.dry_decode = True
        dry._stats = dict.fromkeys(self._stats, 0)
        dry._unfolded = []
        dry.tiles = TileCounters(self.cfg.mpe_cols)
        dry._res = cy.new_result_vector()
        dry._rec = recording
        return dry

    def clear_stats(self) -> None:
        self._unfolded.clear()
        for k in self._stats:
            self._stats[k] = 0

    def reset(self) -> None:
        """Fast reset of the hardware counters (tiles); stats are the simulator's, kept."""
        self.tiles.clear()

    # --- execution ----------------------------------------------------------------------------

    def run(self, instr_addr: int, nbytes: int, mmu: MmuTable, *, rows_en: int | None = None,
            cols_en: int | None = None, icore_clk_hz: int | None = None,
            ddr_clk_hz: int | None = None, timer: tuple[int, int] | None = None,
            profiler: tuple[int, int] | None = None, layer_base: int = 0) -> RunResult:
        """Execute `nbytes` of instructions at physical ETM address `instr_addr`.

        `timer` / `profiler`: (physical address, bytes) of the record areas, or None.
        `layer_base`: the layer counter before this run (records go to slot = layer index).
        """
        cfg = self.cfg
        if nbytes <= 0 or nbytes % 8:
            raise NpuFault(f"instruction size {nbytes} is not a positive multiple of 8 bytes")
        try:
            mem = self.bus.mem_of(instr_addr, nbytes)
        except MmuFault as exc:
            raise NpuFault(f"instruction fetch: {exc}") from None
        if mem != MEM_ETM:
            raise NpuFault(f"instruction fetch at {instr_addr:#x}: instructions are read from ETM")
        code = self.bus.peek(mem, instr_addr, nbytes)
        rows = cfg.mpe_rows if rows_en is None else int(rows_en)
        cols = cfg.mpe_cols if cols_en is None else int(cols_en)
        # (the cycle model's parameters follow from the array shape and the clocks)
        key = (instr_addr, nbytes, rows, cols, icore_clk_hz, ddr_clk_hz, timer, profiler,
               int(layer_base))
        prog = self._programs.get(key)
        if prog is not None and prog.bind(code, mmu, self.bus):
            res = self._replay(prog)
            pool.rest()
            return res
        hw = cfg.hw_vector(rows, cols, icore_clk_hz, ddr_clk_hz)
        self._fold()
        stats0 = dict(self._stats)
        tiles0 = self.tiles.read.copy(), self.tiles.write.copy()
        code = code.copy()
        self._rec = rec = Recording()
        if prefetch.active:  # a fresh install: compile this run's kernels side by side
            prefetch.prefetch_run(self, code, instr_addr, mmu, rows, cols, hw, timer, profiler,
                                  layer_base)
        res = self._interpret(code, instr_addr, mmu, rows, cols, hw, timer, profiler, layer_base)
        pool.rest()  # the run's last cut call is behind it: the pool's threads sleep
        if len(self._programs) >= MAX_PROGRAMS:
            self._programs.clear()
        self._programs[key] = Program(
            code, mmu, rec, res,
            {k: v - stats0[k] for k, v in self._stats.items()},
            self.tiles.read - tiles0[0], self.tiles.write - tiles0[1])
        return res

    def _replay(self, prog: Program) -> RunResult:
        """Run a recorded program again: its kernels on today's feature maps, its records and
        counters as the interpreter would write them. The result is the recorded run's (the
        same cycles, layers and MACs; callers only read it)."""
        prog.replay()
        self._unfolded.append(prog.stats)
        if len(self._unfolded) >= 256:
            self._fold()
        self.tiles.read += prog.rtiles
        self.tiles.write += prog.wtiles
        return prog.result

    def _interpret(self, code: np.ndarray, instr_addr: int, mmu: MmuTable, rows: int, cols: int,
                   hw: np.ndarray, timer, profiler, layer_base: int) -> RunResult:
        """Decode and execute the words in `code` one by one (recording into ``self._rec``)."""
        cfg = self.cfg
        raw = code.view("<u8")
        ops, fids, payloads = decode_arrays(raw)
        d: dict[int, int] = {}
        res = RunResult()
        cur = np.zeros(cy.R_SIZE, dtype=np.int64)
        t = cfg.launch_overhead_cycles
        layer_start = t
        words_in_layer = 0
        layer_idx = int(layer_base)
        n = len(ops)
        i = 0
        opl = ops.tolist()
        fidl = fids.tolist()
        payl = payloads.tolist()
        while i < n:
            op, a, p = opl[i], fidl[i], payl[i]
            i += 1
            words_in_layer += 1
            if op == Op.SET:
                if a not in F._value2member_map_:
                    raise NpuFault(f"word {i - 1} at {instr_addr + 8 * (i - 1):#x}: SET to "
                                   f"unknown field {a:#04x}")
                d[a] = p
            elif op == Op.NOP:
                continue
            elif op == Op.SYNC:
                fetch = -(-words_in_layer * 8 * 1024 // int(hw[cy.HW_ETM_BW1024]))
                issue = words_in_layer * cfg.issue_cycles_per_word
                layer_cycles = int(cur[cy.R_CYCLES]) + max(fetch, issue) + cfg.sync_overhead_cycles
                t = layer_start + layer_cycles
                rec = np.zeros(1, dtype=PROFILE_RECORD)
                rec["tag"], rec["layer"] = p, layer_idx
                rec["macs"], rec["cycles"] = cur[cy.R_MACS], layer_cycles
                rec["compute"], rec["dma"] = cur[cy.R_COMPUTE], cur[cy.R_DMA] + fetch
                rec["etm_rd"] = cur[cy.R_ETM_RD] + words_in_layer * 8
                rec["etm_wr"], rec["ocm_rd"], rec["ocm_wr"] = (cur[cy.R_ETM_WR], cur[cy.R_OCM_RD],
                                                              cur[cy.R_OCM_WR])
                res.layers.append(rec[0])
                self._write_records(timer, profiler, layer_idx, p, layer_start, t, rec)
                self._account(rec[0], cur, words_in_layer)
                layer_idx += 1
                layer_start = t
                cur[:] = 0
                words_in_layer = 0
            elif op == Op.END:
                break
            elif op in RUN_OPS:
                try:
                    lv = self._execute(op, p & 0xFF, d, mmu, rows)
                except MmuFault as exc:
                    raise NpuFault(f"word {i - 1} ({Op(op).name}): {exc}") from None
                cy.layer_cycles(lv, hw, self._res)
                cur += self._res
                self.tiles.add(int(self._res[cy.R_RTILES]), int(self._res[cy.R_WTILES]), cols)
            else:
                raise NpuFault(f"word {i - 1} at {instr_addr + 8 * (i - 1):#x}: illegal opcode "
                               f"{op:#04x} (word {int(raw[i - 1]):#018x})")
        # work after the last SYNC (a stream without a final SYNC) still costs time
        tail = int(cur[cy.R_CYCLES]) + words_in_layer * cfg.issue_cycles_per_word
        t = layer_start + tail
        self._stats["cycles"] += tail
        self._stats["macs"] += int(cur[cy.R_MACS])
        res.cycles = int(t)
        res.syncs = layer_idx - int(layer_base)
        res.words = i
        self._stats["runs"] += 1
        self._stats["cycles"] += cfg.launch_overhead_cycles
        self._stats["instructions"] += i
        res.macs = sum(int(r["macs"]) for r in res.layers)
        res.compute = sum(int(r["compute"]) for r in res.layers)
        return res

    def _account(self, rec: np.void, cur: np.ndarray, words: int) -> None:
        s = self._stats
        s["layers"] += 1
        s["cycles"] += int(rec["cycles"])
        s["macs"] += int(rec["macs"])
        s["compute_cycles"] += int(rec["compute"])
        s["dma_cycles"] += int(rec["dma"])
        s["etm_rd"] += int(rec["etm_rd"])
        s["etm_wr"] += int(rec["etm_wr"])
        s["ocm_rd"] += int(rec["ocm_rd"])
        s["ocm_wr"] += int(rec["ocm_wr"])
        s["rtiles"] += int(cur[cy.R_RTILES])
        s["wtiles"] += int(cur[cy.R_WTILES])

    def _write_records(self, timer, profiler, idx: int, tag: int, start: int, end: int,
                       rec: np.ndarray) -> None:
        if timer is not None:
            addr, size = timer
            off = idx * TIMER_RECORD.itemsize
            if off + TIMER_RECORD.itemsize <= size:
                tr = np.zeros(1, dtype=TIMER_RECORD)
                tr["tag"], tr["layer"], tr["start"], tr["end"] = tag, idx, start, end
                self._put(addr + off, tr.view(np.uint8))
        if profiler is not None:
            addr, size = profiler
            off = idx * PROFILE_RECORD.itemsize
            if off + PROFILE_RECORD.itemsize <= size:
                self._put(addr + off, rec.view(np.uint8))

    def _put(self, phys: int, data: np.ndarray) -> None:
        """Write a record at physical address `phys` (a record area is physical: the replay
        copies into the same bytes)."""
        dst = self.bus.view(self.bus.mem_of(phys, data.nbytes), phys, data.nbytes)
        self._rec.call(np.copyto, dst, data)

    # --- operands -----------------------------------------------------------------------------

    def _operand(self, d: dict, mmu: MmuTable, which: str) -> Operand:
        fa, fs, fl, fr = {
            "in": (F.IN_ADDR, F.IN_SHAPE, F.IN_LAYOUT, F.IN_RSTRIDE),
            "in1": (F.IN1_ADDR, F.IN1_SHAPE, F.IN1_LAYOUT, F.IN1_RSTRIDE),
            "out": (F.OUT_ADDR, F.OUT_SHAPE, F.OUT_LAYOUT, F.OUT_RSTRIDE),
        }[which]
        shape = unpack_payload(fs, d.get(fs, 0))
        lay = unpack_payload(fl, d.get(fl, 0))
        dtype = CODE_DTYPES.get(lay["dtype"])
        if dtype is None:
            raise NpuFault(f"{which}: unknown dtype code {lay['dtype']}")
        npdt = NP_DTYPES[dtype]
        esz = npdt.itemsize
        h, w, c, pitch, coff = shape["h"], shape["w"], shape["c"], lay["pitch"], lay["c_off"]
        if min(h, w, c) < 1 or coff + c > pitch:
            raise NpuFault(f"{which}: bad feature map {h}x{w}x{c}, channels [{coff}, {coff + c})"
                           f" of pitch {pitch}")
        rs = d.get(fr, 0) or w * pitch * esz
        if rs % esz or rs < w * pitch * esz:
            raise NpuFault(f"{which}: row stride {rs} bytes is not a whole row of elements")
        nbytes = (h - 1) * rs + ((w - 1) * pitch + coff + c) * esz
        addr = d.get(fa, 0)
        mem, phys = mmu.translate(addr, nbytes, f"{which} operand")
        if phys % esz:
            raise NpuFault(f"{which}: physical address {phys:#x} is not {esz}-byte aligned")
        arr = self._rec.operand(self.bus.view(mem, phys, nbytes).view(npdt.newbyteorder("=")),
                                addr, nbytes, mem)
        return Operand(arr, rs // esz, pitch, coff, h, w, c, mem, dtype, nbytes)

    def _const(self, d: dict, mmu: MmuTable, fid: F, nbytes: int, what: str):
        logical = d.get(fid, 0)
        mem, phys = mmu.translate(logical, nbytes, what)
        return mem, self._rec.const(self.bus.peek(mem, phys, nbytes), logical, mem)

    def _params(self, d: dict, mmu: MmuTable, n: int):
        _, raw = self._const(d, mmu, F.PRM_ADDR, n * PARAM_RECORD.itemsize, "requant params")
        rec = np.frombuffer(raw.tobytes(), dtype=PARAM_RECORD)
        return (rec["bias"].astype(np.int64), rec["mult"].astype(np.int64),
                rec["shift"].astype(np.int64), rec["mult_neg"].astype(np.int64),
                rec["shift_neg"].astype(np.int64))

    @staticmethod
    def _clip(d: dict, dtype: str) -> tuple[int, int]:
        info = np.iinfo(NP_DTYPES[dtype])
        if F.CLIP not in d:
            return int(info.min), int(info.max)
        cl = unpack_payload(F.CLIP, d[F.CLIP])
        return max(cl["lo"], int(info.min)), min(cl["hi"], int(info.max))

    # --- run words ----------------------------------------------------------------------------

    def _execute(self, op: int, mode: int, d: dict, mmu: MmuTable, rows_en: int) -> np.ndarray:
        """Run one layer; return its cycle-model layer vector."""
        cfg = self.cfg
        lv = cy.new_layer_vector()
        x = self._operand(d, mmu, "in")
        y = self._operand(d, mmu, "out")
        tile = unpack_payload(F.TILE, d.get(F.TILE, 0))
        lv[cy.L_ESZ_IN] = NP_DTYPES[x.dtype].itemsize
        lv[cy.L_ESZ_OUT] = NP_DTYPES[y.dtype].itemsize
        lv[cy.L_IN_H], lv[cy.L_IN_W], lv[cy.L_IN_C] = x.h, x.w, x.c
        lv[cy.L_OUT_H], lv[cy.L_OUT_W], lv[cy.L_OUT_C] = y.h, y.w, y.c
        lv[cy.L_TILE_ROWS], lv[cy.L_TILE_OCB] = tile["rows"], tile["oc_blocks"]
        lv[cy.L_IN_MEM], lv[cy.L_OUT_MEM] = x.mem, y.mem
        lv[cy.L_KH] = lv[cy.L_SH] = lv[cy.L_DH] = lv[cy.L_GROUPS] = lv[cy.L_TAPS] = 1
        compute = not cfg.is_mock
        lo, hi = self._clip(d, y.dtype)
        if op == Op.CONV:
            self._conv(mode, d, mmu, x, y, lv, rows_en, lo, hi, compute)
        elif op == Op.MATMUL:
            self._matmul(mode, d, mmu, x, y, lv, rows_en, lo, hi, compute)
        elif op == Op.ELTW:
            b = self._operand(d, mmu, "in1")
            if mode > 4:
                raise NpuFault(f"ELTW mode {mode} is not add/sub/mul/max/min")
            if b.dtype != x.dtype or (b.h, b.w) not in ((x.h, x.w), (1, 1)) or b.c != x.c or \
                    (x.h, x.w, x.c) != (y.h, y.w, y.c):
                raise NpuFault("ELTW operand shapes do not match")
            ka = unpack_payload(F.ELTW_KA, d.get(F.ELTW_KA, 1))["value"]
            kb = unpack_payload(F.ELTW_KB, d.get(F.ELTW_KB, 1))["value"]
            rq = unpack_payload(F.RQ, d.get(F.RQ, 0))
            rn = unpack_payload(F.RQ_NEG, d.get(F.RQ_NEG, d.get(F.RQ, 0)))
            lv[cy.L_KIND] = cy.K_ELTW
            lv[cy.L_IN1_BYTES], lv[cy.L_IN1_MEM] = b.h * b.w * b.c * lv[cy.L_ESZ_IN], b.mem
            bcast = (b.h, b.w) == (1, 1) and (x.h, x.w) != (1, 1)
            if compute and mode >= 3:  # MAX / MIN: each operand to OUT's scale, then compare
                info = np.iinfo(NP_DTYPES[y.dtype])
                self._rec.call(vector.eltw_minmax, x.arr, x.rs, x.pitch, x.coff, b.arr, b.rs,
                               b.pitch, b.coff, bcast, y.arr, y.rs, y.pitch, y.coff, y.h, y.w,
                               y.c, mode == 3, rq["mult"], rq["shift"], rn["mult"], rn["shift"],
                               int(info.min), int(info.max), lo, hi)
            elif compute:
                self._rec.call(vector.eltw, x.arr, x.rs, x.pitch, x.coff, b.arr, b.rs, b.pitch,
                               b.coff, (b.h, b.w) == (1, 1) and (x.h, x.w) != (1, 1), y.arr, y.rs,
                               y.pitch, y.coff, y.h, y.w, y.c, mode, ka, kb, rq["mult"],
                               rq["shift"], rn["mult"], rn["shift"], lo, hi)
        elif op == Op.POOL:
            self._pool(mode, d, mmu, x, y, lv, lo, hi, compute)
        elif op == Op.LUT:
            n = 256 if x.dtype == "int8" else 65536
            mem, raw = self._const(d, mmu, F.PRM_ADDR, n * NP_DTYPES[y.dtype].itemsize, "LUT")
            lv[cy.L_KIND] = cy.K_LUT
            lv[cy.L_PRM_BYTES] = raw.size
            if (x.h, x.w, x.c) != (y.h, y.w, y.c):
                raise NpuFault("LUT in and out shapes differ")
            if compute:
                table = np.frombuffer(raw.tobytes(), dtype=NP_DTYPES[y.dtype].newbyteorder("<"))
                table = table.astype(NP_DTYPES[y.dtype])
                qmin = int(np.iinfo(NP_DTYPES[x.dtype]).min)
                fn, args = vector.lut_call(x.arr, x.rs, x.pitch, x.coff, table, qmin, y.arr,
                                           y.rs, y.pitch, y.coff, y.h, y.w, y.c)
                self._rec.call(fn, *args)
        elif op == Op.NORM:
            self._norm(mode, d, mmu, x, y, lv, lo, hi, compute)
        elif op == Op.UPSAMPLE:
            if mode == UpsampleMode.TABLE:
                self._resize(d, mmu, x, y, lv, lo, hi, compute)
                return lv
            sc = unpack_payload(F.SCALE, d.get(F.SCALE, 0))
            sh, sw = max(sc["sh"], 1), max(sc["sw"], 1)
            if mode not in (UpsampleMode.NEAREST, UpsampleMode.ZERO):
                raise NpuFault(f"UPSAMPLE mode {mode} unknown")
            zeros = mode == UpsampleMode.ZERO
            want = ((x.h - 1) * sh + 1, (x.w - 1) * sw + 1, x.c) if zeros else \
                (x.h * sh, x.w * sw, x.c)
            if (y.h, y.w, y.c) != want or x.dtype != y.dtype:
                raise NpuFault("UPSAMPLE shapes do not match the scale")
            lv[cy.L_KIND], lv[cy.L_SH] = cy.K_UPSAMPLE, sh
            if compute and zeros:
                self._rec.call(vector.upsample_zeros, x.arr, x.rs, x.pitch, x.coff, y.arr, y.rs,
                               y.pitch, y.coff, y.h, y.w, y.c, sh, sw)
            elif compute:
                self._rec.call(vector.upsample_nearest, x.arr, x.rs, x.pitch, x.coff, y.arr, y.rs,
                               y.pitch, y.coff, y.h, y.w, y.c, sh, sw)
        elif op == Op.COPY and mode == CopyMode.PERMUTE:
            pm = unpack_payload(F.PERM, d.get(F.PERM, 0))
            perm = (pm["a0"], pm["a1"], pm["a2"])
            xs = (x.h, x.w, x.c)
            if sorted(perm) != [0, 1, 2] or tuple(xs[a] for a in perm) != (y.h, y.w, y.c) or \
                    x.dtype != y.dtype:
                raise NpuFault(f"COPY PERMUTE {perm}: {xs} -> {(y.h, y.w, y.c)} or dtypes differ")
            # modelled as a copy of the same bytes (the output's rows; docs/zg330-hardware-model)
            lv[cy.L_KIND] = cy.K_COPY
            lv[cy.L_IN_H], lv[cy.L_IN_W], lv[cy.L_IN_C] = y.h, y.w, y.c
            if compute:
                self._rec.call(vector.permute, x.arr, x.rs, x.pitch, x.coff, x.h, x.w, x.c,
                               y.arr, y.rs, y.pitch, y.coff, perm[0], perm[1], perm[2])
        elif op == Op.COPY:
            if mode not in (CopyMode.DENSE, CopyMode.STRIDED_OUT):
                raise NpuFault(f"COPY mode {mode} unknown")
            step = max(unpack_payload(F.CSTEP, d.get(F.CSTEP, 0))["out"], 1) \
                if mode == CopyMode.STRIDED_OUT else 1
            if (x.h, x.w, (x.c - 1) * step + 1) != (y.h, y.w, y.c) or x.dtype != y.dtype:
                raise NpuFault("COPY in and out shapes differ")
            lv[cy.L_KIND], lv[cy.L_OUT_C] = cy.K_COPY, x.c  # the channels written
            if compute:
                self._rec.call(vector.copy, x.arr, x.rs, x.pitch, x.coff, y.arr, y.rs, y.pitch,
                               y.coff, x.h, x.w, x.c, step)
        return lv

    def _norm(self, mode, d, mmu, x: Operand, y: Operand, lv, lo, hi, compute):
        """NORM: Softmax or LayerNorm over each pixel's channels (`kernels.rownorm`)."""
        if (x.h, x.w, x.c) != (y.h, y.w, y.c):
            raise NpuFault("NORM in and out shapes differ")
        lv[cy.L_KIND], lv[cy.L_TAPS] = cy.K_NORM, 3  # statistics, normalise, divide / scale
        if mode == NormMode.SOFTMAX:
            n = d.get(F.PRM_LEN, 0)
            if n < 2 or n % 2:
                raise NpuFault(f"NORM SOFTMAX: table of {n} entries (an even number >= 2)")
            _, raw = self._const(d, mmu, F.PRM_ADDR, 4 * n, "softmax table")
            rq = unpack_payload(F.RQ, d.get(F.RQ, 0))
            if not 0 < rq["mult"] < 1 << 30 or rq["shift"] > 16:
                raise NpuFault(f"NORM SOFTMAX: divisor R={rq['mult']}, F={rq['shift']} out of "
                               f"range")
            lv[cy.L_PRM_BYTES] = raw.size
            table = np.frombuffer(raw.tobytes(), dtype="<i4").astype(np.int32)
            if table[0] <= 0 or table.min() < 0 or table.max() >= 1 << 24:
                raise NpuFault("NORM SOFTMAX: the exponential table must start positive and "
                               "hold entries in [0, 2**24)")
            if compute:
                self._rec.call(rownorm.softmax_rows, x.arr, x.rs, x.pitch, x.coff, table,
                               rq["mult"], rq["shift"], hi, y.arr, y.rs, y.pitch, y.coff,
                               y.h, y.w, y.c)
        elif mode == NormMode.LAYERNORM:
            _, raw = self._const(d, mmu, F.PRM_ADDR, 8 * (3 + 2 * x.c), "layernorm constants")
            lv[cy.L_PRM_BYTES] = raw.size
            if compute:
                prm = np.frombuffer(raw.tobytes(), dtype="<f8").astype(np.float64)
                self._rec.call(rownorm.layer_norm_rows, x.arr, x.rs, x.pitch, x.coff, prm, lo,
                               hi, y.arr, y.rs, y.pitch, y.coff, y.h, y.w, y.c)
        else:
            raise NpuFault(f"NORM mode {mode} is not softmax/layernorm")

    def _resize(self, d, mmu, x: Operand, y: Operand, lv, lo, hi, compute):
        """UPSAMPLE TABLE: every tap is checked against the input map before any is used."""
        if x.c != y.c:
            raise NpuFault(f"UPSAMPLE TABLE in.c {x.c} != out.c {y.c}")
        n = y.h + y.w
        _, raw = self._const(d, mmu, F.PRM_ADDR, n * TAP_RECORD.itemsize, "resize taps")
        rec = np.frombuffer(raw.tobytes(), dtype=TAP_RECORD)
        taps = np.stack([rec["i0"], rec["i1"], rec["w1"]], axis=1).astype(np.int64)
        lim = np.concatenate([np.full(y.h, x.h), np.full(y.w, x.w)])[:, None]
        one = 1 << BILINEAR_FRAC_BITS
        if (taps[:, :2] < 0).any() or (taps[:, :2] >= lim).any() or \
                (taps[:, 2] < 0).any() or (taps[:, 2] > one).any():
            raise NpuFault(f"UPSAMPLE TABLE: a tap reads outside the {x.h}x{x.w} input or "
                           f"weighs outside [0, {one}]")
        rq = unpack_payload(F.RQ, d.get(F.RQ, 0))
        lv[cy.L_KIND], lv[cy.L_TAPS] = cy.K_RESIZE, 4
        lv[cy.L_PRM_BYTES] = raw.size
        if compute:
            self._rec.call(resize.RESIZE_TAPS, x.arr, x.rs, x.pitch, x.coff, y.arr, y.rs, y.pitch,
                           y.coff, y.h, y.w, y.c, taps, one, rq["mult"], rq["shift"], lo, hi)

    def _geometry(self, d: dict) -> tuple[int, ...]:
        k = unpack_payload(F.KERNEL, d.get(F.KERNEL, 0))
        pd = unpack_payload(F.PAD, d.get(F.PAD, 0))
        kh, kw, sh, sw, dh, dw = (max(k[n], 1) for n in ("kh", "kw", "sh", "sw", "dh", "dw"))
        return kh, kw, sh, sw, dh, dw, pd["pt"], pd["pb"], pd["pl"], pd["pr"]

    def _conv(self, mode, d, mmu, x: Operand, y: Operand, lv, rows_en, lo, hi, compute):
        cfg = self.cfg
        kh, kw, sh, sw, dh, dw, pt, pb, pl, pr = self._geometry(d)
        g = max(d.get(F.GROUPS, 1), 1)
        oh = (x.h + pt + pb - dh * (kh - 1) - 1) // sh + 1
        ow = (x.w + pl + pr - dw * (kw - 1) - 1) // sw + 1
        if (oh, ow) != (y.h, y.w) or x.c % g or y.c % g:
            raise NpuFault(f"CONV geometry gives {oh}x{ow}, out is {y.h}x{y.w} (groups {g})")
        cin_g, cout_g = x.c // g, y.c // g
        dwise = mode == ConvMode.DEPTHWISE
        if dwise and not (cin_g == 1 and cout_g == 1):
            raise NpuFault("depthwise CONV needs one input and one output channel per group")
        if mode not in (ConvMode.DENSE, ConvMode.DEPTHWISE):
            raise NpuFault(f"CONV mode {mode} unknown")
        dtype = x.dtype
        cu = cfg.channel_unit(dtype)
        ocb = cfg.oc_block(dtype)
        if dwise:
            nbytes = conv_weight_bytes(kh, kw, x.c, y.c, g, dtype, cfg)
        else:
            nbytes = g * -(-cout_g // ocb) * kh * kw * -(-cin_g // cu) * cu * ocb * \
                int(lv[cy.L_ESZ_IN])
        wmem, wraw = self._const(d, mmu, F.WGT_ADDR, nbytes, "weights")
        lv[cy.L_KIND] = cy.K_DW if dwise else cy.K_CONV
        lv[cy.L_KH], lv[cy.L_KW], lv[cy.L_SH], lv[cy.L_DH] = kh, kw, sh, dh
        lv[cy.L_GROUPS], lv[cy.L_CIN_G], lv[cy.L_COUT_G] = g, cin_g, cout_g
        lv[cy.L_ICB], lv[cy.L_OCB], lv[cy.L_OCB_EFF] = cu, ocb, cfg.out_lanes(dtype) * rows_en
        lv[cy.L_WGT_BYTES], lv[cy.L_WGT_MEM] = nbytes, wmem
        lv[cy.L_PRM_BYTES] = y.c * PARAM_RECORD.itemsize
        lv[cy.L_TAPS] = kh * kw
        lv[cy.L_MACS] = y.h * y.w * y.c * kh * kw * cin_g
        bias, mult, shift, mneg, sneg = self._params(d, mmu, y.c)
        if not compute:
            return
        npdt = NP_DTYPES[dtype]
        packed = wraw.view(npdt.newbyteorder("<")).astype(npdt, copy=dwise)
        if dwise and dtype == "int8" and (kh, kw, sh, sw, pt, pb, pl, pr) == \
                (1, 1, 1, 1, 0, 0, 0, 0):  # a per-channel scale: no taps to walk
            self._rec.call(implicit.DEPTHWISE_1X1, x.arr, x.rs, x.pitch, x.coff,
                           packed.astype(np.int32), bias, mult, shift, mneg, sneg, lo, hi, y.arr,
                           y.rs, y.pitch, y.coff, y.h, y.w, y.c)
            return
        if dwise:  # its own copy: a replay reads the weights it checked, wherever they moved
            args = (x.arr, x.rs, x.pitch, x.coff, x.h, x.w, packed, cu, bias, mult, shift, mneg,
                    sneg, lo, hi, y.arr, y.rs, y.pitch, y.coff, y.h, y.w, y.c, kh, kw, sh, sw,
                    dh, dw, pt, pl, mpe.depthwise_acc(x.arr.itemsize, kh * kw))
            if self.byte_gemm and depthwise.fits(dtype, kh * kw):
                # on pairs of taps where VNNI's vpdpwssd exists, the weights paired here
                self._rec.call(depthwise.CONV_DEPTHWISE_PAIRS, *args,
                               depthwise.pair_weights(packed, cu, kh, kw, y.c))
            else:
                self._rec.call(mpe.CONV_DEPTHWISE, *args)
            return
        waddr = d.get(F.WGT_ADDR, 0)
        if dtype == "int8" and self.int_gemm and self.byte_gemm and g == 1 and \
                kh * kw * cin_g <= bgemm.MAX_K8:
            nr = igemm.panel_width(cout_g)
            wq, corr = self._unpacked_weights(wmem, waddr, packed, ("implicit", nr), g, kh, kw,
                                              cin_g, cout_g, cu, ocb)
            self._rec.call(implicit.CONV_IMPLICIT, x.arr, x.rs, x.pitch, x.coff, x.h, x.w,
                           wq[0], nr, bias + corr, mult, shift, mneg, sneg, lo, hi, y.arr, y.rs,
                           y.pitch, y.coff, y.h, y.w, kh, kw, sh, sw, dh, dw, pt, pl, cin_g,
                           cout_g)
            return
        if dtype == "int8" and self.int_gemm and self.byte_gemm and kh * kw * cin_g <= \
                bgemm.MAX_K8:
            nr = igemm.panel_width(cout_g)
            wq, corr = self._unpacked_weights(wmem, waddr, packed, ("bytes", nr), g, kh, kw,
                                              cin_g, cout_g, cu, ocb)
            # a grouped 1x1: every group's channels of a pixel tile from one gather
            one_gather = grouped.fits(kh, kw, sh, sw, (pt, pb, pl, pr), g, (x.h, x.w),
                                      (y.h, y.w), cin_g)
            self._rec.call(grouped.CONV_G1X1_INT8 if one_gather else mpe.CONV_INT8_BYTES,
                           x.arr, x.rs, x.pitch, x.coff, x.h, x.w, wq, nr, bias + corr,
                           mult, shift, mneg, sneg, lo, hi, y.arr, y.rs, y.pitch,
                           y.coff, y.h, y.w, kh, kw, sh, sw, dh, dw, pt, pl, g, cin_g, cout_g)
            return
        if dtype == "int8" and self.int_gemm and kh * kw * cin_g <= igemm.MAX_K:
            nr = igemm.panel_width(cout_g)
            wq = self._unpacked_weights(wmem, waddr, packed, nr, g, kh, kw, cin_g, cout_g, cu,
                                        ocb)
            self._rec.call(mpe.CONV_INT, x.arr, x.rs, x.pitch, x.coff, x.h, x.w, wq, nr,
                           bias, mult, shift, mneg, sneg, lo, hi, y.arr, y.rs, y.pitch, y.coff,
                           y.h, y.w, kh, kw, sh, sw, dh, dw, pt, pl, g, cin_g, cout_g)
            return
        if (dtype == "int16" and self.int_gemm16 and self.byte_gemm and g == 1
                and (kh, kw, sh, sw, pt, pb, pl, pr) == (1, 1, 1, 1, 0, 0, 0, 0)
                and cin_g <= bgemm.MAX_K):
            wq, corr = self._unpacked_weights(wmem, waddr, packed, ("bytes", 0), g, kh, kw,
                                              cin_g, cout_g, cu, ocb)
            self._rec.call(implicit.CONV_POINTWISE_INT16, x.arr, x.rs, x.pitch, x.coff, wq[0],
                           bias + corr, mult, shift, mneg, sneg, lo, hi, y.arr, y.rs, y.pitch,
                           y.coff, y.h, y.w, cin_g, cout_g)
            return
        if (dtype == "int16" and self.int_gemm16 and self.byte_gemm
                and kh * kw * cin_g <= bgemm.MAX_K):
            wq, corr = self._unpacked_weights(wmem, waddr, packed, ("bytes", 0), g, kh, kw,
                                              cin_g, cout_g, cu, ocb)
            self._rec.call(mpe.CONV_INT16_BYTES, x.arr, x.rs, x.pitch, x.coff, x.h, x.w, wq,
                           bias + corr, mult, shift, mneg, sneg, lo, hi, y.arr, y.rs, y.pitch,
                           y.coff, y.h, y.w, kh, kw, sh, sw, dh, dw, pt, pl, g, cin_g, cout_g)
            return
        if dtype == "int16" and self.int_gemm16:
            nr = igemm.panel_width(cout_g)
            wqh, wql, dmax = self._unpacked_weights(wmem, waddr, packed, nr, g, kh, kw, cin_g,
                                                    cout_g, cu, ocb)
            k2 = (kh * kw * cin_g + 1) // 2
            self._rec.call(mpe.CONV_INT16, x.arr, x.rs, x.pitch, x.coff, x.h, x.w, wqh,
                           wql, nr, igemm.chunk_pairs(2**15, dmax, k2), bias, mult, shift,
                           mneg, sneg, lo, hi, y.arr, y.rs, y.pitch, y.coff, y.h, y.w, kh, kw,
                           sh, sw, dh, dw, pt, pl, g, cin_g, cout_g)
            return
        fdt, kc = (np.float32, mpe.KC_INT8_F32) if dtype == "int8" else \
            (np.float64, mpe.KC_INT16_F64)
        wf = self._unpacked_weights(wmem, waddr, packed, fdt, g, kh, kw, cin_g, cout_g, cu, ocb)
        self._rec.call(mpe.conv_dense, x.arr, x.rs, x.pitch, x.coff, x.h, x.w, wf, bias, mult,
                       shift, mneg, sneg, lo, hi, y.arr, y.rs, y.pitch, y.coff, y.h, y.w, kh, kw,
                       sh, sw, dh, dw, pt, pl, g, cin_g, cout_g, kc)

    def _unpacked_weights(self, wmem, waddr, packed, form, g, kh, kw, cin_g, cout_g, cu, ocb):
        """The weights laid out for the GEMM, cached per weight location; a cached entry is used
        only while the packed bytes in memory are still identical. `form` is a float dtype
        (dense ``[g, K, cout_g]`` for the float GEMM) or a panel width (int16 pairs per group,
        `igemm.pack_pairs`; int16 weights: their digit panels ``(hi, lo, largest |digit|)``,
        `igemm.split_digits`, ``hi`` of shape ``(G, 0)`` when every weight fits in ``lo``) or
        ``("bytes", panel width)`` (the byte GEMM's panels and bias correction: int16 weights
        as `bgemm.int16_weights`, int8 ones as `bgemm.int8_weights`) or ``("implicit", panel
        width)`` (int8, the implicit GEMM's panels and correction, `implicit.row_weights`)."""
        cache = self.__dict__.setdefault("_wf_cache", {})
        pairs = isinstance(form, int)
        byts = isinstance(form, tuple)
        key = (wmem, waddr, packed.dtype.str, packed.size, g, kh, kw, cin_g, cout_g, cu, ocb,
               form if pairs or byts else np.dtype(form).str)
        hit = cache.get(key)
        if hit is not None and np.array_equal(hit[0], packed):
            return hit[1]
        wf = np.empty((g, kh * kw * cin_g, cout_g), dtype=np.int16 if pairs or byts else form)
        mpe.unpack_conv_weights(packed, g, kh, kw, cin_g, cout_g, cu, ocb, wf)
        if byts and form[0] == "implicit":
            wf = implicit.row_weights(wf, kh, kw, form[1])
        elif byts:
            wf = (bgemm.int16_weights(wf) if packed.dtype == np.int16
                  else bgemm.int8_weights(wf, form[1]))
        elif pairs and packed.dtype == np.int16:
            hi, lo = igemm.split_digits(wf)
            dmax = int(max(np.abs(hi).max(initial=0), np.abs(lo).max(initial=0)))
            wh = (igemm.pack_pairs(hi, form).reshape(g, -1) if hi.any()
                  else np.zeros((g, 0), dtype=np.int16))
            wf = (wh, igemm.pack_pairs(lo, form).reshape(g, -1), dmax)
        elif pairs:
            wf = igemm.pack_pairs(wf, form).reshape(g, -1)
        if len(cache) >= 512:
            cache.clear()
        cache[key] = (packed.copy(), wf)
        return wf

    def _matmul(self, mode, d, mmu, a: Operand, y: Operand, lv, rows_en, lo, hi, compute):
        cfg = self.cfg
        if mode not in (MatmulMode.DYNAMIC, MatmulMode.DYNAMIC_BT):
            raise NpuFault(f"MATMUL mode {mode} unknown")
        bt = mode == MatmulMode.DYNAMIC_BT
        b = self._operand(d, mmu, "in1")
        kn = (b.c, b.w) if bt else (b.w, b.c)
        if a.dtype != b.dtype or b.h != a.h or kn != (a.c, y.c) or (y.h, y.w) != (a.h, a.w):
            raise NpuFault("MATMUL operand shapes do not match (a: batch x M x K, "
                           f"b: batch x {'N x K' if bt else 'K x N'}, out: batch x M x N)")
        dtype = a.dtype
        lv[cy.L_KIND] = cy.K_MATMUL
        lv[cy.L_CIN_G], lv[cy.L_COUT_G] = a.c, y.c
        lv[cy.L_ICB], lv[cy.L_OCB] = cfg.channel_unit(dtype), cfg.oc_block(dtype)
        lv[cy.L_OCB_EFF] = cfg.out_lanes(dtype) * rows_en
        lv[cy.L_IN1_BYTES], lv[cy.L_IN1_MEM] = b.h * b.w * b.c * lv[cy.L_ESZ_IN], b.mem
        lv[cy.L_PRM_BYTES] = y.c * PARAM_RECORD.itemsize
        lv[cy.L_MACS] = a.h * a.w * a.c * y.c
        bias, mult, shift, mneg, sneg = self._params(d, mmu, y.c)
        if not compute:
            return
        if dtype == "int8" and self.int_gemm and self.byte_gemm and a.c <= bgemm.MAX_K8:
            self._rec.call(matmul.MATMUL_INT8_BYTES, a.arr, a.rs, a.pitch, a.coff, b.arr, b.rs,
                           b.pitch, b.coff, a.h, a.w, a.c, y.c, bt, igemm.panel_width(y.c),
                           bias, mult, shift, mneg, sneg, lo, hi, y.arr, y.rs, y.pitch,
                           y.coff)
            return
        if dtype == "int8" and self.int_gemm and a.c <= igemm.MAX_K:
            self._rec.call(matmul.MATMUL_INT, a.arr, a.rs, a.pitch, a.coff, b.arr, b.rs,
                           b.pitch, b.coff, a.h, a.w, a.c, y.c, bt, igemm.panel_width(y.c),
                           bias, mult, shift, mneg, sneg, lo, hi, y.arr, y.rs, y.pitch,
                           y.coff)
            return
        if dtype == "int16" and self.int_gemm16 and self.byte_gemm and a.c <= bgemm.MAX_K:
            self._rec.call(matmul.MATMUL_INT16_BYTES, a.arr, a.rs, a.pitch, a.coff, b.arr,
                           b.rs, b.pitch, b.coff, a.h, a.w, a.c, y.c, bt, bgemm.NR, bias, mult,
                           shift, mneg, sneg, lo, hi, y.arr, y.rs, y.pitch, y.coff)
            return
        if dtype == "int16" and self.int_gemm16:
            self._rec.call(matmul.MATMUL_INT16, a.arr, a.rs, a.pitch, a.coff, b.arr,
                           b.rs, b.pitch, b.coff, a.h, a.w, a.c, y.c, bt,
                           igemm.panel_width(y.c), bias, mult, shift, mneg, sneg, lo, hi, y.arr,
                           y.rs, y.pitch, y.coff)
            return
        fdt, kc = (np.float32, mpe.KC_INT8_F32) if dtype == "int8" else \
            (np.float64, mpe.KC_INT16_F64)
        self._rec.call(matmul.matmul_dynamic, a.arr, a.rs, a.pitch, a.coff, b.arr, b.rs, b.pitch,
                       b.coff, a.h, a.w, a.c, y.c, bt, np.zeros(1, dtype=fdt), kc, bias, mult,
                       shift, mneg, sneg, lo, hi, y.arr, y.rs, y.pitch, y.coff)

    def _pool(self, mode, d, mmu, x: Operand, y: Operand, lv, lo, hi, compute):
        kh, kw, sh, sw, dh, dw, pt, pb, pl, pr = self._geometry(d)
        oh = (x.h + pt + pb - dh * (kh - 1) - 1) // sh + 1
        ow = (x.w + pl + pr - dw * (kw - 1) - 1) // sw + 1
        if (oh, ow) != (y.h, y.w) or x.c != y.c:
            raise NpuFault(f"POOL geometry gives {oh}x{ow}x{x.c}, out is {y.h}x{y.w}x{y.c}")
        if mode == PoolMode.MAX and x.dtype != y.dtype:
            raise NpuFault(f"POOL MAX reads {x.dtype} and writes {y.dtype}; only AVG rescales")
        lv[cy.L_KH], lv[cy.L_KW], lv[cy.L_SH], lv[cy.L_DH] = kh, kw, sh, dh
        lv[cy.L_TAPS] = kh * kw
        if mode == PoolMode.MAX:
            lv[cy.L_KIND] = cy.K_MAXPOOL
            if compute:
                self._rec.call(vector.maxpool, x.arr, x.rs, x.pitch, x.coff, x.h, x.w, y.arr, y.rs,
                               y.pitch, y.coff, y.h, y.w, y.c, kh, kw, sh, sw, dh, dw, pt, pl, lo,
                               hi)
            return
        if mode not in (PoolMode.AVG, PoolMode.AVG_INCLUDE_PAD):
            raise NpuFault(f"POOL mode {mode} unknown")
        n = kh * kw + 1
        _, raw = self._const(d, mmu, F.PRM_ADDR, n * AVG_RECORD.itemsize, "avgpool table")
        lv[cy.L_KIND] = cy.K_AVGPOOL
        lv[cy.L_PRM_BYTES] = raw.size
        if compute:
            tab = np.frombuffer(raw.tobytes(), dtype=AVG_RECORD)
            self._rec.call(vector.avgpool, x.arr, x.rs, x.pitch, x.coff, x.h, x.w, y.arr, y.rs,
                           y.pitch, y.coff, y.h, y.w, y.c, kh, kw, sh, sw, pt, pl, mode ==
                           PoolMode.AVG_INCLUDE_PAD, x.h + pb, x.w + pr,
                           tab["mult"].astype(np.int64), tab["shift"].astype(np.int64), lo, hi)

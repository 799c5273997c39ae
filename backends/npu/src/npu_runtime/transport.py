"""How an `NpuDevice` reaches its hardware: the transport it holds (composition, not a mixin).

`Transport` declares what every transport has; `LocalCore` is the in-process one: the simulated
NPU itself -- the ETM and OCM memories, the register file with the model's hooks, and the
`Icore` that a CTRL START runs. The socket transport (`npu_runtime.remote.SocketTransport`)
reaches a served device instead. The device's URL scheme picks one (`open_transport`); the
device then talks to its memories and registers through the regions the transport added, and
to the transport through the few calls below, the same for both.

The model publishes a run's results by poking registers (cycles, layer count, tile counters)
and writing timer/profiler records into memory; it reads the MMU table from its registers at
every START (`NpuDevice.mmu_table`, which a chip may change: the Buyi's MMU switch).
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from npu_model.core import Icore, MemoryBus, NpuFault
from npu_model.mmu import MmuFault
from xrt.device import DEFAULT_WAIT_TIME_MS
from xrt.errors import DeviceError, UnsupportedOpError
from xrt.memory.chunk import MemChunk
from xrt.memory.region import MemRegion

from . import regs as R
from .counter_regs import CounterRegs
from .watched_memory import WatchedArena

log = logging.getLogger(__name__)

MODEL_VERSION = (0 << 16) | 1
#: Allocation alignment of the ETM/OCM regions (the compiler aligns everything to 64 bytes)
MEM_ALIGNMENT = 64
#: alignment of the OCM arena chunk the backends share
OCM_ARENA_ALIGN = 4096


class Transport(ABC):
    """What an `NpuDevice` holds to reach its hardware. Every transport has these fields, so the
    runtime reads them without probing."""

    #: the hardware variant (the served one's, over a socket)
    config: Any
    #: mock: allocation only, runs refused
    mock: bool
    #: the in-process hardware model; None where a served device runs it
    core: Icore | None = None
    #: bumped by every change of the MMU entries and by a full reset: a backend that
    #: programmed the MMU at generation g need not program it again while it is still g. None
    #: where the transport cannot tell (the MMU is then programmed on every run)
    mmu_generation: int | None = None
    #: physical (addr, bytes) areas a served client's run may reach with the MMU off (set by
    #: the serve guard for that run, `confine`; None: all of ETM and OCM)
    confined: list[tuple[int, int]] | None = None
    #: the device's default wait time (ms; `Device.setWaitTime` changes it)
    wait_time_ms: int = DEFAULT_WAIT_TIME_MS

    @abstractmethod
    def attach(self, device: Any) -> tuple[MemRegion, MemRegion | None, Any]:
        """Add the memory regions ("etm", "ocm" where the variant has one) and the register
        region ("regs") to `device`; return them."""

    def invoke(self, device: Any, method: Callable, args: tuple, cast: Callable | None) -> Any:
        """Run `method(device, *args)`, a `served` method of the device: in process here; one
        CALL of the served device over a socket."""
        return method(device, *args)

    @abstractmethod
    def run(self, addr: int, size: int) -> None:
        """`icoreCalc(addr, size)`: run the instructions, blocking; DeviceError on a fault."""

    @abstractmethod
    def reset(self, level: int) -> None:
        """`reset(level)` after the device checked the level (0 full, 1 fast)."""

    @abstractmethod
    def stats(self) -> dict[str, int]:
        """Cumulative simulator counters (runs, layers, cycles, MACs, bytes, tiles)."""

    @abstractmethod
    def clear_stats(self) -> None:
        """Set the simulator counters to 0."""

    def ocm_arena(self, region: MemRegion) -> MemChunk:
        """The whole OCM `region` as one chunk the backends of this device share."""
        return region.malloc(region.size, True, OCM_ARENA_ALIGN)

    def about(self) -> dict[str, str]:
        """What `version()` adds about the transport (the server and protocol of a socket)."""
        return {}

    def call(self, method: str, *args: Any) -> Any:
        raise UnsupportedOpError("an in-process device has no server to call; call its "
                                 "methods directly")

    def server_info(self) -> dict[str, Any]:
        raise UnsupportedOpError("an in-process device is not served; server_info is a "
                                 "socket device's")

    @abstractmethod
    def close(self) -> None:
        """Release what the transport holds (runs once, before the device frees its memory)."""

    def confine(self, areas: list[tuple[int, int]] | None) -> None:
        """The areas a served client's next run may reach with the MMU off (None: all)."""
        self.confined = None if areas is None else list(areas)


class LocalCore(Transport):
    """The in-process transport: the simulated `chip` of hardware variant `config`
    (``mock``: allocates, cannot run), its MPE array `rows_cols` enabled at power-on (None:
    all of it)."""

    def __init__(self, chip: Any, config: Any, mock: bool,
                 rows_cols: tuple[int, int] | None) -> None:
        self.chip = chip
        self.config = config.mock() if mock else config
        self.mock = bool(mock)
        #: MPE rows x cols enabled at power-on
        self.rows_cols_on = rows_cols or (config.mpe_rows, config.mpe_cols)
        self.core = None
        self.mmu_generation = 0
        self.confined = None
        #: the message of the last run's fault, and the last run's result (model counters)
        self.last_error = ""
        self.last_result: Any = None
        self._mpe_offsets: dict[tuple[int, int], tuple[int, ...]] = {}
        self._name = chip.name
        self._mmu_table: Callable[[], Any] | None = None

    # --- building the hardware ----------------------------------------------------------------

    def attach(self, device: Any) -> tuple[MemRegion, MemRegion | None, Any]:
        cfg = self.config
        self._name = repr(device)
        self._mmu_table = device.mmu_table  # the chip's view of the MMU (the Buyi's switch)
        # (watched stores: the icore replays a decoded run without comparing its bytes while
        # nothing may have written them, watched_memory.py)
        etm = device.add_mem_region(
            MemRegion("etm", device, cfg.etm_base, cfg.etm_size,
                      WatchedArena(cfg.etm_base, cfg.etm_size, "region 'etm'"),
                      default_alignment=MEM_ALIGNMENT),
            default=True)
        ocm = None  # a variant without OCM (``ocm_kib=0``) has no "ocm" region
        if cfg.ocm_size:
            ocm = device.add_mem_region(
                MemRegion("ocm", device, cfg.ocm_base, cfg.ocm_size,
                          WatchedArena(cfg.ocm_base, cfg.ocm_size, "region 'ocm'"),
                          default_alignment=MEM_ALIGNMENT))
        counters = {R.REG_BASE + R.mpe_bank(cid, rid, cfg.mpe_rows) + off
                    for cid in range(cfg.mpe_cols) for rid in range(cfg.mpe_rows)
                    for off in (R.MPE_MACS_LO, R.MPE_MACS_HI, R.MPE_BUSY_LO, R.MPE_BUSY_HI)}
        reg = device.add_reg_region(
            CounterRegs("regs", device, R.REG_BASE, R.REG_SIZE, 4, counters), default=True)
        self.reg = reg
        self.core = Icore(cfg, MemoryBus(cfg, etm.storage, ocm and ocm.storage))
        ro = {R.ID: self.chip.device_id, R.VERSION: MODEL_VERSION,
              R.ROWS_COLS: cfg.mpe_rows | cfg.mpe_cols << 16}
        for off, value in ro.items():
            reg.on_read(off, lambda a, v, _x=value: _x, relative=True)
        for cid in range(cfg.mpe_cols):
            for rid in range(cfg.mpe_rows):
                reg.on_read(R.mpe_bank(cid, rid, cfg.mpe_rows) + R.MPE_ID,
                            lambda a, v, _x=(cid << 8) | rid: _x, relative=True)
        reg.on_write(R.CTRL, self._on_ctrl, relative=True)
        #: register offsets of the read tile counters, then the write ones, per channel
        self._tile_offsets = tuple(base + 4 * cid for base in (R.RTILE_BASE, R.WTILE_BASE)
                                   for cid in range(min(cfg.mpe_cols, R.MAX_CHANNELS)))
        #: absolute addresses of what a run reads, and of what it writes: the cycles, layer and
        #: run counts, the read then the write tile counters, the status (`_start`)
        self._in_addrs = reg.plain(self._RUN_INPUTS)
        self._out_addrs = reg.plain((R.CYCLES_LO, R.CYCLES_HI, R.LAYER_COUNT, R.RUN_COUNT,
                                     *self._tile_offsets, R.STATUS))
        self._status_addr = reg.plain((R.STATUS,))
        self._launch_addrs = reg.plain((R.INSTR_ADDR_LO, R.INSTR_ADDR_HI, R.INSTR_SIZE, R.CTRL))
        #: register offsets a fast reset sets to 0: status, counters, every MPE's counters
        self._fast_reset_clears = (*R.FAST_RESET_CLEARS, *self._tile_offsets,
                                   *self._mpe_counter_offsets(cfg.mpe_rows, cfg.mpe_cols))
        checker = R.write_checker(cfg, R.REG_BASE, self._name)
        mmu_lo = R.REG_BASE + R.MMU_BASE
        mmu_hi = mmu_lo + R.MMU_ENTRY_BYTES * cfg.mmu_entries

        def check(addr: int, value: int) -> None:
            checker(addr, value)
            if mmu_lo <= addr < mmu_hi:
                self.mmu_generation += 1

        reg.check_writes(check)
        reg.on_reset(self._on_reg_reset)
        self._power_on_defaults()
        return etm, ocm, reg

    def _poke(self, off: int, value: int) -> None:
        self.reg.poke(off, int(value) & 0xFFFF_FFFF, relative=True)

    def _power_on_defaults(self) -> None:
        """The registers that are not 0 at power-on (the MPE enable of this variant and the
        clocks), set now and restored by every register reset."""
        cfg = self.config
        rows, cols = self.rows_cols_on
        for off, value in ((R.MPE_EN, rows | cols << 16), (R.ICORE_CLK_HZ, cfg.icore_clk_hz),
                           (R.DDR_CLK_HZ, cfg.ddr_clk_hz)):
            self.reg.power_on[self.reg.absolute(off, relative=True)] = value
            self._poke(off, value)

    def _on_reg_reset(self) -> None:
        """A register reset (the device's or the RegRegion's own) emptied the MMU."""
        self.mmu_generation += 1

    # --- running ------------------------------------------------------------------------------

    def mock_message(self) -> str:
        return (f"{self._name} is a mock device: it allocates memory but cannot run forward or "
                f"icoreCalc; open '{self.chip.default_url}' to compute")

    def run(self, addr: int, size: int) -> None:
        reg = self.reg
        addr = int(addr)
        # four register writes, each checked and its hooks run (CTRL's starts the icore)
        reg.write_plain(self._launch_addrs, (addr & 0xFFFF_FFFF, addr >> 32 & 0xFFFF_FFFF,
                                             int(size), R.CTRL_START))
        if reg.peek_plain(self._status_addr)[0] & R.STATUS_ERROR:
            raise DeviceError(self.last_error)

    def _on_ctrl(self, addr: int, value: int) -> None:
        if value & R.CTRL_FULL_RESET:
            self.reset(0)
        elif value & R.CTRL_FAST_RESET:
            self.reset(1)
        if value & R.CTRL_START:
            self._start()

    #: registers a run reads (their stored values: the chip's own logic, no read hooks)
    _RUN_INPUTS = (R.MPE_EN, R.INSTR_ADDR_LO, R.INSTR_ADDR_LO + 4, R.INSTR_SIZE, R.TIMER_ADDR_LO,
                   R.TIMER_ADDR_LO + 4, R.TIMER_SIZE, R.PROF_ADDR_LO, R.PROF_ADDR_LO + 4,
                   R.PROF_SIZE, R.LAYER_COUNT, R.ICORE_CLK_HZ, R.DDR_CLK_HZ, R.RUN_COUNT)

    def _start(self) -> None:
        self.last_error = ""
        reg = self.reg
        reg.poke_plain(self._status_addr, (R.STATUS_BUSY,))
        if self.mock:
            self._fault(R.ERR_MOCK, self.mock_message())
            return
        (mpe_en, ia_lo, ia_hi, isize, t_lo, t_hi, t_size, p_lo, p_hi, p_size, base, icore_hz,
         ddr_hz, runs) = reg.peek_plain(self._in_addrs)
        cfg = self.config
        rows = min(mpe_en & 0xFFFF, cfg.mpe_rows) or cfg.mpe_rows
        cols = min(mpe_en >> 16 & 0xFFFF, cfg.mpe_cols) or cfg.mpe_cols
        timer = (t_lo | t_hi << 32, t_size) if t_size else None
        prof = (p_lo | p_hi << 32, p_size) if p_size else None
        try:
            mmu = self._mmu_table()
            res = self.core.run(ia_lo | ia_hi << 32, isize, mmu, rows_en=rows, cols_en=cols,
                                icore_clk_hz=icore_hz, ddr_clk_hz=ddr_hz, timer=timer,
                                profiler=prof, layer_base=base)
        except MmuFault as exc:
            self._fault(R.ERR_MMU, f"{self._name}: {exc}")
            return
        except NpuFault as exc:
            self._fault(R.ERR_MMU if "MMU fault" in str(exc) else R.ERR_ILLEGAL,
                        f"{self._name}: {exc}")
            return
        n = len(self._tile_offsets) // 2
        tiles = self.core.tiles
        reg.add_counters(self._mpe_counter_offsets(rows, cols),
                         res.macs // max(rows * cols, 1), res.compute)
        # (masked to 32 bits: the cycles' low word, the tile counts)
        reg.poke_plain(self._out_addrs, (res.cycles, res.cycles >> 32, base + res.syncs,
                                         runs + 1, *tiles.read[:n].tolist(),
                                         *tiles.write[:n].tolist(), R.STATUS_DONE))
        self.last_result = res

    def _mpe_counter_offsets(self, rows: int, cols: int) -> tuple[int, ...]:
        """Register offsets (MACS lo, hi, BUSY lo, hi) of every enabled MPE, cached per shape."""
        key = (rows, cols)
        offs = self._mpe_offsets.get(key)
        if offs is None:
            offs = tuple(R.mpe_bank(cid, rid, self.config.mpe_rows) + off
                         for cid in range(cols) for rid in range(rows)
                         for off in (R.MPE_MACS_LO, R.MPE_MACS_HI, R.MPE_BUSY_LO,
                                     R.MPE_BUSY_HI))
            self._mpe_offsets[key] = offs
        return offs

    def _fault(self, code: int, msg: str) -> None:
        self.last_error = msg
        self._poke(R.ERR_CODE, code)
        self._poke(R.STATUS, R.STATUS_ERROR | R.STATUS_DONE)
        log.debug("%s fault: %s", self.chip.name, msg)

    def reset(self, level: int) -> None:
        if level == 0:
            self.reg.reset()
        else:
            self.reg.clear_words(self._fast_reset_clears)
        self.core.reset()

    def stats(self) -> dict[str, int]:
        return self.core.stats()

    def close(self) -> None:
        """Nothing to release beyond the device's memories, which the device frees; a run
        confined for a served client ends here too."""
        self.confined = None

    def clear_stats(self) -> None:
        self.core.clear_stats()


def open_transport(url: Any, chip: Any, config: Any, mock: bool,
                   rows_cols: tuple[int, int] | None) -> Transport:
    """The transport a device URL names: a served device for ``socket://``, the in-process
    simulator of `config` otherwise (``mock`` or a ``mock://`` URL: allocation only)."""
    if url.scheme == "socket":
        from .remote import SocketTransport

        return SocketTransport(url, chip)
    return LocalCore(chip, config or chip.config, mock or url.scheme == "mock", rows_cols)

"""`NpuDevice`: an FMSH NPU as an xrt Device; the ZG330 and Buyi devices subclass it with their
`Chip` and their vendor methods.

A device holds its transport (`transport.py`): the in-process simulator (`LocalCore`: the
memories, the register file and the Icore) or a served device (`remote.SocketTransport`), picked
by the URL's scheme in the one `__init__`; every device has the same declared fields whatever
the transport, so the runtime never probes for one.

Regions: memory "etm" (the DDR the NPU sees; default) and "ocm" (on chip), both
`xrt.memory.MemRegion`s; registers "regs" (`npu_runtime.regs`). Every state change goes through
a memory or register method, so the vendor methods below run unchanged on either transport:
`icoreCalc` has the transport run the instructions (in process: INSTR_ADDR/INSTR_SIZE and
CTRL.START, whose hook runs the icore); the model publishes its results in registers (cycles,
layer count, tile counters) and memory (timer/profiler records). The methods marked `served`
are one CALL each over a socket.

Addresses: `icoreCalc(addr, size)` takes the *physical* ETM address of the instruction stream
(the fetch unit reads DDR directly); every address inside the instructions is *logical* and goes
through the MMU (program it with `mmuMap`, i.e. the MMU registers).

What the backends of one device share is declared here (`DeviceShare`): the OCM as one arena
chunk, the lock that serialises their forwards, and which backend's MMU table is programmed.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from npu_model.core import PROFILE_RECORD, TIMER_RECORD, Icore
from npu_model.mmu import MmuFault, MmuTable, Segment
from xrt.device import Device
from xrt.errors import (
    AddressInUseError,
    DeviceError,
    DeviceUrlError,
    InvalidArgumentError,
    OutOfDeviceMemoryError,
    UnsupportedOpError,
)
from xrt.memory.chunk import MemChunk
from xrt.url import DeviceUrl

from . import regs as R
from .chip import Chip
from .transport import (  # noqa: F401 (MEM_ALIGNMENT, OCM_ARENA_ALIGN re-exported)
    MEM_ALIGNMENT,
    MODEL_VERSION,
    OCM_ARENA_ALIGN,
    Transport,
    open_transport,
)
from .url_params import parse_variant

log = logging.getLogger(__name__)


class DeviceShare:
    """What every backend on one device shares: the OCM arena, the forward lock, the MMU
    owner. A backend's OCM maps and MMU table are valid only while it runs, so backends of one
    device take turns (`lock`, held from the first HardOp of a forward to the last)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._mmu_owner: weakref.ref | None = None
        self._arena: Any = None
        self._arena_lock = threading.Lock()

    @property
    def mmu_owner(self) -> Any:
        """The forwarder whose MMU table is programmed now (None: whoever runs next programs
        it). Held weakly: a session dropped without close() must not be kept alive by the
        device it last ran on."""
        return self._mmu_owner() if self._mmu_owner is not None else None

    @mmu_owner.setter
    def mmu_owner(self, owner: Any) -> None:
        self._mmu_owner = weakref.ref(owner) if owner is not None else None

    def ocm_arena(self, device: Any) -> Any:
        """The device's OCM as one chunk shared by every backend on it (over a socket a lease
        of the served OCM, time-shared with the server's other clients); None when the OCM is
        taken by the user's chunks or the chip has none (``ocm_kib=0``): OCM planning is then
        off."""
        with self._arena_lock:
            if self._arena is not None and not self._arena.is_freed:
                return self._arena
            if not device.config.ocm_size:
                return None
            region = device.getMemRegion("ocm")
            try:
                self._arena = device.transport.ocm_arena(region)
            except (OutOfDeviceMemoryError, AddressInUseError):  # the user's: no OCM planning
                log.warning("%r: the OCM is in use; OCM optimisation is off", device)
                return None
            return self._arena


def served(cast: Callable[[Any], Any] | None = None, *,
           mmu: bool = False) -> Callable[[Callable], Callable]:
    """Mark an `NpuDevice` method the served device runs as one CALL when the device's
    transport is a socket (it reads the model itself, or would cost many register round trips);
    in process the method runs as written. `cast` turns the CALL's JSON result back into the
    method's type (a list into a tuple, ...); `mmu`: the method changes MMU entries (a socket
    transport counts that in its `mmu_generation`, as the register hooks do in process). The
    method's name must be in the server's allow-list (`remote.SOCKET_METHODS`, or a chip's
    own)."""

    def mark(method: Callable) -> Callable:
        sig = inspect.signature(method)
        method.changes_mmu = mmu  # type: ignore[attr-defined]

        @functools.wraps(method)
        def run(self: NpuDevice, *args: Any, **kwargs: Any) -> Any:
            if kwargs:  # a CALL carries positional arguments only
                bound = sig.bind(self, *args, **kwargs)
                bound.apply_defaults()
                args = bound.args[1:]
            return self.transport.invoke(self, method, args, cast)

        run.served = True  # type: ignore[attr-defined]
        return run

    return mark


class NpuDevice(Device):
    """An NPU of the `chip` class attribute, reached through the transport it holds: the
    in-process simulator (``sim://``, ``axi://``; ``mock://`` or ``mock=True``: allocation
    only) or a served device (``socket://``). ``Cls(dev)`` casts a Device opened by URL back to
    its class (the vendor's ``ZG330Device(ObjectRef)`` constructor); ``Cls()`` opens a new
    simulator."""

    chip: ClassVar[Chip]
    #: a chip's socket class (``ZG330SocketDevice``): opens ``socket://`` URLs only, and
    #: ``Cls()`` the default server address
    served_only: ClassVar[bool] = False

    # Every NPU device has these fields, whatever its transport, so the runtime reads them
    # without probing:
    #: how the device reaches its hardware (`transport.LocalCore` or `remote.SocketTransport`)
    transport: Transport
    #: what the backends of this device share (OCM arena, forward lock, MMU owner)
    share: DeviceShare
    #: the hardware variant (the served one's over a socket)
    config: Any
    #: the URL's query (a hardware variant)
    url_params: dict[str, Any]
    #: mock: allocation only, runs refused; a config with is_mock but not `mock` is the
    #: cycles-only mode (runs, counts, computes nothing)
    mock: bool
    #: the memory and register regions ("etm", "ocm" or None without OCM, "regs")
    _etm: Any
    _ocm: Any
    _reg: Any

    def __new__(cls, *args: Any, **kwargs: Any) -> NpuDevice:
        if args and isinstance(args[0], Device):
            if not isinstance(args[0], cls):
                raise InvalidArgumentError(
                    f"{args[0]!r} is not a {cls.chip.name} device; open one with "
                    f"Device.Open('{cls.chip.default_url}')")
            return args[0]
        return super().__new__(cls)

    def __init__(self, url: Any = None, config: Any = None, mock: bool = False,
                 rows_cols: tuple[int, int] | None = None) -> None:
        if isinstance(url, Device):  # cast: already initialised
            return
        parsed = DeviceUrl.parse(url or self.default_url())
        transport = self.open_transport(parsed, config, mock, rows_cols)
        super().__init__(str(url or parsed), transport.wait_time_ms)
        self.transport = transport
        self.share = DeviceShare()
        self.url_params = {}
        self._mmu_cache: tuple[int, MmuTable] | None = None
        self._declare()
        try:
            self._etm, self._ocm, self._reg = transport.attach(self)
        except BaseException:
            transport.close()
            raise
        self.config = transport.config
        self.mock = transport.mock

    @classmethod
    def default_url(cls) -> str:
        """The URL ``Cls()`` opens: the chip's simulator, or a server on this host's default
        port for a socket class."""
        if cls.served_only:
            return f"socket://{cls.chip.kind}@127.0.0.1:5001"
        return cls.chip.default_url

    def open_transport(self, url: DeviceUrl, config: Any, mock: bool,
                       rows_cols: tuple[int, int] | None) -> Transport:
        """The transport `url`'s scheme names (`transport.open_transport`)."""
        if self.served_only and url.scheme != "socket":
            raise DeviceUrlError(f"{str(url)!r}: a {type(self).__name__} is a served "
                                 f"{self.chip.name}; open socket://{self.chip.kind}@host:port, "
                                 f"or a {self.served_class_name()} for {url.scheme}://")
        return open_transport(url, self.chip, config, mock, rows_cols)

    def _declare(self) -> None:
        """Set a chip's own fields (the Buyi's MMU mode and data type); every NPU device's are
        set by `__init__`, whatever the transport."""

    @classmethod
    def served_class_name(cls) -> str:
        """The name of the chip's device class, which a server of this chip serves."""
        return next(c.__name__ for c in cls.__mro__ if "chip" in vars(c))

    # --- the transport's state --------------------------------------------------------------------

    @property
    def sim(self) -> Icore | None:
        """The in-process hardware model; None on a served device (the server runs it)."""
        return self.transport.core

    @property
    def mmu_generation(self) -> int | None:
        """Bumped by every change of the MMU entries and by a full reset (over a socket: by
        this client's own, the only ones that reach its entries on the server)."""
        return self.transport.mmu_generation

    @property
    def confined(self) -> list[tuple[int, int]] | None:
        """Physical areas a served client's run may reach with the MMU off (None: all)."""
        return self.transport.confined

    def call(self, method: str, *args: Any) -> Any:
        """Call `method(*args)` on the served device (a socket device; its allow-list)."""
        return self.transport.call(method, *args)

    def server_info(self) -> dict[str, Any]:
        """The server's counters (a socket device): clients, requests, live chunks."""
        return self.transport.server_info()

    # --- register helpers ----------------------------------------------------------------------

    def _rd(self, off: int) -> int:
        return self._reg.read(off, relative=True)

    def _wr(self, off: int, value: int) -> None:
        self._reg.write(off, value, relative=True)

    def _rd64(self, lo: int) -> int:
        return self._rd(lo) | self._rd(lo + 4) << 32

    def _wr64(self, lo: int, value: int) -> None:
        self._wr(lo, int(value) & 0xFFFF_FFFF)
        self._wr(lo + 4, int(value) >> 32 & 0xFFFF_FFFF)

    # --- vendor API: execution ------------------------------------------------------------------

    def icoreCalc(self, addr: int, size: int) -> None:
        """Run `size` bytes of instructions at physical ETM address `addr` (blocking).

        Raises DeviceError when the NPU faults (illegal word, MMU fault); the STATUS and
        ERR_CODE registers say the same. Mock devices raise UnsupportedOpError.
        """
        self._check_open()
        if self.mock:
            raise UnsupportedOpError(self._mock_msg())
        self.transport.run(int(addr), int(size))

    def _mock_msg(self) -> str:
        return (f"{self!r} is a mock device: it allocates memory but cannot run forward or "
                f"icoreCalc; open '{self.chip.default_url}' to compute")

    def _area(self, lo: int, size_reg: int) -> tuple[int, int] | None:
        """(physical address, bytes) of the timer (`lo` = TIMER_ADDR_LO) or profiler area;
        None when its size register is 0 (these registers have no read hooks)."""
        a_lo, a_hi, size = self._reg.peek_words((lo, lo + 4, size_reg))
        return (a_lo | a_hi << 32, size) if size else None

    # --- vendor API: counters and clocks ----------------------------------------------------------

    @served(float)
    def calcTime(self) -> float:
        """Time of the last icoreCalc in ms, at the icore clock set now."""
        return self._rd64(R.CYCLES_LO) / self._rd(R.ICORE_CLK_HZ) * 1e3

    @served(int)
    def calcCycles(self) -> int:
        """Icore cycles of the last icoreCalc (not in the vendor API)."""
        return self._rd64(R.CYCLES_LO)

    @served(int)
    def layerCount(self) -> int:
        """SYNCs (hardware layers) executed since the last reset."""
        return self._rd(R.LAYER_COUNT)

    def _cid(self, cid: int) -> int:
        if not 0 <= int(cid) < self.config.mpe_cols:
            raise InvalidArgumentError(
                f"{self!r}: channel id {cid} is outside 0..{self.config.mpe_cols - 1}")
        return int(cid)

    @served(tuple)
    def tile_counts(self, cid: int) -> tuple[int, int]:
        """(read, write) DMA tiles of channel (MPE column) `cid` since the last reset."""
        cid = self._cid(cid)
        return self._rd(R.RTILE_BASE + 4 * cid), self._rd(R.WTILE_BASE + 4 * cid)

    @served(tuple)
    def getRowsCols(self) -> tuple[int, int]:
        """Enabled MPE rows and columns (register MPE_EN)."""
        v = self._rd(R.MPE_EN)
        rows, cols = v & 0xFFFF, v >> 16 & 0xFFFF
        rows = min(rows, self.config.mpe_rows) or self.config.mpe_rows
        cols = min(cols, self.config.mpe_cols) or self.config.mpe_cols
        return rows, cols

    def set_rows_cols(self, rows: int, cols: int) -> None:
        """Enable the first `rows` x `cols` MPEs (register MPE_EN)."""
        if not (1 <= rows <= self.config.mpe_rows and 1 <= cols <= self.config.mpe_cols):
            raise InvalidArgumentError(
                f"{self!r}: {rows} x {cols} MPEs requested, the array is "
                f"{self.config.mpe_rows} x {self.config.mpe_cols}")
        self._wr(R.MPE_EN, rows | cols << 16)

    def set_icore_clock(self, freq_hz: int) -> None:
        """Icore clock in Hz (affects calcTime and the DDR bandwidth per icore cycle)."""
        self._wr(R.ICORE_CLK_HZ, self._freq(freq_hz))

    def set_ddr_clock(self, freq_hz: int) -> None:
        """DDR clock in Hz (ETM bandwidth = ddr_bytes_per_cycle x this)."""
        self._wr(R.DDR_CLK_HZ, self._freq(freq_hz))

    def _freq(self, f: int) -> int:
        f = int(f)
        if not 1_000 <= f < 1 << 32:
            raise InvalidArgumentError(f"{self!r}: clock {f} Hz is outside [1 kHz, 4.29 GHz)")
        return f

    def set_master_cid(self, master_cid: int) -> None:
        """The MPE column that owns sync and timer/profiler write-back."""
        self._wr(R.MASTER_CID, self._cid(master_cid))

    # --- vendor API: registers --------------------------------------------------------------------

    def readReg(self, *args: Any, relative: bool = False) -> int:
        """``readReg(cid, rid, offset)``: register `offset` of the MPE at column `cid`, row
        `rid`; the Device forms ``readReg(addr)`` / ``readReg(region, addr)`` also work."""
        if len(args) == 3 and not any(isinstance(a, str) for a in args):
            return self._rd(self._mpe_reg(*args))
        return super().readReg(*args, relative=relative)

    def writeReg(self, *args: Any, relative: bool = False) -> None:
        """``writeReg(cid, rid, offset, data)`` for an MPE bank; Device forms otherwise."""
        if len(args) == 4 and not any(isinstance(a, str) for a in args):
            cid, rid, off, data = args
            self._wr(self._mpe_reg(cid, rid, off), data)
            return
        super().writeReg(*args, relative=relative)

    def _mpe_reg(self, cid: int, rid: int, offset: int) -> int:
        cfg = self.config
        if not (0 <= cid < cfg.mpe_cols and 0 <= rid < cfg.mpe_rows):
            raise InvalidArgumentError(
                f"{self!r}: MPE ({cid}, {rid}) is outside the {cfg.mpe_cols} x {cfg.mpe_rows} "
                "(cols x rows) array")
        if not 0 <= offset < R.MPE_BANK_BYTES or offset % 4:
            raise InvalidArgumentError(
                f"{self!r}: MPE register offset {offset:#x} is not a 4-byte aligned offset "
                f"below {R.MPE_BANK_BYTES:#x}")
        return R.mpe_bank(cid, rid, cfg.mpe_rows) + offset

    # --- MMU --------------------------------------------------------------------------------------

    @property
    def serve_guard(self) -> Any:
        """What each client of `xrt serve` may make this device do (`serve_guard.py`)."""
        from .serve_guard import ClientGuard

        return ClientGuard(self)

    def serve_description(self) -> dict[str, Any]:
        """The served device's mock flag and hardware variant (a socket client's `config`)."""
        return {"mock": self.mock, "config": dataclasses.asdict(self.config)}

    @served(mmu=True)
    def mmuMap(self, index: int, logical: int, physical: int, size: int,
               valid: bool = True) -> None:
        """Program MMU entry `index` (registers MMU[index]): logical -> physical, `size` bytes."""
        if not 0 <= index < self.config.mmu_entries:
            raise InvalidArgumentError(
                f"{self!r}: MMU entry {index} is outside 0..{self.config.mmu_entries - 1}")
        base = R.mmu_entry(index)
        self._wr64(base + R.MMU_LOGIC_LO, logical)
        self._wr64(base + R.MMU_SIZE_LO, size)
        self._wr64(base + R.MMU_PHYS_LO, physical)
        self._wr(base + R.MMU_FLAGS, R.MMU_VALID if valid else 0)

    def mmuMapChunk(self, index: int, logical: int, chunk: MemChunk) -> None:
        """Map a whole ETM/OCM chunk of this device at `logical`."""
        self.mmuMap(index, logical, chunk.addr, chunk.byte_size)

    @served(mmu=True)
    def mmuClear(self) -> None:
        """Invalidate every MMU entry."""
        for i in range(self.config.mmu_entries):
            self._wr(R.mmu_entry(i) + R.MMU_FLAGS, 0)

    @served(bool)
    def mmu_enabled(self) -> bool:
        """Whether instruction addresses go through the MMU (always, unless a chip can switch
        it off: the Buyi's `mmuModeSwitch`)."""
        return True

    def mmu_table(self) -> MmuTable:
        """The MMU table as programmed in the registers (decoded again only after an MMU
        register changed)."""
        gen = self.mmu_generation
        if gen is None:  # a transport that cannot tell: decode every time
            return self._decode_mmu()
        cached = self._mmu_cache
        if cached is not None and cached[0] == gen:
            return cached[1]
        table = self._decode_mmu()
        self._mmu_cache = (gen, table)
        return table

    def _decode_mmu(self) -> MmuTable:
        entries = []
        for i in range(self.config.mmu_entries):
            base = R.mmu_entry(i)
            flags = self._rd(base + R.MMU_FLAGS)
            if not flags & R.MMU_VALID:
                continue
            entries.append((self._rd64(base + R.MMU_LOGIC_LO), self._rd64(base + R.MMU_SIZE_LO),
                            self._rd64(base + R.MMU_PHYS_LO), flags))
        segs = [Segment(lo, sz, ph, self._mem_index(ph, sz)) for lo, sz, ph, _ in entries
                if sz > 0]
        return MmuTable(segs)

    def _mem_index(self, addr: int, size: int) -> int:
        """Which memory a physical range is in (0 ETM, 1 OCM; MmuFault when neither)."""
        for index, region in enumerate((self._etm, self._ocm)):
            if region is not None and region.contains(addr, max(int(size), 1)):
                return index
        raise MmuFault(f"{self!r}: physical range [{addr:#x}, {addr + size:#x}) is in neither "
                       "ETM nor OCM")

    # --- timer and profiler -----------------------------------------------------------------------

    def _chunk_addr(self, chunk: MemChunk, what: str) -> tuple[int, int]:
        region = chunk.region
        if region is None or region.device() is not self or region.name not in ("etm", "ocm"):
            raise InvalidArgumentError(
                f"{self!r}.{what}: the chunk must be ETM or OCM memory of this device; allocate "
                "it with device.malloc(size)")
        return chunk.addr, chunk.byte_size

    def config_timer(self, chunk: MemChunk) -> None:
        """Per-layer timer records go to `chunk` (32 bytes per layer, slot = layer index:
        tag, layer, start cycle, end cycle as uint64). The chunk is zeroed."""
        addr, size = self._chunk_addr(chunk, "config_timer")
        chunk.fill(0)
        self._wr64(R.TIMER_ADDR_LO, addr)
        self._wr(R.TIMER_SIZE, size)

    def config_profiler(self, chunk: MemChunk) -> None:
        """Per-layer profiler records go to `chunk` (80 bytes per layer: tag, layer, MACs,
        cycles, compute cycles, DMA cycles, ETM read/written, OCM read/written bytes)."""
        addr, size = self._chunk_addr(chunk, "config_profiler")
        chunk.fill(0)
        self._wr64(R.PROF_ADDR_LO, addr)
        self._wr(R.PROF_SIZE, size)

    def profiler_area(self) -> tuple[int, int] | None:
        """(physical address, bytes) the profiler records go to; None when not configured."""
        return self._area(R.PROF_ADDR_LO, R.PROF_SIZE)

    def _record_bytes(self, lo: int, size_reg: int, itemsize: int, from_idx: int,
                      count: int, area: Any = False) -> Any:
        """The bytes of records [from_idx, from_idx + count) of the timer (`lo` =
        TIMER_ADDR_LO) or profiler area, clipped to the area (a bytes-like copy). `area`:
        the area as its registers say now, when the caller read them (False: read here)."""
        if area is False:
            area = self._area(lo, size_reg)
        if area is None:
            what = "timer" if lo == R.TIMER_ADDR_LO else "profiler"
            raise DeviceError(f"{self!r}: no {what} chunk configured; configure one first "
                              f"(config_{what})")
        addr, size = area
        from_idx = max(0, int(from_idx))
        count = max(0, min(int(count), size // itemsize - from_idx))
        if count == 0:
            return b""
        region = self._etm if self._mem_index(addr, size) == 0 else self._ocm
        return region.storage.read(addr + from_idx * itemsize, count * itemsize)

    def _records(self, lo: int, size_reg: int, dtype: np.dtype, from_idx: int,
                 count: int) -> np.ndarray:
        raw = self._record_bytes(lo, size_reg, dtype.itemsize, from_idx, count)
        return np.frombuffer(raw, dtype=dtype).copy()  # a read gives bytes or a uint8 copy

    def profile_bytes(self, from_idx: int = 0, op_cnt: int | None = None, *,
                      area: Any = False) -> bytes:
        """`profile` as the records' raw bytes (the runtime compares them with the last run's
        before making records of them). `area`: `profiler_area()` as the caller read it
        since the registers last changed (the runtime, once per chip segment), else read."""
        raw = self._record_bytes(R.PROF_ADDR_LO, R.PROF_SIZE, PROFILE_RECORD.itemsize, from_idx,
                                 op_cnt if op_cnt is not None else 1 << 30, area)
        return raw if isinstance(raw, bytes) else raw.tobytes()

    def layerTimes(self, from_idx: int = 0, op_cnt: int | None = None) -> np.ndarray:
        """Timer records [from_idx, from_idx + op_cnt) read from the timer chunk."""
        return self._records(R.TIMER_ADDR_LO, R.TIMER_SIZE, TIMER_RECORD, from_idx,
                             op_cnt if op_cnt is not None else 1 << 30)

    def profile(self, from_idx: int = 0, op_cnt: int | None = None) -> np.ndarray:
        """Profiler records [from_idx, from_idx + op_cnt) read from the profiler chunk."""
        return self._records(R.PROF_ADDR_LO, R.PROF_SIZE, PROFILE_RECORD, from_idx,
                             op_cnt if op_cnt is not None else 1 << 30)

    def show_layer_time(self, from_idx: int, op_cnt: int) -> None:
        """Print the per-layer times [from_idx, from_idx + op_cnt) from the timer chunk."""
        recs = self.layerTimes(from_idx, op_cnt)
        clk = self._rd(R.ICORE_CLK_HZ)
        print(f"{'layer':>6} {'tag':>8} {'cycles':>12} {'ms':>10}")
        for r in recs:
            cyc = int(r["end"]) - int(r["start"])
            print(f"{int(r['layer']):>6} {int(r['tag']):>8} {cyc:>12} {cyc / clk * 1e3:>10.4f}")

    # --- Device API -------------------------------------------------------------------------------

    def reset(self, level: int = 0) -> None:
        """`reset(1)`: fast reset, keeps configuration registers (MMU, clocks, MPE enable,
        timer/profiler, master) and clears status and counters. `reset(0)`: full reset, every
        register back to its power-on value. Memory keeps its contents at both levels."""
        self._check_open()
        level = int(level)
        if level not in (0, 1):
            raise InvalidArgumentError(f"{self!r}: reset level {level} is not 0 (full) or 1 (fast)")
        self.transport.reset(level)

    def check(self, level: int = 0) -> bool:
        """Open, memory book-keeping consistent, identification registers right, no fault."""
        ok = super().check(level) and self._rd(R.ID) == self.chip.device_id
        if level >= 1:
            ok = ok and not self._rd(R.STATUS) & R.STATUS_ERROR
        return ok

    def status(self, level: int = 0) -> str:
        rows, cols = self.getRowsCols()
        st = self._rd(R.STATUS)
        kind = "mock" if self.mock else ("simulator, cycles only" if self.config.is_mock
                                          else "simulator")
        extra = [f" {self.chip.name} {kind}: MPE {rows}x{cols} enabled of "
                 f"{self.config.mpe_rows}x{self.config.mpe_cols}, icore "
                 f"{self._rd(R.ICORE_CLK_HZ) / 1e6:.0f} MHz, DDR {self._rd(R.DDR_CLK_HZ) / 1e6:.0f}"
                 f" MHz, layers {self.layerCount()}, status {st:#x}, MMU entries "
                 f"{len(self.mmu_table())}"]
        return super().status(level) + "\n" + "\n".join(extra)

    def version(self) -> dict[str, str]:
        """Version strings: xrt, the device model (the served one's over a socket) and, over a
        socket, the server and protocol."""
        v = {str(k): str(x) for k, x in self.model_version().items()}
        v.update(self.transport.about())
        return v

    @served(dict)
    def model_version(self) -> dict[str, str]:
        """The device model's version strings (device, id, ISA, model)."""
        from npu_model.isa import ISA_VERSION

        v = super().version()
        v.update({"device": self.chip.name + (" (mock)" if self.mock else " (simulator)"),
                  "id": f"{self._rd(R.ID):#010x}", "isa": str(ISA_VERSION),
                  "model": f"{MODEL_VERSION >> 16}.{MODEL_VERSION & 0xFFFF}"})
        return v

    def clone(self, depth: int = 1) -> NpuDevice:
        """The same device (one piece of hardware is not copied)."""
        return self

    def _on_close(self) -> None:
        self.transport.close()

    # --- simulator counters -----------------------------------------------------------------------

    def stats(self) -> dict[str, int]:
        """Cumulative simulator counters (runs, layers, cycles, MACs, bytes, tiles)."""
        return self.transport.stats()

    def clear_stats(self) -> None:
        self.transport.clear_stats()


def open_simulated(device_cls: type[NpuDevice], url: Any) -> NpuDevice:
    """Open `device_cls` for a ``sim://`` / ``axi://`` / ``mock://`` URL (mock opens
    allocation-only); the query may name a hardware variant (`npu_runtime.url_params`) and is
    kept in ``url_params``. The plugin registry has already
    matched the URL's device name to the chip."""
    url = DeviceUrl.parse(url)
    variant = parse_variant(str(url), dict(url.params), device_cls.chip.config)
    config = device_cls.chip.config.replace(**variant.config_changes)
    dev = device_cls(url, config=config, mock=url.scheme == "mock", rows_cols=variant.rows_cols)
    dev.url_params.update(url.params)
    return dev

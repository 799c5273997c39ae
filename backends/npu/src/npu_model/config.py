"""Hardware parameters of an FMSH NPU model, in one object (after TVM VTA's ``Environment``).

Every number the simulator, the emitters and the cycle model use lives here, with its default
and the reason for it (docs/zg330-hardware-model.md has the longer story). Kernels never read
this object as a global: `hw_vector()` flattens the parameters the Numba cycle model needs into
an int64 array that is passed as an argument (Numba freezes globals into its cache).

`NpuConfig.mock()` gives the "mock" variant: the core decodes the instruction stream, allocates,
counts bytes and cycles, but runs no compute kernel (outputs are left untouched).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

MiB = 1 << 20

#: dtype codes used in instruction fields (see docs/zg330-isa.md)
DTYPE_CODES = {"int8": 0, "int16": 1}
CODE_DTYPES = {v: k for k, v in DTYPE_CODES.items()}
NP_DTYPES = {"int8": np.dtype(np.int8), "int16": np.dtype(np.int16)}


@dataclass(frozen=True)
class NpuConfig:
    """Every parameter of the NPU hardware model, with defaults for the ZG330.

    MPE array. ``mpe_rows x mpe_cols`` multiply-accumulate engines (MPEs). An MPE takes
    ``in_lanes`` input channels and produces ``out_lanes`` output channels per cycle, i.e.
    ``in_lanes * out_lanes`` MACs per cycle (256 in int8, 64 in int16). The rows split output
    channels (one weight block of ``mpe_rows * out_lanes`` output channels is spread over the
    rows), the columns split output pixels (each column computes a different pixel with the same
    weights). Peak: 4 * 4 * 256 = 4096 int8 MACs per cycle, 8.2 TOPS at 1 GHz.

    Channel unit. Feature maps in memory are NHWC with C padded to the channel unit; packed
    weights use the same unit as their input-channel block. It may be set below the lane count
    (int8 1..32, int16 1..16); the MPE then leaves lanes idle.
    """

    name: str = "zg330"
    #: MPE array shape (physical; the runtime may enable fewer via registers)
    mpe_rows: int = 4
    mpe_cols: int = 4
    #: MPE lanes per dtype: input channels x output channels per cycle
    in_lanes_int8: int = 32
    out_lanes_int8: int = 8
    in_lanes_int16: int = 16
    out_lanes_int16: int = 4
    #: channel unit of the memory layout (C padded to it) and of packed weights
    channel_unit_int8: int = 32
    channel_unit_int16: int = 16
    #: supported data modes
    dtypes: tuple[str, ...] = ("int8", "int16")
    #: vector unit (element-wise, pool, LUT, upsample, copy): elements per cycle
    vector_lanes: int = 128

    # --- memories ------------------------------------------------------------------------------
    #: ETM (the DDR seen by the NPU): physical range and bytes per DDR clock (64-bit DDR4, both
    #: edges: 16 bytes per memory clock)
    etm_base: int = 0x4000_0000
    etm_size: int = 1 << 30
    ddr_bytes_per_cycle: int = 16
    #: on-chip memory: 2 MiB, 256 bytes per icore cycle (8 banks x 32 bytes)
    ocm_base: int = 0xC000_0000
    ocm_size: int = 2 * MiB
    ocm_bytes_per_cycle: int = 256

    # --- DMA and tile buffers ------------------------------------------------------------------
    #: local buffers the DMA fills, each double-buffered (half is the tile budget)
    ibuf_bytes: int = 256 * 1024
    wbuf_bytes: int = 256 * 1024
    obuf_bytes: int = 128 * 1024
    #: smallest DMA burst; each tile transfer is rounded up to it
    dma_burst_bytes: int = 64

    # --- clocks and overheads ------------------------------------------------------------------
    icore_clk_hz: int = 1_000_000_000
    ddr_clk_hz: int = 800_000_000
    #: fixed cost of one HardOp (layer) run instruction: descriptor load, pipeline fill/drain
    hardop_overhead_cycles: int = 256
    #: fixed cost of one SYNC (layer counter, timer/profiler write-back)
    sync_overhead_cycles: int = 64
    #: fixed cost of one icoreCalc launch (instruction fetch start, MMU walk)
    launch_overhead_cycles: int = 1024
    #: cycles to issue one instruction word (decode); fetch bytes are charged to the ETM too
    issue_cycles_per_word: int = 1

    # --- MMU -------------------------------------------------------------------------------------
    mmu_entries: int = 64

    #: "mock": decode, allocate and count, but never compute
    is_mock: bool = False

    extra: dict = field(default_factory=dict, compare=False)

    # --- derived ---------------------------------------------------------------------------------

    def __post_init__(self) -> None:
        if not 1 <= self.channel_unit_int8 <= self.in_lanes_int8:
            raise ValueError(f"channel_unit_int8 must be in 1..{self.in_lanes_int8}")
        if not 1 <= self.channel_unit_int16 <= self.in_lanes_int16:
            raise ValueError(f"channel_unit_int16 must be in 1..{self.in_lanes_int16}")
        if self.mpe_rows < 1 or self.mpe_cols < 1:
            raise ValueError("the MPE array needs at least one row and one column")

    def mock(self) -> NpuConfig:
        """The same hardware, but counting and allocating without computing."""
        return dataclasses.replace(self, is_mock=True)

    def replace(self, **changes) -> NpuConfig:
        """A copy with some parameters changed."""
        return dataclasses.replace(self, **changes)

    def channel_unit(self, dtype: str) -> int:
        """Channel unit (padding of C in memory, input block of packed weights) for `dtype`."""
        return self.channel_unit_int8 if dtype == "int8" else self.channel_unit_int16

    def in_lanes(self, dtype: str) -> int:
        return self.in_lanes_int8 if dtype == "int8" else self.in_lanes_int16

    def out_lanes(self, dtype: str) -> int:
        return self.out_lanes_int8 if dtype == "int8" else self.out_lanes_int16

    def oc_block(self, dtype: str) -> int:
        """Output channels of one packed weight block: one per (row, out lane)."""
        return self.mpe_rows * self.out_lanes(dtype)

    def macs_per_mpe(self, dtype: str = "int8") -> int:
        return self.in_lanes(dtype) * self.out_lanes(dtype)

    def peak_macs_per_cycle(self, dtype: str = "int8", rows: int | None = None,
                            cols: int | None = None) -> int:
        """Peak MACs per icore cycle with `rows x cols` MPEs enabled (default: all), counting
        only the lanes the channel unit uses."""
        r = self.mpe_rows if rows is None else rows
        c = self.mpe_cols if cols is None else cols
        return r * c * self.channel_unit(dtype) * self.out_lanes(dtype)

    def etm_bytes_per_icore_cycle(self, ddr_clk_hz: int | None = None,
                                  icore_clk_hz: int | None = None) -> float:
        ddr = self.ddr_clk_hz if ddr_clk_hz is None else ddr_clk_hz
        ic = self.icore_clk_hz if icore_clk_hz is None else icore_clk_hz
        return self.ddr_bytes_per_cycle * ddr / ic

    def hw_vector(self, rows: int | None = None, cols: int | None = None,
                  icore_clk_hz: int | None = None, ddr_clk_hz: int | None = None) -> np.ndarray:
        """The int64 parameter vector of the Numba cycle model (indices in `npu_model.cycles`).

        Bandwidths are given in bytes per 1024 icore cycles, so that clocks set at run time
        (`setIcoreClkFreq`, `setDDRClkFreq`) change the model without floats in the kernel.
        """
        ic = self.icore_clk_hz if icore_clk_hz is None else int(icore_clk_hz)
        ddr = self.ddr_clk_hz if ddr_clk_hz is None else int(ddr_clk_hz)
        etm_bw_1024 = max(1, (self.ddr_bytes_per_cycle * ddr * 1024) // ic)
        return np.array([
            self.mpe_rows if rows is None else rows,
            self.mpe_cols if cols is None else cols,
            self.vector_lanes,
            etm_bw_1024,
            self.ocm_bytes_per_cycle * 1024,
            self.ibuf_bytes // 2,
            self.wbuf_bytes // 2,
            self.obuf_bytes // 2,
            self.dma_burst_bytes,
            self.hardop_overhead_cycles,
            self.sync_overhead_cycles,
        ], dtype=np.int64)


#: ZG330 defaults (the ZG330 distribution re-exports this with its own name)
DEFAULT = NpuConfig()

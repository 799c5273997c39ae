"""`ZG330Device`: the ZG330 NPU as an xrt Device (the shared `NpuDevice` with the ZG330's vendor
methods), and `ZG330SocketDevice`, the same served by ``xrt serve zg330``.

Open it with ``Device.Open("sim://zg330")`` (or the vendor's ``axi://zg330aiu?npu=...&dma=...``,
which opens the same simulator; the query is kept in ``url_params``); ``mock://zg330`` gives a
device that allocates memory but cannot compute; ``socket://zg330@host:port`` a served one.
"""

from __future__ import annotations

from npu_runtime.device import NpuDevice
from xrt.memory.chunk import MemChunk

from .chip import ZG330_CHIP


class ZG330Device(NpuDevice):
    """The ZG330 NPU (simulated). ``ZG330Device(dev)`` casts a Device opened by URL back to its
    class (the vendor's ``ZG330Device(ObjectRef)`` constructor); ``ZG330Device()`` opens a new
    simulator."""

    chip = ZG330_CHIP

    def rTileCount(self, cid: int) -> int:
        """DMA read tiles of channel (MPE column) `cid` since the last reset."""
        return self.tile_counts(cid)[0]

    def wTileCount(self, cid: int) -> int:
        """DMA write tiles of channel (MPE column) `cid` since the last reset."""
        return self.tile_counts(cid)[1]

    def setRowsCols(self, rows: int, cols: int) -> None:
        """Enable the first `rows` x `cols` MPEs (not in the vendor API; register MPE_EN)."""
        self.set_rows_cols(rows, cols)

    def setIcoreClkFreq(self, freq_hz: int) -> None:
        """Icore clock in Hz (affects calcTime and the DDR bandwidth per icore cycle)."""
        self.set_icore_clock(freq_hz)

    def setDDRClkFreq(self, freq_hz: int) -> None:
        """DDR clock in Hz (ETM bandwidth = ddr_bytes_per_cycle x this)."""
        self.set_ddr_clock(freq_hz)

    def setMasterCID(self, master_cid: int) -> None:
        """The MPE column that owns sync and timer/profiler write-back."""
        self.set_master_cid(master_cid)

    def configTimer(self, chunk: MemChunk) -> None:
        """Per-layer timer records go to `chunk` (32 bytes per layer, slot = layer index:
        tag, layer, start cycle, end cycle as uint64). The chunk is zeroed."""
        self.config_timer(chunk)

    def configProfiler(self, chunk: MemChunk) -> None:
        """Per-layer profiler records go to `chunk` (80 bytes per layer: tag, layer, MACs,
        cycles, compute cycles, DMA cycles, ETM read/written, OCM read/written bytes)."""
        self.config_profiler(chunk)

    def showLayerTime(self, from_idx: int, op_cnt: int) -> None:
        """Print the per-layer times [from_idx, from_idx + op_cnt) from the timer chunk."""
        self.show_layer_time(from_idx, op_cnt)


class ZG330SocketDevice(ZG330Device):
    """A ZG330 served by ``xrt serve zg330`` (``socket://zg330@host:port``): the same device
    class over the socket transport (``ZG330Device("socket://...")`` opens one too)."""

    served_only = True

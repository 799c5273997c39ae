"""`BuyiDevice`: the Buyi NPU as an xrt Device (xrt Python reference, class BuyiDevice), and
`BuyiSocketDevice`, the same served by ``xrt serve buyi``.

The shared `NpuDevice` holds the simulated core, the register map and the memory regions; the
Buyi adds only what differs (docs/buyi.md): its `Chip` (smaller MPE array, channel unit 16 / 8),
its vendor method names (`setEnabledMPE`, `clkFreq` / `setClkFreq`), the data type switch
`setDType(8|16)`, and an MMU that can be switched off (`mmuModeSwitch`): with it off every
address is physical.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from npu_model.mmu import MmuTable, Segment
from npu_runtime import regs as R
from npu_runtime.device import NpuDevice, served
from xrt.errors import InvalidArgumentError

from .chip import BUYI_CHIP, DTYPE_BITS

#: BuyiDevice methods a socket client may call beyond the shared ones: the state the served
#: model reads in icoreCalc
SOCKET_METHODS = ("setDType", "dtype", "mmuModeSwitch", "modeInfo")


class BuyiDevice(NpuDevice):
    """The Buyi NPU (simulated). Open it with ``Device.Open("sim://buyi")``, the vendor's
    ``axi://ql100aiu?npu=0x...&dma=0x...`` (the same simulator) or ``mock://buyi`` (allocation
    only). ``BuyiDevice(dev)`` casts a Device opened by URL back to its class."""

    chip = BUYI_CHIP

    def _declare(self) -> None:
        """The Buyi's fields beside every NPU device's: the MMU mode and the data type (over a
        socket the served device's count: the methods that read or set them are CALLs)."""
        self._mmu_on = True
        self._dtype_bits = 8

    # --- vendor API -------------------------------------------------------------------------------
    def clkFreq(self) -> float:
        """The icore clock in MHz."""
        return self._rd(R.ICORE_CLK_HZ) / 1e6

    def setClkFreq(self, clk_freq: float) -> None:
        """Set the icore clock in MHz (calcTime follows; the cycle model's DDR bandwidth per
        icore cycle too)."""
        self.set_icore_clock(int(round(float(clk_freq) * 1e6)))

    def setEnabledMPE(self, rows: int, cols: int) -> None:
        """Enable the first `rows` x `cols` MPEs; fewer MPEs run the same layers in more
        cycles (the results are the same)."""
        self.set_rows_cols(int(rows), int(cols))

    @served()
    def setDType(self, dtype: int) -> None:
        """The data type the NPU computes in: 8 or 16 (bits of fixed point)."""
        if int(dtype) not in DTYPE_BITS:
            raise InvalidArgumentError(f"{self!r}.setDType({dtype!r}): the Buyi computes in 8 "
                                       f"or 16 bits")
        self._dtype_bits = int(dtype)

    @served(int)
    def dtype(self) -> int:
        """The data type set with `setDType` (bits; not in the vendor API)."""
        return self._dtype_bits

    @served()
    def mmuModeSwitch(self, is_on: bool) -> None:
        """MMU on (default): instruction addresses are logical, mapped by the MMU table. MMU
        off: every address is physical (the runtime relocates instructions to match)."""
        self._mmu_on = bool(is_on)

    @served(int)
    def modeInfo(self) -> int:
        """1 when the MMU is on, 0 when it is off."""
        return int(self._mmu_on)

    def mmu_enabled(self) -> bool:
        return bool(self.modeInfo())

    def updateBuffer(self, seg_table: Iterable[Any]) -> None:
        """Replace the MMU segment table: entries ``(logical, physical, size)`` (tuples, or
        objects with ``logic_addr`` / ``phy_addr`` / ``byte_size``)."""
        rows = []
        for e in seg_table:
            if isinstance(e, (tuple, list)):
                lo, ph, n = (int(x) for x in e)
            else:
                lo, ph, n = int(e.logic_addr), int(e.phy_addr), int(e.byte_size)
            rows.append((lo, ph, n))
        if len(rows) > self.config.mmu_entries:
            raise InvalidArgumentError(f"{self!r}.updateBuffer: {len(rows)} segments, the MMU "
                                       f"has {self.config.mmu_entries} entries")
        self.mmuClear()
        for i, (lo, ph, n) in enumerate(rows):
            self.mmuMap(i, lo, ph, n)

    def mmu_table(self) -> MmuTable:
        """The programmed table (MMU on), or the identity over ETM and OCM (MMU off)."""
        if self.modeInfo():
            return super().mmu_table()
        areas = self.confined  # a served client's run: its own chunks only
        if areas is None:
            areas = [(r.base, r.size) for r in (self._etm, self._ocm)]
        return MmuTable([Segment(a, n, a, self._mem_index(a, n)) for a, n in sorted(areas)])


class BuyiSocketDevice(BuyiDevice):
    """A Buyi served by ``xrt serve buyi`` (``socket://buyi@host:port`` or the vendor's board
    name ``socket://ql100aiu@host:port``): the same device class over the socket transport. The
    Buyi's own methods run unchanged where they only touch registers (`clkFreq`, `setClkFreq`,
    `setEnabledMPE`, `updateBuffer` through `mmuClear`/`mmuMap`); the ones that read or change
    state the served model reads in `icoreCalc` (data type, MMU mode) are `served`: CALLs from
    `SOCKET_METHODS`."""

    served_only = True

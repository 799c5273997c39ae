"""BuyiDevice: the Buyi NPU on the shared hardware model (seed 002, class BuyiDevice).

The Buyi and the ZG330 share the simulated core (`npu_model`), the register map and the memory
regions; the device class reuses `ZG330Device` for all of that and adds only what differs
(docs/buyi.md): the Buyi configuration (smaller MPE array, channel unit 16 / 8), the vendor's
method names (`setEnabledMPE`, `clkFreq` / `setClkFreq`), the data type switch `setDType(8|16)`,
and an MMU that can be switched off (`mmuModeSwitch`): with it off every address is physical.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from npu_model.mmu import MmuTable, Segment
from xrt.device import Device
from xrt.errors import InvalidArgumentError
from zg330backend import regs as R
from zg330backend.device import ZG330Device

from .config import BUYI_CONFIG, DEVICE_ID, DTYPE_BITS


class BuyiDevice(ZG330Device):
    """The Buyi NPU (simulated). Open it with ``Device.Open("sim://buyi")``, the vendor's
    ``axi://ql100aiu?npu=0x...&dma=0x...`` (the same simulator) or ``mock://buyi`` (allocation
    only). ``BuyiDevice(dev)`` casts a Device opened by URL back to its class."""

    is_buyi = True

    def __new__(cls, *args: Any, **kwargs: Any) -> BuyiDevice:
        if args and isinstance(args[0], Device):
            if not isinstance(args[0], BuyiDevice):
                raise InvalidArgumentError(
                    f"{args[0]!r} is not a Buyi device; open one with Device.Open('sim://buyi')")
            return args[0]
        return Device.__new__(cls)

    def __init__(self, url: Any = "sim://buyi", config: Any = None, mock: bool = False) -> None:
        if isinstance(url, Device):  # cast: already initialised
            return
        super().__init__(url, config or BUYI_CONFIG, mock)
        self._reg.on_read(R.ID, lambda a, v: DEVICE_ID, relative=True)
        self._mmu_on = True
        self._dtype_bits = 8

    def _mock_msg(self) -> str:
        return (f"{self!r} is a mock device: it allocates memory but cannot run forward or "
                "icoreCalc; open 'sim://buyi' to compute")

    # --- vendor API -------------------------------------------------------------------------------
    def clkFreq(self) -> float:
        """The icore clock in MHz."""
        return self._rd(R.ICORE_CLK_HZ) / 1e6

    def setClkFreq(self, clk_freq: float) -> None:
        """Set the icore clock in MHz (calcTime follows; the cycle model's DDR bandwidth per
        icore cycle too)."""
        self.setIcoreClkFreq(int(round(float(clk_freq) * 1e6)))

    def setEnabledMPE(self, rows: int, cols: int) -> None:
        """Enable the first `rows` x `cols` MPEs; fewer MPEs run the same layers in more
        cycles (the results are the same)."""
        self.setRowsCols(int(rows), int(cols))

    def setDType(self, dtype: int) -> None:
        """The data type the NPU computes in: 8 or 16 (bits of fixed point)."""
        if int(dtype) not in DTYPE_BITS:
            raise InvalidArgumentError(f"{self!r}.setDType({dtype!r}): the Buyi computes in 8 "
                                       f"or 16 bits")
        self._dtype_bits = int(dtype)

    def dtype(self) -> int:
        """The data type set with `setDType` (bits; not in the vendor API)."""
        return self._dtype_bits

    def mmuModeSwitch(self, is_on: bool) -> None:
        """MMU on (default): instruction addresses are logical, mapped by the MMU table. MMU
        off: every address is physical (the runtime relocates instructions to match)."""
        self._mmu_on = bool(is_on)

    def modeInfo(self) -> int:
        """1 when the MMU is on, 0 when it is off."""
        return int(self._mmu_on)

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
        return MmuTable([Segment(r.base, r.size, r.base, self._mem_index(r.base, r.size))
                         for r in (self._etm, self._ocm)])

    def check(self, level: int = 0) -> bool:
        """Open, memory book-keeping consistent, the Buyi's identification, no fault."""
        ok = Device.check(self, level) and self._rd(R.ID) == DEVICE_ID
        if level >= 1:
            ok = ok and not self._rd(R.STATUS) & R.STATUS_ERROR
        return ok

"""What one client of a served NPU (`xrt serve`) may make the device do: the server's device
guard (`DeviceServer.guard`, docs/socket-protocol.md "Threat model").

The MMU, the instruction registers and the timer/profiler record areas are device-wide, so a
client that could program them could run a COPY program over another client's memory. Each
client therefore gets its own shadow of them: its `mmuMap`/`mmuClear` calls and register
writes land in the shadow (reads come back from it), every physical range they name must lie
in a chunk the client allocated, and its `icoreCalc` programs the device from the shadow for
that one run, under the device lock, and clears it afterwards. A run started by a CTRL write is
refused (it would use whatever another client left behind).
"""

from __future__ import annotations

from typing import Any

from xrt.errors import InvalidArgumentError, MemoryAccessError

from . import regs as R

#: the timer and profiler record areas, programmed onto the device for a client's run
RECORD_REGS = (R.TIMER_ADDR_LO, R.TIMER_ADDR_HI, R.TIMER_SIZE, R.PROF_ADDR_LO, R.PROF_ADDR_HI,
               R.PROF_SIZE)
#: registers a client sets for its own runs only (kept in its shadow)
RUN_REGS = (R.INSTR_ADDR_LO, R.INSTR_ADDR_HI, R.INSTR_SIZE) + RECORD_REGS

#: the server's view of one client's memory: `owns(addr, n) -> bool` and `owns.ranges()`
Owns = Any


class ClientGuard:
    """The device guard of a served NPU device (`NpuDevice.serve_guard`)."""

    def __init__(self, device: Any) -> None:
        self.dev = device
        self.base = device.defaultRegRegion().base
        self._check = R.write_checker(device.config, self.base, repr(device))
        self.entries = device.config.mmu_entries
        self.mmu_end = R.MMU_BASE + R.MMU_ENTRY_BYTES * self.entries

    # --- shadows ----------------------------------------------------------------------------------
    @staticmethod
    def _mmu(scope: dict) -> dict[int, dict[int, int]]:
        return scope.setdefault("mmu", {})

    @staticmethod
    def _regs(scope: dict) -> dict[int, int]:
        return scope.setdefault("regs", {})

    # --- the server's three entry points ----------------------------------------------------------
    def reg_read(self, scope: dict, addr: int) -> int | None:
        off = addr - self.base
        if R.MMU_BASE <= off < self.mmu_end:
            i, field = divmod(off - R.MMU_BASE, R.MMU_ENTRY_BYTES)
            return self._mmu(scope).get(i, {}).get(field, 0)
        if off in RUN_REGS:
            return self._regs(scope).get(off, 0)
        return None

    def reg_reset(self, scope: dict) -> None:
        """Forget a client's shadow MMU entries and run registers (its register reset; the
        device's own registers go back to their power-on values beside it)."""
        self._mmu(scope).clear()
        self._regs(scope).clear()

    def reg_write(self, scope: dict, addr: int, value: int) -> bool:
        off = addr - self.base
        if off == R.CTRL and value & R.CTRL_START:
            raise InvalidArgumentError(
                "a served device runs through icoreCalc(addr, size), not a CTRL START write: "
                "each client's MMU entries and record areas are programmed for its run only")
        if R.MMU_BASE <= off < self.mmu_end:
            self._check(addr, value)
            i, field = divmod(off - R.MMU_BASE, R.MMU_ENTRY_BYTES)
            self._mmu(scope).setdefault(i, {})[field] = int(value) & 0xFFFF_FFFF
            return True
        if off in RUN_REGS:
            self._check(addr, value)
            self._regs(scope)[off] = int(value) & 0xFFFF_FFFF
            return True
        return False

    def call(self, scope: dict, name: str, args: list, owns: Owns) -> tuple[Any] | None:
        if name == "mmuMap":
            self._map(scope, owns, *args)
            return (None,)
        if name == "mmuClear":
            self._mmu(scope).clear()
            return (None,)
        if name == "icoreCalc":
            self._run(scope, owns, *args)
            return (None,)
        if name == "reset" and (not args or args[0] == 0):
            self.reg_reset(scope)  # the device's own reset follows (power-on values)
        return None

    # --- calls ------------------------------------------------------------------------------------
    def _map(self, scope: dict, owns: Owns, index: int, logical: int, physical: int, size: int,
             valid: bool = True) -> None:
        index, logical, physical, size = (int(v) for v in (index, logical, physical, size))
        if not 0 <= index < self.entries:
            raise InvalidArgumentError(f"MMU entry {index} is outside 0..{self.entries - 1}")
        if min(logical, physical, size) < 0:
            raise InvalidArgumentError("mmuMap: negative address or size")
        if valid and not owns(physical, size):
            raise MemoryAccessError(
                f"mmuMap entry {index}: [{physical:#x}, {physical + size:#x}) is not inside a "
                "chunk this client allocated; a client maps only its own memory")
        words = {R.MMU_LOGIC_LO: logical & 0xFFFF_FFFF, R.MMU_LOGIC_HI: logical >> 32,
                 R.MMU_SIZE_LO: size & 0xFFFF_FFFF, R.MMU_SIZE_HI: size >> 32,
                 R.MMU_PHYS_LO: physical & 0xFFFF_FFFF, R.MMU_PHYS_HI: physical >> 32,
                 R.MMU_FLAGS: R.MMU_VALID if valid else 0}
        self._mmu(scope)[index] = words

    def _run(self, scope: dict, owns: Owns, addr: int, size: int) -> None:
        addr, size = int(addr), int(size)
        if not owns(addr, size):
            raise MemoryAccessError(
                f"icoreCalc: instructions [{addr:#x}, {addr + size:#x}) are not inside a chunk "
                "this client allocated")
        regs = self._regs(scope)
        for name, lo, sz in (("timer", R.TIMER_ADDR_LO, R.TIMER_SIZE),
                             ("profiler", R.PROF_ADDR_LO, R.PROF_SIZE)):
            n = regs.get(sz, 0)
            where = regs.get(lo, 0) | regs.get(lo + 4, 0) << 32
            if n and not owns(where, n):
                raise MemoryAccessError(f"icoreCalc: the {name} records [{where:#x}, "
                                        f"{where + n:#x}) are not this client's memory")
        table = []
        for i, w in sorted(self._mmu(scope).items()):
            if not w.get(R.MMU_FLAGS, 0) & R.MMU_VALID:
                continue
            phys = w.get(R.MMU_PHYS_LO, 0) | w.get(R.MMU_PHYS_HI, 0) << 32
            n = w.get(R.MMU_SIZE_LO, 0) | w.get(R.MMU_SIZE_HI, 0) << 32
            if not owns(phys, n):  # mapped, then freed: the memory may be another's now
                raise MemoryAccessError(f"icoreCalc: MMU entry {i} maps [{phys:#x}, "
                                        f"{phys + n:#x}), no longer this client's memory")
            table.append((i, w))
        dev = self.dev
        dev.mmuClear()
        # with the MMU off, addresses reach only this client's chunks
        dev.transport.confine(owns.ranges())
        try:
            for i, w in table:
                for field, value in w.items():
                    dev.writeReg(R.mmu_entry(i) + field, value, relative=True)
            for off in RECORD_REGS:
                dev.writeReg(off, regs.get(off, 0), relative=True)
            dev.icoreCalc(addr, size)
        finally:
            dev.transport.confine(None)
            dev.mmuClear()
            dev.writeReg(R.TIMER_SIZE, 0, relative=True)
            dev.writeReg(R.PROF_SIZE, 0, relative=True)

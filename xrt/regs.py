"""`RegRegion`: a device's memory-mapped register window, with hooks for device models.

Registers are words of `word_bytes` bytes at aligned addresses in [base, base + size). Values are
stored unsigned, modulo 2**(8 * word_bytes): a write keeps only the low bits, so -1 becomes
0xFFFFFFFF with 4-byte words. Unwritten registers read 0.

Device models attach side effects: `on_write(addr, cb)` runs `cb(addr, value)` after a write (a
write to a "start" register launches the simulated computation), and `on_read(addr, cb)` runs
`cb(addr, value)` on a read and may return a replacement value (a live status register).
`peek`/`poke` access the stored value without hooks, which is how a model updates its own status.

All register traffic goes through `_load`/`_store`, so a remote device can subclass and forward.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from xrt.errors import InvalidArgumentError, MemoryAccessError

if TYPE_CHECKING:
    from xrt.device import Device

WriteHook = Callable[[int, int], None]
ReadHook = Callable[[int, int], "int | None"]


class RegRegion:
    """Register window [base, base + size) of a device, in words of `word_bytes` bytes."""

    def __init__(
        self, name: str, device: Device | None, base: int, size: int, word_bytes: int = 4
    ) -> None:
        word_bytes = int(word_bytes)
        if word_bytes not in (1, 2, 4, 8):
            raise InvalidArgumentError(
                f"register region {name!r}: word_bytes {word_bytes} is not 1, 2, 4 or 8"
            )
        self.name = name
        self.base = int(base)
        self.size = int(size)
        self.word_bytes = word_bytes
        self.mask = (1 << (8 * word_bytes)) - 1
        self._device = device
        self._values: dict[int, int] = {}
        self._write_hooks: dict[int, list[WriteHook]] = {}
        self._read_hooks: dict[int, list[ReadHook]] = {}
        self._write_check: WriteHook | None = None
        #: absolute address -> the value `reset()` restores (the others go back to 0)
        self.power_on: dict[int, int] = {}
        self._reset_hooks: list[Callable[[], None]] = []
        self._checked_sets: set[tuple[int, ...]] = set()  # offset sets `_check_offsets` passed

    # --- addressing ---------------------------------------------------------------------------

    def absolute(self, addr: int, relative: bool = False) -> int:
        """The checked absolute address of register `addr` (base-relative if `relative`)."""
        if type(addr) is not int and (isinstance(addr, bool)
                                      or not isinstance(addr, numbers.Integral)):
            raise InvalidArgumentError(
                f"register region {self.name!r}: address must be an int, got {type(addr).__name__}"
            )
        a = int(addr) + (self.base if relative else 0)
        if a < self.base or a + self.word_bytes > self.base + self.size:
            hint = "pass relative=True for an offset" if a < self.base else "check the register map"
            raise MemoryAccessError(
                f"register region {self.name!r}: register {a:#x} is outside "
                f"[{self.base:#x}, {self.base + self.size:#x}); {hint}"
            )
        if (a - self.base) % self.word_bytes:
            raise MemoryAccessError(
                f"register region {self.name!r}: register {a:#x} is not aligned to its "
                f"{self.word_bytes}-byte words; use a multiple of {self.word_bytes}"
            )
        return a

    def _value(self, data: Any) -> int:
        if type(data) is int:  # the common case, without the ABC checks below
            return data & self.mask
        if isinstance(data, bool) or not isinstance(data, numbers.Integral):
            raise InvalidArgumentError(
                f"register region {self.name!r}: data must be an int, got {type(data).__name__}"
            )
        return int(data) & self.mask

    # --- backing (override in a remote proxy) -------------------------------------------------

    def _load(self, addr: int) -> int:
        return self._values.get(addr, 0)

    def _store(self, addr: int, value: int) -> None:
        self._values[addr] = value

    # --- vendor API ---------------------------------------------------------------------------

    def read(self, addr: int, relative: bool = False) -> int:
        """Read a register; on_read hooks may replace the stored value."""
        a = self.absolute(addr, relative)
        value = self._load(a)
        for hook in self._read_hooks.get(a, ()):
            new = hook(a, value)
            if new is not None:
                value = self._value(new)
        return value

    def write(self, addr: int, data: int, relative: bool = False) -> None:
        """Write a register (masked to the word width), then run its on_write hooks."""
        a = self.absolute(addr, relative)
        value = self._value(data)
        if self._write_check is not None:
            self._write_check(a, value)
        self._store(a, value)
        for hook in list(self._write_hooks.get(a, ())):
            hook(a, value)

    def device(self) -> Device | None:
        """The device this register region belongs to."""
        return self._device

    def attach(self, device: Device) -> None:
        """Make `device` the region's owner when it has none yet (`Device.add_reg_region`)."""
        if self._device is None:
            self._device = device

    def clone(self, depth: int = 1) -> RegRegion:
        """The same region: it stands for one piece of hardware, which is not copied."""
        return self

    # --- device-model helpers -----------------------------------------------------------------

    def on_write(
        self, addr: int, callback: WriteHook, relative: bool = False
    ) -> Callable[[], None]:
        """Call `callback(addr, value)` after each write to `addr`; return a remover."""
        a = self.absolute(addr, relative)
        hooks = self._write_hooks.setdefault(a, [])
        hooks.append(callback)
        return lambda: hooks.remove(callback) if callback in hooks else None

    def check_writes(self, check: WriteHook | None) -> None:
        """`check(addr, value)` runs before every `write` is stored (not `poke`) and raises
        `InvalidArgumentError` for an illegal one: a device model's legal ranges."""
        self._write_check = check

    def on_read(self, addr: int, callback: ReadHook, relative: bool = False) -> Callable[[], None]:
        """Call `callback(addr, value)` on each read of `addr`; a non-None result is returned
        instead of the stored value. Return a remover."""
        a = self.absolute(addr, relative)
        hooks = self._read_hooks.setdefault(a, [])
        hooks.append(callback)
        return lambda: hooks.remove(callback) if callback in hooks else None

    def peek(self, addr: int, relative: bool = False) -> int:
        """The stored value, without read hooks."""
        return self._load(self.absolute(addr, relative))

    def _check_offsets(self, offsets: tuple[int, ...]) -> None:
        """Check base-relative `offsets`, once per set (a model touches the same set after every
        run)."""
        if offsets in self._checked_sets:
            return
        for off in offsets:
            self.absolute(off, relative=True)
        if len(self._checked_sets) < 64:
            self._checked_sets.add(offsets)

    def peek_words(self, offsets: tuple[int, ...]) -> list[int]:
        """Stored values of many base-relative registers, without read hooks (checked once per
        set of offsets, like `poke_words`)."""
        self._check_offsets(offsets)
        base, load = self.base, self._load
        return [load(base + off) for off in offsets]

    def poke(self, addr: int, data: int, relative: bool = False) -> None:
        """Store a value without write hooks (a device model updating its own status)."""
        self._store(self.absolute(addr, relative), self._value(data))

    def poke_words(self, words: dict[int, int]) -> None:
        """Store many base-relative values at once, without write hooks: a device model
        updating its own status and counters after a run (offsets checked here, in one go)."""
        self._check_offsets(tuple(words))
        base, mask = self.base, self.mask
        for off, value in words.items():
            self._store(base + off, int(value) & mask)

    def reset(self) -> None:
        """Set every register back to its power-on value (`power_on`, else 0); hooks stay
        attached, and the device's reset hooks run (a model dropping what it derived from the
        registers)."""
        self._values = dict(self.power_on)
        for hook in list(self._reset_hooks):
            hook()

    def on_reset(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call `callback()` after every `reset()`; returns a function that removes it."""
        self._reset_hooks.append(callback)
        return lambda: self._reset_hooks.remove(callback) \
            if callback in self._reset_hooks else None

    def __repr__(self) -> str:
        return (
            f"RegRegion({self.name!r}, base={self.base:#x}, size={self.size}, "
            f"word_bytes={self.word_bytes})"
        )

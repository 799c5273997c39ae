"""The NPU's register window with its per-MPE counters added to lazily.

Every run adds the same MACs and busy cycles to the MACS and BUSY counters of every enabled MPE:
four words per MPE, read, added and stored again after each run, cost more than the kernels of
a small network. The adds wait here instead and land on the registers when any counter word is
loaded or stored (a read, a peek, a served client's raw read, a snapshot), so every reader sees
what the hardware would show.
"""

from __future__ import annotations

from typing import Any

from xrt.errors import InvalidArgumentError
from xrt.regs import RegRegion


class CounterRegs(RegRegion):
    """A `RegRegion` whose MPE counter words (given by absolute address) take deferred adds."""

    def __init__(self, name: str, device: Any, base: int, size: int, word_bytes: int,
                 counters: set[int]) -> None:
        super().__init__(name, device, base, size, word_bytes)
        self._counters = frozenset(counters)
        #: offsets (MACS lo, hi, BUSY lo, hi per MPE) -> [MACs per MPE, busy cycles] due
        self._due: dict[tuple[int, ...], list[int]] = {}
        #: offsets -> whether they include a counter word (`poke_words`)
        self._touches: dict[tuple[int, ...], bool] = {}
        #: offsets -> ({plain address: 0}, {counter address: 0}) (`clear_words`)
        self._zeros: dict[tuple[int, ...], tuple[dict[int, int], dict[int, int]]] = {}
        #: counter words a fast reset set to 0 that are still to be stored (before any add)
        self._pending: dict[int, int] | None = None

    def plain(self, offsets: tuple[int, ...]) -> tuple[int, ...]:
        """The absolute addresses of base-relative `offsets` (checked), for `peek_plain` and
        `poke_plain`: none may be a counter word (those need their adds landed first)."""
        self._check_offsets(offsets)
        addrs = tuple(self.base + off for off in offsets)
        if not self._counters.isdisjoint(addrs):
            raise InvalidArgumentError(f"register region {self.name!r}: offsets "
                                       f"{[hex(o) for o in offsets]} include an MPE counter word")
        return addrs

    def peek_plain(self, addrs: tuple[int, ...]) -> list[int]:
        """Stored values at absolute `addrs` from `plain` (a model reading its own registers
        after every run: `peek_words` without the checks)."""
        values = self._values
        return [values.get(a, 0) for a in addrs]

    def poke_plain(self, addrs: tuple[int, ...], values: Any) -> None:
        """Store `values` (ints, masked to the word) at absolute `addrs` from `plain` without
        hooks (`poke_words` without the checks)."""
        mask = self.mask
        self._values.update(zip(addrs, [v & mask for v in values]))

    def write_plain(self, addrs: tuple[int, ...], values: Any) -> None:
        """`write` of `values` (ints) at absolute `addrs` from `plain`, one after the other:
        each checked, stored and its hooks run, as `write` does (without its address and
        type checks: the addresses were checked once, the values are ints)."""
        check, mask, hooks = self._write_check, self.mask, self._write_hooks
        for a, v in zip(addrs, values):
            v &= mask
            if check is not None:
                check(a, v)
            self._values[a] = v
            for hook in list(hooks.get(a, ())):
                hook(a, v)

    def add_counters(self, offsets: tuple[int, ...], macs: int, busy: int) -> None:
        """Add `macs` to the MACS and `busy` to the BUSY counter of each MPE whose four words
        are at base-relative `offsets` (checked once per set)."""
        self._check_offsets(offsets)
        due = self._due.get(offsets)
        if due is None:
            self._due[offsets] = [macs, busy]
        else:
            due[0] += macs
            due[1] += busy

    def clear_words(self, offsets: tuple[int, ...]) -> None:
        """Set the registers at base-relative `offsets` to 0 and forget the counter adds not
        yet landed (a fast reset clearing status and counters). The counter words' zeros wait
        like the adds (stored, then the adds, when any counter word is loaded or stored): a
        fast reset before every run, 64 counter words of 16 MPEs, is a store of the few
        others."""
        zeros = self._zeros.get(offsets)
        if zeros is None:
            self._check_offsets(offsets)
            addrs = [self.base + o for o in offsets]
            zeros = self._zeros[offsets] = (
                dict.fromkeys((a for a in addrs if a not in self._counters), 0),
                dict.fromkeys((a for a in addrs if a in self._counters), 0))
        plain, counters = zeros
        self._due.clear()
        self._values.update(plain)
        if counters:
            pending = self._pending
            self._pending = counters if pending is None or pending is counters else \
                {**pending, **counters}

    def _settle(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            self._values.update(pending)
        due, self._due = self._due, {}
        base, values, mask = self.base, self._values, self.mask
        for offsets, adds in due.items():
            for k in range(0, len(offsets), 4):
                for j, add in ((0, adds[0]), (2, adds[1])):
                    lo, hi = base + offsets[k + j], base + offsets[k + j + 1]
                    v = (values.get(lo, 0) | values.get(hi, 0) << 32) + add
                    values[lo] = v & mask
                    values[hi] = v >> 32 & mask

    def poke_words(self, words: dict[int, int]) -> None:
        """`RegRegion.poke_words` in one dict update (a fast reset clears some 300 words)."""
        offsets = tuple(words)
        touches = self._touches.get(offsets)
        if touches is None:
            self._check_offsets(offsets)
            touches = not self._counters.isdisjoint(self.base + o for o in offsets)
            if len(self._touches) < 64:
                self._touches[offsets] = touches
        if touches and (self._due or self._pending is not None):
            self._settle()
        base, mask = self.base, self.mask
        self._values.update({base + off: int(v) & mask for off, v in words.items()})

    def _load(self, addr: int) -> int:
        if (self._due or self._pending is not None) and addr in self._counters:
            self._settle()
        return self._values.get(addr, 0)

    def _store(self, addr: int, value: int) -> None:
        if (self._due or self._pending is not None) and addr in self._counters:
            self._settle()
        self._values[addr] = value

    def reset(self) -> None:
        self._due.clear()
        self._pending = None
        super().reset()

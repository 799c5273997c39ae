"""One readers-writer lock per network object: forwards read its parameters, a refit writes them.

`Session.refitWeights` swaps parameters in several places at once: the chip's WEIGHT segment
(under the device's forward lock) and the Params of host ops in the network itself. A forward
in another thread must see all of the old weights or all of the new, never a host layer
refitted and the next not yet (issue 29, point 5). Every forward of every session on a network
object holds its lock for reading, a refit for writing, so forwards still run side by side
and a refit waits for the running ones and holds new ones back while it writes.

The lock lives here, keyed weakly by the network object, instead of on the network: xir knows
no runtime. A refit from inside a forward on the same thread (a callback) would wait for
itself: it is refused (`CallOrderError`).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .errors import CallOrderError


class WeightsLock:
    """Many readers or one writer; a thread that reads may read again (nested forwards). A
    waiting writer holds new readers back, so a loop of forwards cannot starve a refit."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers: dict[int, int] = {}  # thread id -> depth
        self._writer: int | None = None
        self._waiting = 0  # writers waiting

    def reading(self) -> _Reading:
        """A context holding the lock for reading (a class, not a generator: a forward takes
        it every time, and a generator-based context costs a microsecond more)."""
        return _Reading(self)

    def _enter_reading(self) -> int:
        me = threading.get_ident()
        with self._cond:
            if me not in self._readers:
                while self._writer is not None or self._waiting:
                    self._cond.wait()
            self._readers[me] = self._readers.get(me, 0) + 1
        return me

    def _leave_reading(self, me: int) -> None:
        with self._cond:
            left = self._readers[me] - 1
            if left:
                self._readers[me] = left
            else:
                del self._readers[me]
                self._cond.notify_all()

    @contextmanager
    def writing(self, what: str) -> Iterator[None]:
        me = threading.get_ident()
        with self._cond:
            if me in self._readers:
                raise CallOrderError(f"{what}: called from inside a forward of a session on "
                                     f"the same network in this thread (a callback); call it "
                                     f"after the forward returns")
            self._waiting += 1
            try:
                while self._writer is not None or self._readers:
                    self._cond.wait()
            finally:
                self._waiting -= 1
            self._writer = me
        try:
            yield
        finally:
            with self._cond:
                self._writer = None
                self._cond.notify_all()


class _Reading:
    """`WeightsLock.reading`'s context: the lock held for reading from enter to exit."""

    __slots__ = ("_lock", "_me")

    def __init__(self, lock: WeightsLock) -> None:
        self._lock = lock
        self._me = 0

    def __enter__(self) -> None:
        self._me = self._lock._enter_reading()

    def __exit__(self, *exc: object) -> None:
        self._lock._leave_reading(self._me)


_LOCKS: weakref.WeakKeyDictionary[Any, WeightsLock] = weakref.WeakKeyDictionary()
_GUARD = threading.Lock()


def weights_lock(network: Any) -> WeightsLock:
    """The lock of `network` (the root network object a session's view belongs to)."""
    with _GUARD:
        lock = _LOCKS.get(network)
        if lock is None:
            lock = _LOCKS[network] = WeightsLock()
        return lock

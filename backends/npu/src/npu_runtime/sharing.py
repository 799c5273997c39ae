"""Work memory (FTMP) shared by several deployments, made safe by the runtime.

Several networks may deploy their FTMP segment into one chunk the user allocated
(`userReuseSegment(chunk, FTMP)`, sized to the largest: Ascend's work memory shared by models
run one after another, `aclmdlLoadFromMemWithMem`). A forward of one of them overwrites the
feature maps of the others, so two forwards must never be in flight on one chunk at once. The
device lock does not guarantee it: it is re-entrant, so one thread that pauses a forward
(`Session.stepTo`) and starts another session's forward would interleave them and give a wrong
result without any error.

Each shared FTMP chunk therefore has a `FtmpGate`, held by the forward that uses the chunk from
its first HardOp to its last (taken before the device lock, let go with it):

- a forward in **another thread** waits for the gate: forwards on one chunk are serialised;
- a forward in **the thread that holds it** (another session, while the first one is paused
  between HardOps) is refused with `SharedSegmentBusyError` naming the holder: waiting would
  never end, running would corrupt the paused forward.

WEIGHT and INSTR chunks are only read by forwards (written once, at apply, with the same bytes by
every backend sharing them: `deploy.claim` / `claim_layout`), so any number of sessions and
threads read them at once without a gate. How long a shared chunk lives is the chunk's business
(`MemChunk.pin`, xrt/memory/chunk.py): a backend pins the user chunks it deploys into until it
is deinitialised, and freeing a pinned chunk raises `ChunkInUseError`.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from xrt.errors import XrtError


class SharedSegmentBusyError(XrtError, RuntimeError):
    """A forward would start on a shared FTMP chunk that a paused forward of another session in
    the same thread still holds."""


class FtmpGate:
    """The lock of one shared FTMP chunk: which backend's forward holds it, in which thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._meta = threading.Lock()
        self.holder: str | None = None
        self.thread: int | None = None
        #: forwards that ran on the chunk, and how many had to wait for another's (tests)
        self.forwards = 0
        self.waits = 0

    def enter(self, who: str) -> None:
        """Take the gate for the forward of `who` (waits for another thread's forward)."""
        me = threading.get_ident()
        with self._meta:
            if self.thread == me:
                raise SharedSegmentBusyError(
                    f"{who}: the shared FTMP chunk is held by the paused forward of {self.holder} "
                    f"in this thread (Session.stepTo stopped between its HardOps); finish that "
                    f"forward (forward() or stepTo its last op) before running a network that "
                    f"shares its work memory, or give them separate FTMP chunks")
        if not self._lock.acquire(blocking=False):
            with self._meta:
                self.waits += 1
            self._lock.acquire()
        with self._meta:
            self.holder, self.thread = who, me
            self.forwards += 1

    def leave(self) -> None:
        """Let go of the gate (the forward ended, finished or failed)."""
        with self._meta:
            self.holder, self.thread = None, None
        self._lock.release()

    @property
    def busy(self) -> bool:
        return self.thread is not None


#: chunk state -> its gate (the gate goes with the chunk's last handle)
_GATES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_GATES_LOCK = threading.Lock()


def gate_of(chunk: Any) -> FtmpGate:
    """The gate of shared FTMP chunk `chunk` (one per allocation, whatever the handle)."""
    key = chunk.identity()
    with _GATES_LOCK:
        gate = _GATES.get(key)
        if gate is None:
            gate = _GATES[key] = FtmpGate()
        return gate

"""What every ZG330Backend on one device shares, kept on the device object: the OCM as one
arena chunk, and the lock that serialises forwards. A backend's OCM maps and MMU table are
valid only while it runs, so backends of one device take turns; one module lock guards creating
both.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from .layout import SEGMENT_ALIGN

log = logging.getLogger(__name__)

_arena_lock = threading.Lock()


def _ocm_arena(dev: Any) -> Any:
    """The device's OCM as one chunk shared by every ZG330Backend on it (a backend's OCM maps
    live only while it runs; forwards on one device are serialised by `_device_lock`).
    None when the OCM region is taken by someone else."""
    with _arena_lock:
        arena = getattr(dev, "_zg330_ocm_arena", None)
        if arena is not None and not arena.is_freed:
            return arena
        region = dev.getMemRegion("ocm")
        try:
            arena = region.malloc(region.size, True, SEGMENT_ALIGN)
        except Exception:  # the OCM is in use by the user: no OCM planning
            log.warning("ZG330: the OCM of %r is in use; OCM optimisation is off", dev)
            return None
        dev._zg330_ocm_arena = arena
        return arena


def _device_lock(dev: Any) -> Any:
    """The re-entrant lock a backend holds on `dev` from the first HardOp of a forward to the
    last (`ForwardMixin.forwardHardOp`)."""
    with _arena_lock:
        lk = getattr(dev, "_zg330_lock", None)
        if lk is None:
            lk = dev._zg330_lock = threading.RLock()
        return lk

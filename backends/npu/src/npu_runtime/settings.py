"""The deployment settings of an NPU backend: what the user chose between `init` and `apply`
(merging, FTMP reuse, the OCM option, user chunks) and what the device said at apply (MMU on or
off). Recorded here, acted on by `apply`; frozen into snapshots."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .structs import OcmOpt, SegmentType


@dataclass
class Settings:
    """A backend's deployment choices (the chip's defaults until the user changes them)."""

    #: consecutive HardOps run as one icoreCalc
    merge: bool
    #: FTMP slots share memory by lifetime (else one slot per buffer, the compiler's layout)
    etm_reuse: bool
    #: the OCM option asked for (`Deployment.plan.ocm_used` is the one planning used)
    ocm: OcmOpt = OcmOpt.BEST_SCORE
    #: instruction addresses go through the MMU (False: relocated to physical at apply)
    mmu_on: bool = True
    #: WEIGHT / INSTR / FTMP deployed into chunks the user allocated (`userReuseSegment`)
    user_segments: dict[SegmentType, Any] = field(default_factory=dict)
    #: INPUT / OUTPUT buffers (owner v_id) deployed into user chunks (`userConnectNetwork`)
    user_io: dict[int, Any] = field(default_factory=dict)
    #: values copied through a dense user chunk (a window of a wider buffer): v_id -> chunk
    staged: dict[int, Any] = field(default_factory=dict)

    @property
    def uses_user_chunks(self) -> bool:
        return bool(self.user_segments or self.user_io or self.staged)

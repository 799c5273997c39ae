"""The deployment options of ZG330Backend (docs/zg330-deployment.md), set between `init` and
`apply`: merging (`disableMergeHardOp`), FTMP reuse (`disableEtmOptimize`), the OCM option
(`ocmOptimize`) and user chunks (`userReuseSegment`, `userConnectNetwork`). They record choices
and check the user's chunks; `apply` (apply.py) acts on them. The call-order guards `_config`
(before apply) and `_after_apply` are here as well: every public call after `init` goes through
one of the two.
"""

from __future__ import annotations

from typing import Any

from xrt.errors import CallOrderError, InvalidArgumentError

from . import deploy
from .layout import SEGMENT_ALIGN, _hardops
from .structs import OcmOpt, SegmentType


class OptionsMixin:
    """The settings of ZG330Backend between `init` and `apply`, and the call-order guards."""

    def _config(self, what: str) -> None:
        if self._snapshot:
            raise CallOrderError(f"ZG330Backend.{what}(): this backend was restored from a "
                                 f"snapshot; merge, ETM reuse and OCM settings are frozen at "
                                 f"dump time (configure a normal session and dump again)")
        self._require_init(what)
        if self._applied:
            raise CallOrderError(f"ZG330Backend.{what}() must be called before apply(); the "
                                 f"backend is already deployed")

    def disableMergeHardOp(self) -> None:
        """Run every HardOp with its own icoreCalc (default: consecutive HardOps merged)."""
        self._config("disableMergeHardOp")
        self.is_mergeHardop = False

    def disableEtmOptimize(self) -> None:
        """Keep the compiler's one-slot-per-value FTMP layout (default: reuse planning on)."""
        self._config("disableEtmOptimize")
        self.is_etmOptimize = False
        self._estimate_ftmp()

    def ocmOptimize(self, option: OcmOpt) -> None:
        """Choose the OCM placement option (OcmOpt.NONE turns OCM use off)."""
        self._config("ocmOptimize")
        try:
            self.ocmopt = OcmOpt(option)
        except ValueError:
            raise InvalidArgumentError(f"ocmOptimize: {option!r} is not an OcmOpt "
                                       f"({', '.join(o.name for o in OcmOpt)})") from None

    def userReuseSegment(self, memchunk: Any, segment_type: SegmentType) -> None:
        """Deploy the WEIGHT, INSTR or FTMP segment into a chunk the user allocated
        (4096-aligned, at least the logic segment's byte_size). Backends of one network may
        share all three; backends of different networks only FTMP (run them one at a time)."""
        self._config("userReuseSegment")
        try:
            st = SegmentType(segment_type)
        except ValueError:
            raise InvalidArgumentError(f"userReuseSegment: {segment_type!r} is not a "
                                       f"SegmentType") from None
        if st not in (SegmentType.WEIGHT, SegmentType.INSTR, SegmentType.FTMP):
            raise InvalidArgumentError(f"userReuseSegment: {st.name} segments are one chunk per "
                                       f"value; use userConnectNetwork(chunk, v_id)")
        self._check_user_chunk(memchunk, self.logic_segment_map[st].byte_size,
                               f"the {st.name} segment")
        deploy.claim(memchunk, st, self.fingerprint())
        self._user_segments[st] = memchunk

    def fingerprint(self) -> str:
        """md5 of the view's HardOps (ids, instructions, weights): 'the same network'."""
        if self._fingerprint is None:
            arrays: list[Any] = []
            for op in _hardops(self._view):
                arrays.append(str(op.op_id))
                if op.instr is not None:
                    arrays.append(op.instr.data)
                if op.params:
                    arrays.append(op.params[0].data)
            self._fingerprint = deploy.digest(*arrays)
        return self._fingerprint

    def userConnectNetwork(self, memchunk: Any, v_id: int) -> None:
        """Deploy the INPUT or OUTPUT buffer of value `v_id` into a user chunk (to connect the
        output of one network to the input of another on ETM)."""
        self._config("userConnectNetwork")
        vi = self.value_info.get(int(v_id))
        if vi is None or vi.segment not in (SegmentType.INPUT, SegmentType.OUTPUT):
            io = sorted(v for v, i in self.value_info.items()
                        if i.segment in (SegmentType.INPUT, SegmentType.OUTPUT))
            raise InvalidArgumentError(f"userConnectNetwork: v_id {v_id} is not an input or "
                                       f"output of this ZG330Backend's view (those are {io})")
        b = self._buffers[vi.value.tags[self.TAG]["buffer"]]
        t = vi.value.tags[self.TAG]
        if int(v_id) == b.owner and t["c_off"] == 0 and t["pitch"] == t["c"] and \
                vi.value.storageBytes() == b.byte_size:
            self._check_user_chunk(memchunk, b.byte_size, f"v_id {v_id}")
            self._user_io[b.owner] = memchunk  # in place: the MMU maps the buffer to it
        else:  # the value is a window of a wider buffer: staged through the user chunk
            self._check_user_chunk(memchunk, vi.value.storageBytes(), f"v_id {v_id}")
            self._staged[int(v_id)] = memchunk

    def _check_user_chunk(self, chunk: Any, need: int, what: str) -> None:
        region = getattr(chunk, "region", None)
        if region is None or region.device() is not self._device or region.name != "etm":
            raise InvalidArgumentError(f"the chunk for {what} must be ETM memory of this "
                                       f"backend's device")
        if chunk.addr % SEGMENT_ALIGN:
            raise InvalidArgumentError(f"the chunk for {what} starts at {chunk.addr:#x}, not "
                                       f"{SEGMENT_ALIGN}-aligned: allocate it with "
                                       f"malloc(size, True, {SEGMENT_ALIGN})")
        if chunk.byte_size < need:
            raise InvalidArgumentError(f"the chunk for {what} has {chunk.byte_size} bytes, "
                                       f"{need} are needed (logic segment byte_size); "
                                       f"allocate at least that, {SEGMENT_ALIGN}-aligned")

    def _after_apply(self, what: str) -> None:
        if not self._applied:
            raise CallOrderError(f"ZG330Backend.{what}() is called after apply()")

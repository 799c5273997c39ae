"""`NpuBackend`: runs a network view's HardOps on an NPU device; the ZG330 and Buyi backends
subclass it with their `Chip`, their vendor option methods and a few steps (`ChipSteps`).

The deployment goes through typed stages, each producing what the next consumes:
``init`` builds the `Layout` (layout.py) from the compiled view, the options fill `Settings`
(settings.py), ``apply`` turns both into a `Deployment` (apply.py) -- which holds the layout as
placed, the MMU indices and the physical addresses, leaving `layout` as init made it -- a
`Forwarder` runs it
(forward.py), and report.py / snapshot.py read it. Nothing is computed in Python: each HardOp
(or each run of consecutive HardOps when merging is on) is one ``device.icoreCalc`` on the
instruction bytes in simulated ETM.

The vendor's fields (ZG330Backend user guide, "数据结构": `forward_info`, `logic_segment_map`,
`phy_segment_map`, `value_info`, `is_applied_`, `is_mergeHardop`, `is_etmOptimize`, `ocmopt`)
are read-only views of those objects.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
from typing import Any, ClassVar

from xrt.backend import Backend
from xrt.errors import (
    InvalidArgumentError,
    UnsupportedOpError,
    XrtError,
)
from xrt.tensor import Tensor

from . import apply as stage
from . import bundle_weights, deploy, refresh, report, sharing, snapshot
from .chip import Chip
from .forward import ChipSteps, Forwarder
from .layout import SEGMENT_ALIGN, Layout, build_layout, hardops
from .settings import Settings
from .sizes import SegmentSizes, query_size
from .structs import ForwardInfo, MemChunkInfo, OcmOpt, PhySegment, SegmentType, ValueInfo

_ids = itertools.count()


class UnsupportedMethodError(UnsupportedOpError, AttributeError):
    """A vendor method of another chip's backend (an AttributeError: `hasattr` is False)."""


class NpuBackend(ChipSteps, Backend):
    """Deploys and runs HardOps compiled for `chip` on a device of `device_class`."""

    chip: ClassVar[Chip]
    #: the chip's device class (its socket device subclasses it)
    device_class: ClassVar[type]
    #: vendor methods of other chips' backends -> what this chip offers instead
    OTHER_CHIP_METHODS: ClassVar[dict[str, str]] = {}

    def __init__(self, other: Any = None) -> None:
        super().__init__(other)
        if isinstance(other, Backend):
            return
        self.backend_id = next(_ids)
        self.settings = Settings(merge=self.chip.merge, etm_reuse=self.chip.etm_reuse)
        self.layout: Layout | None = None
        self.deployment: stage.Deployment | None = None
        self.precheck_failures: list[tuple[int, str, str]] = []
        self._forwarder: Forwarder | None = None
        self._fingerprint: str | None = None
        self._is_fork = False
        #: the gate of a shared FTMP chunk (sharing.py), and whether this backend's forward
        #: holds it now
        self._gate: sharing.FtmpGate | None = None
        self._gate_held = False
        #: a fork's WEIGHT / INSTR chunks, borrowed from the backend it was forked from and
        #: pinned while it uses them
        self._borrowed: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        hint = type(self).OTHER_CHIP_METHODS.get(name)
        if hint is not None:
            raise UnsupportedMethodError(f"{type(self).__name__} has no {name}(): {hint}")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # --- binding ---------------------------------------------------------------------------------
    def isOpSupported(self, op: Any) -> bool:
        if op.op_type != "HardOp":
            return False
        if op.compile_target != self.chip.compile_target:
            raise UnsupportedOpError(
                f"op {op.op_id} (HardOp '{op.name}') was compiled for {op.compile_target}; "
                f"{type(self).__name__} runs HardOps compiled for {self.chip.compile_target} "
                f"only: recompile with `xrt compile --target {self.chip.kind}` or bind it to "
                f"the backend of that target first")
        return True

    def getForwardFunc(self, op: Any) -> Any:
        return _forward_hardop if op.op_type == "HardOp" else None

    def holds(self, tensor: Tensor) -> bool:
        """Any tensor: one in this device's memory is read where it lies (a value a HardOp left
        in OCM or ETM, or the caller's tensor, which the MMU maps); any other is copied once,
        straight into the HardOp's INPUT buffer -- no ETM tensor allocated for it, the MMU left
        as it is, so the run's decoded program replays unchanged."""
        return True

    # --- init (hooks of xrt.Backend's template methods) ----------------------------------------
    def _bind(self, network_view: Any, device: Any) -> Any:
        """The view's HardOps, checked: compiled for this chip, instructions loaded."""
        self._check_device(device)
        # Given a whole compiled network (the manual's `Backend.Create(ZG330Backend,
        # network.view(0), device)`), the backend takes its HardOps, as the vendor's does; the
        # Input/Cast/AlignAxis/... around them belong to the HostBackend of the Session.
        hard = [op for op in network_view.ops if op.op_type == "HardOp"]
        if not hard and network_view.ops:
            raise UnsupportedOpError(
                f"{type(self).__name__}: the network view holds no HardOp (ops "
                f"{[op.op_type for op in network_view.ops][:6]}...); compile it for "
                f"{self.chip.kind} first (xrt compile --target {self.chip.kind})")
        if len(hard) != len(network_view.ops):
            network_view = network_view.view([op.op_id for op in hard])
        for op in hard:
            self.isOpSupported(op)
            if op.instr is not None and op.instr.data is None:
                raise XrtError(f"HardOp {op.op_id} '{op.name}' has no instruction data: call "
                               f"network.loadParamsFromFile(raw) first")
        return network_view

    def _init(self) -> None:
        self.layout = build_layout(self._view, self.chip.tag, self.backend_id)
        self.layout.ftmp_estimate(self.settings.etm_reuse)

    def _check_device(self, device: Any) -> None:
        if not isinstance(device, self.device_class):
            raise InvalidArgumentError(
                f"{type(self).__name__} needs a {self.chip.name} device "
                f"(Device.Open('{self.chip.default_url}')), got {device!r}")

    # --- settings (between init and apply) -------------------------------------------------------
    def _config(self, what: str) -> None:
        """The guard of a deployment option: after init, before apply, not when restored."""
        self._require_not_applied(what)
        self._require_init(what)

    def _set_merge(self, what: str, on: bool) -> None:
        self._config(what)
        self.settings.merge = on

    def _set_etm_reuse(self, what: str, on: bool) -> None:
        self._config(what)
        self.settings.etm_reuse = on
        self.layout.ftmp_estimate(on)

    def _set_ocm(self, what: str, option: Any) -> None:
        self._config(what)
        try:
            self.settings.ocm = OcmOpt(option)
        except ValueError:
            raise InvalidArgumentError(f"{what}: {option!r} is not an OcmOpt "
                                       f"({', '.join(o.name for o in OcmOpt)})") from None

    @classmethod
    def QuerySize(cls, network_view: Any, etm_reuse: bool | None = None) -> SegmentSizes:
        """WEIGHT, INSTR and FTMP bytes (`weight`, `instr`, `ftmp`) of the view's HardOps and
        the alignment (`align`) of a user chunk for `userReuseSegment`, without a device or the
        parameters' data: what `logic_segment_map` holds after `init` (Ascend:
        aclmdlQuerySize). `etm_reuse`: the feature-map reuse the deployment will use (None:
        the chip's default). See npu_runtime/sizes.py."""
        return query_size(network_view, cls.chip, etm_reuse, name=cls.__name__)

    query_size = QuerySize
    """Pythonic alias of `QuerySize`."""

    def userReuseSegment(self, memchunk: Any, segment_type: SegmentType) -> None:
        """Deploy the WEIGHT, INSTR or FTMP segment into a chunk the user allocated
        (4096-aligned, at least the logic segment's byte_size). Backends of one network may
        share all three; backends of different networks only FTMP. The runtime keeps it safe
        (npu_runtime/sharing.py): forwards on a shared FTMP chunk are serialised (another
        thread's waits; a second one in the thread of a paused forward is refused with
        `SharedSegmentBusyError`), and the chunk is pinned until this backend is deinitialised
        (`chunk.free()` raises `ChunkInUseError` meanwhile)."""
        self._config("userReuseSegment")
        try:
            st = SegmentType(segment_type)
        except ValueError:
            raise InvalidArgumentError(f"userReuseSegment: {segment_type!r} is not a "
                                       f"SegmentType") from None
        if st not in (SegmentType.WEIGHT, SegmentType.INSTR, SegmentType.FTMP):
            raise InvalidArgumentError(f"userReuseSegment: {st.name} segments are one chunk per "
                                       f"value; use userConnectNetwork(chunk, v_id)")
        self._check_user_chunk(memchunk, self.layout.segments[st].byte_size,
                               f"the {st.name} segment")
        deploy.claim(memchunk, st, self.fingerprint(), bundle_weights.block_map(self.layout)
                     if st == SegmentType.WEIGHT else None)
        self._use_user_chunk(self.settings.user_segments, st, memchunk, f"{st.name} segment")

    def _use_user_chunk(self, table: dict[Any, Any], key: Any, chunk: Any, what: str) -> None:
        """`table[key] = chunk`, pinned for this backend (a chunk it replaces is unpinned
        unless this backend still uses it elsewhere)."""
        old = table.get(key)
        table[key] = chunk
        chunk.pin(self, f"{self._pin_label()} ({what})")
        if old is not None and old != chunk and all(c != old for c in self._user_chunks()):
            old.unpin(self)

    def _user_chunks(self) -> list[Any]:
        s = self.settings
        return [*s.user_segments.values(), *s.user_io.values(), *s.staged.values()]

    def _pin_label(self) -> str:
        view = getattr(self, "_view", None)
        net = getattr(getattr(view, "network", None), "name", None)
        return f"{type(self).__name__} #{self.backend_id}" + (f" of network {net!r}" if net
                                                                else "")

    def userConnectNetwork(self, memchunk: Any, v_id: int) -> None:
        """Deploy the INPUT or OUTPUT buffer of value `v_id` into a user chunk (to connect the
        output of one network to the input of another on ETM)."""
        self._config("userConnectNetwork")
        vi = self.layout.value_info.get(int(v_id))
        if vi is None or vi.segment not in (SegmentType.INPUT, SegmentType.OUTPUT):
            io = sorted(v for v, i in self.layout.value_info.items()
                        if i.segment in (SegmentType.INPUT, SegmentType.OUTPUT))
            raise InvalidArgumentError(f"userConnectNetwork: v_id {v_id} is not an input or "
                                       f"output of this {type(self).__name__}'s view (those "
                                       f"are {io})")
        b = self.layout.buffer_of(vi.value)
        t = self.layout.window(vi.value)
        if int(v_id) == b.owner and t["c_off"] == 0 and t["pitch"] == t["c"] and \
                vi.value.storageBytes() == b.byte_size:
            self._check_user_chunk(memchunk, b.byte_size, f"v_id {v_id}")
            # in place: the MMU maps the buffer to it
            self._use_user_chunk(self.settings.user_io, b.owner, memchunk, f"v_id {v_id}")
        else:  # the value is a window of a wider buffer: staged through the user chunk
            self._check_user_chunk(memchunk, vi.value.storageBytes(), f"v_id {v_id}")
            self._use_user_chunk(self.settings.staged, int(v_id), memchunk, f"v_id {v_id}")

    def fingerprint(self) -> str:
        """md5 of the view's HardOps (ids, instructions, weights): 'the same network'."""
        if self._fingerprint is None:
            arrays: list[Any] = []
            for op in hardops(self._view):
                arrays.append(str(op.op_id))
                if op.instr is not None:
                    arrays.append(op.instr.data)
                if op.params:
                    arrays.append(op.params[0].data)
            self._fingerprint = deploy.digest(*arrays)
        return self._fingerprint

    def invalidate_fingerprint(self) -> None:
        """Its weights changed in place (`refreshWeights`): the next `fingerprint()` hashes
        them again."""
        self._fingerprint = None

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

    # --- apply -----------------------------------------------------------------------------------
    def _apply(self) -> None:
        """Plan (OCM, then ETM reuse), relocate the instructions, allocate the physical
        segments, upload instructions and weights, build the MMU table."""
        self.settings.mmu_on = not self.chip.mmu_switch or bool(self._device.mmu_enabled())
        for st, chunk in self.settings.user_segments.items():
            self._check_user_chunk(chunk, self.layout.segments[st].byte_size,
                                   f"the {st.name} segment")
        dep = stage.apply(self._view, self.layout, self.settings, self._device,
                          self.backend_id, self.run_key)
        self._adopt(dep)

    def _adopt(self, dep: stage.Deployment) -> None:
        """Take `dep` as this backend's deployment and get ready to forward it."""
        self.deployment = dep
        self._forwarder = Forwarder(dep.layout, self.settings, dep, self._device, self._is_fork)
        ftmp = self.settings.user_segments.get(SegmentType.FTMP)
        self._gate = sharing.gate_of(ftmp) if ftmp is not None else None
        self._gate_held = False

    # --- steps a chip may change -----------------------------------------------------------------
    def run_key(self, op: Any) -> Any:
        """HardOps merge into one run only while this agrees (None: any adjacent HardOps)."""
        return None

    # --- forward ---------------------------------------------------------------------------------
    def forwardHardOp(self, op: Any, inputs: list[Tensor], outputs: list[Tensor]
                      ) -> list[Tensor]:
        """Run one HardOp (its whole merged run the first time); see `forward.Forwarder`."""
        self._require_forwardable(f"forward of HardOp {op.op_id}")
        if op.op_id not in self.layout.order:
            raise XrtError(f"HardOp {op.op_id} is not in this {type(self).__name__}'s network "
                           f"view")
        if self._gate is None:
            return self._forwarder.forward_hardop(op, inputs, outputs, self)
        return self._gated(self._forwarder.forward_hardop, op, inputs, outputs, self)

    def forwardSegment(self, ops: tuple[Any, ...], feeds: dict[int, Tensor],
                       wanted: tuple[int, ...]) -> list[Tensor]:
        """Run consecutive HardOps of the view in one call (a Session's plain forward: one
        call per chip segment): `feeds` holds the tensors of the values they read from
        outside (v_id -> tensor), the result is a tensor per v_id of `wanted`. The same runs
        on the same device memory as `forwardHardOp` op by op; see `Forwarder.forward_segment`.
        The per-op times of `setTimeElapses` are not recorded."""
        self._require_forwardable("forwardSegment")
        if self._gate is None:
            return self._forwarder.forward_segment(ops, feeds, wanted, self)
        return self._gated(self._forwarder.forward_segment, ops, feeds, wanted, self)

    def _gated(self, fn: Any, *args: Any) -> Any:
        """`fn(*args)` inside the gate of a shared FTMP chunk (sharing.py)."""
        gate = self._gate
        if not self._gate_held:  # the first HardOp of a forward on a shared FTMP chunk
            gate.enter(self._pin_label())
            self._gate_held = True
        elif gate.thread != threading.get_ident():
            raise sharing.SharedSegmentBusyError(
                f"{self._pin_label()}: forwarded from two threads at once while its work "
                f"memory is a shared FTMP chunk; give each thread its own session (or fork())")
        try:
            return fn(*args)
        finally:
            if not self._forwarder.holding:  # the forward ended (its last HardOp, or failed)
                self._gate_held = False
                gate.leave()

    def refreshWeights(self, network: Any) -> dict[str, Any]:
        """Rewrite the deployed WEIGHT segment with the HardOp weight blocks of `network` (the
        same graph lowered for this chip with the same instructions, other weights), without
        re-apply; all or nothing, atomic for forwards in other threads; the network this
        backend was created from holds the new blocks afterwards. See npu_runtime/refresh.py.
        Returns {"hardops": ids whose weights changed, "bytes": bytes written}."""
        self._require_applied("refreshWeights")
        return refresh.refresh_weights(self, network)

    refresh_weights = refreshWeights
    """Pythonic alias of `refreshWeights`."""

    def prepareRefit(self, plan: Any) -> Any:
        """`Session.refitWeights`' device half: the weight blocks of the HardOps whose layers
        `plan` refits, packed again by this chip's lowering rules and checked; returns the
        function that writes them as `refreshWeights` does (npu_runtime/refresh.py)."""
        self._require_applied("refitWeights")
        return refresh.refit_prepare(self, plan)

    def profileInfo(self) -> dict[int, dict[str, float]]:
        """{op_id: {cycles, macs, etm_bytes, ocm_bytes, utilisation}} of the last forward, from
        the device's profiler records (one record per layer, tagged with the HardOp id)."""
        prof = self._forwarder.profile if self._forwarder is not None else {}
        return {k: dict(v) for k, v in sorted(prof.items())}

    # --- fork --------------------------------------------------------------------------------
    def fork(self) -> NpuBackend:
        """A backend for another thread: shares this one's INSTR and WEIGHT chunks (and the
        deployment: plan, relocated instructions, logical layout), owns its FTMP, INPUT and
        OUTPUT chunks, profiler chunk and MMU table. Forwards on one device are serialised
        (the device's lock). The fork pins the chunks it borrows: closed first, the backend
        it was forked from leaves them to the fork (freed when the fork lets go of them)."""
        self._require_applied("fork")
        if not self.settings.mmu_on:
            raise UnsupportedOpError(f"{type(self).__name__}.fork(): with the MMU off the "
                                     f"instructions hold this backend's physical addresses; "
                                     f"fork in MMU mode")
        return super().fork()

    def _fork(self, parent: Backend) -> None:
        """This copy's own FTMP, INPUT and OUTPUT chunks and MMU table over `parent`'s plan and
        placed layout (shared: a deployment's MMU indices and addresses are its own)."""
        self.backend_id = next(_ids)
        self._is_fork = True
        self._gate, self._gate_held = None, False
        self._borrowed = []
        self.settings = dataclasses.replace(parent.settings, user_segments={}, user_io={})
        src = parent.deployment
        placed = src.layout
        region = self._device.defaultMemRegion()
        phy: dict[SegmentType, PhySegment] = {}
        for st in (SegmentType.WEIGHT, SegmentType.INSTR):
            ps = src.segments[st]
            phy[st] = dataclasses.replace(ps, single_chunk=MemChunkInfo(
                ps.single_chunk.memChunk, True))  # borrowed: the parent frees it
            if ps.single_chunk.memChunk is not None:
                # pinned: a parent closed first cannot free it under this fork (its free is
                # refused and the chunk goes with its last handle)
                ps.single_chunk.memChunk.pin(self, f"{self._pin_label()} ({st.name} segment "
                                                   f"of the backend it was forked from)")
                self._borrowed.append(ps.single_chunk.memChunk)
        f = src.segments[SegmentType.FTMP]
        ff = dataclasses.replace(f, single_chunk=MemChunkInfo())
        if f.single_chunk.memChunk is not None:
            chunk = region.malloc(max(f.byte_size, 1), True, SEGMENT_ALIGN)
            chunk.fill(0)
            ff.single_chunk, ff.phy_addr = MemChunkInfo(chunk, False), chunk.addr
        phy[SegmentType.FTMP] = ff
        offsets: dict[int, int] = {}
        for st in (SegmentType.INPUT, SegmentType.OUTPUT):
            phy[st] = stage.io_segment(placed, None, st, region,
                                       offsets if src.packed_io else None)
        dep = stage.Deployment(src.plan, phy, src.instr_words, src.ocm_chunk, forked=True,
                               io_offsets=offsets, layout=placed)
        try:
            stage.zero_feature_maps(phy)
            stage.finish(self._view, placed, self.settings, self._device, dep,
                         self.backend_id, self.run_key)
        except BaseException:
            dep.free()
            raise
        self._adopt(dep)

    # --- reports -----------------------------------------------------------------------------
    def precheck(self) -> bool:
        """Compare the instruction and weight bytes in ETM with the network's, per HardOp."""
        self._require_applied("precheck")
        self.precheck_failures = report.precheck(self._view, self.deployment.layout,
                                                 self.deployment)
        return not self.precheck_failures

    def deployment_report(self) -> dict[str, Any]:
        """The deployment as plain data (what `log()` writes as JSON)."""
        self._require_applied("deployment_report")
        return report.deployment_report(self.deployment.layout, self.settings, self.deployment,
                                        self.backend_id, self._is_fork)

    def log(self) -> str:
        """Write the deployment log to ./.icraft/logs/ (text, and a .json twin); returns the
        text file's path."""
        self._require_applied("log")
        return report.write_log(self.deployment_report(), type(self).__name__, self.backend_id)

    # --- snapshots (docs/snapshot-format.md) ---------------------------------------------------
    def snapshotState(self) -> tuple[dict[str, Any], dict[str, bytes]]:
        """The deployment as snapshot state: settings, plan, logical layout, value and HardOp
        infos, MMU layout; blobs "weight" and "instr" (relocated) segment images."""
        self._require_applied("snapshotState")
        return snapshot.dump(self._view, self.deployment.layout, self.settings, self.deployment,
                             self._device, type(self).__name__)

    def _restore(self, state: dict[str, Any], blobs: dict[str, Any]) -> None:
        """Deploy from snapshot state on the bound device without lowering or planning."""
        self.layout, self.settings, dep = snapshot.restore(
            self._view, self._device, state, blobs, name=type(self).__name__,
            tag=self.chip.tag, backend_id=self.backend_id, run_key=self.run_key)
        self._adopt(dep)

    def _deinit(self) -> None:
        if self._forwarder is not None:
            self._forwarder.release()
            self._forwarder = None  # it holds the chunks it bound (user tensors among them)
        if self._gate_held:
            self._gate_held = False
            self._gate.leave()
        if self.deployment is not None:
            self.deployment.free()
        for chunk in [*self._user_chunks(), *self._borrowed]:
            chunk.unpin(self)

    # --- the vendor's fields -------------------------------------------------------------------
    def _placed(self) -> Layout | None:
        """The layout as deployed (after apply), else as init made it."""
        return self.deployment.layout if self.deployment is not None else self.layout

    @property
    def logic_segment_map(self) -> dict[SegmentType, Any]:
        lay = self._placed()
        return lay.segments if lay is not None else {}

    @property
    def phy_segment_map(self) -> dict[SegmentType, PhySegment]:
        return self.deployment.segments if self.deployment is not None else {}

    @property
    def value_info(self) -> dict[int, ValueInfo]:
        if self.deployment is not None:
            return self.deployment.value_info
        return self.layout.value_info if self.layout is not None else {}

    @property
    def forward_info(self) -> ForwardInfo:
        lay, dep = self._placed(), self.deployment
        if lay is None:
            return ForwardInfo()
        return ForwardInfo(
            value_map=dict(self.value_info),
            hardop_map=dict(dep.hardop_info if dep is not None else lay.hardop_info),
            idx_map={oid: (self.backend_id, hi.sync_idx[1])
                     for oid, hi in lay.hardop_info.items()},
            memchunk_map=dict(dep.memchunk_map) if dep is not None else {})

    @property
    def is_applied_(self) -> bool:
        return self._applied

    @property
    def is_mergeHardop(self) -> bool:
        return self.settings.merge

    @property
    def is_etmOptimize(self) -> bool:
        return self.settings.etm_reuse

    @property
    def ocmopt(self) -> OcmOpt:
        """The OCM option: the one asked for before apply, the one used after (BEST_SCORE
        resolves to the winner, as the vendor's field does)."""
        if self.deployment is not None:
            return self.deployment.plan.ocm_used
        return self.settings.ocm


def _forward_hardop(op: Any, inputs: list[Tensor], outputs: list[Tensor], backend: Any
                    ) -> list[Tensor]:
    """The forward function of HardOps (`FORWARDS`): the session calls it with the backend
    the op is bound to."""
    return backend.forwardHardOp(op, inputs, outputs)


NpuBackend.FORWARDS = {"HardOp": _forward_hardop}

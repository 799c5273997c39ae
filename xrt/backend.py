"""Backend: what executes a network view's ops on one device (the xrt Python reference, class
`xrt.Backend`).

A backend class lists the op types it can run in `FORWARDS` (op type -> forward function with
the vendor signature `fn(op, inputs, outputs, backend) -> outputs`) and may narrow that per op by
overriding `isOpSupported`. Lifecycle: `Init()` -> `init(view, device)` -> configure ->
`apply()` (once) -> forwards -> `deinit()`, with `fork()` and `restoreSnapshot()` beside them.
The base owns that state: its lifecycle methods check the order, set the fields and call the
hooks (`_bind`, `_init`, `_apply`, `_fork`, `_restore`, `_deinit`) a backend implements; a
backend never writes the base's fields and raises the base's guards (`_require_init`,
`_require_applied`, `_require_not_applied`, `_require_forwardable`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from .errors import CallOrderError, XrtError

if TYPE_CHECKING:
    import xir

    from .device import Device
    from .tensor import Tensor

ForwardFunc = Callable[["xir.Operation", list["Tensor"], list["Tensor"], "Backend"], list["Tensor"]]
InitFunc = Callable[["xir.Operation", "Backend"], None]


class Backend:
    """Base of every backend; subclasses fill `name`, `FORWARDS` and optionally `INITS`."""

    name: ClassVar[str] = ""
    FORWARDS: ClassVar[dict[str, ForwardFunc]] = {}
    INITS: ClassVar[dict[str, InitFunc]] = {}
    supports_user_outputs: ClassVar[bool] = True

    def __new__(cls, other: Any = None, *args: Any, **kwargs: Any) -> Backend:
        # Vendor cast: `ZG330Backend(sess.backends[0])` returns that backend as a ZG330Backend.
        if isinstance(other, Backend):
            if not isinstance(other, cls):
                raise XrtError(f"cannot cast a {type(other).__name__} to {cls.__name__}")
            return other
        return super().__new__(cls)

    def __init__(self, other: Any = None) -> None:
        if isinstance(other, Backend):
            return  # a cast: the object is already initialised
        if other is not None:
            raise XrtError(f"{type(self).__name__}() takes no argument or a Backend to cast, "
                           f"not {type(other).__name__}")
        self._view = None
        self._device = None
        self._applied = False
        self._deinited = False
        self._snapshot = False
        self._time_profile = False
        self._times: dict[int, tuple[float, float, float]] = {}

    # --- construction -------------------------------------------------------------------
    @classmethod
    def Init(cls) -> Backend:
        """An initialised, unbound backend object (call `init` next)."""
        return cls()

    @staticmethod
    def Create(backend_type: type, network_view: Any, device: Any) -> Backend:
        """Create a backend of `backend_type` bound to a network view and a device."""
        if not (isinstance(backend_type, type) and issubclass(backend_type, Backend)):
            raise XrtError(f"Backend.Create needs a Backend subclass, not {backend_type!r}")
        backend = backend_type.Init()
        backend.init(network_view, device)
        return backend

    # --- lifecycle (template methods: the base checks the order and owns the state; a
    # backend implements the hooks `_bind`, `_init`, `_apply`, `_fork`, `_restore`, `_deinit`,
    # as onnx.reference's OpRun.run calls `_run`) ------------------------------------------------
    def init(self, network_view: Any, device: Any) -> None:
        """Bind the network view and device, then prepare the backend (`_init`: by default,
        every supported op's init function)."""
        if self._applied:
            raise CallOrderError(f"{self._label()}: init after apply; create a new backend")
        view = self._bind(network_view, device)
        self._view, self._device = view, device
        try:
            self._init()
        except BaseException:
            self._view = self._device = None
            raise

    def apply(self) -> None:
        """Deploy the configured options (once)."""
        self._require_init("apply")
        if self._applied:
            raise CallOrderError(f"{self._label()}: apply() was already called; a backend "
                                 f"is applied once")
        self._apply()
        self._applied = True

    def deinit(self) -> None:
        """Release what the backend holds on its device. Idempotent."""
        if self._deinited:
            return
        self._deinit()
        self._deinited = True

    def fork(self) -> Backend:
        """A copy for another thread: shares read-only state, owns its work memory (what
        `_fork` gives the copy) and its timing records."""
        self._require_init("fork")
        if self._deinited:
            raise CallOrderError(f"{self._label()}: fork() after deinit()")
        other = copy.copy(self)
        other._times = {}
        other._fork(self)
        return other

    # --- hooks a backend implements -----------------------------------------------------------
    def _bind(self, network_view: Any, device: Any) -> Any:
        """Check that this backend can take `network_view` on `device` (raise if not) and
        return the view it keeps (a backend may narrow it to the ops it runs)."""
        return network_view

    def _init(self) -> None:
        """Prepare what the backend needs once bound (`network_view`, `device` are set)."""
        for op in self._view.ops:
            if self.isOpSupported(op):
                self.initOp(op)

    def _apply(self) -> None:
        """Deploy the configured options (called once, after init)."""

    def _fork(self, parent: Backend) -> None:
        """Called on the shallow copy `fork` made of `parent`: give it its own work state."""

    def _restore(self, state: dict[str, Any], blobs: dict[str, Any]) -> None:
        """Become deployed from snapshot state (bound already); the default (no state) runs
        `_init` and `_apply`, right for a backend whose apply computes nothing worth storing."""
        self._init()
        self._apply()

    def _deinit(self) -> None:
        """Release what the backend holds on its device (called once)."""

    def clone(self, depth: int = 1) -> Backend:
        """A copy of this backend object: depth 1 shares everything it refers to; depth >= 2
        also copies its own state (options, per-op records), never the device or the network
        view it is bound to, which stand for hardware and a file."""
        if depth <= 1:
            return copy.copy(self)
        memo = {id(self._device): self._device, id(self._view): self._view}
        return copy.deepcopy(self, memo)

    def setDevice(self, device: Any) -> Backend:
        """Bind `device` before init (a Session does so, since `isOpSupported` may ask it)."""
        if self._applied:
            raise CallOrderError(f"{self._label()}: setDevice after apply")
        self._device = device
        return self

    # --- snapshots (docs/snapshot-format.md) -------------------------------------------------
    def snapshotState(self) -> tuple[dict[str, Any], dict[str, bytes]]:
        """This backend's deployed state for `Session.dumpSnapshot`, after apply: a JSON-able
        object and named byte blobs. The default is no state (a backend whose apply computes
        nothing worth keeping, such as HostBackend)."""
        self._require_applied("snapshotState")
        return {}, {}

    def restoreSnapshot(self, network_view: Any, device: Any, state: dict[str, Any],
                        blobs: dict[str, Any]) -> None:
        """Become the applied backend `snapshotState` described, bound to `network_view` on
        `device`, without re-running its deployment (`_restore`); its settings stay frozen."""
        if self._applied:
            raise CallOrderError(f"{self._label()}.restoreSnapshot() on an applied backend")
        view = self._bind(network_view, device)
        self._view, self._device = view, device
        try:
            self._restore(state, blobs)
        except BaseException:
            self._view = self._device = None
            raise
        self._applied = True
        self._snapshot = True

    # --- ops ------------------------------------------------------------------------------
    def getForwardFunc(self, op: Any) -> ForwardFunc | None:
        """The forward function of `op` on this backend, or None if it cannot run it."""
        return type(self).FORWARDS.get(op.op_type)

    def getInitFunc(self, op: Any) -> InitFunc | None:
        return type(self).INITS.get(op.op_type)

    def isOpSupported(self, op: Any) -> bool:
        return self.getForwardFunc(op) is not None

    def initOp(self, op: Any) -> None:
        fn = self.getInitFunc(op)
        if fn is not None:
            fn(op, self)

    def forwardOp(self, op: Any, inputs: list[Tensor], outputs: list[Tensor] | None = None
                  ) -> list[Tensor]:
        """Run one op; `outputs` (optional) are caller-allocated result tensors."""
        fn = self.getForwardFunc(op)
        if fn is None:
            from .errors import UnsupportedOpError

            raise UnsupportedOpError(f"{self._label()} cannot run {op.op_type} "
                                     f"(op {op.op_id})")
        return fn(op, list(inputs), list(outputs or []), self)

    # --- refit (Session.refitWeights) -----------------------------------------------------
    def prepareRefit(self, plan: Any) -> Callable[[], None]:
        """Check that this backend can take the layers of a refit `plan` (the `xrt_refit_plan`
        hook's) that lie in its view, and return the function that writes them: nothing
        changes before it is called, so a session refuses a refit before any backend wrote.

        This base serves backends that read their ops' Params from the network at forward time
        (the HostBackend): a layer among its ops gets its new weight and bias Params (data and
        quantized type) in the network itself; the activation types stay. A backend that
        keeps weights elsewhere (a device segment) overrides it (`NpuBackend`); one whose view
        holds a layer it cannot write (a HardOp) refuses."""
        self._require_applied("refitWeights")
        from .errors import InvalidArgumentError

        todo = []
        for op in self._view.ops:
            layer = plan.layers.get(op.op_id)
            if layer is None:
                continue
            new = layer.op
            if op.op_type != new.op_type or len(op.inputs) != len(new.inputs) or any(
                    not op.inputs[i].is_params or tuple(op.inputs[i].shape) !=
                    tuple(new.inputs[i].shape) for i in range(1, len(new.inputs))):
                raise InvalidArgumentError(
                    f"{self._label()}: op {op.op_id} ({op.op_type} '{op.name}') cannot take the "
                    f"refitted {new.op_type} '{new.name}' ({', '.join(layer.names)}): "
                    f"{type(self).__name__} does not refit it")
            todo.append((op, new))

        def commit() -> None:
            for op, new in todo:
                for old_p, new_p in zip(op.inputs[1:], new.inputs[1:]):
                    old_p.dtype = new_p.dtype
                    old_p.setData(new_p.data.copy())
            plan.report.host_ops += [op.op_id for op, _ in todo]

        return commit

    def memRegion(self) -> Any:
        """The memory region this backend's tensors live in."""
        self._require_init("memRegion")
        return self._device.defaultMemRegion()

    def holds(self, tensor: Tensor) -> bool:
        """Whether this backend's ops take `tensor` where it lies; the session copies any other
        input into `memRegion()` first."""
        return tensor.isOn(self.memRegion())

    # --- timing -------------------------------------------------------------------------
    def enableTimeProfile(self, enable: bool) -> None:
        self._time_profile = bool(enable)

    def setTimeElapses(self, op_id: int, memcpy_time: float, hard_time: float, *,
                       host_ms: float = 0.0) -> None:
        """Record the memcpy and hardware time (ms) of an op's last forward. `host_ms` (not in
        the vendor API): host wall time spent for `op_id` inside another op's forward call --
        a merged run simulated during its first HardOp -- which the session moves from that
        op's row to this one."""
        old = self._times.get(op_id, (0.0, 0.0, 0.0))
        self._times[op_id] = (old[0] + float(memcpy_time), old[1] + float(hard_time),
                              old[2] + float(host_ms))

    def takeTimeElapses(self) -> dict[int, tuple[float, float, float]]:
        """The recorded (memcpy, hard, host) times since the last call, cleared."""
        times, self._times = self._times, {}
        return times

    # --- properties -----------------------------------------------------------------------
    @property
    def device(self) -> Device:
        return self._device

    @property
    def network_view(self) -> Any:
        return self._view

    @property
    def snapshot(self) -> bool:
        return self._snapshot

    @property
    def time_profile(self) -> bool:
        return self._time_profile

    @property
    def is_applied(self) -> bool:
        return self._applied

    # --- the guards (every backend's call-order messages) -------------------------------------
    def _require_init(self, what: str) -> None:
        if self._view is None or self._device is None:
            raise CallOrderError(f"{self._label()}: {what}() before init(network_view, device)")

    def _require_applied(self, what: str) -> None:
        if not self._applied:
            raise CallOrderError(f"{self._label()}.{what}() is called after apply(); call "
                                 f"apply() first")

    def _require_not_applied(self, what: str) -> None:
        """The guard of an option: set after init, before apply, never on a restored one."""
        if self._snapshot:
            raise CallOrderError(f"{self._label()}: {what}() on a backend restored from a "
                                 f"snapshot; its settings are frozen at dump time (configure "
                                 f"before apply and dump a new snapshot)")
        if self._applied:
            raise CallOrderError(f"{self._label()}: {what}() must be called before apply(); "
                                 f"the backend is already deployed")

    def _require_forwardable(self, what: str) -> None:
        if self._deinited:
            raise CallOrderError(f"{self._label()}: {what} after deinit()")
        if not self._applied:
            raise CallOrderError(f"{self._label()}: {what} before apply()")

    def _label(self) -> str:
        return f"{type(self).__name__}"

    def __repr__(self) -> str:
        n = len(self._view.ops) if self._view is not None else 0
        return f"<{type(self).__name__} ops={n} applied={self._applied}>"

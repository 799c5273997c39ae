"""Session: binds each op of a network view to a backend and runs the view forward.

`Session.Create([B1, B2, ...], view, [d1, d2, ...])` gives each op to the first backend in the
list that supports it. Tensors crossing from one backend's memory to another's move with
`Tensor.to`, and that time is the op's memcpy time in `timeProfileResults()`.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from .args import bool_arg, int_arg, seq_arg, str_arg
from .backend import Backend
from .errors import (
    CallOrderError,
    InvalidArgumentError,
    TensorError,
    UnsupportedOpError,
    XrtError,
)
from .tensor import Tensor
from .weights_lock import weights_lock

log = logging.getLogger(__name__)

Callback = Callable[["Session", Any, Backend, list[Tensor]], None]


class Session:
    """A network view bound to backends, ready to forward."""

    def __init__(self, other: Any = None) -> None:
        if isinstance(other, Session):
            self.__dict__ = other.__dict__
            return
        self._view = None
        self._backends: list[Backend] = []
        self._bindings: dict[int, Backend] = {}
        self._applied = False
        self._closed = False
        self._position = 0
        self._values: dict[int, Tensor] = {}
        self._pre: Callback | None = None
        self._post: Callback | None = None
        self._log_io = False
        self._log_time = False
        self._dump: tuple[bool, str, str] = (False, "", "")
        self._time_profile = False
        self._profile: dict[int, tuple[float, float, float, float]] = {}
        self._total_ms = 0.0
        self._from_snapshot = False
        self._steps_: list[tuple[Any, Backend, tuple[int, ...]]] | None = None
        self._plan_: tuple[dict[int, Backend], list[Any]] | None = None
        self._io_: tuple[list[Any], list[Any]] | None = None

    # --- construction -------------------------------------------------------------------
    @staticmethod
    def Init() -> Session:
        return Session()

    @staticmethod
    def Create(backend_types: Sequence[type], network: Any, devices: Sequence[Any], *,
               strict: bool = False) -> Session:
        """Create one backend per type on its device and bind ops by priority.

        With `strict=True`, an op that the first backend cannot run is an error instead of a
        fallback to a later backend (Input/Output ops excepted).
        """
        _check_network(network, "Session.Create")
        backend_types = seq_arg(backend_types, "Session.Create backend_types")
        devices = seq_arg(devices, "Session.Create devices")
        if len(backend_types) != len(devices):
            raise XrtError(f"Session.Create: {len(backend_types)} backend types but "
                           f"{len(devices)} devices; they pair up one to one")
        backends = [t.Init() if isinstance(t, type) else t for t in backend_types]
        for b in backends:
            if not isinstance(b, Backend):
                raise XrtError(f"Session.Create: {b!r} is not a Backend type")
        return Session._bind(network, backends, list(devices), strict)

    @staticmethod
    def CreateByOrder(network: Any, backends: Sequence[Backend], devices: Sequence[Any]
                      ) -> Session:
        """Like Create, with backend objects made by the caller (not yet initialised)."""
        _check_network(network, "Session.CreateByOrder")
        backends = seq_arg(backends, "Session.CreateByOrder backends")
        devices = seq_arg(devices, "Session.CreateByOrder devices")
        if len(backends) != len(devices):
            raise XrtError(f"Session.CreateByOrder: {len(backends)} backends but "
                           f"{len(devices)} devices")
        return Session._bind(network, list(backends), list(devices), False)

    @staticmethod
    def CreateWithBackends(network: Any, backends: Sequence[Backend]) -> Session:
        """A session over backends already initialised with their views and devices."""
        _check_network(network, "Session.CreateWithBackends")
        sess = Session()
        sess._view = network
        sess._backends = list(backends)
        owner: dict[int, Backend] = {}
        for b in backends:
            if b.network_view is None:
                raise CallOrderError(f"CreateWithBackends: {b!r} has not been init()ed")
            for op in b.network_view.ops:
                owner.setdefault(op.op_id, b)
        for op in network.ops:
            if op.op_id not in owner:
                raise UnsupportedOpError(f"op {op.op_id} ({op.op_type}) is in no backend's "
                                         f"network view")
            sess._bindings[op.op_id] = owner[op.op_id]
        return sess

    @staticmethod
    def _bind(network: Any, backends: list[Backend], devices: list[Any], strict: bool
              ) -> Session:
        sess = Session()
        sess._view = network
        sess._backends = backends
        # The device must be known to answer isOpSupported (per-op constraints may ask it).
        for b, d in zip(backends, devices):
            b.setDevice(d)
        chosen: dict[int, Backend] = {}
        for op in network.ops:
            tried = []
            for i, b in enumerate(backends):
                if b.isOpSupported(op):
                    if strict and i > 0 and op.op_type not in ("Input", "Output"):
                        raise UnsupportedOpError(
                            f"strict session: op {op.op_id} ({op.op_type}) falls back from "
                            f"{type(backends[0]).__name__} to {type(b).__name__}")
                    chosen[op.op_id] = b
                    break
                tried.append(type(b).__name__)
            else:
                raise UnsupportedOpError(
                    f"no backend supports op {op.op_id} ({op.op_type} '{op.name}'); tried "
                    f"{', '.join(tried) or 'no backends'}")
        for b, d in zip(backends, devices):
            ops = [op for op in network.ops if chosen[op.op_id] is b]
            b.init(network.view([op.op_id for op in ops]), d)
        sess._bindings = chosen
        return sess

    @staticmethod
    def CreateWithSnapshot(file_path: str | os.PathLike | bytes | bytearray | memoryview | Any,
                           backend_types: Sequence[type], devices: Sequence[Any]) -> Session:
        """A session from a `dumpSnapshot` file, already applied: the network and the op ->
        backend binding come from the file, each backend restores its deployed state on its
        device (no binding, lowering or planning is re-run; settings are frozen).

        `file_path` is a path (str or os.PathLike) or the snapshot itself held in memory: bytes,
        bytearray, memoryview, a numpy uint8 array or any buffer (what `dumpSnapshotToMemory`
        returns; errors then name "<buffer>"). The session keeps no reference to that buffer.
        `backend_types` must name the snapshot's backends in the same order (by `name`), one
        device each. Raises SnapshotError for a damaged file or a mismatch."""
        from xir.serialize.json import network_from_dict
        from xir.serialize.raw import read_raw_bytes

        from .errors import SnapshotError
        from .snapshot import BUFFER_LABEL, read_snapshot, read_snapshot_buffer

        if isinstance(file_path, (str, os.PathLike)):
            path = os.fspath(file_path)
            snap = read_snapshot(path)
        else:
            path = BUFFER_LABEL
            snap = read_snapshot_buffer(file_path)
        hdr = snap.header
        stored = hdr["backends"]
        names = [str(b.get("name", "")) for b in stored]
        types = list(backend_types)
        if len(types) != len(stored):
            raise SnapshotError(f"snapshot '{path}' holds {len(stored)} backends ({names}), "
                                f"{len(types)} backend types were given; pass them in order")
        if len(devices) != len(types):
            raise SnapshotError(f"CreateWithSnapshot('{path}'): {len(types)} backend types but "
                                f"{len(devices)} devices; they pair up one to one")
        backends = [t.Init() if isinstance(t, type) else t for t in types]
        for k, (b, want) in enumerate(zip(backends, names)):
            if not isinstance(b, Backend):
                raise XrtError(f"CreateWithSnapshot: {b!r} is not a Backend type")
            if type(b).name != want:
                raise SnapshotError(f"snapshot '{path}': backend {k} was {want!r} at dump time, "
                                    f"{type(b).__name__} ({type(b).name!r}) was given; pass "
                                    f"the backend types in the snapshot's order {names}")
        try:
            obj = json.loads(bytes(snap.section("network.json")).decode("utf-8"))
        except ValueError as exc:
            raise SnapshotError(f"snapshot '{path}': the network section is not JSON") from exc
        # the container's sha256 covers the raw bytes: skip the raw's own md5 pass
        md5, obj["params_md5"] = obj.get("params_md5", ""), ""
        net = network_from_dict(obj, file=path)
        read_raw_bytes(net, bytearray(snap.section("network.raw")), file=path)
        net.params_md5 = md5
        view = net.view([int(i) for i in hdr["network"]["view_op_ids"]])
        bindings = {int(o): int(k) for o, k in hdr["bindings"]}
        if set(bindings) != {op.op_id for op in view.ops} or \
                any(not 0 <= k < len(backends) for k in bindings.values()):
            raise SnapshotError(f"snapshot '{path}': the op bindings do not cover the view")
        done: list[Backend] = []
        try:
            for k, (b, d, entry) in enumerate(zip(backends, devices, stored)):
                ids = [op.op_id for op in view.ops if bindings[op.op_id] == k]
                blobs = {n: snap.section(sec) for n, sec in entry.get("blobs", {}).items()}
                b.restoreSnapshot(net.view(ids), d, entry.get("state", {}), blobs)
                done.append(b)
        except BaseException:
            for b in done:  # free what the backends restored so far
                b.deinit()
            raise
        sess = Session()
        sess._view = view
        sess._backends = backends
        sess._bindings = {o: backends[k] for o, k in bindings.items()}
        sess._applied = True
        sess._from_snapshot = True
        return sess

    def dumpSnapshot(self, file_path: str | os.PathLike) -> None:
        """Write this applied session (network, bindings, every backend's deployed state) to
        one file, atomically (docs/snapshot-format.md)."""
        from .snapshot import write_snapshot

        write_snapshot(file_path, *self._snapshotParts("dumpSnapshot"))

    def dumpSnapshotToMemory(self) -> bytes:
        """The snapshot `dumpSnapshot` would write, as bytes (the same bytes as the file):
        `Session.CreateWithSnapshot(data, ...)` restores it, like Ascend's
        aclmdlLoadFromMem after a model was serialised to memory."""
        from .snapshot import snapshot_bytes

        return snapshot_bytes(*self._snapshotParts("dumpSnapshotToMemory"))

    dump_snapshot_to_memory = dumpSnapshotToMemory
    """Pythonic alias of `dumpSnapshotToMemory`."""

    def refitWeights(self, source: Any) -> Any:
        """New weights for this applied session without recompiling or re-apply (TensorRT's
        refitter, Ascend's weight-update graph): `source` is an ONNX file path or
        `onnx.ModelProto` of the graph the network was compiled from, or a dict of ONNX
        initializer names to arrays (a subset). The activation scales and the instructions
        stay; each layer the source changes is re-quantized (per-channel scales, bias, the
        requantization words; folded BatchNorms folded again) and every backend writes its
        part -- the chip's WEIGHT segment under its forward lock, so a forward in another
        thread sees the old weights or the new, never a mix. The network object holds the new
        parameters afterwards (save, snapshots and the integer reference agree with the chip).

        The compile half comes from the `xrt_refit_plan` plugin hook (`xcompile`). Every
        check of every backend runs before the first write: a refused source raises an
        `XrtError` naming the initializer or layer, and nothing changes. Returns the report
        (per layer: initializers, saturation, weight error; HardOps and bytes written);
        docs/memory-and-weights.md, "Refit from ONNX"."""
        from . import plugins

        self._require_applied("refitWeights")
        root = self._root()
        plan = plugins.plugin_manager().hook.xrt_refit_plan(network=root, source=source)
        if plan is None:
            raise XrtError("refitWeights: no plugin implements xrt_refit_plan (the compile "
                           "pipeline, distribution icraft-xrt-sim's xcompile, is not loaded)")
        # forwards of every session on this network (other threads): wholly before or after
        with weights_lock(root).writing("refitWeights"):
            commits = [b.prepareRefit(plan) for b in self._backends]
            for commit in commits:
                commit()
            plan.finish(root)
        return plan.report

    refit_weights = refitWeights
    """Pythonic alias of `refitWeights`."""

    def _snapshotParts(self, what: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """(header, sections) of this applied session's snapshot."""
        import io

        from xir.serialize.json import network_to_dict
        from xir.serialize.raw import write_raw_stream

        from . import __version__

        self._require_applied(what)
        root = self._root()
        raw = io.BytesIO()
        size, md5 = write_raw_stream(raw, root.params())
        obj = network_to_dict(root)
        obj["params_bytes"], obj["params_md5"] = size, md5
        sections: dict[str, Any] = {
            "network.json": json.dumps(obj, separators=(",", ":")).encode("utf-8"),
            "network.raw": raw.getbuffer()}
        index = {id(b): k for k, b in enumerate(self._backends)}
        entries = []
        for k, b in enumerate(self._backends):
            state, blobs = b.snapshotState()
            names = {}
            for n, data in blobs.items():
                names[n] = f"backend.{k}.{n}"
                sections[names[n]] = data
            entries.append({"name": type(b).name, "class": type(b).__name__, "state": state,
                            "blobs": names})
        header = {"xrt_version": __version__,
                  "network": {"name": root.name, "view_op_ids": [op.op_id for op in
                                                                 self._view.ops]},
                  "bindings": [[op.op_id, index[id(self._bindings[op.op_id])]]
                               for op in self._view.ops],
                  "backends": entries}
        return header, sections

    # --- lifecycle ------------------------------------------------------------------------
    def apply(self) -> None:
        """Apply every backend (deploys networks on their devices). A session made by
        CreateWithSnapshot is applied already: apply() does nothing there."""
        if self._from_snapshot:
            return
        if self._applied:
            raise CallOrderError("Session.apply() was already called")
        for b in self._backends:
            if not b.is_applied:
                b.apply()
        self._applied = True

    def close(self) -> None:
        """Deinit every backend. Idempotent."""
        for b in self._backends:
            b.deinit()
        self._values.clear()
        self._closed = True

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # --- queries --------------------------------------------------------------------------
    @property
    def backends(self) -> list[Backend]:
        return list(self._backends)

    @property
    def network_view(self) -> Any:
        return self._view

    def backendBindings(self) -> dict[int, Backend]:
        return dict(self._bindings)

    def getForwards(self) -> list[tuple[Any, Backend, Any, list[int], list[int]]]:
        """(op, backend, forward function, input v_ids, output v_ids) in execution order."""
        out = []
        for op in self._view.ops:
            b = self._bindings[op.op_id]
            out.append((op, b, b.getForwardFunc(op), [v.v_id for v in op.inputs],
                        [v.v_id for v in op.outputs]))
        return out

    def sub(self, start_index: int, end_index: int | None = None) -> Session:
        """A session over part of this one's view that shares its backends."""
        start_index = int_arg(start_index, "Session.sub start_index")
        if end_index is not None:
            end_index = int_arg(end_index, "Session.sub end_index")
        view = self._view.view(start_index, end_index)
        sess = Session()
        sess._view = view
        sess._backends = self._backends
        sess._bindings = {op.op_id: self._bindings[op.op_id] for op in view.ops}
        sess._applied = self._applied
        sess._time_profile = self._time_profile
        return sess

    # --- options --------------------------------------------------------------------------
    def setPreCallBack(self, func: Callback) -> None:
        self._pre = func

    def setPostCallBack(self, func: Callback) -> None:
        self._post = func

    def setLogIO(self, flag: bool) -> None:
        self._log_io = bool_arg(flag, "setLogIO flag")

    def setLogTime(self, flag: bool) -> None:
        self._log_time = bool_arg(flag, "setLogTime flag")

    def setDumpOutputs(self, flag: bool, path: str = "", format: str = "SFB") -> None:
        """Dump every op's outputs after it runs to `path` as `<v_id>.<fmt>` files."""
        from .tensor import check_dump_format

        flag = bool_arg(flag, "setDumpOutputs flag")
        path = str_arg(path, "setDumpOutputs path")
        check_dump_format(format)
        if flag:
            os.makedirs(path or ".", exist_ok=True)
        self._dump = (bool(flag), path or ".", format)

    def enableTimeProfile(self, enable: bool) -> None:
        enable = bool_arg(enable, "enableTimeProfile enable")
        self._time_profile = enable
        for b in self._backends:
            b.enableTimeProfile(enable)

    def timeProfileResults(self) -> dict[int, tuple[float, float, float, float]]:
        """{op_id: (wall, memcpy, hard, other)} in ms for the last forward run with
        `enableTimeProfile(True)`; empty when the profile was never enabled (nothing is
        measured then, as on the vendor runtime). `totalTime()` is always measured."""
        return dict(self._profile)

    def clone(self, depth: int = 1) -> Session:
        """Another session object over the same view (the vendor's `clone`). depth 1 (the
        vendor's default, a shallow clone) shares the backends, so it runs on the same deployed
        network, with its own inputs, outputs, callbacks and profile. depth >= 2 clones the
        backends too (`Backend.clone(depth - 1)`), which is only possible before `apply`: an
        applied backend owns device memory that a copy would share."""
        depth = int_arg(depth, "Session.clone depth", 1)
        if depth >= 2 and self._applied:
            raise CallOrderError("Session.clone(depth >= 2) after apply: the backends own "
                                 "device memory a copy would share; clone before apply, or "
                                 "use clone() (shares the deployed backends)")
        new = Session()
        new.__dict__.update({k: v for k, v in self.__dict__.items()
                             if k not in ("_values", "_profile", "_position", "_steps_",
                                          "_io_")})
        if depth >= 2:
            twins = {id(b): b.clone(depth - 1) for b in self._backends}
            new._backends = [twins[id(b)] for b in self._backends]
            new._bindings = {oid: twins[id(b)] for oid, b in self._bindings.items()}
        else:
            new._backends = list(self._backends)
            new._bindings = dict(self._bindings)
        return new

    def totalTime(self) -> float:
        """Wall time (ms) of the last forward."""
        return self._total_ms

    # --- running --------------------------------------------------------------------------
    def forward(self, inputs: Sequence[Tensor | Any], outputs: Sequence[Tensor] | None = None
                ) -> list[Tensor] | None:
        """Run the whole view; returns its outputs, or fills the caller's `outputs`."""
        self._require_applied("forward")
        self._values = {}
        self._bind_inputs(inputs)
        user_out = self._bind_user_outputs(outputs) if outputs is not None else {}
        self._profile = {}
        t0 = time.perf_counter()
        with weights_lock(self._root()).reading():  # a refit in another thread: all or none
            if user_out or not self._plain():
                self._run(0, len(self._view.ops), user_out)
            else:
                self._run_plan()
        self._total_ms = (time.perf_counter() - t0) * 1e3
        self._position = 0
        results = [self._values[v.v_id] for v in self._io()[1]]
        if outputs is not None:
            for dst, src in zip(outputs, results):
                if dst is not src:
                    dst.copyFrom(0, src, 0, src.dtype().storageBytes())
            return None
        return results

    def stepTo(self, op_id: int, inputs: Sequence[Tensor | Any] = ()) -> list[Tensor]:
        """Run from where the last step stopped up to and including op `op_id`.

        Inputs are taken from `inputs` only for values produced outside the steps run so far.
        """
        self._require_applied("stepTo")
        target = self._view.index(op_id)
        if self._position == 0 or target < self._position:
            self._values = {}
            self._position = 0
            self._profile = {}
        if inputs:
            self._bind_inputs(inputs, only_missing=True)
        t0 = time.perf_counter()
        with weights_lock(self._root()).reading():
            self._run(self._position, target + 1, {})
        self._total_ms = (time.perf_counter() - t0) * 1e3
        self._position = target + 1 if target + 1 < len(self._view.ops) else 0
        op = self._view.ops[target]
        return [self._values[v.v_id] for v in op.outputs]

    # --- internals ------------------------------------------------------------------------
    def _root(self) -> Any:
        """The network object this session's view belongs to."""
        return getattr(self._view, "network", self._view)

    def _require_applied(self, what: str) -> None:
        if self._closed:
            raise CallOrderError(f"Session.{what}() after close(): the backends gave their "
                                 f"device memory back; create a new session")
        if not self._applied:
            raise CallOrderError(f"Session.{what}() before Session.apply()")

    def _bind_inputs(self, inputs: Sequence[Any], only_missing: bool = False) -> None:
        wanted = self._io()[0]
        given = [t if isinstance(t, Tensor) else Tensor(t)
                 for t in seq_arg(inputs, "forward inputs")]
        if not only_missing and len(given) != len(wanted):
            raise TensorError(f"forward: the view takes {len(wanted)} inputs "
                              f"({[v.v_id for v in wanted]}), got {len(given)}")
        for value, tensor in zip(wanted, given):
            if only_missing and value.v_id in self._values:
                continue
            _check_tensor(value, tensor, "input")
            self._values[value.v_id] = tensor

    def _bind_user_outputs(self, outputs: Sequence[Tensor]) -> dict[int, Tensor]:
        wanted = self._io()[1]
        if len(outputs) != len(wanted):
            raise TensorError(f"forward: the view has {len(wanted)} outputs, "
                              f"{len(outputs)} output tensors were given")
        bound = {}
        for value, tensor in zip(wanted, outputs):
            if not isinstance(tensor, Tensor) or not tensor.hasData():
                raise TensorError(f"forward: output for v_id {value.v_id} must be an "
                                  f"allocated Tensor")
            _check_tensor(value, tensor, "output")
            bound[value.v_id] = tensor
        return bound

    def _steps(self) -> list[tuple[Any, Backend, tuple[int, ...]]]:
        """Per op of the view: (op, its backend, the v_ids of the tensors it is fed -- an
        Input op its outputs, any other op its non-params inputs), made on the first run: the
        bindings are fixed once the session is created."""
        steps = self._steps_
        if steps is None:
            steps = []
            for op in self._view.ops:
                sources = op.outputs if op.op_type == "Input" else op.inputs
                steps.append((op, self._bindings[op.op_id],
                              tuple(v.v_id for v in sources if not v.is_params)))
            self._steps_ = steps
        return steps

    def _io(self) -> tuple[list[Any], list[Any]]:
        """The view's input and output values, found once (a view's outputs are a scan of
        its ops and their consumers)."""
        io = self._io_
        if io is None:
            io = self._io_ = (self._view.inputs(), self._view.outputs())
        return io

    def _run(self, start: int, end: int, user_out: dict[int, Tensor]) -> None:
        dump_on, dump_path, dump_fmt = self._dump
        values, profile = self._values, self._time_profile
        perf = time.perf_counter
        t_op = perf()  # each op's wall time runs from where the last one's ended, so the
        # rows of a profile add up to totalTime() (its bookkeeping goes to the next op)
        for op, backend, sources in self._steps()[start:end]:
            ins, memcpy_ms = self._gather(op, backend, sources)
            outs_given = [user_out[v.v_id] for v in op.outputs if v.v_id in user_out] \
                if user_out else []
            if outs_given and (len(outs_given) != len(op.outputs)
                               or not backend.supports_user_outputs):
                outs_given = []
            if self._pre is not None:
                self._pre(self, op, backend, ins)
            outs = backend.forwardOp(op, ins, outs_given)
            if len(outs) != len(op.outputs):
                raise XrtError(f"{type(backend).__name__} returned {len(outs)} tensors for op "
                               f"{op.op_id} ({op.op_type}), which has {len(op.outputs)} outputs")
            for v, t in zip(op.outputs, outs):
                values[v.v_id] = t
            if self._post is not None:
                self._post(self, op, backend, outs)
            extra = backend.takeTimeElapses()
            t_end = perf()
            wall = (t_end - t_op) * 1e3
            if profile or self._log_time:
                self._record_times(op, wall, memcpy_ms, extra)
            if self._log_io:
                for v, t in zip(op.outputs, outs):
                    print(f"[{op.op_id:>5}] {op.op_type:<16} out v{v.v_id} {t!r}")
            if dump_on:
                for v, t in zip(op.outputs, outs):
                    name = f"{v.v_id}.{dump_fmt}"
                    with open(os.path.join(dump_path, name), "wb") as fh:
                        t.dump(fh, dump_fmt)
            t_op = perf() if (dump_on or self._log_io) else t_end  # debug output: no op's

    def _plain(self) -> bool:
        """Whether a forward may take the compiled plan (`_run_plan`): nothing asks for what
        happens per op -- no callbacks, time profile, timing or IO log, output dumps."""
        return self._pre is None and self._post is None and not (
            self._time_profile or self._log_time or self._log_io or self._dump[0])

    def _plan(self) -> list[tuple[bool, Backend, Any, Any, tuple[int, ...], tuple[int, ...]]]:
        """The forward as a compiled plan, made on the first plain forward (the bindings are
        fixed once the session is created; a clone or sub-session has other bindings and
        makes its own). Each entry is (segment?, backend, the memory region whose tensors it
        takes where they lie -- None when the backend's own `holds` decides --, what, source
        v_ids, result v_ids):
        a run of consecutive ops on a backend with `forwardSegment` (an NPU backend's chip
        segment) is one entry -- `what` its ops, sources the values it reads from outside,
        results the values read after it -- any other op one entry -- `what` (op, forward
        function or None for the backend's own `forwardOp`)."""
        plan = self._plan_
        if plan is not None and plan[0] is self._bindings:
            return plan[1]
        steps = self._steps()
        last_use: dict[int, int] = {}
        for i, (_, _, sources) in enumerate(steps):
            for vid in sources:
                last_use[vid] = i
        for v in self._io()[1]:
            last_use[v.v_id] = len(steps)
        entries: list[tuple[bool, Backend, Any, Any, tuple[int, ...], tuple[int, ...]]] = []
        i = 0
        while i < len(steps):
            op, backend, sources = steps[i]
            # the base `holds` is "on my memory region", fixed once applied
            held = backend.memRegion() if type(backend).holds is Backend.holds else None
            if getattr(backend, "forwardSegment", None) is None:
                fn = backend.getForwardFunc(op) \
                    if type(backend).forwardOp is Backend.forwardOp else None
                entries.append((False, backend, held, (op, fn), sources,
                                tuple(v.v_id for v in op.outputs)))
                i += 1
                continue
            j = i
            while j < len(steps) and steps[j][1] is backend:
                j += 1
            ops = tuple(st[0] for st in steps[i:j])
            # an Input op's outputs are the forward's inputs: fed to the segment, like values
            # made before it
            made = {v.v_id for o in ops if o.op_type != "Input" for v in o.outputs}
            feeds = tuple(dict.fromkeys(vid for st in steps[i:j] for vid in st[2]
                                        if vid not in made))
            wanted = tuple(v.v_id for o in ops for v in o.outputs
                           if last_use.get(v.v_id, -1) >= j)
            entries.append((True, backend, held, ops, feeds, wanted))
            i = j
        self._plan_ = (self._bindings, entries)
        return entries

    def _run_plan(self) -> None:
        """A plain forward: the compiled plan, one call per chip segment and per other op, none
        of the per-op bookkeeping of `_run` (times, callbacks, logs), the same results."""
        values = self._values
        for segment, backend, held, what, sources, results in self._plan():
            try:
                ins = [values[vid] for vid in sources]
            except KeyError:
                self._missing(what if segment else what[:1], sources)
                raise
            for k, t in enumerate(ins):
                if not (t.isOn(held) if held is not None else backend.holds(t)):
                    ins[k] = t.to(backend.memRegion())
            if segment:
                outs = backend.forwardSegment(what, dict(zip(sources, ins)), results)
                if len(outs) != len(results):
                    raise XrtError(f"{type(backend).__name__}.forwardSegment returned "
                                   f"{len(outs)} tensors for the {len(results)} values asked "
                                   f"of ops {[op.op_id for op in what]}")
            else:
                op, fn = what
                outs = fn(op, ins, [], backend) if fn is not None else \
                    backend.forwardOp(op, ins, [])
                if len(outs) != len(results):
                    raise XrtError(f"{type(backend).__name__} returned {len(outs)} tensors for "
                                   f"op {op.op_id} ({op.op_type}), which has {len(results)} "
                                   f"outputs")
            values.update(zip(results, outs))
        for b in self._backends:
            b.takeTimeElapses()  # a backend's own records: nobody reads them on this path

    def _missing(self, ops: Sequence[Any], sources: tuple[int, ...]) -> None:
        """Raise for the first input among `sources` of `ops` that has no tensor."""
        for op in ops:
            for k, v in enumerate(op.outputs if op.op_type == "Input" else op.inputs):
                if v.v_id in sources and v.v_id not in self._values:
                    raise XrtError(f"op {op.op_id} ({op.op_type}) input {k} (v_id {v.v_id}) "
                                   f"has no tensor: feed it in inputs or run its producer first")

    def _record_times(self, op: Any, wall: float, memcpy_ms: float,
                      extra: dict[int, tuple[float, float, float]]) -> None:
        """The op's row of the time profile (and its timing log line)."""
        b_memcpy, hard, _ = extra.pop(op.op_id, (0.0, 0.0, 0.0))
        memcpy_ms += b_memcpy
        # host time the backend spent for other rows (a merged run) leaves this op's row
        wall = max(0.0, wall - sum(h for _, _, h in extra.values()))
        if self._time_profile:
            self._profile[op.op_id] = (wall, memcpy_ms, hard, max(0.0, wall - memcpy_ms - hard))
            for sid, (mc, hd, host) in extra.items():  # synthetic ids of merged runs
                self._profile[sid] = (host + mc, mc, hd, max(0.0, host - hd))
        if self._log_time:
            print(f"[{op.op_id:>5}] {op.op_type:<16} wall {wall:9.3f} ms  memcpy "
                  f"{memcpy_ms:8.3f}  hard {hard:8.3f}")

    def _gather(self, op: Any, backend: Backend, sources: tuple[int, ...]
                ) -> tuple[list[Tensor], float]:
        """The op's input tensors (v_ids `sources`), moved to the backend's memory; returns the
        memcpy ms."""
        ins, memcpy_ms = [], 0.0
        values = self._values
        for vid in sources:
            t = values.get(vid)
            if t is None:
                k = next(k for k, v in enumerate(op.outputs if op.op_type == "Input"
                                                 else op.inputs) if v.v_id == vid)
                raise XrtError(f"op {op.op_id} ({op.op_type}) input {k} (v_id {vid}) has no "
                               f"tensor: feed it in inputs or run its producer first")
            if not backend.holds(t):
                t0 = time.perf_counter()
                t = t.to(backend.memRegion())
                memcpy_ms += (time.perf_counter() - t0) * 1e3
            ins.append(t)
        return ins, memcpy_ms


def _check_network(network: Any, where: str) -> None:
    """A session runs an xir Network or NetworkView; anything else is the caller's mistake."""
    if not all(hasattr(network, a) for a in ("ops", "view", "inputs", "outputs")):
        raise InvalidArgumentError(f"{where}: the network must be an xir Network or "
                                   f"NetworkView (network.view(0)), not "
                                   f"{type(network).__name__}")


def _check_tensor(value: Any, tensor: Tensor, what: str) -> None:
    if not isinstance(tensor, Tensor):
        raise TensorError(f"{what} for v_id {value.v_id} must be an xrt.Tensor or array")
    want, got = value.dtype, tensor.dtype()
    if tuple(got.shape) != tuple(want.shape):
        raise TensorError(f"{what} v_id {value.v_id} ('{value.name}') must have shape "
                          f"{list(want.shape)}, got {list(got.shape)}")
    if got.numpy_dtype != want.numpy_dtype:
        raise TensorError(f"{what} v_id {value.v_id} ('{value.name}') must be "
                          f"{want.element_dtype!r} ({want.numpy_dtype}), got {got.numpy_dtype}")
    if not _layouts_agree(want.layout, got.layout):
        raise TensorError(f"{what} v_id {value.v_id} ('{value.name}') is laid out "
                          f"{want.layout.spec}, the tensor says {got.layout.spec}; transpose "
                          f"it or make the tensor without a layout")


def _layouts_agree(a: Any, b: Any) -> bool:
    """Whether two layouts can describe the same tensor: '*' (or no layout) matches any axis."""
    if a is None or b is None or not a.rank or not b.rank:
        return True
    return a.rank == b.rank and all(x[0] == "*" or y[0] == "*" or x == y
                                    for x, y in zip(a.tokens, b.tokens))

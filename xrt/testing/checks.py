"""The contract every xrt backend meets, as checks (docs/plugin-guide.md, "The conformance
kit").

A `Subject` is a backend class and a device URL. `checks(subject)` lists the checks that
apply: registration; op results against the HostBackend reference for every catalogue op the
backend claims (`cases.CASES`, random shapes, each dtype of `conformance_dtypes`); a compiled
network from the plugins (`xrt_load_model`) for a backend that claims HardOps; binding,
lifecycle order and its errors (`CallOrderError`), unsupported ops (`UnsupportedOpError`),
memory region and tensor handling, profile rows, fork, and the snapshot round trip. The
HostBackend is found through the plugin manager, like the backend under test: xrt imports no
plugin.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import CallOrderError, UnsupportedOpError, XrtError
from .cases import CASES, Case, make_case
from .result import ConformanceError, SkipCheck

#: the reference backend's registered name
REFERENCE = "Host"
#: tolerances of a float op against the reference: (rtol, atol) per dtype
TOLERANCE = {"float16": (2e-2, 2e-2), "float32": (1e-4, 1e-5), "float64": (1e-10, 1e-12)}
#: cosine a compiled network's outputs keep against the float network (int8 quantization)
MIN_COSINE = 0.98


@dataclass
class Check:
    """One named check of a subject; `run()` raises ConformanceError or SkipCheck."""

    name: str
    run: Callable[[], None]
    doc: str = ""


@dataclass
class Subject:
    """A backend under test: its class, the device URL it runs on, and what the kit found."""

    backend: type
    device_url: str = ""
    seed: int = 0
    trials: int = 2
    models: tuple[str, ...] = ("tiny_cnn",)
    _claims: dict[str, bool] = field(default_factory=dict)
    _compiled: Any = None

    def __post_init__(self) -> None:
        from ..backend import Backend

        if not (isinstance(self.backend, type) and issubclass(self.backend, Backend)):
            raise XrtError(f"conformance: {self.backend!r} is not an xrt.Backend subclass")
        self.device_url = self.device_url or getattr(self.backend, "default_url", "")
        if not self.device_url:
            raise XrtError(f"conformance: backend '{self.name}' has no default_url; give "
                           f"its device URL (--device URL)")

    @property
    def name(self) -> str:
        return getattr(self.backend, "name", "") or self.backend.__name__

    @property
    def dtypes(self) -> tuple[str, ...]:
        return tuple(getattr(self.backend, "conformance_dtypes", ("float32",)))

    # --- devices and sessions ------------------------------------------------------------------
    @contextmanager
    def devices(self, count: int = 1) -> Iterator[list[Any]]:
        """`count` devices of the subject's URL plus one host device (last), closed after."""
        from ..device import Device

        opened: list[Any] = []
        try:
            for _ in range(count):
                opened.append(Device.Open(self.device_url))
            opened.append(Device.Open(reference().default_url))
            yield opened
        finally:
            for d in opened:
                d.close()

    def claims(self, op: Any, device: Any) -> bool:
        """Whether the backend claims `op` (isOpSupported on a fresh object bound to
        `device`); an UnsupportedOpError from isOpSupported counts as no."""
        b = self.backend.Init()
        b.setDevice(device)
        try:
            return bool(b.isOpSupported(op))
        except UnsupportedOpError:
            return False

    def claimed_ops(self, device: Any) -> list[str]:
        """The catalogue's op types this backend claims (asked once per op type)."""
        if not self._claims:
            for op_type in CASES:
                case = make_case(op_type, self.seed, 0, self.dtypes[0])
                self._claims[op_type] = self.claims(case.op(), device)
        return [t for t, yes in self._claims.items() if yes]

    def compiled(self, device: Any) -> tuple[Any, Any, list[np.ndarray], str] | None:
        """(compiled network, float network, inputs, label) of the first model the plugins
        compile for a target whose HardOps this backend claims (asked with a one-op probe
        network per registered compile target, so nothing is compiled for a backend that
        claims no HardOp); None when there is none."""
        if self._compiled is not None:
            return self._compiled or None
        from .. import plugins

        hook = plugins.plugin_manager().hook
        mine = [t for t, ct in sorted(plugins.registry().compile_targets.items())
                if ct and self.claims(_probe_hardop(ct), device)]
        found: Any = ()
        for model in self.models:
            for target in mine:
                try:
                    net = _loaded(hook.xrt_load_model(model=model, target=target,
                                                      input_size=None))
                    ref = _loaded(hook.xrt_load_model(model=model, target=None,
                                                      input_size=None))
                except XrtError:
                    continue
                if net is None:
                    break  # no plugin loads this model
                sample = hook.xrt_sample_inputs(model=model, network=net, input_size=None)
                inputs = list(sample) if sample is not None else _inputs(net, self.seed)
                found = (net, ref, inputs, f"{model}@{target}")
                break
            if found:
                break
        self._compiled = found
        return found or None

    def network(self, device: Any) -> tuple[Any, list[np.ndarray], str]:
        """A network this backend runs part of, with inputs: a claimed catalogue case, else
        the compiled model. SkipCheck when there is none."""
        ops = self.claimed_ops(device)
        if ops:
            case = make_case(ops[0], self.seed, 0, self.dtypes[0])
            return case.network, case.inputs, f"{case.op_type} case"
        comp = self.compiled(device)
        if comp is None:
            raise SkipCheck(f"{self.name} claims no catalogue op and no HardOp of a model the "
                            f"plugins compile")
        return comp[0], comp[2], comp[3]

    def session(self, net: Any, devices: list[Any]) -> Any:
        from ..session import Session

        sess = Session.Create([self.backend, reference()], net.view(0), devices)
        sess.apply()
        return sess


def reference() -> type:
    """The HostBackend, found through the plugin manager."""
    from .. import plugins

    return plugins.backend_class(REFERENCE)


def _probe_hardop(compile_target: str) -> Any:
    """A one-HardOp network's HardOp compiled for `compile_target` (for isOpSupported)."""
    import xir

    b = xir.NetworkBuilder("conformance_probe")
    x = b.input([1, 4, 4, 32], layout="NHWC")
    b.output(b.op("HardOp", [x], compile_target=compile_target, out_types=[x.dtype]))
    return next(op for op in b.build(validate=False).ops if op.op_type == "HardOp")


def _loaded(net: Any) -> Any:
    if isinstance(net, str):
        from ..cli.run_cmd import load_model

        return load_model(net, None)
    return net


def _inputs(net: Any, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(v.shape).astype(v.dtype.numpy_dtype) for v in net.inputs()]


def _arrays(outs: list[Any]) -> list[np.ndarray]:
    return [np.array(np.asarray(t)) for t in outs]


def _host_run(net: Any, inputs: list[np.ndarray], device: Any) -> list[np.ndarray]:
    from ..session import Session

    sess = Session.Create([reference()], net.view(0), [device])
    try:
        sess.apply()
        return _arrays(sess.forward(inputs))
    finally:
        sess.close()


def _expect(exc: type, what: str, fn: Callable[[], Any]) -> None:
    """`fn()` must raise `exc` (an XrtError); anything else breaks the contract."""
    try:
        fn()
    except exc:
        return
    except Exception as other:
        raise ConformanceError(f"{what}: raised {type(other).__name__} ({other}), the "
                               f"contract says {exc.__name__}") from None
    raise ConformanceError(f"{what}: no error; the contract says {exc.__name__}")


def _same(a: list[np.ndarray], b: list[np.ndarray], what: str) -> None:
    if len(a) != len(b):
        raise ConformanceError(f"{what}: {len(a)} outputs against {len(b)}")
    for k, (x, y) in enumerate(zip(a, b)):
        if x.shape != y.shape or x.dtype != y.dtype or not np.array_equal(x, y, equal_nan=True):
            raise ConformanceError(f"{what}: output {k} differs ({x.shape} {x.dtype} against "
                                   f"{y.shape} {y.dtype}, max |diff| "
                                   f"{_maxdiff(x, y)})")


def _maxdiff(x: np.ndarray, y: np.ndarray) -> str:
    if x.shape != y.shape:
        return "n/a"
    return f"{float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)), initial=0)):.3g}"


# --- the checks --------------------------------------------------------------------------------

def check_registration(s: Subject) -> None:
    """The class is registered under its unique `name`, its FORWARDS is a dict of callables,
    and its device URL opens through the plugin that claims the scheme."""
    from .. import plugins

    name = getattr(s.backend, "name", "")
    if not name:
        raise ConformanceError(f"{s.backend.__name__} has no `name`: backend strings "
                               f"('Name,url;Host') and snapshots need one")
    registered = plugins.registry().backends.get(name)
    if registered is None or registered[0] is not s.backend:
        raise ConformanceError(f"backend '{name}' is not registered by any plugin "
                               f"(xrt_register_backends)")
    forwards = getattr(s.backend, "FORWARDS", None)
    if not isinstance(forwards, dict) or not all(callable(f) for f in forwards.values()):
        raise ConformanceError(f"{s.backend.__name__}.FORWARDS must map op types to forward "
                               f"functions")
    with s.devices():
        pass


def check_op(s: Subject, op_type: str) -> None:
    """Every random case of `op_type` (each declared dtype, `trials` shapes): the op is bound
    to the backend and its outputs match the HostBackend's within the dtype's tolerance."""
    with s.devices() as (dev, host):
        if op_type not in s.claimed_ops(dev):
            raise SkipCheck(f"{s.name} does not claim {op_type}")
        for dtype in s.dtypes:
            rtol, atol = TOLERANCE.get(dtype, (1e-4, 1e-5))
            for trial in range(s.trials):
                case = make_case(op_type, s.seed, trial, dtype)
                _compare_case(s, case, dev, host, rtol, atol)


def _compare_case(s: Subject, case: Case, dev: Any, host: Any, rtol: float, atol: float
                  ) -> None:
    what = f"{case.op_type} {case.description} ({case.network.name})"
    if not s.claims(case.op(), dev):
        raise ConformanceError(f"{what}: {s.name} claimed {case.op_type} on an earlier case "
                               f"but not on this one")
    want = _host_run(case.network, case.inputs, host)
    sess = s.session(case.network, [dev, host])
    try:
        where = sess.backendBindings()[case.op().op_id]
        if not isinstance(where, s.backend):
            raise ConformanceError(f"{what}: bound to {type(where).__name__}, not to {s.name} "
                                   f"which claims it")
        got = _arrays(sess.forward([x.copy() for x in case.inputs]))
    finally:
        sess.close()
    for k, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape or g.dtype != w.dtype:
            raise ConformanceError(f"{what}: output {k} is {g.shape} {g.dtype}, the reference "
                                   f"{w.shape} {w.dtype}")
        if not np.allclose(g, w, rtol=rtol, atol=atol * max(1.0, float(np.abs(w).max(
                initial=0)))):
            raise ConformanceError(f"{what}: output {k} differs from the HostBackend's by up "
                                   f"to {_maxdiff(g, w)} (rtol {rtol}, atol {atol})")


def check_catalogue_coverage(s: Subject) -> None:
    """The op types in the backend's FORWARDS that the catalogue has no case for: their
    results are not checked (skipped, naming them, so the gap is visible)."""
    forwards = set(getattr(s.backend, "FORWARDS", {}) or {})
    missing = sorted(forwards - set(CASES) - {"Input", "Output", "HardOp"})
    if missing:
        raise SkipCheck(f"no catalogue case for {len(missing)} op type(s) of {s.name}: "
                        f"{', '.join(missing)}")


def check_compiled_network(s: Subject) -> None:
    """A model the plugins compile for the backend's target: every HardOp bound to the backend
    and the outputs close to the float network's on the HostBackend (cosine)."""
    with s.devices() as (dev, host):
        comp = s.compiled(dev)
        if comp is None:
            raise SkipCheck(f"{s.name} claims no HardOp of a model the plugins compile")
        net, ref, inputs, label = comp
        want = _host_run(ref, inputs, host) if ref is not None else None
        sess = s.session(net, [dev, host])
        try:
            bound = sess.backendBindings()
            off = [op.op_id for op in net.ops if op.op_type == "HardOp"
                   and not isinstance(bound[op.op_id], s.backend)]
            if off:
                raise ConformanceError(f"{label}: HardOps {off} were not bound to {s.name}")
            got = _arrays(sess.forward(inputs))
        finally:
            sess.close()
    if want is None:
        return
    for k, (g, w) in enumerate(zip(got, want)):
        g64, w64 = g.astype(np.float64).ravel(), w.astype(np.float64).ravel()
        cos = float(g64 @ w64 / max(np.linalg.norm(g64) * np.linalg.norm(w64), 1e-30))
        if g.shape != w.shape or not cos >= MIN_COSINE:
            raise ConformanceError(f"{label}: output {k} {g.shape} has cosine {cos:.4f} to the "
                                   f"float network's {w.shape} (at least {MIN_COSINE})")


def check_lifecycle(s: Subject) -> None:
    """init -> apply (once) -> forwards -> deinit, with CallOrderError for every other
    order; deinit is idempotent."""
    with s.devices() as (dev, _host):
        net, inputs, label = s.network(dev)
        view = _claimed_view(s, net, dev)
        b = s.backend.Init()
        _expect(CallOrderError, f"{s.name}: apply() before init()", b.apply)
        _expect(CallOrderError, f"{s.name}: fork() before init()", b.fork)
        b.init(view, dev)
        _expect(CallOrderError, f"{s.name}: snapshotState() before apply()", b.snapshotState)
        b.apply()
        try:
            if not b.is_applied:
                raise ConformanceError(f"{s.name}: is_applied is False after apply()")
            _expect(CallOrderError, f"{s.name}: a second apply()", b.apply)
            _expect(CallOrderError, f"{s.name}: init() after apply()",
                    lambda: b.init(view, dev))
        finally:
            b.deinit()
        b.deinit()  # idempotent: a second call must not raise
        _expect(CallOrderError, f"{s.name}: fork() after deinit()", b.fork)
        sess = s.session(net, [dev, _host])
        sess.close()
        _expect(CallOrderError, f"{s.name} ({label}): Session.forward after close()",
                lambda: sess.forward(inputs))


def _claimed_view(s: Subject, net: Any, dev: Any) -> Any:
    ids = [op.op_id for op in net.ops if s.claims(op, dev)]
    if not ids:
        raise SkipCheck(f"{s.name} claims no op of its test network")
    return net.view(ids)


def check_unsupported_op(s: Subject) -> None:
    """forwardOp on an op the backend does not claim raises UnsupportedOpError."""
    with s.devices() as (dev, _host):
        net, _, _ = s.network(dev)
        view = _claimed_view(s, net, dev)
        from .. import plugins

        candidates = [make_case(t, s.seed, 0, s.dtypes[0]).op() for t in CASES]
        candidates += [_probe_hardop(ct) for ct in
                       sorted(set(plugins.registry().compile_targets.values())) if ct]
        foreign = next((op for op in candidates if not s.claims(op, dev)), None)
        if foreign is None:
            raise SkipCheck(f"{s.name} claims every catalogue op and every HardOp")
        b = s.backend.Init()
        b.init(view, dev)
        try:
            b.apply()
            _expect(UnsupportedOpError, f"{s.name}.forwardOp({foreign.op_type}), an op it "
                                        f"does not claim", lambda: b.forwardOp(foreign, []))
        finally:
            b.deinit()


def check_memory_and_tensors(s: Subject) -> None:
    """Outputs are xrt Tensors of the declared shapes and dtypes, readable on the host;
    the backend holds a tensor of its own region; inputs are left untouched; forwards are
    deterministic; caller-allocated outputs get the same results."""
    from ..tensor import Tensor

    with s.devices() as (dev, host):
        net, inputs, label = s.network(dev)
        sess = s.session(net, [dev, host])
        try:
            mine = next(b for b in sess.backends if isinstance(b, s.backend))
            region = mine.memRegion()
            if not hasattr(region, "malloc"):
                raise ConformanceError(f"{s.name}.memRegion() gave {region!r}, not a memory "
                                       f"region")
            probe = Tensor(np.zeros(4, np.float32)).to(region)
            if not mine.holds(probe):
                raise ConformanceError(f"{s.name}.holds() is False for a tensor on its own "
                                       f"memRegion()")
            kept = [x.copy() for x in inputs]
            outs = sess.forward(inputs)
            for k, (x, y) in enumerate(zip(inputs, kept)):
                if not np.array_equal(x, y, equal_nan=True):
                    raise ConformanceError(f"{label}: the forward changed input {k}")
            for v, t in zip(net.outputs(), outs):
                if not isinstance(t, Tensor):
                    raise ConformanceError(f"{label}: output v{v.v_id} is a "
                                           f"{type(t).__name__}, not an xrt.Tensor")
                arr = np.asarray(t)
                if tuple(arr.shape) != tuple(v.dtype.shape) or \
                        arr.dtype != v.dtype.numpy_dtype:
                    raise ConformanceError(f"{label}: output v{v.v_id} is {arr.shape} "
                                           f"{arr.dtype}, declared {list(v.dtype.shape)} "
                                           f"{v.dtype.numpy_dtype}")
            first = _arrays(outs)
            _same(_arrays(sess.forward(inputs)), first, f"{label}: a second forward")
            given = [Tensor.empty(v.dtype, host.defaultMemRegion()) for v in net.outputs()]
            sess.forward(inputs, given)
            _same(_arrays(given), first, f"{label}: forward into caller-allocated outputs")
        finally:
            sess.close()


def has_forward_segment(backend: type) -> bool:
    """Whether a backend class implements the optional `forwardSegment` (the base has none)."""
    return callable(getattr(backend, "forwardSegment", None))


def check_forward_segment(s: Subject) -> None:
    """A backend with the optional `forwardSegment`: a plain `Session.forward` calls it (one
    call per run of consecutive ops on the backend) and gives exactly, byte for byte, what the
    op-by-op forward gives (`forwardOp` per op, taken when a callback asks about single ops),
    forward after forward."""
    with s.devices() as (dev, host):
        net, inputs, label = s.network(dev)
        sess = s.session(net, [dev, host])
        try:
            mine = next(b for b in sess.backends if isinstance(b, s.backend))
            calls = [0]
            segment = mine.forwardSegment

            def counted(*args: Any, **kwargs: Any) -> Any:
                calls[0] += 1
                return segment(*args, **kwargs)

            mine.forwardSegment = counted
            try:
                plain = _arrays(sess.forward(inputs))
            except XrtError as exc:
                raise ConformanceError(f"{label}: the plain forward through "
                                       f"{s.name}.forwardSegment failed: {exc}") from None
            if not calls[0]:
                raise SkipCheck(f"{label}: no op of the network ran on {s.name}")
            segments = calls[0]
            sess.setPostCallBack(lambda *args: None)  # asks about single ops: per-op path
            per_op = _arrays(sess.forward(inputs))
            if calls[0] != segments:
                raise ConformanceError(f"{label}: a forward with a callback called "
                                       f"{s.name}.forwardSegment; it goes op by op")
            _same(plain, per_op, f"{label}: forwardSegment (plain forward) against forwardOp "
                                 f"(op by op)")
            sess.setPostCallBack(None)
            _same(_arrays(sess.forward(inputs)), per_op,
                  f"{label}: a plain forward after an op-by-op one")
        finally:
            sess.close()


def check_profile(s: Subject) -> None:
    """With the time profile on, every op of the backend has a row of four finite,
    non-negative times; a backend with `profileInfo` gives per-op hardware figures."""
    from ..profiling import HW_KEYS, profile_rows

    with s.devices() as (dev, host):
        net, inputs, label = s.network(dev)
        sess = s.session(net, [dev, host])
        try:
            sess.enableTimeProfile(True)
            sess.forward(inputs)
            results = sess.timeProfileResults()
            bound = sess.backendBindings()
            for op in net.ops:
                if not isinstance(bound[op.op_id], s.backend):
                    continue
                row = results.get(op.op_id)
                if row is None or len(row) != 4:
                    raise ConformanceError(f"{label}: op {op.op_id} ({op.op_type}) has no "
                                           f"time profile row")
                if not all(np.isfinite(x) and x >= 0 for x in row):
                    raise ConformanceError(f"{label}: op {op.op_id} profile row {row} is not "
                                           f"four non-negative times")
            mine = next(b for b in sess.backends if isinstance(b, s.backend))
            leftover = mine.takeTimeElapses()
            if leftover:
                raise ConformanceError(f"{label}: {s.name} kept time records {sorted(leftover)}"
                                       f" the session should have taken")
            rows = profile_rows(sess)
            names = {r["backend"] for r in rows if isinstance(bound.get(r["op_id"]),
                                                              s.backend)}
            if names - {s.name}:
                raise ConformanceError(f"{label}: profile rows name backend {names}, not "
                                       f"{s.name!r}")
            info = getattr(mine, "profileInfo", None)
            if callable(info):
                for oid, figures in info().items():
                    bad = {k: x for k, x in figures.items() if k in HW_KEYS and not x >= 0}
                    if bad:
                        raise ConformanceError(f"{label}: profileInfo of op {oid} has "
                                               f"negative figures {bad}")
        finally:
            sess.close()


def check_fork(s: Subject) -> None:
    """Forks of the applied backends run the network to the same outputs."""
    from ..session import Session

    with s.devices() as (dev, host):
        net, inputs, label = s.network(dev)
        sess = s.session(net, [dev, host])
        forks: list[Any] = []
        try:
            want = _arrays(sess.forward(inputs))
            try:
                forks = [b.fork() for b in sess.backends]
            except UnsupportedOpError as exc:
                raise SkipCheck(f"{s.name} does not fork here: {exc}") from None
            other = Session.CreateWithBackends(sess.network_view, forks)
            other.apply()
            _same(_arrays(other.forward(inputs)), want, f"{label}: forward of the forks")
        finally:
            for f in forks:
                f.deinit()
            sess.close()


def check_snapshot(s: Subject) -> None:
    """dumpSnapshot -> CreateWithSnapshot gives a session with the same outputs, restored on
    a device opened after the first one was closed (as another process would: a server's
    on-chip memory is given back when its client goes)."""
    from ..session import Session

    with s.devices(2) as (dev, dev2, host):
        net, inputs, label = s.network(dev)
        sess = s.session(net, [dev, host])
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "conformance.snap")
            try:
                want = _arrays(sess.forward(inputs))
                try:
                    sess.dumpSnapshot(path)
                except UnsupportedOpError as exc:
                    raise SkipCheck(f"{s.name} does not write snapshots: {exc}") from None
            finally:
                sess.close()
                dev.close()
            again = Session.CreateWithSnapshot(path, [type(b) for b in sess.backends],
                                               [dev2, host])
            try:
                _same(_arrays(again.forward(inputs)), want, f"{label}: restored snapshot")
            finally:
                again.close()


def checks(s: Subject) -> list[Check]:
    """Every check of the contract for subject `s`, in the order they run."""
    out = [Check("registration", lambda: check_registration(s), check_registration.__doc__)]
    for op_type in CASES:
        out.append(Check(f"ops[{op_type}]", lambda t=op_type: check_op(s, t),
                         check_op.__doc__))
    for name, fn in (("catalogue_coverage", check_catalogue_coverage),
                     ("compiled_network", check_compiled_network),
                     ("lifecycle", check_lifecycle), ("unsupported_op", check_unsupported_op),
                     ("memory_and_tensors", check_memory_and_tensors), ("profile", check_profile),
                     ("fork", check_fork), ("snapshot", check_snapshot)):
        out.append(Check(name, lambda f=fn: f(s), fn.__doc__))
    if has_forward_segment(s.backend):  # optional: checked where the backend has it
        out.append(Check("forward_segment", lambda: check_forward_segment(s),
                         check_forward_segment.__doc__))
    return out

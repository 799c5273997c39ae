"""HostBackend: runs every registry op except HardOp on the CPU with numpy kernels.

Kernels are pure functions of numpy arrays (`host_backend.ops`); this class only adapts them to
the runtime: Params come from the op, feature maps from the input tensors, results become host
tensors (or are written into caller-allocated ones).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xir.types import ScalarType
from xrt.backend import Backend
from xrt.errors import TensorError, UnsupportedOpError, XrtError
from xrt.tensor import Tensor

from . import fused
from .ops import FLOAT_KERNELS, INT_KERNELS
from .ops.cast import edge_cast

FP64 = ScalarType("fp", 64)


def _forward_input(op, inputs, outputs, backend):
    return list(inputs)


def _forward_output(op, inputs, outputs, backend):
    return []


#: layout ops that are the identity when they change no shape
_PASS_THROUGH = frozenset({"AlignAxis", "PruneAxis"})


def _uses_types(op) -> bool:
    """Ops run by an integer kernel: Cast, and every op with a quantized value."""
    return op.op_type == "Cast" or op.is_quantized()


class _Plan:
    """What forwarding one op needs that does not change between forwards (the op's kernel,
    whether it takes types, its output types and numpy dtypes), made on its first forward."""

    __slots__ = ("kernel", "typed", "fake", "in_types", "out_types", "params", "outs",
                 "identity", "no_params", "edge")

    def __init__(self, op, backend: HostBackend) -> None:
        self.kernel = backend.kernelFor(op)
        self.typed = _uses_types(op)
        self.fake = self.typed and backend.fakeQf
        self.in_types = [v.dtype for v in op.inputs]
        self.out_types = [v.dtype for v in op.outputs]
        self.params = [v.is_params for v in op.inputs]
        #: every input is fed (no Params): the arrays are the input tensors' own
        self.no_params = not any(self.params)
        outs = []
        for value in op.outputs:
            vtype = value.dtype
            quantized = vtype.is_quantized()
            if self.fake and quantized:
                # fakeQf: quantized values travel as float64 in integer units
                vtype = vtype.with_element(FP64)
            outs.append((vtype, vtype.numpy_dtype, tuple(vtype.shape),
                         self.fake and quantized))
        self.outs = outs
        #: an AlignAxis already aligned or a PruneAxis keeping the whole axis: its input is
        #: its result (the vendor's graphs put them around every Cast)
        self.identity = op.op_type in _PASS_THROUGH and len(op.inputs) == 1 and \
            len(op.outputs) == 1 and not self.params[0] and \
            tuple(self.in_types[0].shape) == outs[0][2] and \
            self.in_types[0].numpy_dtype == outs[0][1] and not outs[0][3]
        #: a network's edge Cast (one-scale quantize / dequantize of an untiled map): the
        #: function of its input array that `cast` would run (`cast.edge_cast`)
        self.edge = edge_cast(self.in_types[0], self.out_types[0]) \
            if op.op_type == "Cast" and not self.fake and len(op.inputs) == 1 and \
            len(op.outputs) == 1 and not self.params[0] else None


def _forward_kernel(op, inputs, outputs, backend: HostBackend):
    plan = backend._plans.get(op.op_id)
    if plan is None:
        plan = backend._plans[op.op_id] = _Plan(op, backend)
    if plan.identity and not outputs:
        vtype, npdt, shape, _ = plan.outs[0]
        arr = inputs[0].numpy()
        if arr.dtype == npdt and arr.shape == shape:
            return [Tensor.over_array(arr, vtype, backend.memRegion())]
    if plan.edge is not None and not outputs and len(inputs) == 1:
        y = plan.edge(inputs[0].numpy())  # a fresh C-contiguous array of the output's type
        if y is not None:
            return [Tensor.over_array(y, plan.outs[0][0], backend.memRegion())]
    if plan.no_params and len(inputs) == len(op.inputs):
        arrays = [t.numpy() for t in inputs]
    else:
        arrays = _arrays(op, inputs, plan)
    if plan.typed:
        # a Params' type is read at each forward: a refit (Session.refitWeights) gives a
        # layer's weights and bias new scales in place
        in_types = plan.in_types if plan.no_params else [v.dtype for v in op.inputs]
        results = plan.kernel(arrays, op.attrs, in_types, plan.out_types, fake=plan.fake)
    else:
        results = plan.kernel(arrays, op.attrs)
    tensors = []
    region = backend.memRegion()
    for i, ((vtype, npdt, shape, fake_q), arr) in enumerate(zip(plan.outs, results)):
        arr = np.asarray(arr)
        if arr.dtype != npdt:
            arr = arr.astype(npdt)
        if i < len(outputs) and not fake_q:
            dst = outputs[i]
            np.copyto(dst.numpy(), arr.reshape(shape))
            tensors.append(dst)
        else:
            flags = arr.flags
            if not (flags.c_contiguous and flags.writeable):
                arr = np.array(arr, order="C")
            if arr.shape != shape:
                arr = arr.reshape(shape)
            tensors.append(Tensor.over_array(arr, vtype, region))
    return tensors


def _arrays(op, inputs, plan: _Plan) -> list[np.ndarray]:
    """The kernel's input arrays: Params from the op, feature maps from `inputs` in order."""
    arrays: list[np.ndarray] = []
    feed = iter(inputs)
    for v, is_params in zip(op.inputs, plan.params):
        if is_params:
            if v.data is None:
                raise TensorError(f"op {op.op_id} ({op.op_type}) params v_id {v.v_id} have no "
                                  f"data: call network.loadParamsFromFile(raw) first")
            arrays.append(v.data)
        else:
            arrays.append(next(feed).numpy())
    return arrays


class HostBackend(Backend):
    """The CPU reference backend (the xrt Python reference's HostBackend).

    Float ops run the float kernels; ops with quantized element types (and Cast) run the exact
    integer kernels of docs/quantization.md. `setFakeQf(True)` (before apply) switches the
    integer kernels to fakeQf: the same scales, no rounding, no saturation.
    """

    name = "Host"
    default_url = "host://"
    FORWARDS = {"Input": _forward_input, "Output": _forward_output,
                **{op_type: _forward_kernel for op_type in {*FLOAT_KERNELS, *INT_KERNELS}}}

    def __init__(self, other: Any = None) -> None:
        super().__init__(other)
        self._plans: dict[int, _Plan] = {}
        self._segments: dict[tuple, list] = {}
        self._region = None
        if not isinstance(other, Backend):
            self._fake_qf = False

    def setFakeQf(self, enable: bool) -> None:
        """fakeQf mode (the vendor's name): fixed-point scales without rounding or saturation,
        to tell rounding loss from saturation loss. Set it before apply()."""
        self._require_not_applied("setFakeQf")
        self._fake_qf = bool(enable)
        self._plans.clear()

    def _fork(self, parent: Backend) -> None:
        """A fork plans its ops on its own (a dict the two threads would both write)."""
        self._plans = dict(parent._plans)
        self._segments = dict(parent._segments)

    def forwardSegment(self, ops: tuple[Any, ...], feeds: dict[int, Tensor],
                       wanted: tuple[int, ...]) -> list[Tensor]:
        """Run consecutive ops of the view in one call (a Session's plain forward): `feeds`
        holds the tensors of the values they read from outside (v_id -> tensor), the result
        is a tensor per v_id of `wanted`. Each op runs as `forwardOp` runs it, except float
        Conv2d chains (Conv2d, BatchNorm2d, Add, Relu) whose intermediate values nobody reads:
        those run in one pass over the convolution's result (`fused`), byte for byte the
        op-by-op results. The plan, made on the first call, holds each op's forward function
        and the ids of the values it reads and makes (`_plan_segment`), so a forward calls
        the functions without `forwardOp`'s look-ups and copies."""
        self._require_forwardable("forwardSegment")
        # ops hash by identity: the session's plan passes the same tuple every forward
        key = (ops if type(ops) is tuple else tuple(ops), wanted)
        steps = self._segments.get(key)
        if steps is None:
            steps = self._segments[key] = _plan_segment(self, ops, wanted)
        values = dict(feeds)
        # a subclass's own forwardOp is honoured: every op goes through it
        own = type(self).forwardOp is not Backend.forwardOp
        for step in steps:
            if type(step) is tuple:
                op, fn, sources, outs = step
                if not own:
                    try:
                        ins = [values[v] for v in sources]
                    except KeyError as exc:
                        raise _unfed(self, op, exc) from None
                    res = fn(op, ins, [], self)
                    if len(res) != len(outs):
                        raise _miscount(self, op, res)
                    values.update(zip(outs, res))
                    continue
                todo = [op]
            elif isinstance(step, fused.Chain):
                if not own:
                    out = self._chain(step, values)
                    if out is not None:
                        values[step.last.outputs[0].v_id] = out
                        continue
                todo = [o for o in (step.conv, step.bn, step.add, step.relu) if o is not None]
            else:
                todo = [step]
            for op in todo:
                sources = op.outputs if op.op_type == "Input" else op.inputs
                try:
                    ins = [values[v.v_id] for v in sources if not v.is_params]
                except KeyError as exc:
                    raise _unfed(self, op, exc) from None
                outs = self.forwardOp(op, ins, [])
                if len(outs) != len(op.outputs):
                    raise _miscount(self, op, outs)
                values.update(zip((v.v_id for v in op.outputs), outs))
        return [values[vid] for vid in wanted]

    def _chain(self, chain: fused.Chain, values: dict[int, Tensor]) -> Tensor | None:
        """A fused chain's output tensor, or None where it must run op by op."""
        conv = chain.conv
        if conv.inputs[0].v_id not in values or (chain.residual is not None
                                                 and chain.residual not in values):
            return None  # op by op: the missing value is named there
        plan = self._plans.get(conv.op_id)
        if plan is None:
            plan = self._plans[conv.op_id] = _Plan(conv, self)
        conv_in = _arrays(conv, [values[conv.inputs[0].v_id]], plan)
        bn_in = None
        if chain.bn is not None:
            bn_in = [v.data for v in chain.bn.inputs[1:]]
            if any(d is None for d in bn_in):
                return None  # op by op: BatchNorm2d's forward names the Params without data
        res = values[chain.residual].numpy() if chain.residual is not None else None
        y = fused.run_chain(chain, conv_in, bn_in, res)
        if y is None:
            return None
        vtype = chain.last.outputs[0].dtype
        return Tensor.over_array(y.reshape(tuple(vtype.shape)), vtype, self.memRegion())

    @property
    def fakeQf(self) -> bool:
        return getattr(self, "_fake_qf", False)

    def isOpSupported(self, op: Any) -> bool:
        if op.op_type in ("Input", "Output"):
            return True
        table = INT_KERNELS if _uses_types(op) else FLOAT_KERNELS
        return op.op_type in table

    def kernelFor(self, op: Any):
        """The numpy kernel that computes `op`: the integer kernel (signature with types) for
        Cast and ops with quantized values, the float kernel otherwise."""
        typed = _uses_types(op)
        kernel = (INT_KERNELS if typed else FLOAT_KERNELS).get(op.op_type)
        if kernel is None:
            kind = "integer" if typed else "float"
            raise UnsupportedOpError(f"HostBackend has no {kind} kernel for {op.op_type} "
                                     f"(op {op.op_id})")
        return kernel

    def memRegion(self):
        if self._region is None:
            from xrt.device import HostDevice

            self._region = HostDevice.MemRegion()
        return self._region


def _plan_segment(backend: HostBackend, ops: tuple[Any, ...], wanted: tuple[int, ...]
                  ) -> list[Any]:
    """`fused.plan_segment`'s steps with each single op that has a forward function as
    ``(op, function, ids of the values it reads, ids of its outputs)``."""
    steps: list[Any] = []
    for step in fused.plan_segment(ops, wanted):
        fn = backend.getForwardFunc(step) if not isinstance(step, fused.Chain) else None
        if fn is None:
            steps.append(step)  # a chain, or an op forwardOp refuses (it names the op)
            continue
        sources = step.outputs if step.op_type == "Input" else step.inputs
        steps.append((step, fn, tuple(v.v_id for v in sources if not v.is_params),
                      tuple(v.v_id for v in step.outputs)))
    return steps


def _unfed(backend: HostBackend, op: Any, exc: KeyError) -> XrtError:
    return XrtError(f"{type(backend).__name__}.forwardSegment: op {op.op_id} ({op.op_type}) "
                    f"reads value {exc.args[0]}, which neither the feeds nor an earlier op of "
                    f"the segment gives")


def _miscount(backend: HostBackend, op: Any, outs: list[Tensor]) -> XrtError:
    return XrtError(f"{type(backend).__name__} returned {len(outs)} tensors for op {op.op_id} "
                    f"({op.op_type}), which has {len(op.outputs)} outputs")

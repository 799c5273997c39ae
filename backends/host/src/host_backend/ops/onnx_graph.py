"""Host kernel of xir.ops.onnx_graph: run the carried ONNX graph.

The graph runs on onnxruntime (CPU provider, one intra-op and one inter-op thread, sequential
execution: the HostBackend is single-threaded and a session spinning its own pool beside the
numpy kernels would only steal cores). Where onnxruntime is not installed, cannot build the
graph (an op or opset it lacks) or has no kernel for it at run time, onnx's reference
evaluator runs it instead. A runner is built once per model (keyed by the op's sha256
`digest`, which is checked against the bytes when the runner is built) and kept in a small
LRU cache, so a forward costs one dictionary look-up before the run.

Errors become xrt errors naming the carried ONNX ops and nodes: `UnsupportedOpError` when no
runtime can build the graph, `InvalidArgumentError` when the run fails on the inputs it got,
`TensorError` when the model bytes do not match the digest or a result does not have the
shape the graph declares (the HostBackend casts results to the declared element types).

The same kernel serves float and integer tensors (ONNX decides the arithmetic of each dtype).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from xir.ops.onnx_graph import model_digest
from xrt.errors import InvalidArgumentError, TensorError, UnsupportedOpError

#: carried ops that run on the reference first, with the reason (onnxruntime still runs them
#: where the onnx package is missing)
REFERENCE_FIRST = {
    "DFT": "onnxruntime's float32 DFT is off by ~1e-4 of the signal's scale; the reference "
           "computes with numpy's FFT",
    "STFT": "as DFT (onnxruntime leaves ~1e-5 of the signal's scale where the spectrum is 0)",
    "Attention": "onnxruntime's Attention (opset 23) leaves the causal mask out of its "
                 "qk_matmul_output and refuses 4-D masks with padded keys; the reference "
                 "follows the specification (numpy matmuls)",
}

#: runners kept alive (sessions of tiny graphs cost ~0.1-1 ms to build, a few hundred KB each)
CACHE_SIZE = 128

_RUNNERS: OrderedDict[str, _Runner] = OrderedDict()
_LOCK = threading.Lock()


def _label(attrs: dict) -> str:
    ops = "+".join(attrs.get("onnx_ops") or ["?"])
    nodes = [n for n in attrs.get("onnx_nodes") or [] if n]
    return f"OnnxGraph({ops})" + (f" (node {', '.join(map(repr, nodes))})" if nodes else "")


def _ort_session(data: bytes):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.log_severity_level = 4  # errors come back as exceptions; keep stderr quiet
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def _dims(shape: Any) -> list[int | None] | None:
    """A declared output shape: ints where static, None where symbolic or unknown."""
    if shape is None:
        return None
    return [d if isinstance(d, int) and d >= 0 else None for d in shape]


class _Runner:
    """One carried model, ready to run: an onnxruntime session or the reference evaluator."""

    def __init__(self, data: bytes, attrs: dict) -> None:
        self.label = _label(attrs)
        self.data = data
        self.engine = ""
        self.ort: Any = None
        self.ref: Any = None
        self.ort_error: BaseException | str | None = None
        if any(t in REFERENCE_FIRST for t in attrs.get("onnx_ops") or []):
            try:
                self._use_reference()
                return
            except UnsupportedOpError:
                self.ref = None  # no onnx package: onnxruntime it is
        try:
            self.ort = _ort_session(data)
            self.engine = "onnxruntime"
            self.input_names = [i.name for i in self.ort.get_inputs()]
            self.output_names = [o.name for o in self.ort.get_outputs()]
            # onnxruntime reports an unknown rank as []: no check of scalars against it
            self.out_shapes = [_dims(o.shape) if o.shape else None
                               for o in self.ort.get_outputs()]
        except ImportError as exc:
            self.ort_error = exc
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
            self.ort_error = exc
        if self.ort is None:
            self._use_reference()

    def _use_reference(self) -> None:
        """Build the reference evaluator (names and declared output shapes from the model)."""
        try:
            import onnx
            from onnx.reference import ReferenceEvaluator

            model = onnx.load_from_string(self.data)
            ref = ReferenceEvaluator(model)
        except Exception as exc:  # noqa: BLE001 - neither runtime can build it
            first = f"onnxruntime: {self.ort_error}; " if self.ort_error is not None else ""
            raise UnsupportedOpError(
                f"{self.label}: no runtime can run the carried ONNX graph ({first}onnx "
                f"reference: {type(exc).__name__}: {exc})".replace("\n", " ")) from exc
        self.ref = ref
        self.engine = "reference"
        self.input_names = list(ref.input_names)
        self.output_names = list(ref.output_names)
        self.out_shapes = [
            _dims([d.dim_value if d.HasField("dim_value") else None
                   for d in o.type.tensor_type.shape.dim])
            if o.type.tensor_type.HasField("shape") else None for o in model.graph.output]

    def run(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        """The graph's outputs for these inputs, checked against the declared shapes."""
        if len(arrays) != len(self.input_names):
            raise InvalidArgumentError(
                f"{self.label}: the carried graph has {len(self.input_names)} inputs "
                f"({self.input_names}), the op feeds {len(arrays)}")
        outs = self._run(dict(zip(self.input_names, arrays)))
        for name, want, got in zip(self.output_names, self.out_shapes, outs):
            if want is not None and (len(want) != got.ndim or any(
                    w is not None and w != g for w, g in zip(want, got.shape))):
                raise TensorError(f"{self.label}: output '{name}' came out "
                                  f"{list(got.shape)}, the graph declares "
                                  f"{['?' if w is None else w for w in want]}")
        return outs

    def _run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        if self.ort is not None:
            try:
                return [np.asarray(r) for r in self.ort.run(None, feeds)]
            except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
                ort_error = exc
        else:
            ort_error = None
        # onnxruntime builds some graphs it cannot run (ConvInteger with per-channel zero
        # points: "Non per-tensor quantization is not supported now"): where the reference
        # runs them, it does from then on; where it fails too, both errors are reported
        try:
            if self.ref is None:
                self.ort_error = ort_error
                self._use_reference()
            with np.errstate(all="ignore"):  # IEEE results (a masked row's NaN) are the spec's
                res = [np.asarray(r) for r in self.ref.run(None, feeds)]
        except Exception as exc:  # noqa: BLE001 - the reference raises anything
            first = f"onnxruntime: {ort_error}; " if ort_error is not None else ""
            raise InvalidArgumentError(f"{self.label}: the carried graph fails on these inputs "
                                       f"({first}onnx reference: {type(exc).__name__}: {exc})"
                                       .replace("\n", " ")) from exc
        self.ort = None
        return res


def runner(data: np.ndarray, attrs: dict) -> _Runner:
    """The cached runner of this model (built, and its bytes checked, on first use)."""
    digest = attrs.get("digest", "")
    with _LOCK:
        got = _RUNNERS.get(digest)
        if got is not None:
            _RUNNERS.move_to_end(digest)
            return got
    raw = np.ascontiguousarray(data).view(np.uint8).tobytes()
    if model_digest(raw) != digest:
        raise TensorError(f"{_label(attrs)}: the model bytes ({len(raw)}) do not have the "
                          f"sha256 the op records: the blob is corrupt or belongs to another op")
    made = _Runner(raw, attrs)
    with _LOCK:
        _RUNNERS[digest] = made
        while len(_RUNNERS) > CACHE_SIZE:
            _RUNNERS.popitem(last=False)
    return made


def onnx_graph(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """Run the carried graph: `inputs` are the graph's inputs then the model bytes (uint8)."""
    if not inputs:
        raise InvalidArgumentError(f"{_label(attrs)}: no model bytes (the last input)")
    run = runner(inputs[-1], attrs)
    outs = run.run(list(inputs[:-1]))
    return [np.asarray(o) for o in outs]


FLOAT_KERNELS: dict = {"OnnxGraph": onnx_graph}
INT_KERNELS: dict = {}

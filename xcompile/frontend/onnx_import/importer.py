"""`_Importer`: walks an ONNX graph node by node and emits the float xir network.

Each node either folds (all inputs constant: evaluated with onnx's reference evaluator) or goes
to its registered handler; a node no handler takes (or whose handler refuses it) is carried
whole by an OnnxGraph op (`handlers.generic`). An If whose condition folds to a constant is
replaced by the nodes of the branch it takes, which import like any other. Nodes that cannot be
expressed even so are collected, so one error lists them all. The finished network goes
through the clean-up passes and is validated.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from xcompile.frontend.onnx_import.cleanup import _optimize
from xcompile.frontend.onnx_import.handlers import SUPPORTED_ONNX_OPS, generic
from xcompile.frontend.onnx_import.loading import _onnx
from xcompile.frontend.onnx_import.registry import _HANDLERS, _Unsupported
from xcompile.frontend.onnx_import.tensor import _T, NHWC, _ident
from xcompile.refit.provenance import (
    GRAPH_TAG,
    INITIALIZERS_TAG,
    SRC,
    graph_digest,
    initializer_digest,
    leaf,
)
from xir.errors import (
    DynamicShapeError,
    OnnxImportError,
    OnnxModelError,
    UnsupportedOnnxOpError,
    XirError,
)
from xir.network import Network
from xir.ops.base import OP_REGISTRY, Operation
from xir.types import Layout, TensorType
from xir.values import Params, Value

_RANDOM = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
           "Multinomial", "Bernoulli"}
#: never folded by the reference evaluator: random draws, and the control-flow ops (If
#: inlines a constant condition's branch; Loop / Scan fold through the fallback's runtime)
_NO_FOLD = _RANDOM | {"If", "Loop", "Scan"}

log = logging.getLogger(__name__)


def _attrs(node) -> dict[str, Any]:
    onnx = _onnx()
    out = {}
    for a in node.attribute:
        v = onnx.helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        out[a.name] = v
    return out


def _read_names(graph) -> set[str]:
    """Every name a node of `graph` or of its subgraphs reads (subgraph outputs included)."""
    out: set[str] = set()
    for node in graph.node:
        out.update(node.input)
        for g in generic.subgraphs(node):
            out |= _read_names(g)
            out.update(o.name for o in g.output)
    return out


_TILE = 256
"""Side of the blocks `c_order` copies a large transposed array in (a 256 x 256 float32
block, 256 KiB, stays in the L2 cache while it is read across and written along)."""


def c_order(data: np.ndarray) -> np.ndarray:
    """`data` in C order (`np.ascontiguousarray`), a large transposed weight copied block by
    block over its first and last axes: numpy's one-pass copy of a transposed matrix reads
    one element per cache line (a vgg19 FC weight's 400 MB: 0.85 s, in blocks 0.28 s)."""
    if data.flags.c_contiguous or data.ndim < 2 or data.size < _TILE * _TILE:
        return np.ascontiguousarray(data)
    out = np.empty(data.shape, data.dtype)
    for i in range(0, data.shape[0], _TILE):
        for j in range(0, data.shape[-1], _TILE):
            out[i:i + _TILE, ..., j:j + _TILE] = data[i:i + _TILE, ..., j:j + _TILE]
    return out


def _moves_only_unit_axes(shape: tuple[int, ...], rel: list[int]) -> bool:
    """True when transposing `shape` by `rel` keeps the non-unit axes in order (= a reshape)."""
    kept = [a for a in rel if shape[a] != 1]
    return kept == sorted(kept)


class _Importer:
    def __init__(self, model, input_shapes: dict[str, list[int]] | None, name: str | None,
                 file: str | None, input_values: dict[str, Any] | None = None) -> None:
        onnx = _onnx()
        self.onnx = onnx
        self.model = model
        self.file = file
        self.graph = model.graph
        self.opset = 1
        for imp in model.opset_import:
            if imp.domain in ("", "ai.onnx"):
                self.opset = int(imp.version)
        self.input_shapes = dict(input_shapes or {})
        #: graph inputs fixed to a value (a VAD's sample rate): constants, not network inputs,
        #: so what they decide folds (an If on `sr == 16000` inlines its branch)
        self.input_values = dict(input_values or {})
        self.net = Network(name or model.graph.name or "onnx_model", framework_kind="onnx",
                           framework_version=f"opset {self.opset}")
        self.ops: list[Operation] = []
        self.tensors: dict[str, _T] = {}
        self.poisoned: set[str] = set()
        self.unsupported: list[tuple[str, str, str]] = []
        self._op_id = 0
        self.node: Any = None
        self.used = _read_names(self.graph) | {o.name for o in self.graph.output}

    def reads(self, node, index: int) -> bool:
        """True when output `index` of `node` is read by a node or is a graph output."""
        return index < len(node.output) and node.output[index] in self.used

    # --- emitting xir ops --------------------------------------------------------------------
    def newOpId(self) -> int:
        """A fresh op id (ops are numbered in the order they are emitted)."""
        self._op_id += 1
        return self._op_id - 1

    def emit(self, op_type: str, inputs: list[Value], layouts: list[str | None] | None = None,
             name: str | None = None, **attrs: Any) -> list[Value]:
        cls = OP_REGISTRY[op_type]
        label = name if name is not None else (self.node.name if self.node is not None else "")
        op = cls(inputs, [], op_id=self._op_id, name=label, **attrs)
        self._op_id += 1
        types = op.infer_types([v.dtype for v in inputs])
        outs = []
        for i, t in enumerate(types):
            lay = layouts[i] if layouts and i < len(layouts) else None
            layout = Layout(lay) if lay and len(lay) == t.rank else Layout.any(t.rank)
            outs.append(self.net.newValue(TensorType(t.element_dtype, t.shape, layout)))
        op.outputs = outs
        op.check_arity()
        self.ops.append(op)
        return outs

    def emit1(self, op_type: str, inputs: list[Value], layout: str | None = None,
              **attrs: Any) -> Value:
        return self.emit(op_type, inputs, [layout], **attrs)[0]

    def params(self, data: np.ndarray, layout: str | None = None, name: str = "") -> Params:
        data = c_order(data)
        lay = layout if layout and len(layout) == data.ndim else None
        return self.net.newParams(data, name, lay)

    def value(self, t: _T, perm=None, layout: str | None = None) -> Value:
        """The xir Value holding transpose(t, perm) (ONNX order when perm is None)."""
        perm = _ident(t.rank) if perm is None else tuple(perm)
        got = t.views.get(perm)
        if got is not None:
            return got
        if t.const is not None:
            data = t.const if perm == _ident(t.rank) else np.transpose(t.const, perm)
            v: Value = self.params(data, layout)
            if t.src is not None:  # provenance for a refit (xcompile.refit.provenance)
                v.tags[SRC] = leaf(t.src, perm)
        else:
            p = t.base
            src = t.views[p]
            rel = [p.index(q) for q in perm]
            shape = tuple(t.shape[q] for q in perm)
            if layout is None and t.rank == 4:
                layout = "NHWC" if perm == NHWC else "NCHW" if perm == _ident(4) else None
            if _moves_only_unit_axes(tuple(src.shape), rel):
                v = self.emit1("Reshape", [src], layout, shape=list(shape))
            else:
                v = self.emit1("Transpose", [src], layout, perm=rel)
        t.views[perm] = v
        return v

    def nhwc(self, t: _T) -> Value:
        return self.value(t, NHWC)

    def result(self, v: Value, perm=None) -> _T:
        """Wrap an xir Value holding transpose(onnx, perm) as an ONNX tensor."""
        perm = _ident(len(v.shape)) if perm is None else tuple(perm)
        shape = [0] * len(perm)
        for i, p in enumerate(perm):
            shape[p] = v.shape[i]
        return _T(shape, value=v, perm=perm)

    def const_of(self, t: _T | None, what: str) -> np.ndarray | None:
        if t is None:
            return None
        if t.const is None:
            raise _Unsupported(f"{what} must be a constant (or fold to one)")
        return t.const

    # --- driver ------------------------------------------------------------------------------
    def run(self) -> Network:
        self._inputs()
        for node in self.graph.node:
            self._node(node)
        outputs = self._outputs()
        if self.unsupported:
            lines = "\n".join(f"  - node '{n}' ({t}): {r}" for n, t, r in self.unsupported)
            raise UnsupportedOnnxOpError(
                f"{len(self.unsupported)} ONNX node(s) have no xir equivalent:\n{lines}\n"
                f"Rewrite or remove them before import (ops with a native xir form: "
                f"{', '.join(sorted(SUPPORTED_ONNX_OPS))}; any other op whose outputs are "
                f"tensors of static shape runs as an OnnxGraph op, see docs/onnx-import.md).",
                nodes=list(self.unsupported), file=self.file)
        self.ops.append(OP_REGISTRY["Output"](outputs, [], op_id=self._op_id))
        self._op_id += 1
        self.net.ops = self.ops
        self.net.relink()
        _optimize(self.net)
        self.net.reserveIds(op_id=max(self.net.opIds(), default=-1))
        self.net.validate()
        return self.net

    def _inputs(self) -> None:
        onnx = self.onnx
        init_names = set()
        digests: dict[str, list] = {}
        for init in self.graph.initializer:
            init_names.add(init.name)
            try:
                arr = onnx.numpy_helper.to_array(init)
            except Exception as exc:  # noqa: BLE001 - any decoding failure is a broken file
                raise OnnxModelError(f"initializer '{init.name}' cannot be read: {exc}",
                                     file=self.file) from exc
            self.tensors[init.name] = t = _T.constant(arr)
            t.src = init.name
            digests[init.name] = [initializer_digest(arr), list(arr.shape), arr.dtype.str]
        # what was imported, to tell a refit's changed initializers and graph (xcompile.refit)
        self.net.tags[INITIALIZERS_TAG] = digests
        self.net.tags[GRAPH_TAG] = graph_digest(self.graph)
        names = [i.name for i in self.graph.input if i.name not in init_names]
        self._fix_inputs(names)
        names = [n for n in names if n not in self.input_values]
        unknown = sorted(set(self.input_shapes) - set(names))
        if unknown:
            raise DynamicShapeError(
                f"input_shapes names {unknown}, which are not graph inputs (inputs: {names})",
                file=self.file, field="input_shapes")
        dynamic = []
        for inp in self.graph.input:
            if inp.name in init_names or inp.name in self.input_values:
                continue
            if not inp.type.HasField("tensor_type"):
                raise UnsupportedOnnxOpError(
                    f"graph input '{inp.name}' is not a tensor (sequence/map/optional inputs "
                    f"have no xir equivalent)", nodes=[(inp.name, "input", "not a tensor")],
                    file=self.file)
            tt = inp.type.tensor_type
            dims: list[int | None] | None = None
            if tt.HasField("shape"):
                # exporters write a dynamic dimension as a name, nothing or -1; a 0 is an empty
                # axis unless input_shapes gives it a size (some exporters mean dynamic)
                dims = [d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else None
                        for d in tt.shape.dim]
            if inp.name in self.input_shapes:
                want = [int(d) for d in self.input_shapes[inp.name]]
                if any(w <= 0 for w in want):
                    raise DynamicShapeError(
                        f"input_shapes['{inp.name}'] = {want}: every dimension must be a "
                        f"positive size", file=self.file, field="input_shapes")
                if dims is not None and len(want) != len(dims):
                    raise DynamicShapeError(
                        f"input_shapes['{inp.name}'] = {want} has rank {len(want)}, the model "
                        f"says rank {len(dims)}", file=self.file, field="input_shapes")
                if dims is not None and any(d is not None and d != 0 and d != w
                                            for d, w in zip(dims, want)):
                    raise DynamicShapeError(
                        f"input_shapes['{inp.name}'] = {want} contradicts the model's static "
                        f"shape {dims}", file=self.file, field="input_shapes")
                dims = want
            if dims is not None and len(dims) > 1 and dims[0] is None and \
                    all(d is not None for d in dims[1:]):
                dims = [1] + dims[1:]  # a dynamic batch alone: one sample, as deployed
                log.info("graph input '%s': dynamic batch dimension taken as 1", inp.name)
            if dims is None or any(d is None for d in dims):
                dynamic.append((inp.name, dims))
                continue
            try:
                dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
                value = self.net.newValue(TensorType(dtype, dims, "NCHW" if len(dims) == 4
                                                     else None), inp.name)
            except (KeyError, XirError) as exc:
                raise UnsupportedOnnxOpError(
                    f"graph input '{inp.name}' has an element type xir cannot hold ({exc})",
                    nodes=[(inp.name, "input", "element type")], file=self.file) from exc
            self.ops.append(OP_REGISTRY["Input"]([], [value], op_id=self._op_id,
                                                 name=inp.name))
            self._op_id += 1
            self.tensors[inp.name] = _T(dims, value=value)
        if dynamic:
            desc = ", ".join(
                f"'{n}' {'(no shape)' if ds is None else ['?' if d is None else d for d in ds]}"
                for n, ds in dynamic)
            raise DynamicShapeError(
                f"graph input(s) {desc} have symbolic or unknown dimensions; pass "
                f"input_shapes={{name: [static dims]}} for each", file=self.file,
                field="input_shapes")

    def _fix_inputs(self, names: list[str]) -> None:
        """`input_values`: each becomes a constant of the input's declared element type (and
        shape, where the model declares a static one)."""
        unknown = sorted(set(self.input_values) - set(names))
        if unknown:
            raise DynamicShapeError(
                f"input_values names {unknown}, which are not graph inputs (inputs: {names})",
                file=self.file, field="input_values")
        for inp in self.graph.input:
            if inp.name not in self.input_values:
                continue
            tt = inp.type.tensor_type
            try:
                dtype = self.onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
                arr = np.asarray(self.input_values[inp.name], dtype=dtype)
            except (KeyError, TypeError, ValueError) as exc:
                raise OnnxImportError(f"input_values['{inp.name}'] is no value of the input's "
                                      f"element type: {exc}", file=self.file,
                                      field="input_values") from exc
            dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim] \
                if tt.HasField("shape") else None
            if dims is not None and None not in dims and list(arr.shape) != dims:
                if arr.size != int(np.prod(dims)):
                    raise DynamicShapeError(
                        f"input_values['{inp.name}'] has shape {list(arr.shape)}, the model "
                        f"says {dims}", file=self.file, field="input_values")
                arr = arr.reshape(dims)
            self.tensors[inp.name] = _T.constant(arr)

    def _node(self, node) -> None:
        self.node = node
        label = node.name or (node.output[0] if node.output else node.op_type)
        op_type = node.op_type
        custom = node.domain not in generic.STANDARD_DOMAINS
        reads = list(node.input) + generic.outer_names(node)
        if any(n and n in self.poisoned for n in reads):
            self.poisoned.update(node.output)
            return
        ins: list[_T | None] = []
        for n in node.input:
            if not n:
                ins.append(None)
                continue
            t = self.tensors.get(n)
            if t is None:
                raise OnnxModelError(f"node '{label}' ({op_type}) reads '{n}', which no node "
                                     f"or input produces", file=self.file)
            ins.append(t)
        try:
            if op_type == "If" and not custom and ins and ins[0] is not None and \
                    ins[0].is_const:
                self._inline_if(node, bool(np.asarray(ins[0].const).reshape(-1)[0]))
                return
            outs = None
            handler = None if custom else _HANDLERS.get(op_type)
            if not custom and op_type not in _NO_FOLD and \
                    all(t is None or t.is_const for t in ins):
                try:
                    outs = self._fold(node, ins)
                except _Unsupported:
                    outs = None  # the reference lacks this op or opset: a handler, or carry it
            if outs is None and handler is not None:
                mark = len(self.ops)
                try:
                    outs = handler(self, node, _attrs(node), ins)
                    for i, n in enumerate(node.output[len(outs):], len(outs)):
                        if n in self.used:
                            raise _Unsupported(f"optional output {i} ('{n}') is not supported")
                except _Unsupported as err:
                    log.debug("node '%s' (%s): native import refused (%s), carrying it as an "
                              "OnnxGraph", label, op_type, err)
                    self._rollback(mark)
                    outs = None
            if outs is None:
                outs = generic.fallback(self, node, fold=op_type not in _RANDOM)
        except _Unsupported as u:
            self.unsupported.append((label, op_type, u.reason))
            self.poisoned.update(node.output)
            return
        except XirError as err:
            if isinstance(err, OnnxImportError):
                raise
            raise OnnxImportError(f"node '{label}' ({op_type}): {err}",
                                  file=self.file) from err
        self._bind(node.output, outs)

    def _rollback(self, mark: int) -> None:
        """Drop the ops a refusing handler emitted after position `mark`, and the cached
        views of tensors that point at their outputs."""
        dropped = self.ops[mark:]
        if not dropped:
            return
        del self.ops[mark:]
        gone = {id(v) for op in dropped for v in op.outputs}
        for t in self.tensors.values():
            for perm, v in list(t.views.items()):
                if id(v) in gone:
                    del t.views[perm]

    def _bind(self, names, outs) -> None:
        for n, t in zip(names, outs):
            if not n or t is None:
                continue
            if t.base is not None:
                v = t.views[t.base]
                if v.name == f"v{v.v_id}":
                    v.name = n
            self.tensors[n] = t

    def _inline_if(self, node, cond: bool) -> None:
        """An If whose condition is a constant: import the taken branch's nodes in its place
        (they read the outer scope directly), its outputs become the If's."""
        attr = "then_branch" if cond else "else_branch"
        branch = next((a.g for a in node.attribute if a.name == attr), None)
        if branch is None:
            raise OnnxModelError(f"If node '{node.name}' has no {attr}", file=self.file)
        log.info("If node '%s': condition is constant %s, inlining its %s", node.name, cond,
                 attr)
        for init in branch.initializer:
            self.tensors[init.name] = _T.constant(self.onnx.numpy_helper.to_array(init))
        for inner in branch.node:
            self._node(inner)
        self.node = node
        for n, o in zip(node.output, branch.output):
            if o.name in self.poisoned:
                self.poisoned.add(n)
            elif o.name in self.tensors:
                self.tensors[n] = self.tensors[o.name]
            elif n in self.used:
                raise OnnxModelError(f"If node '{node.name}': branch output '{o.name}' is "
                                     f"produced by no node", file=self.file)

    def _fold(self, node, ins: list[_T | None]) -> list[_T]:
        if node.op_type in ("Identity", "Dropout") and ins:
            return [ins[0]]
        from onnx.reference import ReferenceEvaluator

        feeds = {n: t.const for n, t in zip(node.input, ins) if n and t is not None}
        try:
            ref = ReferenceEvaluator(node, opsets={"": self.opset})
            res = ref.run(None, feeds)
        except Exception as exc:  # noqa: BLE001 - the reference raises anything
            raise _Unsupported(f"constant folding failed: {type(exc).__name__}: {exc}") from exc
        for n, r in zip(node.output, res):
            if not isinstance(r, np.ndarray) or r.dtype.kind in "OUS":
                what = "a sequence" if isinstance(r, list) else "an empty optional" \
                    if r is None else "a map" if isinstance(r, dict) else "a string tensor" \
                    if isinstance(r, np.ndarray) else type(r).__name__
                raise _Unsupported(f"output '{n}' is {what}; sequence-, map-, optional- and "
                                   f"string-typed values have no xir equivalent")
        return [_T.constant(r) for r in res]

    def _computed_output(self, name: str, const: np.ndarray) -> _T | None:
        """A graph output that folded to a constant (a Shape, a ConstantOfShape): its producer
        runs as an OnnxGraph op instead, so the network computes it; None (the node listed as
        unsupported) where it has no producer or cannot be carried."""
        producer = next((n for n in self.graph.node if name in n.output), None)
        if producer is not None:
            self.node = producer
            try:
                outs = generic.fallback(self, producer, fold=False,
                                        known={name: (const.dtype, const.shape)})
            except _Unsupported as u:
                reason = f"graph output '{name}' folds to a constant, and carrying its node " \
                         f"fails: {u.reason}"
            else:
                got = dict(zip(producer.output, outs)).get(name)
                if got is not None:
                    return got
                reason = f"graph output '{name}' folds to a constant"
        else:
            reason = f"graph output '{name}' is a constant (an initializer or a fixed " \
                     f"input); an xir network computes its outputs from its inputs"
        self.unsupported.append(((producer.name or name) if producer else name,
                                 producer.op_type if producer else "initializer", reason))
        return None

    def _outputs(self) -> list[Value]:
        outs = []
        for o in self.graph.output:
            if o.name in self.poisoned:
                continue
            t = self.tensors.get(o.name)
            if t is None:
                raise OnnxModelError(f"graph output '{o.name}' is produced by no node",
                                     file=self.file)
            if t.is_const:
                t = self._computed_output(o.name, np.asarray(t.const))
                if t is None:
                    continue
            v = self.value(t)
            if not any(op.op_type == "Input" and v in op.outputs for op in self.ops):
                v.name = o.name
            outs.append(v)
        return outs

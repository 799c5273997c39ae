"""Import an ONNX model as a float xir network.

How the import works:
- Every ONNX tensor becomes an `_T`: either a numpy constant (initializers and everything that
  folds: Shape/Gather/Concat/Cast/... chains are evaluated with numpy while importing) or an xir
  Value. A Value holds `transpose(onnx_tensor, perm)` for some `perm`; a tensor can have several
  such views, each made once and cached.
- 2-D ops (Conv, pools, BatchNorm, Resize) read the NHWC view (perm 0,2,3,1) and produce NHWC.
  Axis-generic ops (element-wise, Concat, Split, Slice, Pad, Softmax) work in whatever view their
  input has, with remapped axes; ONNX Transpose only relabels views. Layout-sensitive ops
  (Reshape, Flatten, Squeeze, Unsqueeze, MatMul, Gemm) and graph outputs read the ONNX-order
  view, so a Transpose back is emitted only there (a Reshape when only unit axes move).
- Afterwards: BatchNorm folding into the Conv before it, x*Sigmoid(x) -> Silu, composition of
  consecutive Transposes/Reshapes and removal of dead ops.
"""

from __future__ import annotations

import logging
import math
import os
from typing import Any, Callable

import numpy as np

from ..errors import (DynamicShapeError, MissingDependencyError, OnnxImportError,
                      OnnxModelError, UnsupportedOnnxOpError, XirError)
from ..network import Network
from ..ops.base import OP_REGISTRY, Operation
from ..types import Layout, TensorType
from ..values import Params, Value

log = logging.getLogger(__name__)

NHWC = (0, 2, 3, 1)
_NO_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
            "Multinomial", "Bernoulli", "If", "Loop", "Scan"}


def _onnx():
    try:
        import onnx
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingDependencyError(
            "ONNX import needs the onnx package: pip install 'onnx>=1.15' "
            "(or pip install icraft-xrt-sim[onnx])") from exc
    return onnx


class _Unsupported(Exception):
    """Internal: this node cannot be expressed in xir (the reason is collected)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _ident(rank: int) -> tuple[int, ...]:
    return tuple(range(rank))


class _T:
    """An imported ONNX tensor: a constant, or xir Values holding transposed views of it."""

    __slots__ = ("shape", "const", "views", "base")

    def __init__(self, shape, const: np.ndarray | None = None, value: Value | None = None,
                 perm=None) -> None:
        self.shape = tuple(int(d) for d in shape)
        self.const = const
        self.views: dict[tuple[int, ...], Value] = {}
        self.base: tuple[int, ...] | None = None
        if value is not None:
            self.base = tuple(perm) if perm is not None else _ident(len(self.shape))
            self.views[self.base] = value

    @classmethod
    def constant(cls, array: Any) -> _T:
        arr = np.asarray(array)
        return cls(arr.shape, const=arr)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_const(self) -> bool:
        return self.const is not None

    @property
    def dtype(self) -> np.dtype:
        if self.const is not None:
            return self.const.dtype
        return self.views[self.base].dtype.numpy_dtype


def _attrs(node) -> dict[str, Any]:
    onnx = _onnx()
    out = {}
    for a in node.attribute:
        v = onnx.helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        out[a.name] = v
    return out


def _moves_only_unit_axes(shape: tuple[int, ...], rel: list[int]) -> bool:
    """True when transposing `shape` by `rel` keeps the non-unit axes in order (= a reshape)."""
    kept = [a for a in rel if shape[a] != 1]
    return kept == sorted(kept)


class _Importer:
    def __init__(self, model, input_shapes: dict[str, list[int]] | None, name: str | None,
                 file: str | None) -> None:
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
        self.net = Network(name or model.graph.name or "onnx_model", framework_kind="onnx",
                           framework_version=f"opset {self.opset}")
        self.ops: list[Operation] = []
        self.tensors: dict[str, _T] = {}
        self.poisoned: set[str] = set()
        self.unsupported: list[tuple[str, str, str]] = []
        self._op_id = 0
        self.node: Any = None
        self.used = {n for node in self.graph.node for n in node.input} | \
            {o.name for o in self.graph.output}

    def reads(self, node, index: int) -> bool:
        """True when output `index` of `node` is read by a node or is a graph output."""
        return index < len(node.output) and node.output[index] in self.used

    # --- emitting xir ops --------------------------------------------------------------------
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
        data = np.ascontiguousarray(data)
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
                f"Rewrite or remove them before import (supported ops: "
                f"{', '.join(sorted(SUPPORTED_ONNX_OPS))}).",
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
        for init in self.graph.initializer:
            init_names.add(init.name)
            try:
                arr = onnx.numpy_helper.to_array(init)
            except Exception as exc:  # noqa: BLE001 - any decoding failure is a broken file
                raise OnnxModelError(f"initializer '{init.name}' cannot be read: {exc}",
                                     file=self.file) from exc
            self.tensors[init.name] = _T.constant(arr)
        names = [i.name for i in self.graph.input if i.name not in init_names]
        unknown = sorted(set(self.input_shapes) - set(names))
        if unknown:
            raise DynamicShapeError(
                f"input_shapes names {unknown}, which are not graph inputs (inputs: {names})",
                file=self.file, field="input_shapes")
        dynamic = []
        for inp in self.graph.input:
            if inp.name in init_names:
                continue
            if not inp.type.HasField("tensor_type"):
                raise UnsupportedOnnxOpError(
                    f"graph input '{inp.name}' is not a tensor (sequence/map/optional inputs "
                    f"have no xir equivalent)", nodes=[(inp.name, "input", "not a tensor")],
                    file=self.file)
            tt = inp.type.tensor_type
            dims: list[int | None] | None = None
            if tt.HasField("shape"):
                dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
            if inp.name in self.input_shapes:
                want = [int(d) for d in self.input_shapes[inp.name]]
                if dims is not None and len(want) != len(dims):
                    raise DynamicShapeError(
                        f"input_shapes['{inp.name}'] = {want} has rank {len(want)}, the model "
                        f"says rank {len(dims)}", file=self.file, field="input_shapes")
                if dims is not None and any(d is not None and d != w
                                            for d, w in zip(dims, want)):
                    raise DynamicShapeError(
                        f"input_shapes['{inp.name}'] = {want} contradicts the model's static "
                        f"shape {dims}", file=self.file, field="input_shapes")
                dims = want
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

    def _node(self, node) -> None:
        self.node = node
        label = node.name or (node.output[0] if node.output else node.op_type)
        op_type = node.op_type
        custom = node.domain not in ("", "ai.onnx")
        if any(n and n in self.poisoned for n in node.input):
            if custom or op_type not in _HANDLERS:
                self.unsupported.append((label, op_type, "no xir equivalent"))
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
            if custom:
                raise _Unsupported(f"custom domain '{node.domain}'")
            outs = None
            fold_error: _Unsupported | None = None
            if op_type not in _NO_FOLD and all(t is None or t.is_const for t in ins):
                try:
                    outs = self._fold(node, ins)
                except _Unsupported as err:
                    if op_type not in _HANDLERS:
                        raise
                    fold_error = err  # the reference lacks this opset: try the handler
            if outs is None:
                handler = _HANDLERS.get(op_type)
                if handler is None:
                    raise _Unsupported("no xir equivalent")
                try:
                    outs = handler(self, node, _attrs(node), ins)
                except (TypeError, AttributeError, ValueError):
                    if fold_error is None:
                        raise
                    raise fold_error
                for i, n in enumerate(node.output[len(outs):], len(outs)):
                    if n in self.used:
                        raise _Unsupported(f"optional output {i} ('{n}') is not supported")
        except _Unsupported as u:
            self.unsupported.append((label, op_type, u.reason))
            self.poisoned.update(node.output)
            return
        except XirError as err:
            if isinstance(err, OnnxImportError):
                raise
            raise OnnxImportError(f"node '{label}' ({op_type}): {err}",
                                  file=self.file) from err
        for n, t in zip(node.output, outs):
            if not n:
                continue
            if t.base is not None:
                v = t.views[t.base]
                if v.name == f"v{v.v_id}":
                    v.name = n
            self.tensors[n] = t

    def _fold(self, node, ins: list[_T | None]) -> list[_T]:
        if node.op_type in ("Identity", "Dropout") and ins:
            return [ins[0]]
        from onnx.reference import ReferenceEvaluator

        feeds = {n: t.const for n, t in zip(node.input, ins) if n and t is not None}
        try:
            ref = ReferenceEvaluator(node, opsets={"": self.opset})
            res = ref.run(None, feeds)
        except Exception as exc:  # noqa: BLE001 - the reference raises anything
            raise _Unsupported(f"constant folding failed: {type(exc).__name__}: {exc}")
        return [_T.constant(r) for r in res]

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
                producer = next((n for n in self.graph.node if o.name in n.output), None)
                self.unsupported.append(
                    ((producer.name or o.name) if producer else o.name,
                     producer.op_type if producer else "initializer",
                     f"graph output '{o.name}' folds to a constant; an xir network computes "
                     f"its outputs from its inputs"))
                continue
            v = self.value(t)
            if not any(op.op_type == "Input" and v in op.outputs for op in self.ops):
                v.name = o.name
            outs.append(v)
        return outs


# --- handlers ------------------------------------------------------------------------------

Handler = Callable[[_Importer, Any, dict, list], list[_T]]
_HANDLERS: dict[str, Handler] = {}


def _handles(*names: str):
    def deco(fn: Handler) -> Handler:
        for n in names:
            _HANDLERS[n] = fn
        return fn
    return deco


def _same_pads(size, k, s, d, upper: bool) -> tuple[int, int]:
    out = -(-size // s)
    total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
    lo = total // 2 if upper else total - total // 2
    return lo, total - lo


def _pads2d(a: dict, spatial, kernel, strides, dil) -> dict[str, int]:
    auto = a.get("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        (t, b), (lft, r) = (_same_pads(spatial[i], kernel[i], strides[i], dil[i],
                                       auto == "SAME_UPPER") for i in range(2))
    elif auto == "VALID":
        t = b = lft = r = 0
    else:
        p = list(a.get("pads", [0, 0, 0, 0]))
        t, lft, b, r = p
    return {"pad_top": t, "pad_bottom": b, "pad_left": lft, "pad_right": r}


def _need_4d(t: _T, what: str) -> None:
    if t.rank != 4:
        raise _Unsupported(f"{what} on a rank-{t.rank} tensor (only 2-D, NCHW)")


@_handles("Conv")
def _conv(im: _Importer, node, a, ins):
    x, w = ins[0], ins[1]
    b = ins[2] if len(ins) > 2 else None
    _need_4d(x, "Conv")
    kernel = list(w.shape[2:])
    strides = list(a.get("strides", [1, 1]))
    dil = list(a.get("dilations", [1, 1]))
    attrs = dict(stride_height=strides[0], stride_width=strides[1], dilation_height=dil[0],
                 dilation_width=dil[1], groups=int(a.get("group", 1)),
                 **_pads2d(a, x.shape[2:], kernel, strides, dil))
    inputs = [im.nhwc(x), im.value(w, (2, 3, 1, 0), "HWIO")]
    if b is not None:
        inputs.append(im.value(b))
    return [im.result(im.emit1("Conv2d", inputs, "NHWC", **attrs), NHWC)]


@_handles("ConvTranspose")
def _conv_transpose(im: _Importer, node, a, ins):
    x, w = ins[0], ins[1]
    b = ins[2] if len(ins) > 2 else None
    _need_4d(x, "ConvTranspose")
    kernel = list(w.shape[2:])
    strides = list(a.get("strides", [1, 1]))
    dil = list(a.get("dilations", [1, 1]))
    opad = list(a.get("output_padding", [0, 0]))
    auto = a.get("auto_pad", "NOTSET")
    out_shape = list(a.get("output_shape", []))[-2:]
    if out_shape or auto in ("SAME_UPPER", "SAME_LOWER"):
        if not out_shape:
            out_shape = [x.shape[2 + i] * strides[i] for i in range(2)]
        lo, hi = [], []
        for i in range(2):
            total = strides[i] * (x.shape[2 + i] - 1) + opad[i] \
                + (kernel[i] - 1) * dil[i] + 1 - out_shape[i]
            first = total // 2 if auto == "SAME_UPPER" else total - total // 2
            lo.append(first)
            hi.append(total - first)
    else:
        p = list(a.get("pads", [0, 0, 0, 0]))
        lo, hi = p[:2], p[2:]
    for i in range(2):
        if hi[i] < 0:  # a larger output than the kernel covers: zero rows at the end
            opad[i] -= hi[i]
            hi[i] = 0
        if lo[i] < 0:
            raise _Unsupported("negative leading padding")
    attrs = dict(stride_height=strides[0], stride_width=strides[1], dilation_height=dil[0],
                 dilation_width=dil[1], groups=int(a.get("group", 1)),
                 pad_top=lo[0], pad_left=lo[1], pad_bottom=hi[0], pad_right=hi[1],
                 output_pad_height=opad[0], output_pad_width=opad[1])
    inputs = [im.nhwc(x), im.value(w, (2, 3, 0, 1), "HWIO")]
    if b is not None:
        inputs.append(im.value(b))
    return [im.result(im.emit1("ConvTranspose2d", inputs, "NHWC", **attrs), NHWC)]


def _pool_attrs(a: dict, x: _T, dilated: bool) -> dict[str, Any]:
    kernel = list(a["kernel_shape"])
    if len(kernel) != 2:
        raise _Unsupported(f"{len(kernel)}-D pooling (only 2-D)")
    strides = list(a.get("strides", [1, 1]))
    dil = list(a.get("dilations", [1, 1]))
    if not dilated and dil != [1, 1]:
        raise _Unsupported("dilated average pooling")
    attrs = dict(pool_height=kernel[0], pool_width=kernel[1], stride_height=strides[0],
                 stride_width=strides[1], ceil_mode=bool(a.get("ceil_mode", 0)),
                 **_pads2d(a, x.shape[2:], kernel, strides, dil))
    if dilated:
        attrs.update(dilation_height=dil[0], dilation_width=dil[1])
    return attrs


@_handles("MaxPool")
def _maxpool(im: _Importer, node, a, ins):
    x = ins[0]
    _need_4d(x, "MaxPool")
    if im.reads(node, 1):
        raise _Unsupported("the Indices output")
    attrs = _pool_attrs(a, x, True)
    return [im.result(im.emit1("MaxPool2d", [im.nhwc(x)], "NHWC", **attrs), NHWC)]


@_handles("AveragePool")
def _avgpool(im: _Importer, node, a, ins):
    x = ins[0]
    _need_4d(x, "AveragePool")
    attrs = _pool_attrs(a, x, False)
    attrs["count_include_pad"] = bool(a.get("count_include_pad", 0))
    return [im.result(im.emit1("AvgPool2d", [im.nhwc(x)], "NHWC", **attrs), NHWC)]


@_handles("GlobalAveragePool")
def _gap(im: _Importer, node, a, ins):
    x = ins[0]
    _need_4d(x, "GlobalAveragePool")
    v = im.emit1("AvgPool2d", [im.nhwc(x)], "NHWC", is_global=True,
                 pool_height=x.shape[2], pool_width=x.shape[3])
    return [im.result(v, NHWC)]


@_handles("GlobalMaxPool")
def _gmp(im: _Importer, node, a, ins):
    x = ins[0]
    _need_4d(x, "GlobalMaxPool")
    v = im.emit1("MaxPool2d", [im.nhwc(x)], "NHWC", pool_height=x.shape[2],
                 pool_width=x.shape[3])
    return [im.result(v, NHWC)]


@_handles("BatchNormalization")
def _batchnorm(im: _Importer, node, a, ins):
    if a.get("training_mode", 0) or any(im.reads(node, i) for i in range(1, 5)):
        raise _Unsupported("training mode (running statistics outputs)")
    x, scale, bias, mean, var = ins[:5]
    eps = float(a.get("epsilon", 1e-5))
    if x.rank == 4:
        inputs = [im.nhwc(x)] + [im.value(t) for t in (scale, bias, mean, var)]
        return [im.result(im.emit1("BatchNorm2d", inputs, "NHWC", epsilon=eps), NHWC)]
    if x.rank < 2 or not all(t.is_const for t in (scale, bias, mean, var)):
        raise _Unsupported(f"rank-{x.rank} batch norm with non-constant statistics")
    s = (scale.const / np.sqrt(var.const + np.float32(eps))).astype(x.dtype)
    sh = (s.size,) + (1,) * (x.rank - 2)
    s_t = _T.constant(s.reshape(sh))
    b_t = _T.constant((bias.const - mean.const * s).astype(x.dtype).reshape(sh))
    y = _binary(im, "Multiply", [x, s_t])
    return [_binary(im, "Add", [y, b_t])]


def _broadcast_values(im: _Importer, ins: list[_T]) -> tuple[list[Value], tuple[int, ...],
                                                             tuple[int, ...]]:
    """Values for a broadcasting element-wise op, all in one view; returns (values, perm,
    onnx output shape)."""
    try:
        out_shape = tuple(np.broadcast_shapes(*[t.shape for t in ins]))
    except ValueError:
        raise _Unsupported(f"shapes {[list(t.shape) for t in ins]} do not broadcast")
    rank = len(out_shape)
    ident = _ident(rank)
    perm = ident
    for t in ins:
        if not t.is_const and t.rank == rank and t.base != ident:
            perm = t.base
            break
    values = []
    for t in ins:
        if t.is_const:
            c = t.const
            if perm != ident:
                c = np.transpose(c.reshape((1,) * (rank - c.ndim) + c.shape), perm)
            values.append(im.params(c))
        elif t.rank == rank or perm == ident:
            values.append(im.value(t, perm if t.rank == rank else None))
        else:
            padded = (1,) * (rank - t.rank) + t.shape
            v = im.emit1("Reshape", [im.value(t)], shape=list(padded))
            values.append(im.value(_T(padded, value=v), perm))
    return values, perm, out_shape


def _binary(im: _Importer, op_type: str, ins: list[_T]) -> _T:
    values, perm, _ = _broadcast_values(im, ins)
    layout = "NHWC" if perm == NHWC else None
    return im.result(im.emit1(op_type, values, layout), perm)


@_handles("Add", "Sub", "Mul")
def _arith(im: _Importer, node, a, ins):
    return [_binary(im, {"Add": "Add", "Sub": "Sub", "Mul": "Multiply"}[node.op_type], ins)]


@_handles("Sum")
def _sum(im: _Importer, node, a, ins):
    acc = ins[0]
    for t in ins[1:]:
        acc = _binary(im, "Add", [acc, t])
    return [acc]


@_handles("Div")
def _div(im: _Importer, node, a, ins):
    x, d = ins
    if not d.is_const or not np.issubdtype(d.dtype, np.floating):
        raise _Unsupported("division by a non-constant (or integer) divisor")
    return [_binary(im, "Multiply", [x, _T.constant((1 / d.const).astype(d.dtype))])]


@_handles("Neg")
def _neg(im: _Importer, node, a, ins):
    x = ins[0]
    return [_binary(im, "Multiply", [x, _T.constant(np.array(-1, dtype=x.dtype))])]


@_handles("Pow")
def _pow(im: _Importer, node, a, ins):
    x, e = ins
    if e.is_const and e.const.size == 1 and float(e.const.reshape(-1)[0]) in (1.0, 2.0) \
            and np.broadcast_shapes(x.shape, e.shape) == x.shape:
        return [x] if float(e.const.reshape(-1)[0]) == 1.0 else [_binary(im, "Multiply", [x, x])]
    raise _Unsupported("only constant exponents 1 and 2")


def _unary(im: _Importer, x: _T, op_type: str, **attrs: Any) -> _T:
    perm = x.base if not x.is_const else None
    layout = "NHWC" if perm == NHWC else None
    return im.result(im.emit1(op_type, [im.value(x, perm)], layout, **attrs), perm)


@_handles("Relu")
def _relu(im, node, a, ins):
    return [_unary(im, ins[0], "Relu")]


@_handles("LeakyRelu")
def _leaky(im, node, a, ins):
    return [_unary(im, ins[0], "Relu", alpha=float(a.get("alpha", 0.01)))]


@_handles("Sigmoid")
def _sigmoid(im, node, a, ins):
    return [_unary(im, ins[0], "Sigmoid")]


@_handles("HardSwish")
def _hardswish(im, node, a, ins):
    return [_unary(im, ins[0], "Hardswish")]


@_handles("Clip")
def _clip(im: _Importer, node, a, ins):
    x = ins[0]
    if im.opset < 11:
        lo, hi = a.get("min", -np.inf), a.get("max", np.inf)
    else:
        lo_c = im.const_of(ins[1] if len(ins) > 1 else None, "Clip min")
        hi_c = im.const_of(ins[2] if len(ins) > 2 else None, "Clip max")
        lo = -np.inf if lo_c is None else float(lo_c)
        hi = np.inf if hi_c is None else float(hi_c)
    if lo != 0.0 or not np.issubdtype(x.dtype, np.floating):
        raise _Unsupported(f"Clip(min={lo}) has no exact xir Relu form (needs min = 0)")
    return [_unary(im, x, "Relu", max_value=float(hi))]


@_handles("Identity", "Dropout")
def _identity(im, node, a, ins):
    if node.op_type == "Dropout" and im.reads(node, 1):
        raise _Unsupported("the mask output")
    if node.op_type == "Dropout" and a.get("training_mode"):
        raise _Unsupported("training mode")
    if node.op_type == "Dropout" and len(ins) > 2 and ins[2] is not None:
        if not ins[2].is_const:
            raise _Unsupported("a non-constant training_mode")
        if bool(ins[2].const):
            raise _Unsupported("training mode")
    return [ins[0]]


@_handles("Cast")
def _cast(im, node, a, ins):
    onnx = im.onnx
    to = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(a["to"]))
    if to != ins[0].dtype:
        raise _Unsupported(f"a Cast of computed data ({ins[0].dtype} -> {to})")
    return [ins[0]]


@_handles("Shape")
def _shape(im, node, a, ins):
    shape = np.array(ins[0].shape, dtype=np.int64)
    start, end = a.get("start", 0), a.get("end", None)
    return [_T.constant(shape[start:end])]


@_handles("Size")
def _size(im, node, a, ins):
    return [_T.constant(np.array(math.prod(ins[0].shape), dtype=np.int64))]


@_handles("Softmax")
def _softmax(im: _Importer, node, a, ins):
    x = ins[0]
    r = x.rank
    axis = int(a.get("axis", -1 if im.opset >= 13 else 1)) % max(r, 1)
    if im.opset >= 13 or axis == r - 1 or all(d == 1 for d in x.shape[axis + 1:]):
        perm = x.base
        layout = "NHWC" if perm == NHWC else None
        v = im.emit1("Softmax", [im.value(x, perm)], layout, axis=perm.index(axis))
        return [im.result(v, perm)]
    flat = [math.prod(x.shape[:axis]), math.prod(x.shape[axis:])]
    v = im.emit1("Reshape", [im.value(x)], shape=flat)
    v = im.emit1("Softmax", [v], axis=-1)
    return [im.result(im.emit1("Reshape", [v], shape=list(x.shape)))]


@_handles("Concat")
def _concat(im: _Importer, node, a, ins):
    parts = [t for t in ins if math.prod(t.shape) > 0 or t.rank != ins[0].rank]
    if len(parts) == 1:
        return [parts[0]]
    r = parts[0].rank
    axis = int(a["axis"]) % r
    perm = next((t.base for t in parts if not t.is_const), _ident(r))
    values = [im.value(t, perm) for t in parts]
    layout = "NHWC" if perm == NHWC else None
    return [im.result(im.emit1("Concat", values, layout, axis=perm.index(axis)), perm)]


@_handles("Split")
def _split(im: _Importer, node, a, ins):
    x = ins[0]
    axis = int(a.get("axis", 0)) % x.rank
    n = len(node.output)
    dim = x.shape[axis]
    sizes = im.const_of(ins[1] if len(ins) > 1 else None, "Split sizes")
    if sizes is not None:
        sizes = [int(s) for s in sizes]
    elif "split" in a:
        sizes = [int(s) for s in a["split"]]
    else:
        n = int(a.get("num_outputs", n))
        chunk = -(-dim // n)
        sizes = [min(chunk, dim - i * chunk) for i in range(n)]
    perm = x.base
    outs = im.emit("Split", [im.value(x, perm)], ["NHWC" if perm == NHWC else None] * len(sizes),
                   axis=perm.index(axis), sections=sizes)
    return [im.result(v, perm) for v in outs]


def _onnx_slice(start: int, end: int, step: int, dim: int) -> tuple[int, int]:
    """ONNX Slice clamping, expressed as python slice bounds."""
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        start, end = min(max(start, 0), dim), min(max(end, 0), dim)
    else:
        start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
        if end < 0:
            end = -dim - 1
    return start, end


@_handles("Slice")
def _slice(im: _Importer, node, a, ins):
    x = ins[0]
    if im.opset < 10:
        starts, ends = list(a["starts"]), list(a["ends"])
        axes = list(a.get("axes", range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts = [int(v) for v in im.const_of(ins[1], "Slice starts")]
        ends = [int(v) for v in im.const_of(ins[2], "Slice ends")]
        ax = im.const_of(ins[3] if len(ins) > 3 else None, "Slice axes")
        st = im.const_of(ins[4] if len(ins) > 4 else None, "Slice steps")
        axes = list(range(len(starts))) if ax is None else [int(v) for v in ax]
        steps = [1] * len(starts) if st is None else [int(v) for v in st]
    r = x.rank
    begin, end, step = [0] * r, list(x.shape), [1] * r
    for s, e, ax_, k in zip(starts, ends, axes, steps):
        ax_ %= r
        begin[ax_], end[ax_] = _onnx_slice(s, e, k, x.shape[ax_])
        step[ax_] = k
    perm = x.base
    v = im.emit1("Slice", [im.value(x, perm)], "NHWC" if perm == NHWC else None,
                 begin=[begin[p] for p in perm], end=[end[p] for p in perm],
                 step=[step[p] for p in perm])
    return [im.result(v, perm)]


@_handles("Pad")
def _pad(im: _Importer, node, a, ins):
    x = ins[0]
    r = x.rank
    mode = a.get("mode", "constant")
    if mode not in ("constant", "reflect", "edge"):
        raise _Unsupported(f"pad mode '{mode}'")
    if im.opset < 11:
        pads, value = list(a.get("pads", a.get("paddings", []))), float(a.get("value", 0.0))
        axes = list(range(r))
    else:
        pads = [int(p) for p in im.const_of(ins[1], "Pad pads")]
        cv = im.const_of(ins[2] if len(ins) > 2 else None, "Pad constant_value")
        value = 0.0 if cv is None or cv.size == 0 else float(cv.reshape(-1)[0])
        ax = im.const_of(ins[3] if len(ins) > 3 else None, "Pad axes")
        axes = list(range(r)) if ax is None else [int(v) % r for v in ax]
    before, after = [0] * r, [0] * r
    n = len(axes)
    for i, ax_ in enumerate(axes):
        before[ax_], after[ax_] = pads[i], pads[i + n]
    perm = x.base
    layout = "NHWC" if perm == NHWC else None
    v = im.value(x, perm)
    if any(p < 0 for p in before + after):
        if mode != "constant":
            raise _Unsupported(f"negative pads with mode '{mode}'")
        cut_b = [max(-p, 0) for p in before]
        cut_a = [x.shape[i] - max(-p, 0) for i, p in enumerate(after)]
        v = im.emit1("Slice", [v], layout, begin=[cut_b[p] for p in perm],
                     end=[cut_a[p] for p in perm], step=[1] * r)
        before = [max(p, 0) for p in before]
        after = [max(p, 0) for p in after]
    if any(before) or any(after):
        v = im.emit1("Pad", [v], layout, pad_before=[before[p] for p in perm],
                     pad_after=[after[p] for p in perm], mode=mode, value=value)
    return [im.result(v, perm)]


def _reshape_to(im: _Importer, x: _T, shape: list[int]) -> _T:
    if tuple(shape) == x.shape:
        return x
    if x.is_const:
        return _T.constant(x.const.reshape(shape))
    return im.result(im.emit1("Reshape", [im.value(x)], shape=[int(d) for d in shape]))


@_handles("Reshape")
def _reshape(im: _Importer, node, a, ins):
    x = ins[0]
    if im.opset < 5:
        want = [int(d) for d in a["shape"]]
    else:
        want = [int(d) for d in im.const_of(ins[1], "Reshape shape")]
    allowzero = int(a.get("allowzero", 0))
    if allowzero and 0 in want:
        raise _Unsupported("a literal 0 dimension (allowzero=1); xir Reshape reads 0 as 'copy'")
    out = []
    for i, d in enumerate(want):
        out.append(x.shape[i] if d == 0 and not allowzero else d)
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        out[out.index(-1)] = math.prod(x.shape) // known if known else 0
    if math.prod(out) != math.prod(x.shape):
        raise OnnxImportError(f"node '{node.name}': cannot reshape {list(x.shape)} to {want}")
    return [_reshape_to(im, x, out)]


@_handles("Flatten")
def _flatten(im: _Importer, node, a, ins):
    x = ins[0]
    axis = int(a.get("axis", 1))
    if axis < 0:
        axis += x.rank
    return [_reshape_to(im, x, [math.prod(x.shape[:axis]), math.prod(x.shape[axis:])])]


@_handles("Squeeze")
def _squeeze(im: _Importer, node, a, ins):
    x = ins[0]
    if im.opset < 13:
        axes = a.get("axes")
    else:
        c = im.const_of(ins[1] if len(ins) > 1 else None, "Squeeze axes")
        axes = None if c is None else [int(v) for v in c]
    if axes is None:
        axes = [i for i, d in enumerate(x.shape) if d == 1]
    axes = {int(v) % x.rank for v in axes}
    return [_reshape_to(im, x, [d for i, d in enumerate(x.shape) if i not in axes])]


@_handles("Unsqueeze")
def _unsqueeze(im: _Importer, node, a, ins):
    x = ins[0]
    if im.opset < 13:
        axes = list(a["axes"])
    else:
        axes = [int(v) for v in im.const_of(ins[1], "Unsqueeze axes")]
    r = x.rank + len(axes)
    shape = list(x.shape)
    for ax in sorted(int(v) % r for v in axes):
        shape.insert(ax, 1)
    return [_reshape_to(im, x, shape)]


@_handles("Transpose")
def _transpose(im: _Importer, node, a, ins):
    x = ins[0]
    q = tuple(int(p) % x.rank for p in a.get("perm", range(x.rank - 1, -1, -1)))
    if x.is_const:
        return [_T.constant(np.transpose(x.const, q))]
    # No op here: every view of x is also a view of y = transpose(x, q).
    y = _T(tuple(x.shape[p] for p in q))
    for pv, v in x.views.items():
        y.views[tuple(q.index(i) for i in pv)] = v
    y.base = tuple(q.index(i) for i in x.base)
    return [y]


@_handles("MatMul")
def _matmul(im: _Importer, node, a, ins):
    x, y = ins
    return [im.result(im.emit1("Matmul", [im.value(x), im.value(y)]))]


@_handles("Gemm")
def _gemm(im: _Importer, node, a, ins):
    A, B = ins[0], ins[1]
    C = ins[2] if len(ins) > 2 else None
    alpha, beta = float(a.get("alpha", 1.0)), float(a.get("beta", 1.0))
    ta, tb = bool(a.get("transA", 0)), bool(a.get("transB", 0))
    if A.rank != 2 or B.rank != 2:
        raise _Unsupported("Gemm operands must be matrices")
    n = B.shape[0] if tb else B.shape[1]
    m = A.shape[1] if ta else A.shape[0]
    if B.is_const:
        b = B.const.T if tb else B.const
        if alpha != 1.0:
            b = (b * np.asarray(alpha, b.dtype)).astype(b.dtype)
        bv, tb, alpha = im.params(b), False, 1.0
    else:
        bv = im.value(B)
    inputs = [im.value(A), bv]
    add_c = None
    if C is not None and beta != 0.0:
        if C.is_const and alpha == 1.0 and math.prod(C.shape) == n and \
                (C.rank == 1 or (C.rank == 2 and C.shape[0] == 1)):
            c = C.const.reshape(n)
            inputs.append(im.params((c * np.asarray(beta, c.dtype)).astype(c.dtype)
                                    if beta != 1.0 else c))
        else:
            add_c = C
    y = im.result(im.emit1("Matmul", inputs, transpose_a=ta, transpose_b=tb))
    if y.shape != (m, n):
        raise OnnxImportError(f"node '{node.name}': Gemm output {list(y.shape)} != {[m, n]}")
    if alpha != 1.0:
        y = _binary(im, "Multiply", [y, _T.constant(np.asarray(alpha, A.dtype))])
    if add_c is not None:
        if beta != 1.0:
            add_c = _T.constant((add_c.const * beta).astype(add_c.const.dtype)) \
                if add_c.is_const else _binary(im, "Multiply",
                                               [add_c, _T.constant(np.asarray(beta, A.dtype))])
        y = _binary(im, "Add", [y, add_c])
    return [y]


def _resize_scales(x: _T, a: dict, scales, sizes) -> tuple[list[int], list[float] | None]:
    """Output sizes (all axes) and the ONNX scales (None when sizes were given)."""
    r = x.rank
    axes = [int(v) % r for v in a.get("axes", range(r))]
    if sizes is not None and sizes.size:
        sizes = [int(v) for v in sizes]
        out = list(x.shape)
        for ax, s in zip(axes, sizes):
            out[ax] = s
        policy = a.get("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            raise _Unsupported(f"keep_aspect_ratio_policy '{policy}'")
        return out, None
    if scales is None or not scales.size:
        raise _Unsupported("Resize without scales or sizes")
    full = [1.0] * r
    for ax, s in zip(axes, [float(v) for v in scales]):
        full[ax] = s
    out = [int(math.floor(d * s)) for d, s in zip(x.shape, full)]
    return out, full


def _nearest_index(out: int, size: int, scale: float, coord: str, rounding: str) -> np.ndarray:
    """Source indices ONNX nearest resize picks along one axis."""
    i = np.arange(out, dtype=np.float64)
    if coord == "half_pixel":
        xo = (i + 0.5) / scale - 0.5
    elif coord == "pytorch_half_pixel":
        xo = (i + 0.5) / scale - 0.5 if out > 1 else np.zeros_like(i)
    elif coord == "align_corners":
        xo = i * (size - 1) / (out - 1) if out > 1 else np.zeros_like(i)
    else:
        xo = i / scale
    if rounding == "round_prefer_floor":
        idx = np.ceil(xo - 0.5)
    elif rounding == "round_prefer_ceil":
        idx = np.floor(xo + 0.5)
    elif rounding == "floor":
        idx = np.floor(xo)
    else:
        idx = np.ceil(xo)
    return np.clip(idx, 0, size - 1).astype(np.int64)


@_handles("Resize", "Upsample")
def _resize(im: _Importer, node, a, ins):
    x = ins[0]
    _need_4d(x, node.op_type)
    if node.op_type == "Upsample" or im.opset < 11:
        if node.op_type == "Upsample" and im.opset < 9:
            scales = np.asarray(a.get("scales", []), dtype=np.float32)
        else:
            scales = im.const_of(ins[1], "Resize scales")
        sizes = None
        coord = "asymmetric"
        mode = a.get("mode", "nearest")
        rounding = "floor"
    else:
        scales = im.const_of(ins[2] if len(ins) > 2 else None, "Resize scales")
        sizes = im.const_of(ins[3] if len(ins) > 3 else None, "Resize sizes")
        coord = a.get("coordinate_transformation_mode", "half_pixel")
        mode = a.get("mode", "nearest")
        rounding = a.get("nearest_mode", "round_prefer_floor")
    if mode not in ("nearest", "linear"):
        raise _Unsupported(f"mode '{mode}'")
    if a.get("antialias", 0):
        raise _Unsupported("antialias")
    if coord not in ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"):
        raise _Unsupported(f"coordinate_transformation_mode '{coord}'")
    out, full = _resize_scales(x, a, scales, sizes)
    if out[:2] != list(x.shape[:2]):
        raise _Unsupported("resizing the batch or channel axis")
    oh, ow = out[2], out[3]
    h, w = x.shape[2], x.shape[3]
    if full is not None and \
            (oh * 1.0 != h * full[2] or ow * 1.0 != w * full[3]):
        raise _Unsupported("scales that do not give whole output sizes (the coordinate "
                           "mapping then uses the scale, xir Resize uses out/in)")
    sh = full[2] if full is not None else oh / h
    sw = full[3] if full is not None else ow / w
    if mode == "nearest" and oh % h == 0 and ow % w == 0:
        kh, kw = oh // h, ow // w
        if np.array_equal(_nearest_index(oh, h, sh, coord, rounding), np.arange(oh) // kh) and \
                np.array_equal(_nearest_index(ow, w, sw, coord, rounding), np.arange(ow) // kw):
            v = im.emit1("Upsample", [im.nhwc(x)], "NHWC", scale_height=kh, scale_width=kw,
                         mode="nearest")
            return [im.result(v, NHWC)]
    if node.op_type == "Upsample" and mode != "nearest":
        raise _Unsupported("linear Upsample")
    v = im.emit1("Resize", [im.nhwc(x)], "NHWC", out_height=oh, out_width=ow,
                 mode="nearest" if mode == "nearest" else "bilinear", coordinate_mode=coord,
                 nearest_mode=rounding)
    return [im.result(v, NHWC)]


SUPPORTED_ONNX_OPS = frozenset(_HANDLERS)
"""ONNX op types the importer maps to xir ops (any op whose inputs are constant also folds)."""


# --- xir-level clean-up passes -------------------------------------------------------------

def _optimize(net: Network) -> None:
    changed = True
    while changed:
        changed = False
        changed |= _fold_batchnorm(net)
        changed |= _fuse_silu(net)
        changed |= _compose_moves(net)
        changed |= _remove_dead(net)
        net.relink()


def _sole_reader(v: Value, op: Operation) -> bool:
    return v.consumers == [op]


def _fold_batchnorm(net: Network) -> bool:
    changed = False
    for bn in list(net.ops):
        if bn.op_type != "BatchNorm2d":
            continue
        x = bn.inputs[0]
        conv = x.producer
        if conv is None or conv.op_type not in ("Conv2d", "ConvTranspose2d") or \
                not _sole_reader(x, bn) or not all(v.is_params and v.hasData()
                                                   for v in conv.inputs[1:] + bn.inputs[1:]):
            continue
        gamma, beta, mean, var = (v.data.astype(np.float64) for v in bn.inputs[1:])
        s = gamma / np.sqrt(var + bn.attrs["epsilon"])
        w = conv.inputs[1].data
        wd = w.astype(np.float64)
        if conv.op_type == "Conv2d":
            w2 = wd * s
        else:
            kh, kw, cin, cout_g = w.shape
            g = conv.attrs["groups"]
            w2 = (wd.reshape(kh, kw, g, cin // g, cout_g) * s.reshape(g, 1, cout_g)
                  ).reshape(w.shape)
        b = conv.inputs[2].data.astype(np.float64) if len(conv.inputs) > 2 else 0.0
        b2 = (b - mean) * s + beta
        wp = net.newParams(w2.astype(w.dtype), conv.inputs[1].name, conv.inputs[1].dtype.layout)
        bp = net.newParams(np.asarray(b2, dtype=w.dtype).reshape(-1), f"{bn.name}:bias")
        conv.inputs = [conv.inputs[0], wp, bp]
        conv.outputs = list(bn.outputs)
        net.ops.remove(bn)
        net.relink()
        changed = True
    return changed


def _fuse_silu(net: Network) -> bool:
    changed = False
    for i, op in enumerate(list(net.ops)):
        if op.op_type != "Multiply":
            continue
        a, b = op.inputs
        for x, s in ((a, b), (b, a)):
            sig = s.producer
            if sig is not None and sig.op_type == "Sigmoid" and sig.inputs[0] is x and \
                    _sole_reader(s, op):
                silu = OP_REGISTRY["Silu"]([x], list(op.outputs), op_id=op.op_id, name=op.name)
                net.ops[net.ops.index(op)] = silu
                net.relink()
                changed = True
                break
    return changed


def _compose_moves(net: Network) -> bool:
    """Transpose(Transpose) -> one Transpose, Reshape(Reshape) -> one, identities bypassed."""
    changed = False
    for op in list(net.ops):
        if op not in net.ops:
            continue
        src = op.inputs[0].producer if op.inputs else None
        if op.op_type == "Transpose":
            if src is not None and src.op_type == "Transpose":
                inner = src.attrs["perm"]
                op.inputs = [src.inputs[0]]
                op.attrs["perm"] = [inner[p] for p in op.attrs["perm"]]
                changed = True
            if op.attrs["perm"] == list(range(len(op.attrs["perm"]))):
                changed |= _bypass(net, op)
        elif op.op_type == "Reshape":
            if src is not None and src.op_type == "Reshape":
                op.inputs = [src.inputs[0]]
                changed = True
            if tuple(op.inputs[0].shape) == tuple(op.outputs[0].shape):
                changed |= _bypass(net, op)
        if changed:
            net.relink()
    return changed


def _bypass(net: Network, op: Operation) -> bool:
    """Let the readers of op's output read op's input instead."""
    src, out = op.inputs[0], op.outputs[0]
    for reader in list(out.consumers):
        reader.inputs = [src if v is out else v for v in reader.inputs]
        if reader.op_type == "Output" and out.name and src.producer is not None and \
                src.producer.op_type != "Input" and not any(
                    c.op_type == "Output" for c in src.consumers):
            src.name = out.name
    net.relink()
    return True


def _remove_dead(net: Network) -> bool:
    changed = False
    for op in reversed(list(net.ops)):
        if op.op_type in ("Input", "Output"):
            continue
        if all(not v.consumers for v in op.outputs):
            net.ops.remove(op)
            net.relink()
            changed = True
    return changed


# --- entry point ---------------------------------------------------------------------------

def _load(model: Any) -> tuple[Any, str | None]:
    onnx = _onnx()
    if isinstance(model, onnx.ModelProto):
        return model, None
    if isinstance(model, (bytes, bytearray, memoryview)):
        file, data = "<bytes>", bytes(model)
        base_dir = None
    elif isinstance(model, (str, os.PathLike)):
        file = os.fspath(model)
        try:
            with open(file, "rb") as fh:
                data = fh.read()
        except OSError as exc:
            raise OnnxModelError(f"cannot read the ONNX file: {exc.strerror or exc}",
                                 file=file) from exc
        base_dir = os.path.dirname(os.path.abspath(file))
    else:
        raise OnnxImportError(f"import_onnx takes a path, bytes or onnx.ModelProto, not "
                              f"{type(model).__name__}")
    if not data:
        raise OnnxModelError("the file is empty", file=file)
    try:
        proto = onnx.ModelProto()
        proto.ParseFromString(data)
    except Exception as exc:  # noqa: BLE001 - protobuf raises DecodeError, RuntimeError, ...
        raise OnnxModelError(f"not a readable ONNX model (corrupt or truncated): {exc}",
                             file=file) from exc
    if base_dir is not None:
        try:
            from onnx.external_data_helper import load_external_data_for_model

            if any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer):
                load_external_data_for_model(proto, base_dir)
        except Exception as exc:  # noqa: BLE001
            raise OnnxModelError(f"external tensor data cannot be loaded: {exc}",
                                 file=file) from exc
    return proto, file


def _check(model: Any, file: str | None) -> Any:
    onnx = _onnx()
    if not model.HasField("graph") or not model.graph.output:
        raise OnnxModelError("the model has no graph outputs (corrupt, truncated or not an "
                             "ONNX model)", file=file)
    try:
        onnx.checker.check_model(model)
    except Exception as exc:  # noqa: BLE001 - ValidationError and protobuf errors
        # The checker is stricter than exporters and runtimes (e.g. outputs without shapes);
        # a model that is really broken fails below with a located error instead.
        log.warning("%s: the ONNX checker rejects the model (%s); importing anyway",
                    file or "model", str(exc).splitlines()[0] if str(exc) else exc)
    if model.functions:
        try:
            model = onnx.inliner.inline_local_functions(model)
        except Exception as exc:  # noqa: BLE001
            log.debug("could not inline local functions: %s", exc)
    return model


def import_onnx(model: str | os.PathLike | bytes | Any,
                input_shapes: dict[str, list[int]] | None = None,
                name: str | None = None) -> Network:
    """Import an ONNX model (path, bytes or ModelProto) as a float xir network.

    `input_shapes` fixes symbolic/unknown input dimensions by input name. Feature maps of the
    2-D ops are NHWC inside the network; inputs and outputs keep ONNX's layout and shape.
    Raises UnsupportedOnnxOpError listing every node xir cannot express, DynamicShapeError for
    unresolved input dimensions and OnnxModelError for unreadable files.
    """
    proto, file = _load(model)
    proto = _check(proto, file)
    try:
        return _Importer(proto, input_shapes, name, file).run()
    except XirError:
        raise
    except Exception as exc:  # noqa: BLE001 - a malformed model may break any step
        raise OnnxModelError(f"the model cannot be imported ({type(exc).__name__}: {exc}); is "
                             f"it a valid ONNX model?", file=file) from exc

"""Export a float xir network to ONNX, shaped like a PyTorch export.

Layout decision: the graph is translated to NCHW, not wrapped op by op. Every rank-4 value may
exist in the ONNX graph in one or both of two forms: "nhwc" (xir's own axis order) and "nchw"
(xir's axes permuted by (0, 3, 1, 2)). The 2-D ops (Conv, ConvTranspose, pools, BatchNorm,
Resize) read and write "nchw"; element-wise ops, Concat, Split, Slice, Pad and Softmax work in
whichever form their inputs already have, with axis attributes remapped; Reshape, Transpose,
Squeeze, Unsqueeze and MatMul need xir's order and get a Transpose in front when the value is
"nchw" (a Transpose of a transposed value folds into one). Converted forms are made on demand
and cached, so a ResNet or YOLO exports with no Transpose at all inside the graph.

At the boundary, rank-4 inputs and outputs are NCHW, as PyTorch models are; other ranks are
unchanged. Weights are converted HWIO -> OIHW (ConvTranspose: (kh,kw,cin,cout/g) ->
(cin,cout/g,kh,kw)). Silu becomes Mul(x, Sigmoid(x)); Relu becomes Relu, LeakyRelu, Clip or,
with a threshold, a Where; Upsample/Resize become Resize; Matmul + bias becomes MatMul + Add.
HardOp, Cast, AlignAxis and PruneAxis have no ONNX meaning and are refused.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from xir.errors import MissingDependencyError, XirError
from xir.network import Network, NetworkView
from xir.ops.base import Operation
from xir.values import Value

NHWC, NCHW = "nhwc", "nchw"
TO_NCHW = (0, 3, 1, 2)
TO_NHWC = (0, 2, 3, 1)
MIN_OPSET = 13
UNSUPPORTED = ("HardOp", "Cast", "AlignAxis", "PruneAxis")


class OnnxExportError(XirError, NotImplementedError):
    """The network (or one of its ops) cannot be expressed in ONNX by this exporter."""


def _onnx():
    try:
        import onnx
        from onnx import helper, numpy_helper
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise MissingDependencyError(
            "export_onnx needs the onnx package: pip install 'icraft-xrt-sim[onnx]'") from err
    return onnx, helper, numpy_helper


class _Exporter:
    def __init__(self, net: Network | NetworkView, opset: int) -> None:
        self.onnx, self.helper, self.numpy_helper = _onnx()
        self.net = net
        self.opset = opset
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.forms: dict[int, dict[str, str]] = {}  # v_id -> form -> onnx tensor name
        self.used_names: set[str] = set()
        self.const_cache: dict[tuple, str] = {}

    # --- names and constants --------------------------------------------------------------
    def fresh(self, base: str) -> str:
        base = base or "t"
        name, k = base, 1
        while name in self.used_names:
            name, k = f"{base}_{k}", k + 1
        self.used_names.add(name)
        return name

    def const(self, array: np.ndarray, base: str) -> str:
        arr = np.array(array, order="C")  # keeps 0-d scalars 0-d
        key = (base, arr.dtype.str, arr.shape, arr.tobytes()) if arr.size <= 64 else None
        if key is not None and key in self.const_cache:
            return self.const_cache[key]
        name = self.fresh(base)
        self.inits.append(self.numpy_helper.from_array(arr, name))
        if key is not None:
            self.const_cache[key] = name
        return name

    def ints(self, values, base: str) -> str:
        return self.const(np.asarray(list(values), dtype=np.int64), base)

    def node(self, op_type: str, inputs: list[str], base: str, n_out: int = 1,
             **attrs: Any) -> list[str]:
        outs = [self.fresh(base if n_out == 1 else f"{base}_{i}") for i in range(n_out)]
        self.nodes.append(self.helper.make_node(op_type, inputs, outs,
                                                name=self.fresh(f"{base}/{op_type}"), **attrs))
        return outs

    # --- value forms ----------------------------------------------------------------------
    def get(self, v: Value, form: str) -> str:
        """ONNX name of value `v` in `form` (rank-4 only may be "nchw"), made if needed."""
        if len(v.shape) != 4:
            form = NHWC
        have = self.forms.setdefault(v.v_id, {})
        if form in have:
            return have[form]
        perm = TO_NCHW if form == NCHW else TO_NHWC
        if v.is_params:
            data = v.data
            if data is None:
                raise OnnxExportError(f"params v_id {v.v_id} ({v.name}) has no data loaded; "
                                      "load the .raw file first", field="data")
            if form == NCHW:
                data = np.transpose(data, TO_NCHW)
            have[form] = self.const(data, v.name if form == NHWC else f"{v.name}_nchw")
            return have[form]
        other = NHWC if form == NCHW else NCHW
        if other not in have:
            raise OnnxExportError(f"value v_id {v.v_id} is read before it is produced")
        n, h, w, c = v.shape
        if (h == 1 and w == 1) or c == 1:  # same memory order: a free Reshape, no Transpose
            shape = [n, c, h, w] if form == NCHW else [n, h, w, c]
            have[form] = self.node("Reshape", [have[other], self.ints(shape, f"{v.name}_shape")],
                                   f"{v.name}_{form}")[0]
        else:
            have[form] = self.node("Transpose", [have[other]], f"{v.name}_{form}",
                                   perm=list(perm))[0]
        return have[form]

    def current_form(self, v: Value) -> str:
        """The form `v` is already available in (nchw preferred)."""
        if v.is_params or len(v.shape) != 4:
            return NHWC
        have = self.forms.get(v.v_id, {})
        return NCHW if NCHW in have else NHWC

    def put(self, v: Value, form: str, name: str) -> None:
        self.forms.setdefault(v.v_id, {})[form if len(v.shape) == 4 else NHWC] = name

    @staticmethod
    def axis_in(form: str, axis: int, rank: int) -> int:
        """xir axis -> the ONNX axis of the same data in `form`."""
        axis %= rank
        return TO_NCHW.index(axis) if form == NCHW and rank == 4 else axis

    # --- driver ---------------------------------------------------------------------------
    def run(self):
        onnx, helper = self.onnx, self.helper
        graph_inputs, graph_outputs = [], []
        for op in self.net.ops:
            if op.op_type in UNSUPPORTED:
                raise OnnxExportError(
                    f"{op.op_type} (op {op.op_id}{' ' + op.name if op.name else ''}) has no "
                    f"ONNX equivalent; export the float network before lowering/quantizing",
                    op_id=op.op_id)
            for v in op.inputs + op.outputs:
                if not v.dtype.element_dtype.is_float() or v.dtype.element_dtype.kind == "bf":
                    raise OnnxExportError(
                        f"{op.op_type} (op {op.op_id}) uses non-float value v_id {v.v_id} "
                        f"({v.dtype.element_dtype!r}); export_onnx handles float networks",
                        op_id=op.op_id)
        for v in self._network_inputs():
            form = NCHW if len(v.shape) == 4 else NHWC
            name = self.fresh(v.name)
            self.put(v, form, name)
            shape = [v.shape[p] for p in TO_NCHW] if form == NCHW else list(v.shape)
            graph_inputs.append(helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(v.dtype.numpy_dtype), shape))
        for op in self.net.ops:
            if op.op_type in ("Input", "Output"):
                continue
            handler = getattr(self, f"op_{op.op_type}", None)
            if handler is None:
                raise OnnxExportError(f"no ONNX export for {op.op_type} (op {op.op_id})",
                                      op_id=op.op_id)
            try:
                handler(op, op.attrs, op.name or f"{op.op_type.lower()}{op.op_id}")
            except XirError as err:
                raise err.located(op_id=op.op_id) from err.__cause__
        for v in self.net.outputs():
            form = NCHW if len(v.shape) == 4 else NHWC
            src = self.get(v, form)
            name = self.fresh(v.name)
            self.nodes.append(helper.make_node("Identity", [src], [name],
                                               name=self.fresh(f"{name}/Identity")))
            shape = [v.shape[p] for p in TO_NCHW] if form == NCHW else list(v.shape)
            graph_outputs.append(helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(v.dtype.numpy_dtype), shape))
        graph = helper.make_graph(self.nodes, getattr(self.net, "name", "network"),
                                  graph_inputs, graph_outputs, self.inits)
        model = helper.make_model(graph, producer_name="xcompile.frontend.onnx_export",
                                  opset_imports=[helper.make_opsetid("", self.opset)])
        model.ir_version = 10  # onnx 1.23 would write 11, which onnxruntime 1.31 refuses
        onnx.checker.check_model(model)
        return model

    def _network_inputs(self) -> list[Value]:
        return list(self.net.inputs())

    # --- 2-D ops (nchw) -------------------------------------------------------------------
    def _weight(self, v: Value, perm: tuple[int, ...], base: str) -> str:
        if v.is_params:
            if v.data is None:
                raise OnnxExportError(f"params {v.name} has no data loaded", field="data")
            return self.const(np.transpose(v.data, perm), f"{v.name}")
        return self.node("Transpose", [self.get(v, NHWC)], f"{base}_w", perm=list(perm))[0]

    def _conv_common(self, a: dict, base: str, x: str) -> tuple[str, list[int]]:
        pads = [a["pad_top"], a["pad_left"], a["pad_bottom"], a["pad_right"]]
        mode = a.get("padding_mode", "zeros")
        if mode == "zeros":
            return x, pads
        onnx_mode = {"reflect": "reflect", "replicate": "edge", "edge": "edge"}.get(mode)
        if onnx_mode is None:
            raise OnnxExportError(f"padding_mode {mode!r} has no ONNX Pad mode",
                                  field="padding_mode")
        p = self.ints([0, 0, pads[0], pads[1], 0, 0, pads[2], pads[3]], f"{base}_pads")
        return self.node("Pad", [x, p], f"{base}_pad", mode=onnx_mode)[0], [0, 0, 0, 0]

    def op_Conv2d(self, op: Operation, a: dict, base: str) -> None:
        x, pads = self._conv_common(a, base, self.get(op.inputs[0], NCHW))
        ins = [x, self._weight(op.inputs[1], (3, 2, 0, 1), base)]
        if len(op.inputs) > 2:
            ins.append(self.get(op.inputs[2], NHWC))
        kh, kw = op.inputs[1].shape[:2]
        out = self.node("Conv", ins, base, kernel_shape=[kh, kw], pads=pads,
                        strides=[a["stride_height"], a["stride_width"]],
                        dilations=[a["dilation_height"], a["dilation_width"]],
                        group=a["groups"])[0]
        self.put(op.outputs[0], NCHW, out)

    def op_ConvTranspose2d(self, op: Operation, a: dict, base: str) -> None:
        if a.get("padding_mode", "zeros") != "zeros":
            raise OnnxExportError("ConvTranspose2d supports padding_mode 'zeros' only",
                                  field="padding_mode")
        ins = [self.get(op.inputs[0], NCHW), self._weight(op.inputs[1], (2, 3, 0, 1), base)]
        if len(op.inputs) > 2:
            ins.append(self.get(op.inputs[2], NHWC))
        kh, kw = op.inputs[1].shape[:2]
        out = self.node("ConvTranspose", ins, base, kernel_shape=[kh, kw],
                        pads=[a["pad_top"], a["pad_left"], a["pad_bottom"], a["pad_right"]],
                        strides=[a["stride_height"], a["stride_width"]],
                        dilations=[a["dilation_height"], a["dilation_width"]],
                        group=a["groups"],
                        output_padding=[a["output_pad_height"], a["output_pad_width"]])[0]
        self.put(op.outputs[0], NCHW, out)

    def _pool(self, op: Operation, a: dict, base: str, onnx_type: str, **extra: Any) -> None:
        x = self.get(op.inputs[0], NCHW)
        out = self.node(onnx_type, [x], base,
                        kernel_shape=[a["pool_height"], a["pool_width"]],
                        strides=[a["stride_height"], a["stride_width"]],
                        pads=[a["pad_top"], a["pad_left"], a["pad_bottom"], a["pad_right"]],
                        ceil_mode=int(a["ceil_mode"]), **extra)[0]
        self.put(op.outputs[0], NCHW, out)

    def op_MaxPool2d(self, op: Operation, a: dict, base: str) -> None:
        self._pool(op, a, base, "MaxPool",
                   dilations=[a["dilation_height"], a["dilation_width"]])

    def op_AvgPool2d(self, op: Operation, a: dict, base: str) -> None:
        if a["is_global"]:
            out = self.node("GlobalAveragePool", [self.get(op.inputs[0], NCHW)], base)[0]
            self.put(op.outputs[0], NCHW, out)
            return
        self._pool(op, a, base, "AveragePool", count_include_pad=int(a["count_include_pad"]))

    def op_BatchNorm2d(self, op: Operation, a: dict, base: str) -> None:
        ins = [self.get(op.inputs[0], NCHW)] + [self.get(v, NHWC) for v in op.inputs[1:]]
        out = self.node("BatchNormalization", ins, base, epsilon=float(a["epsilon"]))[0]
        self.put(op.outputs[0], NCHW, out)

    def op_Sqrt(self, op: Operation, a: dict, base: str) -> None:
        form, x = self._unary(op)
        self.put(op.outputs[0], form, self.node("Sqrt", [x], base)[0])

    def op_ReduceMean(self, op: Operation, a: dict, base: str) -> None:
        x = self.get(op.inputs[0], NHWC)
        axes = [int(d) for d in a["axes"]]
        keep = int(bool(a["keepdims"]))
        if self.opset >= 18:
            out = self.node("ReduceMean", [x, self.ints(axes, f"{base}_axes")], base,
                            keepdims=keep)[0]
        else:
            out = self.node("ReduceMean", [x], base, axes=axes, keepdims=keep)[0]
        self.put(op.outputs[0], NHWC, out)

    def op_Erf(self, op: Operation, a: dict, base: str) -> None:
        form, x = self._unary(op)
        self.put(op.outputs[0], form, self.node("Erf", [x], base)[0])

    def op_Gelu(self, op: Operation, a: dict, base: str) -> None:
        """Gelu (opset 20), or below it the exporters' own decomposition."""
        form, x = self._unary(op)
        if self.opset >= 20:
            self.put(op.outputs[0], form, self.node("Gelu", [x], base,
                                                    approximate=a.get("approximate", "none"))[0])
            return
        if a.get("approximate", "none") == "tanh":
            x3 = self.node("Mul", [x, self.node("Mul", [x, x], f"{base}_sq")[0]],
                           f"{base}_cube")[0]
            k = self.node("Mul", [x3, self.const(np.float32(0.044715), f"{base}_k")],
                          f"{base}_kx3")[0]
            s = self.node("Mul", [self.node("Add", [x, k], f"{base}_in")[0],
                                  self.const(np.float32((2 / np.pi) ** 0.5), f"{base}_c")],
                          f"{base}_s")[0]
            e = self.node("Tanh", [s], f"{base}_tanh")[0]
        else:
            d = self.node("Mul", [x, self.const(np.float32(2 ** -0.5), f"{base}_isq2")],
                          f"{base}_d")[0]
            e = self.node("Erf", [d], f"{base}_erf")[0]
        a1 = self.node("Add", [e, self.const(np.float32(1.0), f"{base}_one")], f"{base}_a")[0]
        m = self.node("Mul", [x, a1], f"{base}_m")[0]
        self.put(op.outputs[0], form,
                 self.node("Mul", [m, self.const(np.float32(0.5), f"{base}_half")], base)[0])

    def op_LRN(self, op: Operation, a: dict, base: str) -> None:
        out = self.node("LRN", [self.get(op.inputs[0], NCHW)], base, size=int(a["size"]),
                        alpha=float(a["alpha"]), beta=float(a["beta"]), bias=float(a["bias"]))[0]
        self.put(op.outputs[0], NCHW, out)

    def op_GroupNorm(self, op: Operation, a: dict, base: str) -> None:
        c = op.inputs[0].shape[3]
        x = self.get(op.inputs[0], NCHW)
        if int(a["num_groups"]) == c:
            ins = [x] + [self.get(v, NHWC) for v in op.inputs[1:]]
            out = self.node("InstanceNormalization", ins, base, epsilon=float(a["epsilon"]))[0]
        elif self.opset >= 21:
            ins = [x] + [self.get(v, NHWC) for v in op.inputs[1:]]
            out = self.node("GroupNormalization", ins, base, num_groups=int(a["num_groups"]),
                            epsilon=float(a["epsilon"]))[0]
        else:
            raise OnnxExportError(f"GroupNorm with {a['num_groups']} groups of {c} channels "
                                  f"needs opset 21 (per-channel GroupNormalization), not "
                                  f"{self.opset}", field="opset")
        self.put(op.outputs[0], NCHW, out)

    def op_LayerNorm(self, op: Operation, a: dict, base: str) -> None:
        if self.opset < 17:
            raise OnnxExportError(f"LayerNorm needs opset 17 (LayerNormalization), not "
                                  f"{self.opset}", field="opset")
        ins = [self.get(v, NHWC) for v in op.inputs]
        outs = self.node("LayerNormalization", ins, base, n_out=len(op.outputs),
                         axis=int(a["axis"]), epsilon=float(a["epsilon"]))
        for v, name in zip(op.outputs, outs):
            self.put(v, NHWC, name)

    def _resize(self, op: Operation, base: str, *, sizes=None, scales=None, mode: str,
                coord: str, nearest: str) -> None:
        x = self.get(op.inputs[0], NCHW)
        roi, sc, sz = "", "", ""
        if sizes is not None:
            sz = self.ints(sizes, f"{base}_sizes")
        else:
            sc = self.const(np.asarray(scales, dtype=np.float32), f"{base}_scales")
        attrs: dict[str, Any] = {"mode": "nearest" if mode == "nearest" else "linear",
                                 "coordinate_transformation_mode": coord}
        if mode == "nearest":
            attrs["nearest_mode"] = nearest
        ins = [x, roi, sc] + ([sz] if sz else [])
        out = self.node("Resize", ins, base, **attrs)[0]
        self.put(op.outputs[0], NCHW, out)

    def op_Resize(self, op: Operation, a: dict, base: str) -> None:
        n, _, _, c = op.inputs[0].shape
        self._resize(op, base, sizes=[n, c, a["out_height"], a["out_width"]], mode=a["mode"],
                     coord=a["coordinate_mode"], nearest=a["nearest_mode"])

    def op_Upsample(self, op: Operation, a: dict, base: str) -> None:
        nearest = a["mode"] == "nearest"
        self._resize(op, base, scales=[1.0, 1.0, float(a["scale_height"]),
                                       float(a["scale_width"])], mode=a["mode"],
                     coord="asymmetric" if nearest else "half_pixel", nearest="floor")

    # --- element-wise (either form) -------------------------------------------------------
    def _unary(self, op: Operation) -> tuple[str, str]:
        form = self.current_form(op.inputs[0])
        return form, self.get(op.inputs[0], form)

    def op_Relu(self, op: Operation, a: dict, base: str) -> None:
        form, x = self._unary(op)
        alpha, top, t = a["alpha"], a["max_value"], a["threshold"]
        if t != 0.0:
            tt = self.const(np.float32(t), f"{base}_threshold")
            keep = self.node("GreaterOrEqual", [x, tt], f"{base}_keep")[0]
            shifted = self.node("Sub", [x, tt], f"{base}_shift")[0]
            low = self.node("Mul", [shifted, self.const(np.float32(alpha), f"{base}_alpha")],
                            f"{base}_low")[0]
            y = self.node("Where", [keep, x, low], f"{base}_where")[0]
            if math.isfinite(top):
                y = self.node("Min", [y, self.const(np.float32(top), f"{base}_max")], base)[0]
        elif alpha != 0.0:
            y = self.node("LeakyRelu", [x], base if not math.isfinite(top) else f"{base}_leaky",
                          alpha=float(alpha))[0]
            if math.isfinite(top):
                y = self.node("Min", [y, self.const(np.float32(top), f"{base}_max")], base)[0]
        elif math.isfinite(top) and top >= 0.0:
            y = self.node("Clip", [x, self.const(np.float32(0.0), "zero"),
                                   self.const(np.float32(top), f"{base}_max")], base)[0]
        else:
            y = self.node("Relu", [x], base if not math.isfinite(top) else f"{base}_relu")[0]
            if math.isfinite(top):
                y = self.node("Min", [y, self.const(np.float32(top), f"{base}_max")], base)[0]
        self.put(op.outputs[0], form, y)

    def op_Tanh(self, op: Operation, a: dict, base: str) -> None:
        form, x = self._unary(op)
        self.put(op.outputs[0], form, self.node("Tanh", [x], base)[0])

    def op_Sigmoid(self, op: Operation, a: dict, base: str) -> None:
        form, x = self._unary(op)
        self.put(op.outputs[0], form, self.node("Sigmoid", [x], base)[0])

    def op_Silu(self, op: Operation, a: dict, base: str) -> None:
        form, x = self._unary(op)
        s = self.node("Sigmoid", [x], f"{base}_sigmoid")[0]
        self.put(op.outputs[0], form, self.node("Mul", [x, s], base)[0])

    def op_Hardswish(self, op: Operation, a: dict, base: str) -> None:
        form, x = self._unary(op)
        if self.opset >= 14:
            y = self.node("HardSwish", [x], base)[0]
        else:
            hs = self.node("HardSigmoid", [x], f"{base}_hsig", alpha=1.0 / 6.0, beta=0.5)[0]
            y = self.node("Mul", [x, hs], base)[0]
        self.put(op.outputs[0], form, y)

    def op_Softmax(self, op: Operation, a: dict, base: str) -> None:
        form, x = self._unary(op)
        axis = self.axis_in(form, a["axis"], len(op.inputs[0].shape))
        self.put(op.outputs[0], form, self.node("Softmax", [x], base, axis=axis)[0])

    def _binary(self, op: Operation, onnx_type: str, base: str) -> None:
        feats = [v for v in op.inputs if not v.is_params]
        out_rank = len(op.outputs[0].shape)
        form = NHWC
        if out_rank == 4 and feats and all(len(v.shape) == 4 for v in feats) and \
                any(self.current_form(v) == NCHW for v in feats):
            form = NCHW
        ins = []
        for v in op.inputs:
            if form == NCHW and v.is_params and len(v.shape) < 4:
                data = v.data.reshape((1,) * (4 - v.data.ndim) + v.data.shape)
                ins.append(self.const(np.transpose(data, TO_NCHW), f"{v.name}_nchw"))
            else:
                ins.append(self.get(v, form))
        self.put(op.outputs[0], form, self.node(onnx_type, ins, base)[0])

    def op_Add(self, op: Operation, a: dict, base: str) -> None:
        self._binary(op, "Add", base)

    def op_Sub(self, op: Operation, a: dict, base: str) -> None:
        self._binary(op, "Sub", base)

    def op_Div(self, op: Operation, a: dict, base: str) -> None:
        self._binary(op, "Div", base)

    def op_Multiply(self, op: Operation, a: dict, base: str) -> None:
        self._binary(op, "Mul", base)

    # --- data movement --------------------------------------------------------------------
    def _common_form(self, values: list[Value]) -> str:
        if all(len(v.shape) == 4 for v in values) and \
                any(self.current_form(v) == NCHW for v in values):
            return NCHW
        return NHWC

    def op_Concat(self, op: Operation, a: dict, base: str) -> None:
        form = self._common_form(op.inputs)
        axis = self.axis_in(form, a["axis"], len(op.inputs[0].shape))
        out = self.node("Concat", [self.get(v, form) for v in op.inputs], base, axis=axis)[0]
        self.put(op.outputs[0], form, out)

    def op_Split(self, op: Operation, a: dict, base: str) -> None:
        form, x = self._unary(op)
        axis = self.axis_in(form, a["axis"], len(op.inputs[0].shape))
        outs = self.node("Split", [x, self.ints(a["sections"], f"{base}_sections")], base,
                         n_out=len(op.outputs), axis=axis)
        for v, name in zip(op.outputs, outs):
            self.put(v, form, name)

    def op_Slice(self, op: Operation, a: dict, base: str) -> None:
        form, x = self._unary(op)
        rank = len(op.inputs[0].shape)
        step = a["step"] or [1] * rank
        order = list(TO_NCHW) if form == NCHW and rank == 4 else list(range(rank))
        out = self.node("Slice", [x, self.ints([a["begin"][i] for i in order], f"{base}_starts"),
                                  self.ints([a["end"][i] for i in order], f"{base}_ends"),
                                  self.ints(range(rank), f"axes{rank}"),
                                  self.ints([step[i] for i in order], f"{base}_steps")],
                        base)[0]
        self.put(op.outputs[0], form, out)

    def op_Pad(self, op: Operation, a: dict, base: str) -> None:
        form, x = self._unary(op)
        rank = len(op.inputs[0].shape)
        order = list(TO_NCHW) if form == NCHW and rank == 4 else list(range(rank))
        pads = [a["pad_before"][i] for i in order] + [a["pad_after"][i] for i in order]
        ins = [x, self.ints(pads, f"{base}_pads")]
        if a["mode"] == "constant":
            dtype = op.inputs[0].dtype.numpy_dtype
            ins.append(self.const(np.asarray(a["value"], dtype=dtype), f"{base}_value"))
        out = self.node("Pad", ins, base, mode=a["mode"])[0]
        self.put(op.outputs[0], form, out)

    def op_Transpose(self, op: Operation, a: dict, base: str) -> None:
        v = op.inputs[0]
        rank = len(v.shape)
        perm = [p % rank for p in a["perm"]]
        if self.current_form(v) == NCHW:  # fold the nchw -> nhwc permutation into this one
            x, perm = self.get(v, NCHW), [TO_NHWC[p] for p in perm]
        else:
            x = self.get(v, NHWC)
        self.put(op.outputs[0], NHWC, self.node("Transpose", [x], base, perm=perm)[0])

    def op_ChannelShuffle(self, op: Operation, a: dict, base: str) -> None:
        shape = [int(d) for d in op.inputs[0].shape]
        g = int(a["groups"])
        x = self.get(op.inputs[0], NHWC)
        split = self.node("Reshape", [x, self.ints(shape[:-1] + [g, shape[-1] // g],
                                                   f"{base}_split")], f"{base}_r")[0]
        perm = list(range(len(shape) - 1)) + [len(shape), len(shape) - 1]
        t = self.node("Transpose", [split], f"{base}_t", perm=perm)[0]
        self.put(op.outputs[0], NHWC, self.node("Reshape", [t, self.ints(shape, f"{base}_shape")],
                                                base)[0])

    def op_Reshape(self, op: Operation, a: dict, base: str) -> None:
        x = self.get(op.inputs[0], NHWC)
        out = self.node("Reshape", [x, self.ints(a["shape"], f"{base}_shape")], base)[0]
        self.put(op.outputs[0], NHWC, out)

    def op_Squeeze(self, op: Operation, a: dict, base: str) -> None:
        x = self.get(op.inputs[0], NHWC)
        axes = [self.ints(a["axes"], f"{base}_axes")] if a["axes"] else []
        self.put(op.outputs[0], NHWC, self.node("Squeeze", [x] + axes, base)[0])

    def op_Unsqueeze(self, op: Operation, a: dict, base: str) -> None:
        x = self.get(op.inputs[0], NHWC)
        out = self.node("Unsqueeze", [x, self.ints(a["axes"], f"{base}_axes")], base)[0]
        self.put(op.outputs[0], NHWC, out)

    def op_Matmul(self, op: Operation, a: dict, base: str) -> None:
        ins = []
        for v, flag in zip(op.inputs[:2], (a["transpose_a"], a["transpose_b"])):
            rank = len(v.shape)
            if flag and rank >= 2:
                if v.is_params:
                    ins.append(self.const(np.swapaxes(v.data, -1, -2), f"{v.name}_t"))
                    continue
                perm = list(range(rank - 2)) + [rank - 1, rank - 2]
                ins.append(self.node("Transpose", [self.get(v, NHWC)], f"{base}_t",
                                     perm=perm)[0])
            else:
                ins.append(self.get(v, NHWC))
        if len(op.inputs) > 2:
            y = self.node("MatMul", ins, f"{base}_matmul")[0]
            y = self.node("Add", [y, self.get(op.inputs[2], NHWC)], base)[0]
        else:
            y = self.node("MatMul", ins, base)[0]
        self.put(op.outputs[0], NHWC, y)


def export_onnx(net: Network | NetworkView, path: str | None = None,
                opset: int = 17) -> Any:
    """Translate a float xir network to an `onnx.ModelProto` (saved to `path` if given).

    Rank-4 inputs and outputs are NCHW, like a PyTorch export; inside, the graph is NCHW with
    no Transposes for conv nets (see the module docstring). Raises OnnxExportError for ops or
    element types ONNX cannot express, MissingDependencyError without the onnx package.
    """
    if opset < MIN_OPSET:
        raise OnnxExportError(f"opset {opset} is too old; export_onnx writes opset "
                              f"{MIN_OPSET} or newer", field="opset")
    model = _Exporter(net, opset).run()
    if path is not None:
        onnx, _, _ = _onnx()
        onnx.save(model, path)
    return model

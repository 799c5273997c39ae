"""Pre-quantized (QDQ) models: their QuantizeLinear/DequantizeLinear pairs out of the float
network, the scales their authors chose kept for the quantize stage.

A QDQ model (onnxruntime's `quantize_static(..., quant_format=QuantFormat.QDQ)`, TensorRT's
and PyTorch's QAT exports) is a float network whose tensors pass through `DequantizeLinear(
QuantizeLinear(x, s, zp), s, zp)`: the pair rounds `x` to the grid its author calibrated or
trained. The importer takes the pairs as they come (an OnnxGraph op each, or native ops where
xir has them) and folds `DequantizeLinear` of an int8 constant (a weight, an int32 bias) into
the float constant, so the weights arrive as exact multiples of their scales.

`remove_qdq(net)` (in place, before the optimize stage) removes every pair and returns, per
float value, the pair's `QdqScale`; it also writes the range the pair represents on that value
as `tags["qdq_amax"]`, which `quantize_network` uses instead of the calibrated threshold
(docs/quantization.md section 8). What follows from the pair:

- symmetric pairs (signed, zero point 0, as onnxruntime writes int8 with ActivationSymmetric)
  give exactly the project's representation: `amax = s * qmax`, so the value's scale is the
  author's `s` (to float64 round-off) wherever it is stored in 8 bits; a value the compile
  keeps in 16 bits keeps the same range at a finer step;
- asymmetric pairs (uint8 with a zero point, onnxruntime's default) cover `[(qmin - zp) s,
  (qmax - zp) s]`; the symmetric scheme (no zero points, section 1) keeps that range, `amax =
  max(|lo|, |hi|)`. Where the range starts at 0 the pair also clipped negatives: onnxruntime
  removes a Relu / Clip behind a convolution into the pair's range, so a Relu is put back there
  (and the optimize stage folds it into the convolution again);
- weights: onnxruntime's symmetric weights are `k * s_c` with `max |k| = 127` per output
  channel, so the compile's per-channel weight scales (`max |w_c| / 127`) are the author's and
  the weight codes are the author's codes (GPTQ keeps weights that lie on the grid);
  per-tensor weights keep their values but get per-channel scales (finer).

Layout: between the NHWC convolutions the importer brings a QDQ pair's NCHW tensors back with a
Transpose on each side; once the pair is gone the two Transposes compose to the identity and
are removed too, so a QDQ model compiles to the same network as its float original.

A pair is left in place (and runs on the host) where it is not a plain round trip: a Q read by
anything but DequantizeLinear, a DQ whose scale or zero point differs from its Q's, per-axis
activation scales, or a non-integer (float8, int4) quantized type.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from xcompile.frontend import import_onnx
from xir.errors import MissingDependencyError
from xir.network import Network
from xir.ops.base import OP_REGISTRY, Operation
from xir.values import Value

log = logging.getLogger(__name__)

__all__ = ["QdqScale", "remove_qdq", "strip_qdq_model", "tag_scales", "import_qdq", "AMAX_TAG",
           "SCALE_TAG"]

#: value tag: the threshold (float, `amax`) the pair's range gives, read by quantize_network
AMAX_TAG = "qdq_amax"
#: value tag: the pair itself ({"scale", "zero_point", "dtype"}), for reports
SCALE_TAG = "qdq"
#: producers whose output can be negative: a one-sided pair behind them was a removed Relu
_SIGNED_PRODUCERS = frozenset({"Conv2d", "ConvTranspose2d", "Matmul", "Add", "Sub",
                               "BatchNorm2d", "Multiply"})


@dataclass(frozen=True)
class QdqScale:
    """One QuantizeLinear/DequantizeLinear pair: per-tensor `scale`, `zero_point` and the
    quantized dtype's range `[qmin, qmax]`."""

    scale: float
    zero_point: int
    dtype: str
    qmin: int
    qmax: int

    @property
    def lo(self) -> float:
        return (self.qmin - self.zero_point) * self.scale

    @property
    def hi(self) -> float:
        return (self.qmax - self.zero_point) * self.scale

    @property
    def symmetric(self) -> bool:
        return self.zero_point == 0 and self.qmin < 0

    @property
    def amax(self) -> float:
        """The symmetric threshold keeping the pair's whole range."""
        if self.symmetric:
            return self.scale * self.qmax
        return max(abs(self.lo), abs(self.hi))

    @property
    def clips_negatives(self) -> bool:
        return self.lo >= 0.0


def _onnx():
    try:
        import onnx
        from onnx import numpy_helper
    except ImportError as exc:  # pragma: no cover - onnx comes with the importer
        raise MissingDependencyError(f"reading a QDQ pair needs onnx ({exc})") from exc
    return onnx, numpy_helper


def _kind(op: Operation) -> str | None:
    """"Q" / "DQ" for a QuantizeLinear / DequantizeLinear op (OnnxGraph or native), else None."""
    if op.op_type == "OnnxGraph":
        ops = list(op.attrs.get("onnx_ops") or [])
        t = ops[0] if len(ops) == 1 else ""
    else:
        t = op.op_type
    return {"QuantizeLinear": "Q", "DequantizeLinear": "DQ"}.get(t)


def _params(op: Operation) -> QdqScale | None:
    """The pair parameters an op carries, or None where they are not a per-tensor integer
    grid (or not constant)."""
    if op.op_type == "OnnxGraph":
        onnx, _ = _onnx()
        graph = onnx.load_from_string(op.model_bytes()).graph
        node = next(n for n in graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear"))
        return _onnx_pair(node, _consts(graph))
    ins = op.inputs[1:3]
    scale = ins[0].data if ins and ins[0].is_params else None
    zp = ins[1].data if len(ins) > 1 and ins[1].is_params else np.zeros((), np.uint8)
    return _pair(scale, zp)


def _pair(scale, zp) -> QdqScale | None:
    """A per-tensor pair on an 8- or 16-bit integer grid, else None."""
    if scale is None or zp is None:
        return None
    scale, zp = np.asarray(scale), np.asarray(zp)
    if scale.size != 1 or zp.size != 1 or zp.dtype.kind not in "iu" or zp.dtype.itemsize > 2:
        return None
    info = np.iinfo(zp.dtype)
    return QdqScale(float(scale.ravel()[0]), int(zp.ravel()[0]), zp.dtype.name,
                    int(info.min), int(info.max))


def _consts(graph) -> dict[str, np.ndarray]:
    """A graph's constants: initializers and Constant nodes' tensors."""
    onnx, numpy_helper = _onnx()
    out = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    for n in graph.node:
        if n.op_type == "Constant" and n.attribute and \
                n.attribute[0].type == onnx.AttributeProto.TENSOR:
            out[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    return out


def _relu_after(net: Network, x: Value, readers: list[Operation]) -> Value:
    """A Relu on `x` right after its producer; `readers` read its output instead."""
    r = net.newValue(x.dtype, f"{x.name}.relu")
    relu = OP_REGISTRY["Relu"]([x], [r], op_id=net.newOpId(), name=f"{x.name}.relu")
    net.ops.insert(net.ops.index(x.producer) + 1, relu)
    for op in readers:
        op.inputs = [r if v is x else v for v in op.inputs]
    net.relink()
    return r


def _perm_identity(p1: list[int], p2: list[int]) -> bool:
    return len(p1) == len(p2) and [p1[i] for i in p2] == list(range(len(p1)))


def _collapse_transposes(net: Network, v: Value, outputs: set[int]) -> Value:
    """Where `v` is a Transpose's output read only by Transposes that undo it, those readers'
    readers read the first Transpose's input instead; the Transposes leave the network.
    Returns the value that now stands for `v` (for its tags)."""
    t1 = v.producer
    if t1 is None or t1.op_type != "Transpose" or v.v_id in outputs or not v.consumers:
        return v
    p1 = list(t1.attrs["perm"])
    if not all(c.op_type == "Transpose" and _perm_identity(p1, list(c.attrs["perm"]))
               and c.outputs[0].v_id not in outputs for c in v.consumers):
        return v
    src = t1.inputs[0]
    for t2 in list(v.consumers):
        net.replaceValue(t2.outputs[0], src)
        net.ops.remove(t2)
    net.ops.remove(t1)
    net.relink()
    return src


def _remove_pair(net: Network, q: Operation, s: QdqScale, outputs: set[int]) -> Value:
    """Take out `q` and its DequantizeLinear readers; returns the float value their readers
    read now (a Relu put back where the pair clipped negatives)."""
    x, dqs = q.inputs[0], list(q.outputs[0].consumers)
    # the pair was the only way to x (and through the importer's Transpose, to its source):
    # only then can its clip be put back as a Relu for every reader
    alone = len(x.consumers) == 1 and (x.producer is None or x.producer.op_type != "Transpose"
                                       or len(x.producer.inputs[0].consumers) == 1)
    for d in dqs:
        b = d.outputs[0]
        for c in list(b.consumers):
            if c.op_type == "Output":
                x.name = b.name  # the network output keeps its ONNX name
            c.inputs = [x if v is b else v for v in c.inputs]
        net.ops.remove(d)
    net.ops.remove(q)
    net.relink()
    v = _collapse_transposes(net, x, outputs)
    if s.clips_negatives and alone and v.producer is not None \
            and v.producer.op_type in _SIGNED_PRODUCERS and v.v_id not in outputs:
        v = _relu_after(net, v, list(v.consumers))
    return v


def remove_qdq(net: Network) -> dict[int, QdqScale]:
    """Remove `net`'s QuantizeLinear/DequantizeLinear round trips in place (module
    docstring); returns `{v_id: QdqScale}` of the float values that now carry the pairs'
    scales (`tags["qdq_amax"]`, `tags["qdq"]`). A network without pairs is left untouched."""
    result: dict[int, QdqScale] = {}
    kept = removed = 0
    for q in [op for op in net.ops if _kind(op) == "Q"]:
        outputs = {v.v_id for v in net.outputs()}
        qv = q.outputs[0]
        dqs = list(qv.consumers)
        s = _params(q)
        if s is None or not dqs or qv.v_id in outputs or any(
                _kind(d) != "DQ" or d.inputs[0] is not qv or _params(d) != s for d in dqs):
            kept += 1
            continue
        v = _remove_pair(net, q, s, outputs)
        removed += 1
        if v.v_id in result and result[v.v_id].amax >= s.amax:
            continue  # one value quantized twice: the wider range wins
        v.tags[AMAX_TAG] = float(s.amax)
        v.tags[SCALE_TAG] = {"scale": s.scale, "zero_point": s.zero_point, "dtype": s.dtype}
        result[v.v_id] = s
    if removed or kept:
        net.validate()
        log.info("QDQ: %d pairs removed (%d values keep their scales), %d left in place",
                 removed, len(result), kept)
    return result


# --- at the ONNX level, before import ---------------------------------------------------------

_ONNX_SIGNED = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm", "Add", "Sub", "Mul",
                          "BatchNormalization"})


def _onnx_pair(node, consts: dict) -> QdqScale | None:
    """The pair parameters of an ONNX QuantizeLinear / DequantizeLinear node (zero point
    absent: uint8, or the node's `output_dtype`)."""
    onnx, _ = _onnx()
    scale = consts.get(node.input[1]) if len(node.input) > 1 else None
    zp = consts.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    if zp is None:
        out_dtype = next((a.i for a in node.attribute if a.name == "output_dtype"), 0)
        zp = np.zeros((), onnx.helper.tensor_dtype_to_np_dtype(out_dtype) if out_dtype
                      else np.uint8)
    return _pair(scale, zp)


def _dequantize(node, consts: dict) -> np.ndarray | None:
    """DequantizeLinear of a constant, as ONNX computes it: (q - zp) * scale in float32, the
    scale broadcast along `axis` when it is a vector."""
    q = consts.get(node.input[0])
    scale = consts.get(node.input[1]) if len(node.input) > 1 else None
    if q is None or scale is None or np.asarray(q).dtype.kind not in "iu":
        return None
    q = np.asarray(q)
    zp = consts.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    scale = np.asarray(scale, np.float32)
    zp = np.zeros_like(scale, np.int64) if zp is None else np.asarray(zp, np.int64)
    if scale.size > 1:
        axis = next((a.i for a in node.attribute if a.name == "axis"), 1) % max(q.ndim, 1)
        shape = [1] * q.ndim
        shape[axis] = -1
        scale, zp = scale.reshape(shape), zp.reshape(shape)
    return ((q.astype(np.int64) - zp).astype(np.float32) * scale).astype(np.float32)


def strip_qdq_model(model) -> tuple[object, dict[str, QdqScale], dict[str, np.ndarray]]:
    """The float model a QDQ ModelProto stands for (a new ModelProto; `model` is not
    changed), the pairs' scales by the ONNX tensor they quantized, and the weight scales
    (per channel where the model has them) by weight name.

    DequantizeLinear of a constant becomes the float constant; a round-trip pair becomes an
    Identity (a Relu where the pair clipped the negatives of a convolution, matmul or add, as
    onnxruntime's asymmetric quantization leaves it); other Q/DQ nodes stay."""
    onnx, numpy_helper = _onnx()
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    consts = _consts(g)
    readers: dict[str, list] = {}
    producer: dict[str, object] = {}
    for n in g.node:
        for x in n.input:
            readers.setdefault(x, []).append(n)
        for y in n.output:
            producer[y] = n
    graph_out = {o.name for o in g.output}
    pairs: dict[str, QdqScale] = {}
    weights: dict[str, np.ndarray] = {}
    drop: set[int] = set()
    new_nodes = []
    replaced: dict[int, object] = {}
    for n in g.node:
        std = n.domain in ("", "ai.onnx")
        if std and n.op_type == "DequantizeLinear" and n.input[0] in consts:
            w = _dequantize(n, consts)
            if w is not None:
                g.initializer.append(numpy_helper.from_array(w, n.output[0]))
                consts[n.output[0]] = w
                weights[n.output[0]] = np.asarray(consts[n.input[1]], np.float64).ravel()
                drop.add(id(n))
            continue
        if not (std and n.op_type == "QuantizeLinear"):
            continue
        s = _onnx_pair(n, consts)
        dqs = readers.get(n.output[0], [])
        if s is None or not dqs or n.output[0] in graph_out or any(
                d.op_type != "DequantizeLinear" or d.input[0] != n.output[0]
                or _onnx_pair(d, consts) != s for d in dqs):
            continue
        x = n.input[0]
        prod = producer.get(x)
        relu = s.clips_negatives and len(readers.get(x, [])) == 1 and prod is not None \
            and prod.op_type in _ONNX_SIGNED
        for d in dqs:
            replaced[id(d)] = onnx.helper.make_node("Relu" if relu else "Identity", [x],
                                                    [d.output[0]], name=f"{d.name}.qdq")
        drop.add(id(n))
        prev = pairs.get(x)
        if prev is None or s.amax > prev.amax:
            pairs[x] = s
    for n in g.node:
        if id(n) in drop:
            continue
        new_nodes.append(replaced.get(id(n), n))
    del g.node[:]
    g.node.extend(new_nodes)
    used = {x for n in g.node for x in n.input} | graph_out
    keep = [i for i in g.initializer if i.name in used]
    del g.initializer[:]
    g.initializer.extend(keep)
    return out, pairs, weights


def tag_scales(net: Network, pairs: dict[str, QdqScale]) -> dict[int, QdqScale]:
    """Write each pair's range on the xir values named after the ONNX tensor it quantized
    (`tags["qdq_amax"]`, `tags["qdq"]`); returns `{v_id: QdqScale}`."""
    result: dict[int, QdqScale] = {}
    for op in net.ops:
        for v in op.outputs:
            s = pairs.get(v.name)
            if s is None:
                continue
            v.tags[AMAX_TAG] = float(s.amax)
            v.tags[SCALE_TAG] = {"scale": s.scale, "zero_point": s.zero_point, "dtype": s.dtype}
            result[v.v_id] = s
    return result


def import_qdq(model, input_shapes: dict[str, list[int]] | None = None,
               name: str | None = None, input_values: dict | None = None) -> Network:
    """`import_onnx` for any model, QDQ or not: a model with QuantizeLinear nodes is imported
    as the float model its pairs stand for (`strip_qdq_model`, so the importer's layouts and
    fusions are the float model's), the pairs' scales tagged on its values (`tag_scales`);
    pairs that are not round trips go through `remove_qdq` after import where they can. A
    file or bytes without the op names is handed to `import_onnx` as it is, unparsed here (no
    second copy of a large model in memory)."""
    onnx, _ = _onnx()
    if not isinstance(model, onnx.ModelProto) and not _mentions_qdq(model):
        return import_onnx(model, input_shapes, name=name, input_values=input_values)
    try:
        proto = model if isinstance(model, onnx.ModelProto) else \
            onnx.load_from_string(bytes(model)) if isinstance(model, (bytes, bytearray)) \
            else onnx.load(str(model))
    except Exception:  # noqa: BLE001 - import_onnx names what is wrong with the file
        return import_onnx(model, input_shapes, name=name, input_values=input_values)
    if not any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in proto.graph.node):
        del proto  # the plain path: import_onnx reads the model itself (and names the file)
        return import_onnx(model, input_shapes, name=name, input_values=input_values)
    stripped, pairs, weights = strip_qdq_model(proto)
    del proto
    net = import_onnx(stripped, input_shapes, name=name, input_values=input_values)
    tagged = tag_scales(net, pairs)
    remove_qdq(net)
    log.info("QDQ model: %d activation scales on %d values, %d dequantized weights",
             len(pairs), len(tagged), len(weights))
    return net


def _mentions_qdq(model) -> bool:
    """Whether a serialized model (a file or bytes) holds the text "uantizeLinear" anywhere
    (a node op type is stored as plain text): False rules QDQ out without parsing."""
    import mmap

    needle = b"uantizeLinear"
    if isinstance(model, (bytes, bytearray, memoryview)):
        return needle in bytes(model)
    try:
        with open(str(model), "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            return m.find(needle) >= 0
    except (OSError, ValueError):  # missing, empty or unreadable: import_onnx says why
        return False

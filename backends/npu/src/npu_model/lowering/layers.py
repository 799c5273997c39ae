"""Per-op lowering rules: which quantized ops an NPU target runs, and their layers and constants.

Each rule reads one quantized xir op and returns an `OpLowering`: the constants to pack into the
HardOp's weight blob and a function that, given the final addresses, makes the npu_model layer
descriptors (`npu_model.asm`). Every multiplier is derived from the value scales exactly as the
HostBackend integer reference does (docs/quantization.md section 9), so the NPU's results are
bit-identical to it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from npu_model import asm
from xir.ops.resize_taps import BILINEAR_FRAC_BITS, integer_taps
from xir.quant.fixed_point import (
    add_rescale_params,
    clip_bounds,
    quantize,
    quantize_multiplier,
    requant_multiplier,
)
from xir.quant.lut import LUT_OPS, build_lut, lut_params
from xir.quant.rownorm import layer_norm_consts, softmax_consts
from xir.types import QuantizedType, TensorType
from xir.values import Value

from .common import items, map3, npu_dtype, scale_of

#: ops that never compute: they become channel offsets / aliases, or a COPY when they cannot
ALIAS_OPS = frozenset({"Concat", "Split", "Reshape", "Squeeze", "Unsqueeze", "AlignAxis",
                       "PruneAxis"})
#: Add/Sub common-shift rule of docs/quantization.md section 9

Resolver = Any  # lower._Resolver: .fmap(value) -> asm.FMap, .const(index) -> logical address


@dataclass
class OpLowering:
    """How one xir op runs on the NPU: constants (packed bytes) and a layer maker.

    `kind` names the layers `make` returns, "+"-joined when there are several; `scratch` are
    maps internal to the op (not network values) that the lowering gives FTMP buffers.

    A batch of N items (NHWC values with N > 1) lies in a buffer as N maps one after the other
    (N * h rows). `fold` says the layers compute every row (or, for MATMUL DYNAMIC, every
    batch row) independently of the others with no vertical window, so the N items run as one
    layer over the N * h rows; otherwise the lowering calls `make` once per item, with the
    resolver's maps pointing at that item (a value of one item is read by every item: numpy's
    broadcast over the batch axis). docs/zg330-lowering.md, "Batches"."""

    kind: str
    consts: list[np.ndarray] = field(default_factory=list)
    make: Callable[[Resolver], list[asm.Layer]] | None = None
    macs: int = 0
    scratch: list[Any] = field(default_factory=list)
    fold: bool = False
    #: the scratch maps are dense (pitch = channels): their bytes are the elements in order
    dense_scratch: bool = False
    #: the lowering makes the input's buffer dense (pitch = channels) when nothing else
    #: shares it; then `make` reads it in place and the scratch maps are not allocated
    dense_input: bool = False

    @property
    def kinds(self) -> list[str]:
        return self.kind.split("+")


class NotLowerable(Exception):
    """The op stays on the host (the message says why, for the compile log)."""


# --- helpers --------------------------------------------------------------------------------------


def _attr(op, name: str, default: Any) -> Any:
    return op.attrs.get(name, default)


def _feature_dtypes(op, rescales: bool = False) -> str:
    """The NPU dtype the op computes in, or NotLowerable. All feature maps share it, except
    that a rescaling layer (`rescales`: CONV, MATMUL, ELTW, LUT, POOL AVG, whose requantization or
    table saturates to the output dtype) may write the other one: the precision edges of a
    mixed-precision network (docs/quantization.md)."""
    feats = op.feature_inputs() + list(op.outputs)
    dts = {npu_dtype(v) for v in feats}
    dins = {npu_dtype(v) for v in op.feature_inputs()}
    if None in dts or len(dins) != 1 or (not rescales and len(dts) != 1):
        raise NotLowerable("feature maps are not all per-tensor int8 or all int16")
    for v in feats:
        if map3(v.shape) is None:
            raise NotLowerable(f"value {v.v_id} shape {list(v.shape)} has no NPU map form "
                               f"(NHWC, (B, M, K) or (M, K), N * H and each axis below 65536)")
    return dins.pop()


def folded_act(attrs: dict, real: Any, s_out: float, out_np: Any, act_key: str = "act",
               alpha_key: str = "act_alpha", max_key: str = "act_max"
               ) -> tuple[tuple[int, int], Any]:
    """((lo, hi), leaky pair or None) of a folded Relu-family activation (quantization.md s.4)."""
    on = str(attrs.get(act_key, "none")) == "relu"
    if not on:
        return clip_bounds(out_np), None
    alpha = float(attrs.get(alpha_key, 0.0))
    amax = float(attrs.get(max_key, np.inf))
    relu6_q = None if amax == np.inf else int(quantize(np.float64(amax), s_out, np.int64))
    if alpha == 0.0:
        return clip_bounds(out_np, relu=True, relu6_q=relu6_q), None
    return clip_bounds(out_np, relu6_q=relu6_q), quantize_multiplier(
        alpha * np.asarray(real, dtype=np.float64))


def _vec(x: Any, n: int) -> np.ndarray:
    a = np.asarray(x, dtype=np.int64).reshape(-1)
    return np.broadcast_to(a, (n,)).copy() if a.size == 1 else a


def _wscales(w) -> np.ndarray:
    el = w.dtype.element_dtype
    return np.asarray(el.scale, dtype=np.float64)


def _rq_records(bias, s_in: float, s_w: np.ndarray, s_out: float, n: int, attrs: dict,
                out_np) -> tuple[np.ndarray, tuple[int, int]]:
    mult, shift = requant_multiplier(s_in, s_w, s_out)
    real = (np.float64(s_in) * s_w) / np.float64(s_out)
    clip, leaky = folded_act(attrs, real, s_out, out_np)
    m, s = _vec(mult, n), _vec(shift, n)
    mn, sn = (m, s) if leaky is None else (_vec(leaky[0], n), _vec(leaky[1], n))
    b = np.zeros(n, np.int64) if bias is None else np.asarray(bias, np.int64).reshape(-1)
    if b.size != n:
        raise NotLowerable(f"bias has {b.size} entries for {n} channels")
    return asm.pack_requant_params(b, m, s, mn, sn, n=n), clip


def _rows_apart(kh: int, sh: int, pads_tb: tuple[int, int]) -> bool:
    """Whether a window layer computes each output row from its own input row only (kernel
    height 1, vertical stride 1, no top/bottom pad): then a batch folds into the rows."""
    return kh == 1 and sh == 1 and tuple(pads_tb) == (0, 0)


def _conv_operands(op) -> tuple[str, Any, Any, Any]:
    """(dtype, x, w, y) of a convolution the MPE can run: one feature input, constant weights
    quantized to the feature dtype, zero padding."""
    dt = _feature_dtypes(op, rescales=True)
    if len(op.feature_inputs()) != 1 or len(op.inputs) < 2 or not op.inputs[1].is_params:
        raise NotLowerable(f"{op.op_type} needs constant weights")
    if _attr(op, "padding_mode", "zeros") != "zeros":
        raise NotLowerable("only zero padding")
    x, w, y = op.inputs[0], op.inputs[1], op.outputs[0]
    if not isinstance(w.dtype.element_dtype, QuantizedType) or w.data is None or \
            np.dtype(w.data.dtype) != np.dtype(dt):
        raise NotLowerable("weights are not quantized to the feature dtype")
    return dt, x, w, y


# --- rules ----------------------------------------------------------------------------------------


def lower_conv(op, cfg) -> OpLowering:
    dt, x, w, y = _conv_operands(op)
    kh, kw, cin_g, cout = w.shape
    g = int(_attr(op, "groups", 1))
    geo = dict(kernel=(kh, kw), stride=(int(_attr(op, "stride_height", 1)),
                                        int(_attr(op, "stride_width", 1))),
               pad=tuple(int(_attr(op, k, 0)) for k in ("pad_top", "pad_bottom", "pad_left",
                                                         "pad_right")),
               dilation=(int(_attr(op, "dilation_height", 1)),
                         int(_attr(op, "dilation_width", 1))))
    if max(kh, kw, *geo["stride"], *geo["pad"], *geo["dilation"]) > 255:
        raise NotLowerable("kernel, stride, pad or dilation above 255")
    if g < 1 or cout % g or map3(x.shape)[2] != cin_g * g:
        raise NotLowerable("group geometry")
    bias = op.inputs[2].data if len(op.inputs) > 2 else None
    rec, clip = _rq_records(bias, scale_of(x), _wscales(w), scale_of(y), cout, op.attrs,
                            y.dtype.numpy_dtype)
    packed = asm.pack_conv_weights(np.asarray(w.data), g, dt, cfg)
    oh, ow, _ = map3(y.shape)

    def make(R: Resolver) -> list[asm.Layer]:
        return [asm.Conv(R.fmap(x), R.fmap(y), R.const(0), R.const(1), groups=g, clip=clip,
                         tag=op.op_id, **geo)]

    return OpLowering("conv", [packed, rec], make,
                      items(y.shape) * oh * ow * cout * kh * kw * cin_g,
                      fold=_rows_apart(kh, geo["stride"][0], geo["pad"][:2]))


def _lower_matmul_dynamic(op, dt: str) -> OpLowering:
    """A @ B with both operands feature maps (attention's Q @ K^T and P @ V): MATMUL DYNAMIC,
    or DYNAMIC_BT reading B as stored when the Matmul transposes it."""
    a, b, y = op.inputs[0], op.inputs[1], op.outputs[0]
    bt = bool(_attr(op, "transpose_b", False))
    (ah, aw, ac), (bh, bw, bc), (yh, yw, yc) = map3(a.shape), map3(b.shape), map3(y.shape)
    kn = (bc, bw) if bt else (bw, bc)
    if len({len(a.shape), len(b.shape), len(y.shape)}) != 1 or kn != (ac, yc) or \
            (yw, yh) != (aw, max(ah, bh)) or (ah != bh and min(ah, bh) != 1):
        raise NotLowerable("Matmul of two feature maps: shapes")
    bias = op.inputs[2].data if len(op.inputs) > 2 else None
    rec, clip = _rq_records(bias, scale_of(a), np.array([scale_of(b)]), scale_of(y), yc,
                            op.attrs, y.dtype.numpy_dtype)

    def row(f: asm.FMap, i: int) -> asm.FMap:
        """Batch row `i` of a map (h = batch), or the map itself when it has one row."""
        if f.h == 1:
            return f
        rs = f.row_stride or f.w * f.pitch * (2 if f.dtype == "int16" else 1)
        return replace(f, addr=f.addr + i * rs, h=1, row_stride=rs)

    def make(R: Resolver) -> list[asm.Layer]:
        fa, fb, fy = R.fmap(a), R.fmap(b), R.fmap(y)
        if ah == bh:
            return [asm.Matmul(fa, fy, R.const(0), b=fb, clip=clip, b_transposed=bt,
                               tag=op.op_id)]
        # one operand of a single batch row against every row of the other: a layer per row
        return [asm.Matmul(row(fa, i), row(fy, i), R.const(0), b=row(fb, i), clip=clip,
                           b_transposed=bt, tag=op.op_id) for i in range(yh)]

    n = {items(a.shape), items(b.shape), items(y.shape)}
    return OpLowering("matmul", [rec], make, max(n) * yh * aw * ac * yc,
                      fold=len(n) == 1 and ah == bh)


def lower_conv_transpose(op, cfg) -> OpLowering:
    """ConvTranspose2d as the MPE runs it: an UPSAMPLE ZERO layer spreads the input with
    ``stride - 1`` zeros between pixels into an FTMP scratch map, then a stride-1 CONV with the
    kernel flipped (and, per group, input and output channels swapped) pads each side by
    ``dilation * (k - 1) - pad`` (plus output_padding at the bottom / right). The array does
    ``stride_h * stride_w`` times the useful MACs: the zeros are multiplied too
    (docs/zg330-lowering.md)."""
    dt, x, w, y = _conv_operands(op)
    kh, kw, cin, og = w.shape
    g = int(_attr(op, "groups", 1))
    if g < 1 or cin % g or map3(x.shape)[2] != cin or len(x.shape) != 4 or \
            items(x.shape) != items(y.shape):
        raise NotLowerable("group geometry")
    sh, sw = int(_attr(op, "stride_height", 1)), int(_attr(op, "stride_width", 1))
    dh, dw = int(_attr(op, "dilation_height", 1)), int(_attr(op, "dilation_width", 1))
    pt, pb, pl, pr = (int(_attr(op, k, 0)) for k in ("pad_top", "pad_bottom", "pad_left",
                                                      "pad_right"))
    pads = (dh * (kh - 1) - pt, dh * (kh - 1) - pb + int(_attr(op, "output_pad_height", 0)),
            dw * (kw - 1) - pl, dw * (kw - 1) - pr + int(_attr(op, "output_pad_width", 0)))
    if min(pads) < 0:
        raise NotLowerable("pads larger than the dilated kernel")
    if max(kh, kw, sh, sw, dh, dw, *pads) > 255:
        raise NotLowerable("kernel, stride, pad or dilation above 255")
    cig, cout = cin // g, og * g
    s_w = _wscales(w)
    if s_w.size not in (1, cout):
        raise NotLowerable("weight scales are neither per tensor nor per output channel")
    wc = np.asarray(w.data)[::-1, ::-1].reshape(kh, kw, g, cig, og).transpose(0, 1, 3, 2, 4)
    wc = np.ascontiguousarray(wc.reshape(kh, kw, cig, cout))
    bias = op.inputs[2].data if len(op.inputs) > 2 else None
    rec, clip = _rq_records(bias, scale_of(x), s_w, scale_of(y), cout, op.attrs,
                            y.dtype.numpy_dtype)
    h, wd, _ = map3(x.shape)
    z = None
    if (sh, sw) != (1, 1):
        z = Value(-1, TensorType(x.dtype.element_dtype, (items(x.shape), (h - 1) * sh + 1,
                                                         (wd - 1) * sw + 1, cin), "NHWC"),
                  f"{op.name or 'conv_transpose'}.zeros")
    oh, ow, _ = map3(y.shape)

    def make(R: Resolver) -> list[asm.Layer]:
        src, layers = R.fmap(x), []
        if z is not None:
            layers.append(asm.Upsample(src, R.fmap(z), (sh, sw), zeros=True, tag=op.op_id))
            src = R.fmap(z)
        return layers + [asm.Conv(src, R.fmap(y), R.const(0), R.const(1), kernel=(kh, kw),
                                  pad=pads, dilation=(dh, dw), groups=g, clip=clip,
                                  tag=op.op_id)]

    return OpLowering("conv" if z is None else "upsample+conv",
                      [asm.pack_conv_weights(wc, g, dt, cfg), rec], make,
                      items(y.shape) * oh * ow * cout * kh * kw * cig,
                      scratch=[] if z is None else [z],
                      fold=z is None and _rows_apart(kh, 1, pads[:2]))


def lower_matmul(op, cfg) -> OpLowering:
    dt = _feature_dtypes(op, rescales=True)
    if _attr(op, "transpose_a", False):
        raise NotLowerable("Matmul with a transposed A")
    if len(op.feature_inputs()) == 2 and len(op.inputs) in (2, 3) and \
            op.feature_inputs() == op.inputs[:2]:
        return _lower_matmul_dynamic(op, dt)
    if len(op.feature_inputs()) != 1 or len(op.inputs) < 2 or not op.inputs[1].is_params:
        raise NotLowerable("Matmul needs a feature-map A and constant 2-D B")
    a, b, y = op.inputs[0], op.inputs[1], op.outputs[0]
    if b.data is None or b.data.ndim != 2 or np.dtype(b.data.dtype) != np.dtype(dt):
        raise NotLowerable("B is not a 2-D constant of the feature dtype")
    B = np.asarray(b.data)
    if _attr(op, "transpose_b", False):
        B = B.T
    K, N = B.shape
    ah, aw, ac = map3(a.shape)
    yh, yw, yc = map3(y.shape)
    if ac != K or yc != N or (ah, aw) != (yh, yw) or len(a.shape) != len(y.shape) or \
            items(a.shape) != items(y.shape):
        raise NotLowerable("matmul shapes")
    bias = op.inputs[2].data if len(op.inputs) > 2 else None
    rec, clip = _rq_records(bias, scale_of(a), _wscales(b), scale_of(y), N, op.attrs,
                            y.dtype.numpy_dtype)
    packed = asm.pack_matmul_weights(B, dt, cfg)

    def make(R: Resolver) -> list[asm.Layer]:
        return [asm.Matmul(R.fmap(a), R.fmap(y), R.const(1), weights_addr=R.const(0), clip=clip,
                           tag=op.op_id)]

    return OpLowering("matmul", [packed, rec], make, items(a.shape) * ah * aw * K * N,
                      fold=True)




def _const_map(v, y, dt: str) -> np.ndarray:
    """A constant operand of an element-wise op as the (h, w, c) map the ELTW layer reads: one
    pixel when it is per-channel (or a scalar), else the whole output map."""
    if npu_dtype(v) != dt or v.data is None or np.dtype(v.data.dtype) != np.dtype(dt):
        raise NotLowerable("constant operand is not per-tensor quantized to the feature dtype")
    data = np.asarray(v.data)
    try:
        full = np.broadcast_to(data, tuple(y.shape))
    except ValueError:
        raise NotLowerable("constant operand does not broadcast to the output") from None
    h, w, c = map3(y.shape)
    flat = full.reshape(-1, c)
    if np.all(flat == flat[:1]):
        return np.ascontiguousarray(flat[:1]).reshape(1, 1, c)
    per_item = full.reshape(items(y.shape), h * w, c)
    if np.any(per_item != per_item[:1]):
        raise NotLowerable("constant operand varies over the batch")
    return np.ascontiguousarray(per_item[0]).reshape(h, w, c)


@dataclass
class EltwOperands:
    """The operands of a two-input element-wise op as an ELTW layer reads them: a full map
    first and, second, a full map, one pixel or a constant (in the weight blob). A second map
    of one channel (a per-pixel or per-item scalar) is first spread over the channels by a 1x1
    CONV of weight 1 (requantization (1, 0): the codes unchanged) into a scratch map `spread`.
    `fold`: the batch items can run as one layer (`OpLowering.fold`)."""

    first: Value
    second: Value
    const: np.ndarray | None
    fold: bool
    dt: str
    spread: Value | None = None
    spread_consts: list[np.ndarray] = field(default_factory=list)

    @property
    def consts(self) -> list[np.ndarray]:
        if self.const is not None:
            return [const_words(self.const, self.dt)]
        return list(self.spread_consts)

    @property
    def scratch(self) -> list[Value]:
        return [] if self.spread is None else [self.spread]

    def prologue(self, R: Resolver) -> list[asm.Layer]:
        """The layers before the ELTW: the channel spread, if any."""
        if self.spread is None:
            return []
        return [asm.Conv(R.fmap(self.second), R.fmap(self.spread), R.const(0), R.const(1),
                         tag=-1)]

    def other(self, R: Resolver) -> asm.FMap:
        """The ELTW's second operand."""
        if self.const is not None:
            h, w, c = self.const.shape
            return asm.FMap(R.const(0), h, w, c, pitch=c, dtype=self.dt)
        return R.fmap(self.second if self.spread is None else self.spread)


def eltw_operands(op, dt: str, cfg) -> EltwOperands:
    """How an ELTW layer reads `op`'s two operands (`EltwOperands`), or NotLowerable."""
    if len(op.inputs) != 2 or all(v.is_params for v in op.inputs):
        raise NotLowerable("element-wise op needs a feature-map operand")
    a, b, y = op.inputs[0], op.inputs[1], op.outputs[0]
    sy3 = map3(y.shape)
    first, second = (a, b) if not a.is_params and map3(a.shape) == sy3 and \
        len(a.shape) == len(y.shape) else (b, a)
    if first.is_params or map3(first.shape) != sy3 or len(first.shape) != len(y.shape):
        raise NotLowerable("broadcast other than a one-pixel or constant operand")
    const, spread, spread_consts = None, None, []
    geo = None  # the (h, w, c) the ELTW reads second as
    if second.is_params:
        const = _const_map(second, y, dt)
    else:
        s3 = map3(second.shape)
        if len(second.shape) != len(y.shape) or s3[:2] not in ((1, 1), sy3[:2]) or \
                s3[2] not in (1, sy3[2]):
            raise NotLowerable("broadcast other than a one-pixel, one-channel or constant "
                               "operand")
        geo = s3
        if s3[2] != sy3[2]:  # one channel: spread it over the channels (1x1 CONV, weight 1)
            c = sy3[2]
            geo = (s3[0], s3[1], c)
            shape = (items(second.shape),) + geo
            spread = Value(-1, TensorType(second.dtype.element_dtype, shape, "NHWC"),
                           f"{op.name or op.op_type}.spread")
            ones = np.ones(c, np.int64)
            spread_consts = [
                asm.pack_conv_weights(np.ones((1, 1, 1, c), np.dtype(dt)), 1, dt, cfg),
                asm.pack_requant_params(np.zeros(c, np.int64), ones, 0 * ones, ones, 0 * ones,
                                        n=c)]
    n = items(y.shape)
    # one layer over all items: every map holds all N items, or the second is one pixel
    # shared by them
    fold = items(first.shape) == n and (
        (geo is not None and ((items(second.shape) == n and geo == sy3) or
                              (items(second.shape) == 1 and geo[:2] == (1, 1))))
        or (const is not None and const.shape[:2] == (1, 1)))
    return EltwOperands(first, second, const, fold, dt, spread, spread_consts)


def const_words(const: np.ndarray, dt: str) -> np.ndarray:
    """A constant ELTW operand as the bytes of the weight blob."""
    return const.astype(np.dtype(dt).newbyteorder("<")).reshape(-1).view(np.uint8)


def lower_eltw(op, cfg) -> OpLowering:
    dt = _feature_dtypes(op, rescales=True)
    a, b, y = op.inputs[0], op.inputs[1], op.outputs[0]
    ops_ = eltw_operands(op, dt, cfg)
    first = ops_.first
    out_np = y.dtype.numpy_dtype
    if op.op_type == "Multiply":
        m, s = (int(v) for v in requant_multiplier(scale_of(a), scale_of(b), scale_of(y)))
        kw = dict(op="mul", ka=1, kb=1, mult=m, shift=s, clip=clip_bounds(out_np))
    else:
        (ma, sha), (mb, shb), S = add_rescale_params(scale_of(a), scale_of(b), scale_of(y))
        clip, leaky = folded_act(op.attrs, 1.0, scale_of(y), out_np)
        if leaky is not None:
            leaky = quantize_multiplier(float(op.attrs.get("act_alpha", 0.0)) * 2.0 ** -S)
        ka, kb = ma << (S - sha), mb << (S - shb)
        if max(abs(ka), abs(kb)) >= 1 << 39:
            raise NotLowerable("add multipliers exceed the 40-bit ELTW_K field")
        kw = dict(op="add" if op.op_type == "Add" else "sub", ka=ka, kb=kb, mult=1, shift=S,
                  clip=clip)
        if leaky is not None:
            kw["mult_neg"], kw["shift_neg"] = int(leaky[0]), int(leaky[1])
    if first is b:  # operands swapped: a - b = (-1 * b) + a
        kw["ka"], kw["kb"] = kw["kb"], kw["ka"]
        if kw["op"] == "sub":
            kw["op"], kw["ka"] = "add", -kw["ka"]

    def make(R: Resolver) -> list[asm.Layer]:
        return ops_.prologue(R) + [asm.Eltw(R.fmap(first), ops_.other(R), R.fmap(y),
                                            tag=op.op_id, **kw)]

    return OpLowering("eltw", ops_.consts, make, fold=ops_.fold, scratch=ops_.scratch)


def lower_relu(op, cfg) -> OpLowering:
    """A standalone Relu (ReLU6, LeakyReLU) as an ELTW ADD of the map with itself at weights
    (1, 0): the requantization ``RM(s_in, 1, s_out)`` with the activation folded in, as the
    host computes it."""
    _feature_dtypes(op, rescales=True)
    if float(_attr(op, "threshold", 0.0)) != 0.0:
        raise NotLowerable("Relu with a non-zero threshold has no integer form")
    x, y = op.inputs[0], op.outputs[0]
    if map3(x.shape) != map3(y.shape):
        raise NotLowerable("relu shapes")
    m, s = (int(v) for v in requant_multiplier(scale_of(x), 1.0, scale_of(y)))
    real = np.float64(scale_of(x)) / np.float64(scale_of(y))
    act = {"act": "relu", "act_alpha": float(_attr(op, "alpha", 0.0)),
           "act_max": float(_attr(op, "max_value", np.inf))}
    clip, leaky = folded_act(act, real, scale_of(y), y.dtype.numpy_dtype)
    kw = dict(op="add", ka=1, kb=0, mult=m, shift=s, clip=clip)
    if leaky is not None:
        kw["mult_neg"], kw["shift_neg"] = int(leaky[0]), int(leaky[1])

    def make(R: Resolver) -> list[asm.Layer]:
        return [asm.Eltw(R.fmap(x), R.fmap(x), R.fmap(y), tag=op.op_id, **kw)]

    return OpLowering("eltw", [], make, fold=True)


#: why a Cast at the host/NPU edge stays on the host (the network's host_ops tag)
EDGE_REASON = "host/NPU edge: float <-> integer conversion and channel alignment"


def lower_requant_cast(op, cfg) -> OpLowering:
    """A Cast between per-tensor quantized types (int8 <-> int16 at a mixed-precision edge, or
    a new scale): the requantization ``RM(s_in, 1, s_out)`` the host's Cast computes, as an
    ELTW ADD of the map with itself at weights (1, 0) and the output dtype's full range -- the
    NPU's data-type converter. Float <-> integer and re-tiling Casts are the host/NPU edge."""
    x, y = op.inputs[0], op.outputs[0]
    if npu_dtype(x) is None or npu_dtype(y) is None or x.dtype.layout.is_tiled() or \
            y.dtype.layout.is_tiled():
        raise NotLowerable(EDGE_REASON)
    _feature_dtypes(op, rescales=True)
    if map3(x.shape) != map3(y.shape):
        raise NotLowerable("a Cast that changes the shape")
    m, s = (int(v) for v in requant_multiplier(scale_of(x), 1.0, scale_of(y)))
    kw = dict(op="add", ka=1, kb=0, mult=m, shift=s, clip=clip_bounds(y.dtype.numpy_dtype))

    def make(R: Resolver) -> list[asm.Layer]:
        return [asm.Eltw(R.fmap(x), R.fmap(x), R.fmap(y), tag=op.op_id, **kw)]

    return OpLowering("eltw", [], make, fold=True)


def _pool_geometry(op, x3):
    h, w, _ = x3
    if op.op_type == "AvgPool2d" and _attr(op, "is_global", False):
        return (h, w), (1, 1), (0, 0, 0, 0), (1, 1), 0, 0
    kh, kw = int(op.attrs["pool_height"]), int(op.attrs["pool_width"])
    sh, sw = int(_attr(op, "stride_height", 1)), int(_attr(op, "stride_width", 1))
    dh = int(_attr(op, "dilation_height", 1)) if op.op_type == "MaxPool2d" else 1
    dw = int(_attr(op, "dilation_width", 1)) if op.op_type == "MaxPool2d" else 1
    pt, pb, pl, pr = (int(_attr(op, k, 0)) for k in ("pad_top", "pad_bottom", "pad_left",
                                                    "pad_right"))
    ceil = bool(_attr(op, "ceil_mode", False))

    def out(size, k, s, d, p0, p1):
        span = size + p0 + p1 - d * (k - 1) - 1
        o = (-(-span // s) if ceil else span // s) + 1
        if ceil and (o - 1) * s >= size + p0:
            o -= 1
        return o

    ho, wo = out(h, kh, sh, dh, pt, pb), out(w, kw, sw, dw, pl, pr)
    eb = max(0, (ho - 1) * sh + dh * (kh - 1) + 1 - (h + pt + pb))
    er = max(0, (wo - 1) * sw + dw * (kw - 1) + 1 - (w + pl + pr))
    return (kh, kw), (sh, sw), (pt, pb, pl, pr), (dh, dw), eb, er


def lower_pool(op, cfg) -> OpLowering:
    _feature_dtypes(op, rescales=op.op_type == "AvgPool2d")
    x, y = op.inputs[0], op.outputs[0]
    x3, y3 = map3(x.shape), map3(y.shape)
    if len(x.shape) != 4:
        raise NotLowerable("pools take NHWC maps")
    k, s, (pt, pb, pl, pr), d, eb, er = _pool_geometry(op, x3)
    pads = (pt, pb + eb, pl, pr + er)
    if max(*k, *s, *pads, *d) > 255:
        raise NotLowerable("pool window, stride or pad above 255")
    if asm.conv_out_hw(x3[0], x3[1], k, s, pads, d) != y3[:2]:
        raise NotLowerable("pool output size")
    if op.op_type == "MaxPool2d":
        if scale_of(x) != scale_of(y):
            raise NotLowerable("max pool with a rescale")

        def make_max(R: Resolver) -> list[asm.Layer]:
            return [asm.Pool(R.fmap(x), R.fmap(y), "max", k, s, pads, d, tag=op.op_id)]

        return OpLowering("maxpool", [], make_max, fold=_rows_apart(k[0], s[0], pads[:2]))
    include = bool(_attr(op, "count_include_pad", False)) and not _attr(op, "is_global", False)
    if include and (eb or er):
        raise NotLowerable("average pool counting pads with a ceil-mode overhang")
    n = k[0] * k[1]
    mult = np.zeros(n + 1, np.int64)
    shift = np.zeros(n + 1, np.int64)
    for i in range(1, n + 1):
        m_, s_ = requant_multiplier(scale_of(x), 1.0 / i, scale_of(y))
        mult[i], shift[i] = int(m_), int(s_)
    table = asm.pack_avgpool_params(mult, shift)

    def make_avg(R: Resolver) -> list[asm.Layer]:
        return [asm.Pool(R.fmap(x), R.fmap(y), "avg", k, s, pads, count_include_pad=include,
                         params_addr=R.const(0), tag=op.op_id)]

    return OpLowering("avgpool", [table], make_avg, fold=_rows_apart(k[0], s[0], pads[:2]))


def lower_lut(op, cfg) -> OpLowering:
    _feature_dtypes(op, rescales=True)
    x, y = op.inputs[0], op.outputs[0]
    table = build_lut(LUT_OPS[op.op_type], scale_of(x), scale_of(y), x.dtype.numpy_dtype,
                      y.dtype.numpy_dtype, lut_params(op.op_type, op.attrs))

    def make(R: Resolver) -> list[asm.Layer]:
        return [asm.Lut(R.fmap(x), R.fmap(y), R.const(0), tag=op.op_id)]

    return OpLowering("lut", [asm.pack_lut(np.asarray(table))], make, fold=True)


def _row_operands(op) -> tuple[Value, Value]:
    """Input and output of a Softmax / LayerNorm that normalises the NPU's channel axis."""
    _feature_dtypes(op, rescales=True)
    x, y = op.inputs[0], op.outputs[0]
    if int(_attr(op, "axis", -1)) % len(x.shape) != len(x.shape) - 1:
        raise NotLowerable(f"{op.op_type} over axis {_attr(op, 'axis', -1)}: the NPU normalises "
                           f"the last (channel) axis")
    return x, y


def lower_softmax(op, cfg) -> OpLowering:
    """Softmax over the channels: one NORM SOFTMAX layer, the host reference's table."""
    x, y = _row_operands(op)
    table, r, f = softmax_consts(scale_of(x), scale_of(y), x.dtype.numpy_dtype)

    def make(R: Resolver) -> list[asm.Layer]:
        return [asm.Softmax(R.fmap(x), R.fmap(y), R.const(0), table.size, r, f, tag=op.op_id)]

    return OpLowering("norm", [asm.pack_exp_table(table)], make, fold=True)


def lower_layer_norm(op, cfg) -> OpLowering:
    """LayerNorm over the channels: one NORM LAYERNORM layer."""
    x, y = _row_operands(op)
    if op.attrs.get("stats", False) or len(op.inputs) not in (2, 3) or \
            not all(v.is_params for v in op.inputs[1:]):
        raise NotLowerable("LayerNorm with stats outputs or a computed scale/bias")
    try:
        consts = layer_norm_consts(scale_of(x), scale_of(y), float(_attr(op, "epsilon", 1e-5)),
                                   int(x.shape[-1]), *(v.data for v in op.inputs[1:]))
    except ValueError as exc:
        raise NotLowerable(str(exc)) from None

    def make(R: Resolver) -> list[asm.Layer]:
        return [asm.LayerNorm(R.fmap(x), R.fmap(y), R.const(0), tag=op.op_id)]

    return OpLowering("norm", [asm.pack_float64(consts)], make, fold=True)


def lower_resize(op, cfg) -> OpLowering:
    """Resize (nearest or bilinear, every coordinate mode, any sizes) and bilinear Upsample:
    one UPSAMPLE TABLE layer whose taps are the host reference's (`xir.ops.resize_taps`)."""
    _feature_dtypes(op, rescales=True)
    x, y = op.inputs[0], op.outputs[0]
    if len(x.shape) != 4:
        raise NotLowerable("resizes take NHWC maps")
    (_, h, w, _), (_, oh, ow, _) = x.shape, y.shape
    mode = str(_attr(op, "mode", "nearest"))
    coord = str(_attr(op, "coordinate_mode", "half_pixel"))
    nearest = str(_attr(op, "nearest_mode", "round_prefer_floor"))
    if op.op_type == "Upsample":
        coord, nearest = "half_pixel", "floor"
    rows = integer_taps(oh, h, mode, coord, nearest)
    cols = integer_taps(ow, w, mode, coord, nearest)
    m, s = requant_multiplier(scale_of(x), 2.0 ** (-2 * BILINEAR_FRAC_BITS), scale_of(y))

    def make(R: Resolver) -> list[asm.Layer]:
        return [asm.Resize(R.fmap(x), R.fmap(y), R.const(0), int(m), int(s), tag=op.op_id)]

    return OpLowering("resize", [asm.pack_resize_taps(rows, cols)], make)


def lower_upsample(op, cfg) -> OpLowering:
    x, y = op.inputs[0], op.outputs[0]
    if _attr(op, "mode", "nearest") != "nearest" or scale_of(x) != scale_of(y):
        return lower_resize(op, cfg)
    _feature_dtypes(op)
    if len(x.shape) != 4:
        raise NotLowerable("upsamples take NHWC maps")
    sh, sw = int(_attr(op, "scale_height", 2)), int(_attr(op, "scale_width", 2))
    if not (1 <= sh <= 255 and 1 <= sw <= 255):
        raise NotLowerable("upsample factor")

    def make(R: Resolver) -> list[asm.Layer]:
        return [asm.Upsample(R.fmap(x), R.fmap(y), (sh, sw), tag=op.op_id)]

    return OpLowering("upsample", [], make, fold=sh == 1)


def lower_channel_shuffle(op, cfg) -> OpLowering:
    """ChannelShuffle as `groups` COPY layers: group i (input channels ``[i*n, (i+1)*n)``)
    goes to every `groups`-th output channel from i (COPY STRIDED_OUT)."""
    _feature_dtypes(op)
    x, y = op.inputs[0], op.outputs[0]
    g = int(op.attrs["groups"])
    c = map3(x.shape)[2]
    if scale_of(x) != scale_of(y) or c != int(x.shape[-1]) or g < 1 or c % g:
        raise NotLowerable("channel shuffle with a rescale or not on the channel axis")
    n = c // g

    def make(R: Resolver) -> list[asm.Layer]:
        src, dst = R.fmap(x), R.fmap(y)
        return [asm.Copy(replace(src, c_off=src.c_off + i * n, c=n),
                         replace(dst, c_off=dst.c_off + i, c=(n - 1) * g + 1), out_step=g,
                         tag=op.op_id) for i in range(g)]

    return OpLowering("+".join(["copy"] * g), [], make, fold=True)


RULES: dict[str, Callable[[Any, Any], OpLowering]] = {
    "Conv2d": lower_conv, "ConvTranspose2d": lower_conv_transpose, "Matmul": lower_matmul,
    "Add": lower_eltw, "Sub": lower_eltw,
    "Multiply": lower_eltw, "Relu": lower_relu, "MaxPool2d": lower_pool, "AvgPool2d": lower_pool,
    "Sigmoid": lower_lut, "Tanh": lower_lut, "Silu": lower_lut, "Hardswish": lower_lut,
    "Gelu": lower_lut, "Power": lower_lut,
    "Upsample": lower_upsample, "Resize": lower_resize, "ChannelShuffle": lower_channel_shuffle,
    "Cast": lower_requant_cast, "Softmax": lower_softmax, "LayerNorm": lower_layer_norm,
}


def alias_ok(op) -> bool:
    """Whether a data-movement op can live on the NPU (last-axis work on NHWC-able values)."""
    if op.op_type not in ALIAS_OPS or not op.is_quantized():
        return False
    try:
        _feature_dtypes(op)
    except NotLowerable:
        return False
    if any(v.is_params for v in op.inputs):
        return False
    x = op.inputs[0]
    x3 = map3(x.shape)
    rank = len(x.shape)
    if op.op_type in ("Concat", "Split", "AlignAxis", "PruneAxis"):
        ax = int(op.attrs.get("axis", -1))
        if ax % rank != rank - 1:
            return False
        if any(scale_of(v) != scale_of(x) for v in op.feature_inputs() + list(op.outputs)):
            return False
        return all(map3(v.shape)[:2] == x3[:2] and len(v.shape) == rank and
                   items(v.shape) == items(x.shape)
                   for v in op.feature_inputs() + list(op.outputs))
    # Reshape: free when it keeps the channels and the pixels in order: the output is the same
    # buffer seen in another geometry ((N, 1, 1, C) -> (N, C), (N, H, W, C) -> (N, H * W, C))
    y = op.outputs[0]
    y3 = map3(y.shape)
    return y3[2] == x3[2] and items(y.shape) * y3[0] * y3[1] == items(x.shape) * x3[0] * x3[1] \
        and scale_of(x) == scale_of(y)

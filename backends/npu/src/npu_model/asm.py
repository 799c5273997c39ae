"""Emitters: layer descriptors -> instruction words, and the weight/parameter packing.

This is the API the lowering calls. A layer is described by dataclasses (`FMap` for where a
feature map lives, `Conv`, `Matmul`, `Eltw`, `Pool`, `Lut`, `Upsample`, `Copy`, `Softmax`,
`LayerNorm` for what to do);
`emit(layer, cfg)` returns the layer's words (every descriptor field it uses, its tiling, the run
word), `emit_layer` adds the SYNC, `emit_program` joins layers and ends the stream with END,
padded with NOPs to 64 bytes. Constants go to memory with `pack_conv_weights`,
`pack_requant_params`, `pack_avgpool_params`, `pack_lut`; their logical addresses go in the
descriptor.

Addresses are logical (the MMU maps them, see `npu_model.mmu`). All shapes are checked here, so
a malformed layer fails at compile time with a message, not on the device.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .config import DEFAULT, DTYPE_CODES, NP_DTYPES, NpuConfig
from .isa import (
    ConvMode,
    CopyMode,
    EltwMode,
    F,
    MatmulMode,
    NormMode,
    Op,
    PoolMode,
    UpsampleMode,
    end_word,
    nop_word,
    run_word,
    set_word,
    sync_word,
)

__all__ = [
    "FMap", "Conv", "Matmul", "Eltw", "Pool", "Lut", "Upsample", "Resize", "Copy", "Softmax",
    "LayerNorm", "Layer", "pack_exp_table", "pack_float64",
    "emit", "emit_layer", "emit_program", "conv_out_hw", "pack_conv_weights",
    "pack_matmul_weights", "pack_requant_params", "pack_avgpool_params",
    "pack_resize_taps", "pack_lut", "conv_weight_bytes", "PARAM_RECORD", "TAP_RECORD", "align",
]

#: One per-output-channel record of `pack_requant_params` (24 bytes, little-endian)
PARAM_RECORD = np.dtype([("bias", "<i8"), ("mult", "<i4"), ("mult_neg", "<i4"),
                         ("shift", "u1"), ("shift_neg", "u1"), ("reserved", "V6")])
#: One entry of the average-pool divisor table (8 bytes)
AVG_RECORD = np.dtype([("mult", "<i4"), ("shift", "<i4")])
#: one tap of a table resize (UPSAMPLE TABLE): neighbours i0, i1 and the weight of i1
TAP_RECORD = np.dtype([("i0", "<i4"), ("i1", "<i4"), ("w1", "<i4")])


def align(n: int, unit: int) -> int:
    """`n` rounded up to a multiple of `unit`."""
    return -(-int(n) // int(unit)) * int(unit)


def _pair(v) -> tuple[int, int]:
    if isinstance(v, (tuple, list)):
        return int(v[0]), int(v[1])
    return int(v), int(v)


# --- descriptors ----------------------------------------------------------------------------------


@dataclass
class FMap:
    """A feature map (or a channel slice of one) in NPU memory, NHWC.

    `addr` is the logical address of pixel (0, 0), channel 0 of the *buffer*; the layer uses
    channels ``[c_off, c_off + c)`` of a buffer with `pitch` channels per pixel (default: `c`
    rounded up to the channel unit). `row_stride` is the bytes between rows (0: ``w * pitch``
    elements). Reading a channel slice is a Split for free; writing into one is a Concat.
    """

    addr: int
    h: int
    w: int
    c: int
    pitch: int = 0
    c_off: int = 0
    dtype: str = "int8"
    row_stride: int = 0

    def resolved(self, cfg: NpuConfig) -> FMap:
        """A copy with `pitch` and `row_stride` filled in, after checks."""
        if self.dtype not in DTYPE_CODES:
            raise ValueError(f"feature map dtype {self.dtype!r} is not one of {list(DTYPE_CODES)}")
        pitch = self.pitch or align(self.c_off + self.c, cfg.channel_unit(self.dtype))
        if min(self.h, self.w, self.c) < 1 or self.c_off < 0:
            raise ValueError(f"feature map {self} has an empty shape or a negative offset")
        if self.c_off + self.c > pitch:
            raise ValueError(f"channels [{self.c_off}, {self.c_off + self.c}) exceed the buffer "
                             f"pitch {pitch}")
        esz = NP_DTYPES[self.dtype].itemsize
        rs = self.row_stride or self.w * pitch * esz
        if rs % esz or rs < self.w * pitch * esz:
            raise ValueError(f"row stride {rs} bytes is shorter than a row ({self.w} x {pitch} "
                             f"x {esz}) or not a multiple of the element size")
        if self.addr % esz:
            raise ValueError(f"address {self.addr:#x} is not aligned to {esz}-byte elements")
        return FMap(self.addr, self.h, self.w, self.c, pitch, self.c_off, self.dtype, rs)

    @property
    def esize(self) -> int:
        return NP_DTYPES[self.dtype].itemsize

    def buffer_bytes(self, cfg: NpuConfig = DEFAULT) -> int:
        """Bytes of the whole buffer this map lives in (h rows of `row_stride`)."""
        r = self.resolved(cfg)
        return r.h * r.row_stride


@dataclass
class Conv:
    """Convolution with per-output-channel requantization and a folded ReLU-family clip.

    Weights HWIO ``(kh, kw, cin // groups, cout)`` packed by `pack_conv_weights` at
    `weights_addr`; per-channel bias/requant records (`pack_requant_params`, ``out.c`` of them)
    at `params_addr`. ``out.c`` is the number of output channels the layer computes and writes
    (pack zero weights for padding channels to fill a whole padded buffer). `clip` is the final
    ``(lo, hi)`` from `xir.quant.fixed_point.clip_bounds` (default: the dtype range). Depthwise
    (``groups == in.c == out.c > 1``) runs in its own MPE mode with the lane weight layout.
    """

    inp: FMap
    out: FMap
    weights_addr: int
    params_addr: int
    kernel: tuple[int, int] | int = 1
    stride: tuple[int, int] | int = 1
    pad: tuple[int, int, int, int] | int = 0  # top, bottom, left, right
    dilation: tuple[int, int] | int = 1
    groups: int = 1
    clip: tuple[int, int] | None = None
    tag: int = 0

    @property
    def depthwise(self) -> bool:
        return self.groups > 1 and self.groups == self.inp.c == self.out.c


@dataclass
class Matmul:
    """``out (batch, M, N) = a (batch, M, K) @ B`` with per-column requantization.

    `a` is a feature map with h = batch, w = M, c = K. B is either constant weights
    ``(K, N)`` packed by `pack_matmul_weights` at `weights_addr` (a 1x1 convolution on the MPE
    array), or a feature map `b` with h = batch, w = K, c = N, or with `b_transposed` its
    transpose (h = batch, w = N, c = K: attention's ``Q @ K^T`` reads K as it is stored).
    `params_addr`: N records.
    """

    a: FMap
    out: FMap
    params_addr: int
    weights_addr: int | None = None
    b: FMap | None = None
    clip: tuple[int, int] | None = None
    tag: int = 0
    b_transposed: bool = False


@dataclass
class Eltw:
    """``out = requant((a * ka) op (b * kb))`` with op add / sub / mul, all in int64.

    Requantization is `requantize_one(acc, mult, shift, mult_neg, shift_neg, lo, hi)`: for an
    Add of scales ``s_a, s_b -> s_out`` a lowering picks e.g. integer ``ka, kb`` aligning the two
    scales and ``(mult, shift)`` for the common rescale. `b` may be one pixel (h = w = 1):
    broadcast over the map (per-channel operand).
    """

    a: FMap
    b: FMap
    out: FMap
    op: str = "add"
    ka: int = 1
    kb: int = 1
    mult: int = 1
    shift: int = 0
    mult_neg: int | None = None
    shift_neg: int | None = None
    clip: tuple[int, int] | None = None
    tag: int = 0


@dataclass
class Pool:
    """Max or average pool. Average: window sum requantized with the divisor table at
    `params_addr` (`pack_avgpool_params`, entry n for a divisor of n)."""

    inp: FMap
    out: FMap
    mode: str = "max"  # "max" | "avg"
    kernel: tuple[int, int] | int = 2
    stride: tuple[int, int] | int = 2
    pad: tuple[int, int, int, int] | int = 0
    dilation: tuple[int, int] | int = 1
    count_include_pad: bool = False
    params_addr: int = 0
    clip: tuple[int, int] | None = None
    tag: int = 0


@dataclass
class Lut:
    """``out = table[in - qmin]``; the table (`pack_lut`) is at `table_addr`."""

    inp: FMap
    out: FMap
    table_addr: int
    tag: int = 0


@dataclass
class Upsample:
    """Nearest-neighbour upsample by integer factors; with `zeros`, zero insertion instead:
    ``out[h * sh, w * sw] = inp[h, w]`` on a ``((H-1)*sh + 1) x ((W-1)*sw + 1)`` map, 0 between
    (the first layer of a transposed convolution)."""

    inp: FMap
    out: FMap
    scale: tuple[int, int] | int = 2
    tag: int = 0
    zeros: bool = False


@dataclass
class Resize:
    """Resize by a tap table (`pack_resize_taps`, at `table_addr`): bilinear, or nearest at any
    sizes. Each output blends two rows, then two columns, with 10-bit weights, exactly in int64,
    and requantizes with (mult, shift) to OUT's dtype."""

    inp: FMap
    out: FMap
    table_addr: int
    mult: int
    shift: int
    tag: int = 0


@dataclass
class Copy:
    """Copy a block between layouts (re-pitch, channel slice, row stride). With ``out_step``
    > 1 input channel k lands on output channel ``k * out_step`` of `out`, whose ``c`` is the
    spanned window ``(inp.c - 1) * out_step + 1`` (one group of a channel shuffle)."""

    inp: FMap
    out: FMap
    tag: int = 0
    out_step: int = 1
    #: output axis k (h, w, c) runs along input axis ``perm[k]`` (COPY PERMUTE: a Transpose)
    perm: tuple[int, int, int] = (0, 1, 2)


@dataclass
class Softmax:
    """Softmax over each pixel's channels (`xir.quant.rownorm`): the exponential table
    (`pack_exp_table`, `table_len` int32 entries) at `table_addr`, the output divisor as
    ``R / 2**F`` (`mult`, `shift`)."""

    inp: FMap
    out: FMap
    table_addr: int
    table_len: int
    mult: int
    shift: int
    tag: int = 0


@dataclass
class LayerNorm:
    """LayerNorm over each pixel's channels (`xir.quant.rownorm`): the float64 constants
    (`pack_float64` of `layer_norm_consts`) at `params_addr`."""

    inp: FMap
    out: FMap
    params_addr: int
    tag: int = 0


Layer = Conv | Matmul | Eltw | Pool | Lut | Upsample | Resize | Copy | Softmax | LayerNorm


# --- helpers --------------------------------------------------------------------------------------


def conv_out_hw(h: int, w: int, kernel, stride=1, pad=0, dilation=1) -> tuple[int, int]:
    """Output height and width of a convolution / pool window."""
    kh, kw = _pair(kernel)
    sh, sw = _pair(stride)
    dh, dw = _pair(dilation)
    pt, pb, pl, pr = _pads(pad)
    return ((h + pt + pb - dh * (kh - 1) - 1) // sh + 1,
            (w + pl + pr - dw * (kw - 1) - 1) // sw + 1)


def _pads(pad) -> tuple[int, int, int, int]:
    if isinstance(pad, (tuple, list)):
        if len(pad) == 2:
            return int(pad[0]), int(pad[0]), int(pad[1]), int(pad[1])
        return tuple(int(p) for p in pad)  # type: ignore[return-value]
    return (int(pad),) * 4


def _fmap_words(f: FMap, which: str) -> list[int]:
    addr, shape, lay, rs = {
        "in": (F.IN_ADDR, F.IN_SHAPE, F.IN_LAYOUT, F.IN_RSTRIDE),
        "in1": (F.IN1_ADDR, F.IN1_SHAPE, F.IN1_LAYOUT, F.IN1_RSTRIDE),
        "out": (F.OUT_ADDR, F.OUT_SHAPE, F.OUT_LAYOUT, F.OUT_RSTRIDE),
    }[which]
    return [set_word(addr, f.addr), set_word(shape, h=f.h, w=f.w, c=f.c),
            set_word(lay, pitch=f.pitch, c_off=f.c_off, dtype=DTYPE_CODES[f.dtype]),
            set_word(rs, f.row_stride)]


def _clip_words(clip, dtype: str) -> list[int]:
    info = np.iinfo(NP_DTYPES[dtype])
    lo, hi = (int(info.min), int(info.max)) if clip is None else (int(clip[0]), int(clip[1]))
    if lo > hi:
        raise ValueError(f"clip ({lo}, {hi}) is empty")
    return [set_word(F.CLIP, lo=max(lo, int(info.min)), hi=min(hi, int(info.max)))]


def _tile_words(cfg: NpuConfig, inp: FMap, out: FMap, kh: int, sh: int, dh: int,
                wblock_bytes: int = 0, nob: int = 1) -> list[int]:
    """Row tiling: as many output rows as fit half the input and output buffers (>= 1), and
    as many weight blocks as fit half the weight buffer."""
    in_row = inp.w * inp.c * inp.esize
    out_row = out.w * out.c * out.esize
    best = 1
    for rows in range(out.h, 0, -1):
        rin = min(inp.h, (rows - 1) * sh + (kh - 1) * dh + 1)
        if rin * in_row <= cfg.ibuf_bytes // 2 and rows * out_row <= cfg.obuf_bytes // 2:
            best = rows
            break
    ocb = nob if wblock_bytes == 0 else max(1, min(nob, (cfg.wbuf_bytes // 2) // wblock_bytes))
    return [set_word(F.TILE, rows=best, oc_blocks=ocb)]


def _check_same_dtype(*maps: FMap) -> None:
    """Layer inputs share the MPE mode's dtype; only rescaling layers may write the other
    (docs/zg330-isa.md)."""
    if len({m.dtype for m in maps}) != 1:
        raise ValueError(f"operands mix dtypes {[m.dtype for m in maps]}; insert a Cast")


# --- emitters -------------------------------------------------------------------------------------


def _emit_conv(L: Conv, cfg: NpuConfig) -> list[int]:
    i, o = L.inp.resolved(cfg), L.out.resolved(cfg)  # OUT may be the other dtype
    kh, kw = _pair(L.kernel)
    sh, sw = _pair(L.stride)
    dh, dw = _pair(L.dilation)
    pt, pb, pl, pr = _pads(L.pad)
    g = int(L.groups)
    if g < 1 or i.c % g or o.c % g:
        raise ValueError(f"groups {g} must divide in.c {i.c} and out.c {o.c}")
    eh, ew = conv_out_hw(i.h, i.w, (kh, kw), (sh, sw), (pt, pb, pl, pr), (dh, dw))
    if (o.h, o.w) != (eh, ew):
        raise ValueError(f"conv output is {eh}x{ew} but out is {o.h}x{o.w}")
    if max(kh, kw, sh, sw, dh, dw, pt, pb, pl, pr) > 255 or min(kh, kw, sh, sw, dh, dw) < 1:
        raise ValueError("kernel, stride, dilation must be in 1..255 and pads in 0..255")
    cu = cfg.channel_unit(i.dtype)
    ocb = cfg.oc_block(i.dtype)
    cin_g, cout_g = i.c // g, o.c // g
    nob = -(-cout_g // ocb)
    block = kh * kw * -(-cin_g // cu) * cu * ocb * i.esize
    words = _fmap_words(i, "in") + _fmap_words(o, "out") + [
        set_word(F.WGT_ADDR, L.weights_addr), set_word(F.PRM_ADDR, L.params_addr),
        set_word(F.KERNEL, kh=kh, kw=kw, sh=sh, sw=sw, dh=dh, dw=dw),
        set_word(F.PAD, pt=pt, pb=pb, pl=pl, pr=pr), set_word(F.GROUPS, g),
    ] + _clip_words(L.clip, o.dtype) + _tile_words(cfg, i, o, kh, sh, dh, block, nob)
    mode = ConvMode.DEPTHWISE if L.depthwise else ConvMode.DENSE
    return words + [run_word(Op.CONV, mode)]


def _emit_matmul(L: Matmul, cfg: NpuConfig) -> list[int]:
    a, o = L.a.resolved(cfg), L.out.resolved(cfg)  # OUT may be the other dtype
    if (L.weights_addr is None) == (L.b is None):
        raise ValueError("a Matmul needs exactly one of weights_addr (constant B) or b")
    if (o.h, o.w) != (a.h, a.w):
        raise ValueError(f"matmul out (batch, M) = ({o.h}, {o.w}) does not match a ({a.h}, {a.w})")
    if L.b is None:
        return _emit_conv(Conv(L.a, L.out, int(L.weights_addr), L.params_addr, clip=L.clip,
                               tag=L.tag), cfg)
    b = L.b.resolved(cfg)
    _check_same_dtype(a, b)
    want = (a.h, o.c, a.c) if L.b_transposed else (a.h, a.c, o.c)
    if (b.h, b.w, b.c) != want:
        raise ValueError(f"matmul b must be (batch, {'N, K' if L.b_transposed else 'K, N'}) = "
                         f"{want}, got ({b.h}, {b.w}, {b.c})")
    words = _fmap_words(a, "in") + _fmap_words(b, "in1") + _fmap_words(o, "out") + [
        set_word(F.PRM_ADDR, L.params_addr)] + _clip_words(L.clip, o.dtype) + \
        _tile_words(cfg, a, o, 1, 1, 1)
    return words + [run_word(Op.MATMUL, MatmulMode.DYNAMIC_BT if L.b_transposed else
                             MatmulMode.DYNAMIC)]


def _emit_eltw(L: Eltw, cfg: NpuConfig) -> list[int]:
    a, b, o = L.a.resolved(cfg), L.b.resolved(cfg), L.out.resolved(cfg)
    _check_same_dtype(a, b)  # OUT may be the other dtype
    if (a.h, a.w, a.c) != (o.h, o.w, o.c):
        raise ValueError(f"eltw a {a.h}x{a.w}x{a.c} and out {o.h}x{o.w}x{o.c} differ")
    if b.c != a.c or (b.h, b.w) not in ((a.h, a.w), (1, 1)):
        raise ValueError(f"eltw b {b.h}x{b.w}x{b.c} neither matches a nor is one pixel")
    mode = {"add": EltwMode.ADD, "sub": EltwMode.SUB, "mul": EltwMode.MUL,
            "max": EltwMode.MAX, "min": EltwMode.MIN}[L.op]
    mn = L.mult if L.mult_neg is None else L.mult_neg
    sn = L.shift if L.shift_neg is None else L.shift_neg
    words = _fmap_words(a, "in") + _fmap_words(b, "in1") + _fmap_words(o, "out") + [
        set_word(F.ELTW_KA, L.ka), set_word(F.ELTW_KB, L.kb),
        set_word(F.RQ, mult=L.mult, shift=L.shift),
        set_word(F.RQ_NEG, mult=mn, shift=sn),
    ] + _clip_words(L.clip, o.dtype) + _tile_words(cfg, a, o, 1, 1, 1)
    return words + [run_word(Op.ELTW, mode)]


def _emit_pool(L: Pool, cfg: NpuConfig) -> list[int]:
    i, o = L.inp.resolved(cfg), L.out.resolved(cfg)
    if L.mode == "max":
        _check_same_dtype(i, o)  # an average requantizes, so it may write the other dtype
    kh, kw = _pair(L.kernel)
    sh, sw = _pair(L.stride)
    dh, dw = _pair(L.dilation)
    pt, pb, pl, pr = _pads(L.pad)
    if i.c != o.c:
        raise ValueError(f"pool in.c {i.c} != out.c {o.c}")
    eh, ew = conv_out_hw(i.h, i.w, (kh, kw), (sh, sw), (pt, pb, pl, pr), (dh, dw))
    if (o.h, o.w) != (eh, ew):
        raise ValueError(f"pool output is {eh}x{ew} but out is {o.h}x{o.w}")
    if L.mode == "max":
        mode = PoolMode.MAX
    elif L.mode == "avg":
        if (dh, dw) != (1, 1):
            raise ValueError("average pool has no dilation")
        mode = PoolMode.AVG_INCLUDE_PAD if L.count_include_pad else PoolMode.AVG
    else:
        raise ValueError(f"pool mode {L.mode!r} is not 'max' or 'avg'")
    words = _fmap_words(i, "in") + _fmap_words(o, "out") + [
        set_word(F.PRM_ADDR, L.params_addr),
        set_word(F.KERNEL, kh=kh, kw=kw, sh=sh, sw=sw, dh=dh, dw=dw),
        set_word(F.PAD, pt=pt, pb=pb, pl=pl, pr=pr),
    ] + _clip_words(L.clip, o.dtype) + _tile_words(cfg, i, o, kh, sh, dh)
    return words + [run_word(Op.POOL, mode)]


def _emit_lut(L: Lut, cfg: NpuConfig) -> list[int]:
    i, o = L.inp.resolved(cfg), L.out.resolved(cfg)
    if (i.h, i.w, i.c) != (o.h, o.w, o.c):
        raise ValueError("lut in and out shapes differ")
    return _fmap_words(i, "in") + _fmap_words(o, "out") + [
        set_word(F.PRM_ADDR, L.table_addr)] + _tile_words(cfg, i, o, 1, 1, 1) + [
        run_word(Op.LUT)]


def _emit_upsample(L: Upsample, cfg: NpuConfig) -> list[int]:
    i, o = L.inp.resolved(cfg), L.out.resolved(cfg)
    _check_same_dtype(i, o)
    sh, sw = _pair(L.scale)
    want = ((i.h - 1) * sh + 1, (i.w - 1) * sw + 1, i.c) if L.zeros else \
        (i.h * sh, i.w * sw, i.c)
    if (o.h, o.w, o.c) != want:
        raise ValueError(f"upsample x({sh},{sw}) of {i.h}x{i.w}x{i.c} is not {o.h}x{o.w}x{o.c}")
    return _fmap_words(i, "in") + _fmap_words(o, "out") + [
        set_word(F.SCALE, sh=sh, sw=sw)] + _tile_words(cfg, i, o, 1, 1, 1) + [
        run_word(Op.UPSAMPLE, UpsampleMode.ZERO if L.zeros else UpsampleMode.NEAREST)]


def _emit_resize(L: Resize, cfg: NpuConfig) -> list[int]:
    i, o = L.inp.resolved(cfg), L.out.resolved(cfg)
    if i.c != o.c:
        raise ValueError(f"resize in.c {i.c} != out.c {o.c}")
    return _fmap_words(i, "in") + _fmap_words(o, "out") + [
        set_word(F.PRM_ADDR, L.table_addr), set_word(F.RQ, mult=L.mult, shift=L.shift)] + \
        _tile_words(cfg, i, o, 1, 1, 1) + [run_word(Op.UPSAMPLE, UpsampleMode.TABLE)]


def _emit_copy(L: Copy, cfg: NpuConfig) -> list[int]:
    i, o = L.inp.resolved(cfg), L.out.resolved(cfg)
    _check_same_dtype(i, o)
    perm = tuple(int(a) for a in L.perm)
    if perm != (0, 1, 2):
        ishape = (i.h, i.w, i.c)
        if sorted(perm) != [0, 1, 2] or L.out_step != 1 or \
                tuple(ishape[a] for a in perm) != (o.h, o.w, o.c):
            raise ValueError(f"copy permute {perm}: {ishape} -> {(o.h, o.w, o.c)}")
        return _fmap_words(i, "in") + _fmap_words(o, "out") + \
            _tile_words(cfg, o, o, 1, 1, 1) + \
            [set_word(F.PERM, a0=perm[0], a1=perm[1], a2=perm[2]),
             run_word(Op.COPY, CopyMode.PERMUTE)]
    step = int(L.out_step)
    if step < 1 or (i.h, i.w, (i.c - 1) * step + 1) != (o.h, o.w, o.c):
        raise ValueError("copy in and out shapes differ")
    words = _fmap_words(i, "in") + _fmap_words(o, "out") + _tile_words(cfg, i, o, 1, 1, 1)
    if step == 1:
        return words + [run_word(Op.COPY)]
    return words + [set_word(F.CSTEP, out=step), run_word(Op.COPY, CopyMode.STRIDED_OUT)]


def _emit_norm(L: Softmax | LayerNorm, cfg: NpuConfig) -> list[int]:
    i, o = L.inp.resolved(cfg), L.out.resolved(cfg)
    if (i.h, i.w, i.c) != (o.h, o.w, o.c):
        raise ValueError(f"{type(L).__name__.lower()} in and out shapes differ")
    words = _fmap_words(i, "in") + _fmap_words(o, "out")
    if isinstance(L, Softmax):
        if L.table_len < 2 or L.table_len % 2:
            raise ValueError(f"softmax table of {L.table_len} entries (an even number >= 2)")
        words += [set_word(F.PRM_ADDR, L.table_addr), set_word(F.PRM_LEN, L.table_len),
                  set_word(F.RQ, mult=L.mult, shift=L.shift)]
        mode = NormMode.SOFTMAX
    else:
        words += [set_word(F.PRM_ADDR, L.params_addr)]
        mode = NormMode.LAYERNORM
    return words + _tile_words(cfg, i, o, 1, 1, 1) + [run_word(Op.NORM, mode)]


_EMITTERS = {Conv: _emit_conv, Matmul: _emit_matmul, Eltw: _emit_eltw, Pool: _emit_pool,
             Lut: _emit_lut, Upsample: _emit_upsample, Resize: _emit_resize, Copy: _emit_copy,
             Softmax: _emit_norm, LayerNorm: _emit_norm}


def emit(layer: Layer, cfg: NpuConfig = DEFAULT) -> list[int]:
    """The words of one layer: its descriptor fields, tiling and run word (no SYNC)."""
    try:
        fn = _EMITTERS[type(layer)]
    except KeyError:
        raise TypeError(f"no emitter for {type(layer).__name__}") from None
    return fn(layer, cfg)


def emit_layer(layer: Layer, cfg: NpuConfig = DEFAULT, tag: int | None = None) -> list[int]:
    """`emit` plus the SYNC that ends the layer (tag: the layer's `tag` unless given)."""
    return emit(layer, cfg) + [sync_word(layer.tag if tag is None else tag)]


def emit_program(layers: list[Layer], cfg: NpuConfig = DEFAULT, end: bool = True) -> np.ndarray:
    """Layers with their SYNCs, then END; NOP-padded to a multiple of 64 bytes (uint64 array)."""
    words: list[int] = []
    for L in layers:
        words += emit_layer(L, cfg)
    if end:
        words.append(end_word())
    while len(words) % 8:
        words.append(nop_word())
    return np.asarray(words, dtype=np.uint64)


# --- packing --------------------------------------------------------------------------------------


def conv_weight_bytes(kh: int, kw: int, cin: int, cout: int, groups: int = 1,
                      dtype: str = "int8", cfg: NpuConfig = DEFAULT) -> int:
    """Bytes of `pack_conv_weights` output for these dimensions."""
    esz = NP_DTYPES[dtype].itemsize
    cu = cfg.channel_unit(dtype)
    if groups > 1 and groups == cin == cout:
        return -(-cout // cu) * kh * kw * cu * esz
    cin_g, cout_g = cin // groups, cout // groups
    ocb = cfg.oc_block(dtype)
    return groups * -(-cout_g // ocb) * kh * kw * -(-cin_g // cu) * cu * ocb * esz


def pack_conv_weights(w: np.ndarray, groups: int = 1, dtype: str | None = None,
                      cfg: NpuConfig = DEFAULT) -> np.ndarray:
    """Pack HWIO weights ``(kh, kw, cin // groups, cout)`` into the MPE layout (uint8 bytes).

    Dense / grouped: ``[g][ob][ky][kx][ib][i][o]`` with ``i`` over the channel unit (input
    block, ICB) and ``o`` over ``mpe_rows * out_lanes`` output channels (OCB); out-of-range
    lanes are zero. Depthwise (``groups == cin == cout > 1``): ``[cb][ky][kx][lane]`` with the
    channel unit as lane count. The MPE array reads one ``ICB x OCB`` block per cycle.
    """
    w = np.asarray(w)
    dtype = dtype or ("int16" if w.dtype == np.int16 else "int8")
    npdt = NP_DTYPES[dtype]
    if w.ndim != 4:
        raise ValueError(f"weights must be HWIO (kh, kw, cin/groups, cout), got shape {w.shape}")
    info = np.iinfo(npdt)
    if w.size and (w.min() < info.min or w.max() > info.max):
        raise ValueError(f"weights do not fit {dtype}")
    kh, kw, cin_g, cout = w.shape
    g = int(groups)
    if cout % g:
        raise ValueError(f"groups {g} does not divide cout {cout}")
    cout_g = cout // g
    cu = cfg.channel_unit(dtype)
    if g > 1 and cin_g == 1 and cout_g == 1:  # depthwise lane layout
        ncb = -(-cout // cu)
        buf = np.zeros((ncb * cu, kh, kw), dtype=npdt)
        buf[:cout] = np.transpose(w[:, :, 0, :], (2, 0, 1))
        out = buf.reshape(ncb, cu, kh, kw).transpose(0, 2, 3, 1)
        return np.ascontiguousarray(out).astype(npdt.newbyteorder("<")).view(np.uint8).ravel()
    ocb = cfg.oc_block(dtype)
    nob = -(-cout_g // ocb)
    nib = -(-cin_g // cu)
    # zero-padded in HWIO order, w[ky, kx, c, g*cout_g + o] -> buf[ky, kx, c, g, o]: the
    # padding copy keeps w's order, and the one reorder below reads runs of OCB output
    # channels (a large FC's weights are not transposed whole, twice, as they were)
    buf = np.zeros((kh, kw, nib * cu, g, nob * ocb), dtype=npdt)
    buf[:, :, :cin_g, :, :cout_g] = w.reshape(kh, kw, cin_g, g, cout_g)
    # -> [g][ob][ky][kx][ib][i][o]
    out = buf.reshape(kh, kw, nib, cu, g, nob, ocb).transpose(4, 5, 0, 1, 2, 3, 6)
    return np.ascontiguousarray(out).astype(npdt.newbyteorder("<"), copy=False) \
        .view(np.uint8).ravel()


def pack_matmul_weights(b: np.ndarray, dtype: str | None = None,
                        cfg: NpuConfig = DEFAULT) -> np.ndarray:
    """Pack a constant matmul operand ``B (K, N)`` (a 1x1 convolution's weights)."""
    b = np.asarray(b)
    if b.ndim != 2:
        raise ValueError(f"B must be (K, N), got {b.shape}")
    return pack_conv_weights(b[None, None], 1, dtype, cfg)


def pack_requant_params(bias, mult, shift, mult_neg=None, shift_neg=None,
                        n: int | None = None) -> np.ndarray:
    """Per-output-channel records (`PARAM_RECORD`, 24 bytes each) as uint8 bytes.

    `bias` is in accumulator units (int32 for int8 layers, int64 for int16); `mult`/`shift`
    from `xir.quant.fixed_point.quantize_multiplier`; the `_neg` pair (LeakyReLU) defaults to
    the positive one. Scalars broadcast to `n` channels.
    """
    arrs = [np.asarray(v) for v in (bias, mult, shift)]
    if n is None:
        n = max(a.size for a in arrs)
    mn = np.asarray(mult if mult_neg is None else mult_neg)
    sn = np.asarray(shift if shift_neg is None else shift_neg)
    rec = np.zeros(n, dtype=PARAM_RECORD)
    for name, v, lo, hi in (("bias", arrs[0], -(1 << 63), (1 << 63) - 1),
                            ("mult", arrs[1], -(1 << 31), (1 << 31) - 1),
                            ("mult_neg", mn, -(1 << 31), (1 << 31) - 1),
                            ("shift", arrs[2], 0, 63), ("shift_neg", sn, 0, 63)):
        v = np.broadcast_to(v.astype(np.int64), (n,))
        if v.size and (v.min() < lo or v.max() > hi):
            raise ValueError(f"requant parameter {name} out of range [{lo}, {hi}]")
        rec[name] = v
    return rec.view(np.uint8)


def pack_avgpool_params(mult, shift) -> np.ndarray:
    """The average-pool divisor table: entry n (0..kh*kw) = (mult, shift) for a divisor of n.

    Typically ``quantize_multiplier((s_in / s_out) / n)`` for n = 1..kh*kw (entry 0 unused).
    """
    m, s = np.asarray(mult, dtype=np.int64), np.asarray(shift, dtype=np.int64)
    rec = np.zeros(m.size, dtype=AVG_RECORD)
    rec["mult"], rec["shift"] = m, s
    return rec.view(np.uint8)


def pack_resize_taps(rows: tuple, cols: tuple) -> np.ndarray:
    """The tap table of a table resize: the (i0, i1, w1) arrays of the output rows, then of the
    output columns (`xir.ops.resize_taps.integer_taps`), as TAP_RECORDs."""
    n_r, n_c = len(rows[0]), len(cols[0])
    rec = np.zeros(n_r + n_c, dtype=TAP_RECORD)
    for k, name in enumerate(("i0", "i1", "w1")):
        rec[name] = np.concatenate([np.asarray(rows[k]), np.asarray(cols[k])])
    return rec.view(np.uint8)


def pack_lut(table: np.ndarray) -> np.ndarray:
    """A lookup table (256 int8/int16 entries for int8 inputs, 65536 for int16) as bytes."""
    t = np.asarray(table)
    if t.dtype not in (np.int8, np.int16) or t.size not in (256, 65536):
        raise ValueError("a LUT has 256 or 65536 int8/int16 entries")
    return np.ascontiguousarray(t.astype(t.dtype.newbyteorder("<"))).view(np.uint8)


def pack_exp_table(table: np.ndarray) -> np.ndarray:
    """A Softmax exponential table (`xir.quant.rownorm.softmax_consts`) as little-endian
    int32 bytes."""
    return np.ascontiguousarray(np.asarray(table, dtype="<i4")).view(np.uint8)


def pack_float64(values: np.ndarray) -> np.ndarray:
    """float64 constants (a LayerNorm block) as little-endian bytes."""
    return np.ascontiguousarray(np.asarray(values, dtype="<f8")).view(np.uint8)

"""Conv2d and ConvTranspose2d, float32, NHWC feature maps and HWIO weights.

Float Conv2d without groups runs on the project's own single-precision GEMM (`sgemm`) where the
CPU has AVX-512: zero-padded convolutions read their taps straight from the padded input where
that pays (`_conv2d_taps`: each tap one row offset), the others read an im2col copy. Elsewhere,
and for grouped
convolutions, Conv2d is im2col (a strided view copied once) plus one BLAS matmul per group,
batched over groups; 1x1 convolutions skip im2col, and depthwise convolutions sum kh*kw shifted
slices. ConvTranspose2d is one matmul to columns followed by a col2im scatter over the taps.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from xir.quant.fixed_point import requant_multiplier

from . import sgemm
from ._common import (
    ACC_CHUNK_F32,
    f32,
    fold_act,
    folded_act,
    fresh,
    int_attr,
    out32,
    pad_hw,
    pads4,
    requant_channels,
    scale1,
    tap,
    tscale,
)

# Conv2d padding_mode -> np.pad mode (PyTorch names; "zeros" is the default).
_PAD_MODES = {"zeros": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def _conv_attrs(attrs: dict) -> tuple[int, int, int, int, int]:
    return (
        int_attr(attrs, "stride_height", 1),
        int_attr(attrs, "stride_width", 1),
        int_attr(attrs, "dilation_height", 1),
        int_attr(attrs, "dilation_width", 1),
        int_attr(attrs, "groups", 1),
    )


def _out_size(padded: int, k: int, s: int, d: int, op: str) -> int:
    size = (padded - d * (k - 1) - 1) // s + 1
    if size <= 0:
        raise ValueError(
            f"{op}: kernel {k} (dilation {d}) is larger than the padded input {padded}"
        )
    return size


def conv2d(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """Conv2d: x NHWC, w (kh, kw, cin/groups, cout), optional bias (cout,), folded act."""
    x, w = f32(inputs[0]), f32(inputs[1])
    bias = f32(inputs[2]) if len(inputs) > 2 else None
    if int_attr(attrs, "groups", 1) == 1 and (bias is None or bias.shape == w.shape[3:]) and \
            sgemm.enabled():
        y = _conv2d_sgemm(x, w, bias, attrs)
    else:
        y = out32(_conv2d_core(x, w, attrs, None))
        if bias is not None:
            y += bias
    return [fold_act(y, attrs, "Conv2d")]


def sgemm_sums(inputs: list[np.ndarray], attrs: dict) -> np.ndarray | None:
    """What `conv2d` computes before its folded activation, where it runs on `sgemm`: the
    sums plus bias as a float32 (n, ho, wo, npad) view, ``npad >= cout`` (the channels past
    cout are padding), possibly of this thread's GEMM scratch (read it before the next
    convolution); None where `conv2d` takes the BLAS path. The HostBackend's fused chains
    (Conv2d, BatchNorm2d, Add, Relu in one pass over the result) start from it."""
    x, w = f32(inputs[0]), f32(inputs[1])
    bias = f32(inputs[2]) if len(inputs) > 2 else None
    if int_attr(attrs, "groups", 1) == 1 and (bias is None or bias.shape == w.shape[3:]) and \
            sgemm.enabled():
        return _conv2d_sgemm(x, w, bias, attrs, view=True)
    return None


def _conv2d_sgemm(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None,
                  attrs: dict, view: bool = False) -> np.ndarray:
    """Conv2d without groups on `sgemm`: the sums plus bias, (n, ho, wo, cout) float32; with
    `view`, (n, ho, wo, npad) that may be a view of scratch (`sgemm_sums`)."""
    sh, sw, dh, dw, _ = _conv_attrs(attrs)
    pt, pb, pl, pr = pads4(attrs)
    mode = _pad_mode(attrs)
    n, h, wd, cin = x.shape
    kh, kw, wcin, cout = w.shape
    if wcin != cin:
        raise ValueError(f"Conv2d: weights {w.shape} do not fit input channels {cin}")
    hp, wp = h + pt + pb, wd + pl + pr
    if min(pt, pb, pl, pr) < 0:
        raise ValueError(f"negative padding ({pt}, {pb}, {pl}, {pr}) is not supported")
    ho = _out_size(hp, kh, sh, dh, "Conv2d")
    wo = _out_size(wp, kw, sw, dw, "Conv2d")
    k = kh * kw * cin
    if mode == "constant":
        y = _conv2d_taps(x, w.reshape(k, cout), bias, (pt, pb, pl, pr), (sh, sw, dh, dw),
                         (kh, kw), ho, wo)
        if y is not None:
            return y if view else fresh(y[..., :cout])
    xp = pad_hw(x, pt, pb, pl, pr, mode=mode)
    s_n, s_h, s_w, s_c = xp.strides
    patches = as_strided(xp, shape=(n, ho, wo, kh, kw, cin),
                         strides=(s_n, s_h * sh, s_w * sw, s_h * dh, s_w * dw, s_c),
                         writeable=False)
    m = n * ho * wo
    a = sgemm.scratch("a", m * k).reshape(m, k)
    a.reshape(patches.shape)[...] = patches
    if view:
        c = sgemm.matmul(a, w.reshape(k, cout), bias, view=True)
        return c.reshape(n, ho, wo, c.shape[1])
    return sgemm.matmul(a, w.reshape(k, cout), bias).reshape(n, ho, wo, cout)


def _conv2d_taps(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, pads: tuple,
                 steps: tuple, kernel: tuple, ho: int, wo: int) -> np.ndarray | None:
    """A zero-padded Conv2d whose GEMM reads its taps from the padded input itself: each tap,
    or each kernel row when dilation_width is 1 (adjacent pixels), is an offset into it.

    Two row layouts. "Flat" (stride 1): every pixel of the padded grid up to the last output
    pixel is a row, whole tiles run across output rows, the rows of pad pixels are computed
    and dropped; used while they are at most 1/8 of the output. "Grouped" (any stride): each
    output row is a group of rows, ``stride * cin`` apart; used where a tap reads 16 to 63
    values (a stem convolution over 3 channels), whose im2col copy would cost as much as its
    arithmetic. Otherwise None: im2col does as well (measured on resnet's layers), and better
    where taps read so few values that the kernel's calls would outnumber its work.
    `w` is the weights as a (kh * kw * cin, cout) matrix. Returns (n, ho, wo, npad) with the
    bias added, a view of scratch."""
    (pt, pb, pl, pr), (sh, sw, dh, dw), (kh, kw) = pads, steps, kernel
    n, h, wd, cin = x.shape
    hp, wp = h + pt + pb, wd + pl + pr
    m = n * ho * wo
    run = kw * cin if dw == 1 else cin  # A values a tap reads: a kernel row's when dw == 1
    flat_rows = (n - 1) * hp * wp + (ho - 1) * wp + wo  # up to the last output pixel
    flat = sh == sw == 1 and (flat_rows - m) * 8 <= m and run >= sgemm.VW
    if not flat and not sgemm.VW <= run < 64:
        return None
    if dw == 1:
        offs = np.array([i * dh * wp * cin for i in range(kh)], np.int64)
        kt = kw * cin
    else:
        offs = np.array([(i * dh * wp + j * dw) * cin for i in range(kh) for j in range(kw)],
                        np.int64)
        kt = cin
    b, npad = sgemm.padded_b(w)
    a = sgemm.scratch("a", n * hp * wp * cin)
    a[...] = 0.0
    a.reshape(n, hp, wp, cin)[:, pt:pt + h, pl:pl + wd] = x
    bf = b.reshape(-1)
    if flat:
        c = sgemm.accumulator(bias, n * hp * wp, npad)
        sgemm.gemm_taps(a, cin, offs, kt, flat_rows, bf, npad, npad, c.reshape(-1), npad)
        return c.reshape(n, hp, wp, npad)[:, :ho, :wo]
    c = sgemm.accumulator(bias, m, npad)
    for i in range(n):
        sgemm.gemm_taps(a[i * hp * wp * cin:], sw * cin, offs, kt, ho * wo, bf, npad, npad,
                        c[i * ho * wo:].reshape(-1), npad, wo, sh * wp * cin)
    return c.reshape(n, ho, wo, npad)


def _pad_mode(attrs: dict) -> str:
    mode = str(attrs.get("padding_mode", "zeros"))
    if mode not in _PAD_MODES:
        raise ValueError(f"Conv2d: padding_mode {mode!r} is not one of {sorted(_PAD_MODES)}")
    return _PAD_MODES[mode]


def _mm(a: np.ndarray, b: np.ndarray, kchunk: int | None) -> np.ndarray:
    """a @ b; with ``kchunk`` the reduction is split into chunks of at most ``kchunk`` terms
    whose (exact, float32) results are summed in float64 (integer kernels, see `_work_dtype`).
    Exact float32 chunks of 2-D operands run on `sgemm` where it is enabled: every partial
    sum is an integer below 2**24, so any order of the sums gives the same bits as BLAS."""
    k = a.shape[-1]
    own = kchunk is not None and a.ndim == 2 and b.ndim == 2 and sgemm.enabled()
    if kchunk is None or k <= kchunk:
        return sgemm.matmul(a, b) if own else np.matmul(a, b)
    acc = None
    for k0 in range(0, k, kchunk):
        ak, bk = a[..., k0:k0 + kchunk], b[..., k0:k0 + kchunk, :]
        part = sgemm.matmul(ak, bk) if own else np.matmul(ak, bk)
        acc = part.astype(np.float64) if acc is None else acc + part
    return acc


def _conv2d_core(x: np.ndarray, w: np.ndarray, attrs: dict, kchunk: int | None) -> np.ndarray:
    """The convolution sums (no bias, no act) in x's float dtype, shape (n, ho, wo, cout)."""
    sh, sw, dh, dw, g = _conv_attrs(attrs)
    pt, pb, pl, pr = pads4(attrs)
    mode = _pad_mode(attrs)
    n, _, _, cin = x.shape
    kh, kw, cig, cout = w.shape
    if cig * g != cin or cout % g:
        raise ValueError(
            f"Conv2d: weights {w.shape} with groups={g} do not fit input channels {cin}"
        )
    og = cout // g
    xp = pad_hw(x, pt, pb, pl, pr, mode=mode)
    hp, wp = xp.shape[1:3]
    ho = _out_size(hp, kh, sh, dh, "Conv2d")
    wo = _out_size(wp, kw, sw, dw, "Conv2d")
    m = n * ho * wo

    if g > 1 and cig == 1 and g == cin and (kchunk is None or kh * kw <= kchunk):
        y = _depthwise(xp, w, og, sh, sw, dh, dw, ho, wo)
    elif kh == 1 and kw == 1:
        xs = tap(xp, 0, 0, sh, sw, ho, wo)
        if g == 1:
            y = _mm(xs.reshape(m, cin), w.reshape(cin, cout), kchunk)
        else:
            cols = xs.reshape(m, g, cig).transpose(1, 0, 2)
            y = _grouped_matmul(cols, w.reshape(cig, g, og).transpose(1, 0, 2), m, cout, kchunk)
    else:
        s_n, s_h, s_w, s_c = xp.strides
        if g == 1:
            patches = as_strided(
                xp,
                shape=(n, ho, wo, kh, kw, cin),
                strides=(s_n, s_h * sh, s_w * sw, s_h * dh, s_w * dw, s_c),
                writeable=False,
            )
            k = kh * kw * cin
            y = _mm(patches.reshape(m, k), w.reshape(k, cout), kchunk)
        else:
            patches = as_strided(
                xp,
                shape=(g, n, ho, wo, kh, kw, cig),
                strides=(s_c * cig, s_n, s_h * sh, s_w * sw, s_h * dh, s_w * dw, s_c),
                writeable=False,
            )
            k = kh * kw * cig
            wg = w.reshape(kh, kw, cig, g, og).transpose(3, 0, 1, 2, 4).reshape(g, k, og)
            y = _grouped_matmul(patches.reshape(g, m, k), wg, m, cout, kchunk)
    return y.reshape(n, ho, wo, cout)


def _grouped_matmul(cols: np.ndarray, wg: np.ndarray, m: int, cout: int,
                    kchunk: int | None = None) -> np.ndarray:
    """(g, m, k) @ (g, k, og) -> (m, g*og), output channels group-major as in HWIO."""
    y = _mm(np.ascontiguousarray(cols), np.ascontiguousarray(wg), kchunk)
    return y.transpose(1, 0, 2).reshape(m, cout)


def _depthwise(
    xp: np.ndarray, w: np.ndarray, mult: int, sh: int, sw: int, dh: int, dw: int, ho: int, wo: int
) -> np.ndarray:
    """groups == cin: output channel o reads input channel o // mult; loop over taps only."""
    kh, kw, _, cout = w.shape
    if mult > 1:
        xp = np.repeat(xp, mult, axis=-1)
    y = np.zeros((xp.shape[0], ho, wo, cout), dtype=xp.dtype)
    tmp = np.empty_like(y)
    for i in range(kh):
        for j in range(kw):
            np.multiply(tap(xp, i * dh, j * dw, sh, sw, ho, wo), w[i, j, 0], out=tmp)
            y += tmp
    return y


def conv_transpose2d(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """ConvTranspose2d: x NHWC, w (kh, kw, cin, cout/groups), optional bias, folded act."""
    x, w = f32(inputs[0]), f32(inputs[1])
    bias = f32(inputs[2]) if len(inputs) > 2 else None
    y = out32(_conv_transpose2d_core(x, w, attrs))
    if bias is not None:
        y += bias
    return [fold_act(y, attrs, "ConvTranspose2d")]


def _conv_transpose2d_core(x: np.ndarray, w: np.ndarray, attrs: dict) -> np.ndarray:
    """The transposed-convolution sums (no bias, no act) in x's float dtype."""
    sh, sw, dh, dw, g = _conv_attrs(attrs)
    pt, pb, pl, pr = pads4(attrs)
    oph = int_attr(attrs, "output_pad_height", 0)
    opw = int_attr(attrs, "output_pad_width", 0)
    mode = str(attrs.get("padding_mode", "zeros"))
    if mode != "zeros":
        raise ValueError(f"ConvTranspose2d: padding_mode {mode!r} is not supported, only 'zeros'")
    if min(pt, pb, pl, pr, oph, opw) < 0:
        raise ValueError("ConvTranspose2d: pads and output pads must be >= 0")
    n, h, wd, cin = x.shape
    kh, kw, wcin, og = w.shape
    if wcin != cin or cin % g:
        raise ValueError(
            f"ConvTranspose2d: weights {w.shape} with groups={g} do not fit input channels {cin}"
        )
    cig, cout = cin // g, og * g
    m = n * h * wd
    # Columns: every input pixel times every tap, (m, kh, kw, cout).
    if g == 1:
        cols = np.matmul(x.reshape(m, cin), w.transpose(2, 0, 1, 3).reshape(cin, kh * kw * og))
        cols = cols.reshape(n, h, wd, kh, kw, cout)
    else:
        xg = np.ascontiguousarray(x.reshape(m, g, cig).transpose(1, 0, 2))
        wg = np.ascontiguousarray(
            w.reshape(kh, kw, g, cig, og).transpose(2, 3, 0, 1, 4).reshape(g, cig, kh * kw * og)
        )
        cols = np.matmul(xg, wg).reshape(g, n, h, wd, kh, kw, og)
        cols = cols.transpose(1, 2, 3, 4, 5, 0, 6).reshape(n, h, wd, kh, kw, cout)
    hf = (h - 1) * sh + dh * (kh - 1) + 1 + oph
    wf = (wd - 1) * sw + dw * (kw - 1) + 1 + opw
    if hf - pt - pb <= 0 or wf - pl - pr <= 0:
        raise ValueError(f"ConvTranspose2d: pads ({pt}, {pb}, {pl}, {pr}) leave an empty output")
    full = np.zeros((n, hf, wf, cout), dtype=x.dtype)
    for i in range(kh):
        for j in range(kw):
            tap(full, i * dh, j * dw, sh, sw, h, wd)[...] += cols[:, :, :, i, j, :]
    return full[:, pt : hf - pb, pl : wf - pr, :]


# --------------------------------------------------------------------------------------------
# Integer kernels (docs/quantization.md, "Integer ops"): exact sums, then requantization
# --------------------------------------------------------------------------------------------


#: float32 represents every integer up to this exactly
_F32_EXACT = 2 ** 24


def _code_max(t) -> int:
    """The largest magnitude of a code of quantized TensorType `t` (128 for int8, 255 for
    uint8)."""
    st = t.element_dtype.storage
    return (1 << st.bits) - 1 if st.kind == "uint" else 1 << (st.bits - 1)


def _work_dtype(*types, fake: bool = False) -> tuple[type, int | None]:
    """float32 with K-chunks whose sums stay exact when every operand is 8-bit (fast GEMM):
    each chunk's partial sums stay below 2**24 (int8 x int8: 1024 terms, ACC_CHUNK_F32; a
    uint8 operand: fewer); float64 otherwise (int16 products < 2**30: exact for any K below
    2**23) and for fakeQf."""
    if not fake and all(t.element_dtype.storage.bits <= 8 for t in types):
        bound = 1
        for t in types:
            bound *= _code_max(t)
        return np.float32, min(ACC_CHUNK_F32, _F32_EXACT // bound)
    return np.float64, None


def _bias_int(inputs: list[np.ndarray]) -> np.ndarray | None:
    return np.asarray(inputs[2], dtype=np.int64) if len(inputs) > 2 else None


def _requant_conv(acc, inputs, attrs, in_types, out_types, fake, w_axis_scales):
    s_in, s_out = scale1(in_types[0]), scale1(out_types[0])
    real_args = (s_in, w_axis_scales, s_out)
    mult, shift = requant_multiplier(*real_args)
    real = (np.float64(s_in) * np.asarray(w_axis_scales, np.float64)) / np.float64(s_out)
    act = folded_act(attrs, real, s_out)
    return requant_channels(acc, _bias_int(inputs), mult, shift, out_types[0].numpy_dtype,
                            fake=fake, **act)


def conv2d_int(inputs, attrs, in_types, out_types, *, fake=False):
    """Integer Conv2d: acc = sum(x_q * w_q) + b_q (exact), then per-channel requantization
    with requant_multiplier(s_in, s_w[c], s_out) and the folded activation."""
    work, kchunk = _work_dtype(in_types[0], in_types[1], fake=fake)
    x, w = np.asarray(inputs[0]), np.asarray(inputs[1])
    if kchunk is not None and int_attr(attrs, "groups", 1) == 1 and sgemm.enabled() and \
            w.ndim == 4 and w.shape[0] * w.shape[1] <= kchunk:
        # the codes as they are: the GEMM's padded input and packed weights take float32
        # copies of them anyway (one pass over the feature map fewer)
        acc = _int_sums_sgemm(x, w, attrs, kchunk)
    else:
        acc = _conv2d_core(x.astype(work), w.astype(work), attrs, kchunk)
    return [_requant_conv(acc, inputs, attrs, in_types, out_types, fake, tscale(in_types[1]))]


def _int_sums_sgemm(x: np.ndarray, w: np.ndarray, attrs: dict, kchunk: int) -> np.ndarray:
    """The exact sums of an 8-bit Conv2d without groups on `sgemm` (codes as float32): the input
    channels cut into as few slices as keep each GEMM's K = kh * kw * slice within `kchunk`,
    whose sums are exact in float32 in any order; two slices or more are summed in float64.
    Zero-padded convolutions read their taps in place (no im2col copy), as the float path."""
    kh, kw, cin, _ = w.shape
    if x.shape[-1] != cin:
        raise ValueError(f"Conv2d: weights {w.shape} do not fit input channels {x.shape[-1]}")
    per = kchunk // (kh * kw)
    step = -(-cin // -(-cin // per))  # as many channels in each slice as the count allows
    acc = None
    for c0 in range(0, cin, step):
        xs, ws = (x, w) if step >= cin else (x[..., c0:c0 + step], w[:, :, c0:c0 + step])
        part = _conv2d_sgemm(xs, ws, None, attrs)
        acc = part if step >= cin else (part.astype(np.float64) if acc is None else acc + part)
    return acc


def conv_transpose2d_int(inputs, attrs, in_types, out_types, *, fake=False):
    """Integer ConvTranspose2d: the exact sums in float64, then requantization as Conv2d
    (per-channel scales only with groups == 1; else per tensor)."""
    x = np.asarray(inputs[0]).astype(np.float64)
    w = np.asarray(inputs[1]).astype(np.float64)
    acc = _conv_transpose2d_core(x, w, attrs)
    return [_requant_conv(acc, inputs, attrs, in_types, out_types, fake, tscale(in_types[1]))]

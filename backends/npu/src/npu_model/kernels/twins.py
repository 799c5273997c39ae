"""numpy forms ("twins") of the kernels that take longest to compile, run while a worker
process compiles the kernel (issue 30, item 4: a fresh install's first forward within 4x of a
warm start).

A fresh install compiles every kernel on its first call; the two convolutions below take 3-4 s
each (Numba's typing of their inlined helpers, then LLVM), most of a small network's cold
start. `compile_pool` already compiles the kernels a run will call in worker processes; with a
twin the caller does not wait for that compile: while the kernel is queued for or being
compiled by a worker, a call runs its twin instead (`jit.twin_of`), and once the worker has put
it in Numba's disk cache the next call loads and runs the compiled kernel.

A twin is a pure function of the kernel's own arguments with the kernel's results, byte for
byte: the same integer sums (a GEMM in floating point where every product and partial sum is
an integer its mantissa holds, so exact in any order), the same int64
requantization (`requantize_one`: products and sums wrapping modulo 2^64 alike, the shift
arithmetic, then the clip), written to the same elements of the output. The tests compare each
twin with its kernel over the layouts, paddings, strides, dilations and requantizations the
chip meets, and whole networks run through the twins against the compiled kernels.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from . import implicit, mpe, vector
from .jit import twin_of

#: bytes of float64 im2col rows a twin convolution builds at once
IM2COL_BYTES = 1 << 24


def _map(a: np.ndarray, off: int, rs: int, pitch: int, h: int, w: int, c: int) -> np.ndarray:
    """The ``(h, w, c)`` feature map at element `off` of flat memory `a` (rows `rs`, pixels
    `pitch` elements apart), as a view (writable where `a` is)."""
    s = a.itemsize
    return as_strided(a[off:], shape=(h, w, c), strides=(rs * s, pitch * s, s))


def _requantize(a: np.ndarray, m, s, mn, sn, lo, hi) -> np.ndarray:
    """`requantize_one` over int64 `a`: each sign its own multiplier and shift (int64 arrays
    broadcasting against `a`, or scalars; a non-positive shift: none, no rounding), clipped
    to ``lo..hi``."""

    def side(m, s):
        s = np.maximum(np.asarray(s, np.int64), 0)
        v = a * np.asarray(m, np.int64)
        v += np.where(s > 0, np.left_shift(np.int64(1), np.maximum(s - 1, 0)), 0)
        v >>= s
        return v

    m, mn = np.asarray(m, np.int64), np.asarray(mn, np.int64)
    s, sn = np.maximum(np.asarray(s, np.int64), 0), np.maximum(np.asarray(sn, np.int64), 0)
    with np.errstate(over="ignore"):  # int64 products wrap modulo 2^64, as the kernels'
        if np.array_equal(m, mn) and np.array_equal(s, sn):  # one side (no LeakyReLU)
            v = side(m, s)
        else:
            v = np.where(a < 0, side(mn, sn), side(m, s))
    return np.clip(v, np.int64(lo), np.int64(hi), out=v)


def _requant(a: np.ndarray, bias, mult, shift, mult_neg, shift_neg, lo, hi) -> np.ndarray:
    """`_requantize` of ``a + bias`` with per-channel parameters (the last axis)."""
    n = a.shape[-1]
    return _requantize(a + np.asarray(bias[:n], np.int64), mult[:n], shift[:n],
                       mult_neg[:n], shift_neg[:n], lo, hi)


def _padded_rows(x, xrs, xpitch, xcoff, ih_n, iw_n, cin, h0, h1, pt, pl, width, fill,
                 dtype=np.int64):
    """Rows ``h0..h1`` of the input padded by `pt` rows and `pl` columns (`width` columns
    in all), as `dtype` with padding pixels `fill`."""
    out = np.full((h1 - h0, width, cin), fill, dtype=dtype)
    src = _map(x, xcoff, xrs, xpitch, ih_n, iw_n, cin)
    r0, r1 = max(h0, pt), min(h1, pt + ih_n)
    c0, c1 = min(max(pl, 0), width), max(0, min(width, pl + iw_n))
    if r1 > r0 and c1 > c0:
        out[r0 - h0:r1 - h0, c0:c1] = src[r0 - pt:r1 - pt, c0 - pl:c1 - pl]
    return out


@twin_of(implicit.conv_implicit_int8)
def conv_implicit_int8(x, xrs, xpitch, xcoff, ih_n, iw_n,
                       wq, nr, bias, mult, shift, mult_neg, shift_neg, lo, hi,
                       y, yrs, ypitch, ycoff, oh_n, ow_n,
                       kh, kw, sh, sw, dh, dw, pt, pl, cin, cout, u_lo, u_hi):
    """`implicit.conv_implicit_int8` in numpy, over units ``u_lo..u_hi`` of (channel group,
    output row) as the kernel's (`implicit.channel_groups`). The kernel sums ``(x + 128) w``
    and its bias holds ``-128 sum(w)``; here the GEMM sums ``x w`` (padding 0) and ``128
    sum(w)`` goes back into the bias, the same int64 total. Products of int8 operands are at
    most 2^14, so a float32 GEMM is exact up to K = 1024 (every partial sum within 2^24),
    float64 beyond."""
    if u_hi <= u_lo:
        return y
    cpad = implicit.channel_pad(cin)
    k4 = kh * kw * cpad // 4
    nb = -(-cout // nr)
    k = kh * kw * cin
    ft = np.float32 if k <= 1024 else np.float64
    cg = getattr(implicit.channel_groups, "py_func", implicit.channel_groups)(
        ih_n, iw_n, oh_n, kh, kw, cin, cout, nr)
    w = wq[:nb * k4 * nr * 4].reshape(nb, k4, nr, 4).transpose(1, 3, 0, 2)
    w = w.reshape(kh, kw, cpad, nb * nr)[:, :, :cin, :cout].reshape(k, cout)
    b = np.asarray(bias[:cout], np.int64) + 128 * w.sum(axis=0, dtype=np.int64)
    w = w.astype(ft)
    wp = (ow_n - 1) * sw + (kw - 1) * dw + 1
    out = _map(y, ycoff, yrs, ypitch, oh_n, ow_n, cout)
    rows = max(1, IM2COL_BYTES // (8 * ow_n * k))
    for g in range(u_lo // oh_n, (u_hi - 1) // oh_n + 1):
        c0, c1 = nb * g // cg * nr, min(nb * (g + 1) // cg * nr, cout)
        for r0 in range(max(u_lo - g * oh_n, 0), min(u_hi - g * oh_n, oh_n), rows):
            r1 = min(u_hi - g * oh_n, oh_n, r0 + rows)
            h0, h1 = r0 * sh, (r1 - 1) * sh + (kh - 1) * dh + 1
            xp = _padded_rows(x, xrs, xpitch, xcoff, ih_n, iw_n, cin, h0, h1, pt, pl, wp, 0,
                              ft)
            s0, s1, s2 = xp.strides
            taps = as_strided(xp, shape=(r1 - r0, ow_n, kh, kw, cin),
                              strides=(sh * s0, sw * s1, dh * s0, dw * s1, s2))
            acc = (taps.reshape((r1 - r0) * ow_n, k) @ w[:, c0:c1]).astype(np.int64)
            acc += b[c0:c1]
            v = _requantize(acc, mult[c0:c1], shift[c0:c1], mult_neg[c0:c1], shift_neg[c0:c1],
                            lo, hi)
            out[r0:r1, :, c0:c1] = v.reshape(r1 - r0, ow_n, c1 - c0)
    return y


@twin_of(mpe.conv_depthwise)
def conv_depthwise(x, xrs, xpitch, xcoff, ih_n, iw_n,
                   packed, cu, bias, mult, shift, mult_neg, shift_neg, lo, hi,
                   y, yrs, ypitch, ycoff, oh_n, ow_n, c_n,
                   kh, kw, sh, sw, dh, dw, pt, pl, acc_like, oh_lo, oh_hi):
    """`mpe.conv_depthwise` in numpy: the weights from the lane layout ``(NCB, KH, KW, CU)``,
    taps outside the input adding nothing, int64 sums (the kernel's int32 ones are exact)."""
    if oh_hi <= oh_lo:
        return y
    taps = kh * kw
    ncb = -(-c_n // cu)
    w = packed[:ncb * taps * cu].reshape(ncb, taps, cu).transpose(1, 0, 2)
    w = w.reshape(taps, ncb * cu)[:, :c_n].astype(np.int64)
    wp = (ow_n - 1) * sw + (kw - 1) * dw + 1
    h0, h1 = oh_lo * sh, (oh_hi - 1) * sh + (kh - 1) * dh + 1
    xp = _padded_rows(x, xrs, xpitch, xcoff, ih_n, iw_n, c_n, h0, h1, pt, pl, wp, 0)
    acc = np.zeros((oh_hi - oh_lo, ow_n, c_n), dtype=np.int64)
    for ky in range(kh):
        for kx in range(kw):
            acc += xp[ky * dh:ky * dh + (oh_hi - oh_lo - 1) * sh + 1:sh,
                      kx * dw:kx * dw + (ow_n - 1) * sw + 1:sw] * w[ky * kw + kx]
    out = _map(y, ycoff, yrs, ypitch, oh_n, ow_n, c_n)
    out[oh_lo:oh_hi] = _requant(acc, bias, mult, shift, mult_neg, shift_neg, lo, hi)
    return y


@twin_of(vector.eltw)
def eltw(a, ars, apitch, acoff, b, brs, bpitch, bcoff, b_bcast,
         y, yrs, ypitch, ycoff, h_n, w_n, c_n,
         op, ka, kb, m, s, mn, sn, lo, hi):
    """`vector.eltw` in numpy: ``requant((a * ka) op (b * kb))`` in int64."""
    va = _map(a, acoff, ars, apitch, h_n, w_n, c_n).astype(np.int64) * np.int64(ka)
    bmap = _map(b, bcoff, 0, 0, 1, 1, c_n) if b_bcast else _map(b, bcoff, brs, bpitch, h_n,
                                                                  w_n, c_n)
    vb = bmap.astype(np.int64) * np.int64(kb)
    with np.errstate(over="ignore"):
        acc = va + vb if op == vector.ELTW_ADD else va - vb if op == vector.ELTW_SUB else va * vb
    _map(y, ycoff, yrs, ypitch, h_n, w_n, c_n)[:] = _requantize(acc, m, s, mn, sn, lo, hi)
    return y


def _window_taps(o_n: int, i_n: int, k: int, st: int, pad: int, dil: int):
    """Per tap of a pooling window along one axis: (input index per output, inside mask)."""
    for t in range(k):
        i = np.arange(o_n) * st - pad + t * dil
        yield i, (i >= 0) & (i < i_n)


@twin_of(vector.maxpool)
def maxpool(x, xrs, xpitch, xcoff, ih_n, iw_n, y, yrs, ypitch, ycoff, oh_n, ow_n, c_n,
            kh, kw, sh, sw, dh, dw, pt, pl, lo, hi):
    """`vector.maxpool` in numpy: padding never wins, an all-padding window gives `lo`."""
    xm = _map(x, xcoff, xrs, xpitch, ih_n, iw_n, c_n).astype(np.int64)
    best = np.full((oh_n, ow_n, c_n), -(1 << 62), dtype=np.int64)
    for ih, hin in _window_taps(oh_n, ih_n, kh, sh, pt, dh):
        for iw, win in _window_taps(ow_n, iw_n, kw, sw, pl, dw):
            v = xm[np.clip(ih, 0, ih_n - 1)][:, np.clip(iw, 0, iw_n - 1)]
            inside = (hin[:, None] & win[None, :])[..., None]
            np.maximum(best, np.where(inside, v, -(1 << 62)), out=best)
    _map(y, ycoff, yrs, ypitch, oh_n, ow_n, c_n)[:] = np.clip(best, lo, hi)
    return y


@twin_of(vector.avgpool)
def avgpool(x, xrs, xpitch, xcoff, ih_n, iw_n, y, yrs, ypitch, ycoff, oh_n, ow_n, c_n,
            kh, kw, sh, sw, pt, pl, include_pad, ih_pad_end, iw_pad_end, mult_tab, shift_tab,
            lo, hi):
    """`vector.avgpool` in numpy: the window's sum requantized by its divisor's entry of
    the tables (the valid taps, or those inside the padded input with `include_pad`)."""
    xm = _map(x, xcoff, xrs, xpitch, ih_n, iw_n, c_n).astype(np.int64)
    acc = np.zeros((oh_n, ow_n, c_n), dtype=np.int64)
    cnt = np.zeros((oh_n, ow_n), dtype=np.int64)
    cnt_pad = np.zeros((oh_n, ow_n), dtype=np.int64)
    for ih, hin in _window_taps(oh_n, ih_n, kh, sh, pt, 1):
        for iw, win in _window_taps(ow_n, iw_n, kw, sw, pl, 1):
            counted = (ih < ih_pad_end)[:, None] & (iw < iw_pad_end)[None, :]
            inside = counted & hin[:, None] & win[None, :]
            cnt_pad += counted
            cnt += inside
            v = xm[np.clip(ih, 0, ih_n - 1)][:, np.clip(iw, 0, iw_n - 1)]
            acc += np.where(inside[..., None], v, 0)
    n = cnt_pad if include_pad else cnt
    m = np.asarray(mult_tab, np.int64)[n][..., None]
    s = np.asarray(shift_tab, np.int64)[n][..., None]
    _map(y, ycoff, yrs, ypitch, oh_n, ow_n, c_n)[:] = _requantize(acc, m, s, m, s, lo, hi)
    return y


@twin_of(vector.upsample_nearest)
def upsample_nearest(x, xrs, xpitch, xcoff, y, yrs, ypitch, ycoff, oh_n, ow_n, c_n, sh, sw):
    """`vector.upsample_nearest` in numpy: ``y[h, w] = x[h // sh, w // sw]``."""
    ih_n, iw_n = (oh_n - 1) // sh + 1, (ow_n - 1) // sw + 1
    xm = _map(x, xcoff, xrs, xpitch, ih_n, iw_n, c_n)
    _map(y, ycoff, yrs, ypitch, oh_n, ow_n, c_n)[:] = xm[np.arange(oh_n) // sh][
        :, np.arange(ow_n) // sw]
    return y

"""MPE-array kernels: convolution (dense, grouped, depthwise) and matmul, bit-exact.

Operands are flat views of simulated memory (int8 or int16 arrays) plus their layout:
element ``(h, w, c)`` of a feature map is at ``h * rs + w * pitch + c_off + c`` (all in
elements). Weights are read in the packed MPE layout (`npu_model.asm.pack_conv_weights`).

Exactness of the fast path. The dense kernel multiplies with BLAS in floating point over
K-chunks small enough that every partial sum is an integer below the float mantissa limit:
int8 products are at most 2**14 in magnitude, so chunks of 1024 keep every partial sum
<= 2**24 and float32 is exact; int16 products are below 2**30, so float64 (2**53) is exact for
chunks up to 2**23. Each chunk's float result is converted to int64 and summed, which is the
hardware's integer accumulation. Requantization is `xir.quant.fixed_point.requantize_one`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from xir.quant.fixed_point import requantize_one

#: K-chunk lengths that keep float partial sums exact
KC_INT8_F32 = 1024
KC_INT16_F64 = 1 << 22


@njit(cache=True)
def unpack_conv_weights(packed, groups, kh, kw, cin_g, cout_g, icb, ocb, wf):
    """Packed ``(G, NOB, KH, KW, NIB, ICB, OCB)`` -> dense ``wf[g, (ky*KW+kx)*cin_g + c, o]``."""
    nob = (cout_g + ocb - 1) // ocb
    nib = (cin_g + icb - 1) // icb
    for g in range(groups):
        for ob in range(nob):
            o0 = ob * ocb
            on = min(ocb, cout_g - o0)
            for ky in range(kh):
                for kx in range(kw):
                    t = ky * kw + kx
                    for ib in range(nib):
                        base = ((((g * nob + ob) * kh + ky) * kw + kx) * nib + ib) * icb * ocb
                        c0 = ib * icb
                        cn = min(icb, cin_g - c0)
                        for i in range(cn):
                            row = t * cin_g + c0 + i
                            src = base + i * ocb
                            for o in range(on):
                                wf[g, row, o0 + o] = packed[src + o]
    return wf


@njit(cache=True)
def _requant_store(acc, p0, npix, ow_n, y, yrs, ypitch, ycoff, ch0, bias_unused,
                   mult, shift, mult_neg, shift_neg, lo, hi):
    """Requantize a (npix, n) int64 tile for output pixels p0.. and channels ch0.. into y."""
    n = acc.shape[1]
    for p in range(npix):
        q = p0 + p
        oh = q // ow_n
        ow = q - oh * ow_n
        base = oh * yrs + ow * ypitch + ycoff + ch0
        for o in range(n):
            c = ch0 + o
            y[base + o] = requantize_one(acc[p, o], mult[c], shift[c], mult_neg[c],
                                         shift_neg[c], lo, hi)


@njit(cache=True)
def conv_dense(x, xrs, xpitch, xcoff, ih_n, iw_n,
               wf, bias, mult, shift, mult_neg, shift_neg, lo, hi,
               y, yrs, ypitch, ycoff, oh_n, ow_n,
               kh, kw, sh, sw, dh, dw, pt, pl, groups, cin_g, cout_g, kc):
    """Dense / grouped convolution: im2col per pixel tile and K-chunk, exact float GEMM.

    `wf` is float32 (int8 operands, kc <= 1024) or float64 (int16 operands).
    """
    npix_all = oh_n * ow_n
    taps = kh * kw
    # pixel tile: keep one im2col chunk near 256 KiB
    kmax = min(kc, taps * cin_g)
    tile = max(32, 65536 // max(kmax, 1))
    if tile > npix_all:
        tile = npix_all
    colbuf = np.empty(tile * kmax, dtype=wf.dtype)
    acc = np.empty((tile, cout_g), dtype=np.int64)
    full = cin_g <= kc
    tpc = kc // cin_g if full else 1
    nchunks_c = 1 if full else (cin_g + kc - 1) // kc
    for g in range(groups):
        wg = wf[g]
        cin0 = xcoff + g * cin_g
        for p0 in range(0, npix_all, tile):
            npix = min(tile, npix_all - p0)
            for p in range(npix):
                for o in range(cout_g):
                    acc[p, o] = bias[g * cout_g + o]
            for t0 in range(0, taps, tpc):
                t1 = min(taps, t0 + tpc)
                for cc in range(nchunks_c):
                    c0 = cc * kc
                    c1 = cin_g if full else min(cin_g, c0 + kc)
                    ncc = c1 - c0
                    klen = (t1 - t0) * ncc
                    # im2col of this chunk (a C-contiguous (npix, klen) view of the buffer)
                    cols = colbuf[:npix * klen].reshape((npix, klen))
                    for p in range(npix):
                        q = p0 + p
                        oh = q // ow_n
                        ow = q - oh * ow_n
                        col = 0
                        for t in range(t0, t1):
                            ky = t // kw
                            kx = t - ky * kw
                            ih = oh * sh - pt + ky * dh
                            iw = ow * sw - pl + kx * dw
                            if ih < 0 or ih >= ih_n or iw < 0 or iw >= iw_n:
                                for c in range(ncc):
                                    cols[p, col + c] = 0
                            else:
                                src = ih * xrs + iw * xpitch + cin0 + c0
                                for c in range(ncc):
                                    cols[p, col + c] = x[src + c]
                            col += ncc
                    if full:
                        r0 = t0 * cin_g
                    else:
                        r0 = t0 * cin_g + c0
                    part = np.dot(cols, wg[r0:r0 + klen])
                    for p in range(npix):
                        for o in range(cout_g):
                            acc[p, o] += np.int64(part[p, o])
            _requant_store(acc, p0, npix, ow_n, y, yrs, ypitch, ycoff, g * cout_g, bias,
                           mult, shift, mult_neg, shift_neg, lo, hi)
    return y


@njit(cache=True)
def conv_depthwise(x, xrs, xpitch, xcoff, ih_n, iw_n,
                   packed, cu, bias, mult, shift, mult_neg, shift_neg, lo, hi,
                   y, yrs, ypitch, ycoff, oh_n, ow_n, c_n,
                   kh, kw, sh, sw, dh, dw, pt, pl):
    """Depthwise convolution (one channel per group), channel innermost, int64 accumulation.

    `packed` is the lane layout ``(NCB, KH, KW, CU)``.
    """
    taps = kh * kw
    w2 = np.empty((taps, c_n), dtype=np.int64)
    for c in range(c_n):
        cb = c // cu
        lane = c - cb * cu
        for t in range(taps):
            w2[t, c] = packed[(cb * taps + t) * cu + lane]
    acc = np.empty(c_n, dtype=np.int64)
    for oh in range(oh_n):
        for ow in range(ow_n):
            for c in range(c_n):
                acc[c] = bias[c]
            for ky in range(kh):
                ih = oh * sh - pt + ky * dh
                if ih < 0 or ih >= ih_n:
                    continue
                for kx in range(kw):
                    iw = ow * sw - pl + kx * dw
                    if iw < 0 or iw >= iw_n:
                        continue
                    src = ih * xrs + iw * xpitch + xcoff
                    t = ky * kw + kx
                    for c in range(c_n):
                        acc[c] += np.int64(x[src + c]) * w2[t, c]
            base = oh * yrs + ow * ypitch + ycoff
            for c in range(c_n):
                y[base + c] = requantize_one(acc[c], mult[c], shift[c], mult_neg[c],
                                             shift_neg[c], lo, hi)
    return y


@njit(cache=True)
def matmul_dynamic(a, ars, apitch, acoff, b, brs, bpitch, bcoff,
                   batch, m, k, n, fdummy, kc,
                   bias, mult, shift, mult_neg, shift_neg, lo, hi,
                   y, yrs, ypitch, ycoff):
    """Batched ``A (batch, M, K) @ B (batch, K, N)`` with both operands feature maps.

    A is stored as H=batch, W=M, C=K; B as H=batch, W=K, C=N; the result as H=batch, W=M, C=N.
    `fdummy` is a 0-d-like array whose dtype selects float32 / float64 for the exact GEMM.
    """
    af = np.empty((m, min(k, kc)), dtype=fdummy.dtype)
    bf = np.empty((min(k, kc), n), dtype=fdummy.dtype)
    acc = np.empty((m, n), dtype=np.int64)
    for bt in range(batch):
        for i in range(m):
            for j in range(n):
                acc[i, j] = bias[j]
        for k0 in range(0, k, kc):
            k1 = min(k, k0 + kc)
            kl = k1 - k0
            for i in range(m):
                src = bt * ars + i * apitch + acoff + k0
                for kk in range(kl):
                    af[i, kk] = a[src + kk]
            for kk in range(kl):
                src = bt * brs + (k0 + kk) * bpitch + bcoff
                for j in range(n):
                    bf[kk, j] = b[src + j]
            part = np.dot(np.ascontiguousarray(af[:, :kl]), np.ascontiguousarray(bf[:kl]))
            for i in range(m):
                for j in range(n):
                    acc[i, j] += np.int64(part[i, j])
        for i in range(m):
            base = bt * yrs + i * ypitch + ycoff
            for j in range(n):
                y[base + j] = requantize_one(acc[i, j], mult[j], shift[j], mult_neg[j],
                                             shift_neg[j], lo, hi)
    return y

"""Matmul kernels of the MPE array whose operands are both feature maps (attention's QK^T and
PV): the exact float K-chunk GEMM for any operand type, and int8 operands on the integer GEMM.
"""

from __future__ import annotations

import numpy as np

from xir.quant.fixed_point import requantize_one

from .bgemm import NR as BNR
from .bgemm import _mk, _mk16, byte_planes, gemm_int16_bytes
from .grouped import _requant_folded8
from .igemm import MR, gemm_pairs, gemm_pairs_wide
from .implicit import _requant_out, _requant_params
from .jit import helper, kernel
from .mpe import _cp, _requant_tile
from .pool import Split

#: kernels from other files these kernels call, with their source stamps (see `mpe`'s note)
NUMBA_DEPENDS = {"npu_model.kernels.bgemm.byte_planes": "c12b5a7aa4a50943",
                 "npu_model.kernels.bgemm.gemm_int16_bytes": "1ab1468d97ccde9c",
                 "npu_model.kernels.grouped._requant_folded8": "2f0f820b4d87a624",
                 "npu_model.kernels.implicit._requant_out": "ee9d9eaa0e58fd5f",
                 "npu_model.kernels.implicit._requant_params": "d0844bb5b7fb3aad",
                 "xir.quant.fixed_point.requantize_one": "e5bd92a5402c36dd",
                 "npu_model.kernels.igemm.gemm_pairs": "0ef95014f7dc6162",
                 "npu_model.kernels.igemm.gemm_pairs_wide": "a5f9715e2922bfc7",
                 "npu_model.kernels.mpe._cp": "df064e8e4cae48cd",
                 "npu_model.kernels.mpe._requant_tile": "3f56748adbddf9fe"}


@kernel(nogil=True)
def matmul_dynamic_int(a, ars, apitch, acoff, b, brs, bpitch, bcoff, batch, m, k, n, bt, nr,
                       bias, mult, shift, mult_neg, shift_neg, lo, hi, y, yrs, ypitch, ycoff,
                       ib_lo, ib_hi):
    """`matmul_dynamic` of int8 operands on the integer GEMM (`igemm`, K <= `igemm.MAX_K`):
    per batch, A's rows in int16 and B packed into panels `nr` wide, int32 accumulation,
    requantized in runs of whole rows. Batch items ``ib_lo..ib_hi`` only (the pool's part)."""
    k2 = (k + 1) // 2
    lda = 2 * k2
    rows = (m + MR - 1) // MR * MR
    nb = (n + nr - 1) // nr
    ldc = nb * nr
    at = np.zeros(rows * lda, dtype=np.int16)  # K and row padding stay 0
    bq = np.zeros(nb * k2 * nr * 2, dtype=np.int16)  # N and K padding stay 0
    c = np.empty(rows * ldc, dtype=np.int32)
    none = np.empty((0, n), dtype=np.int64)
    for ib in range(ib_lo, ib_hi):
        for i in range(m):
            src = ib * ars + i * apitch + acoff
            _cp(at[i * lda:i * lda + k], a[src:src + k])
        for pb in range(nb):  # B into pair panels: bq[(pb, k // 2, n, k % 2)]
            j0 = pb * nr
            wdt = min(nr, n - j0)
            pbase = pb * k2 * nr * 2
            if bt:  # B^T rows: one column of B, contiguous over K
                for nn in range(wdt):
                    src = ib * brs + (j0 + nn) * bpitch + bcoff
                    d = pbase + 2 * nn
                    for kk in range(k):
                        bq[np.uint64(d + (kk >> 1) * 2 * nr + (kk & 1))] = b[np.uint64(src + kk)]
            else:
                for kk in range(k):
                    src = ib * brs + kk * bpitch + bcoff + j0
                    d = pbase + (kk >> 1) * 2 * nr + (kk & 1)
                    for nn in range(wdt):
                        bq[np.uint64(d + 2 * nn)] = b[np.uint64(src + nn)]
        gemm_pairs(at, lda, rows, bq, k2, n, nr, c, np.int64(0), ldc)
        _requant_tile(c, ldc, none, bias, np.int64(0), ib * m, m, m, n, y, yrs, ypitch, ycoff,
                      np.int64(0), mult, shift, mult_neg, shift_neg, lo, hi)
    return


@kernel(nogil=True)
def matmul_dynamic_int8_bytes(a, ars, apitch, acoff, b, brs, bpitch, bcoff, batch, m, k, n, bt,
                              nr, bias, mult, shift, mult_neg, shift_neg, lo, hi, y, yrs,
                              ypitch, ycoff, ib_lo, ib_hi):
    """`matmul_dynamic` of int8 operands on the byte GEMM (`bgemm`'s micro kernel, AVX-512
    VNNI only, K <= `bgemm.MAX_K8`): per batch item, A's rows turned into the unsigned
    ``a + 128`` as they are copied (K padded to quads), B packed into quad panels `nr` wide
    a 32-bit word (four K) at a time while its column sums make the bias's ``-128 sum(b)``,
    then requantized from the tile (`implicit._requant_params`: the bias folded into the
    rounding term where one multiplier and shift serve both signs, eight channels a 512-bit
    pass). Attention's 64x128x64 (B^T) 11.2 -> 7.8 us, 64x64x128 15.8 -> 8.6 us a call
    (byte-identical). Batch items ``ib_lo..ib_hi`` only."""
    k4 = (k + 3) // 4
    kp = 4 * k4
    kq = k // 4 * 4  # K in whole quads; the rest byte by byte
    rows = (m + MR - 1) // MR * MR
    nb = (n + nr - 1) // nr
    ldc = nb * nr
    at = np.empty(rows * kp, dtype=np.uint8)
    at[m * kp:] = 128  # padding rows: an x of 0 (their results are not read)
    bw = np.zeros(nb * k4 * nr, dtype=np.uint32)  # N and K padding stay 0
    bq = bw.view(np.int8)
    c = np.empty(rows * ldc, dtype=np.int32)
    bb = np.empty(n, dtype=np.int64)
    cs = np.empty(nr, dtype=np.int32)  # column sums of a panel: |sum| <= 128 K < 2**31
    for ib in range(ib_lo, ib_hi):
        for i in range(m):
            src = ib * ars + i * apitch + acoff
            ar = a[src:src + k]
            dr = at[i * kp:(i + 1) * kp]
            for q in range(k):
                dr[q] = np.uint8(ar[q]) ^ np.uint8(128)
            for q in range(k, kp):
                dr[q] = 128
        for pb in range(nb):  # B into quad panels: bq[(pb, k // 4, n, k % 4)]
            j0 = pb * nr
            wdt = min(nr, n - j0)
            pw = pb * k4 * nr  # the panel's first word
            if bt:  # B^T rows: one column of B, contiguous over K
                for nn in range(wdt):
                    src = ib * brs + (j0 + nn) * bpitch + bcoff
                    br = b[src:src + k]
                    s = np.int32(0)
                    for q in range(k):
                        s += np.int32(br[q])
                    for q in range(0, kq, 4):
                        bw[pw + (q >> 2) * nr + nn] = _quad(br[q], br[q + 1], br[q + 2],
                                                            br[q + 3])
                    for q in range(kq, k):
                        bq[4 * (pw + (q >> 2) * nr + nn) + (q & 3)] = br[q]
                    bb[j0 + nn] = bias[j0 + nn] - 128 * np.int64(s)
                continue
            cs[:wdt] = 0
            for q in range(0, kq, 4):  # four rows of B make a row of words
                s0 = ib * brs + q * bpitch + bcoff + j0
                r0 = b[s0:s0 + wdt]
                r1 = b[s0 + bpitch:s0 + bpitch + wdt]
                r2 = b[s0 + 2 * bpitch:s0 + 2 * bpitch + wdt]
                r3 = b[s0 + 3 * bpitch:s0 + 3 * bpitch + wdt]
                dw = bw[pw + (q >> 2) * nr:pw + (q >> 2) * nr + wdt]
                for nn in range(wdt):
                    dw[nn] = _quad(r0[nn], r1[nn], r2[nn], r3[nn])
                    cs[nn] += (np.int32(r0[nn]) + np.int32(r1[nn])) + (np.int32(r2[nn])
                                                                       + np.int32(r3[nn]))
            for q in range(kq, k):
                s0 = ib * brs + q * bpitch + bcoff + j0
                for nn in range(wdt):
                    v = b[s0 + nn]
                    bq[4 * (pw + (q >> 2) * nr + nn) + (q & 3)] = v
                    cs[nn] += np.int32(v)
            for nn in range(wdt):
                bb[j0 + nn] = bias[j0 + nn] - 128 * np.int64(cs[nn])
        for pb in range(nb):
            boff = pb * k4 * nr * 4
            for m0 in range(0, rows, MR):
                if nr == BNR:
                    _mk(at, m0 * kp, kp, bq, boff, c, m0 * ldc + pb * nr, ldc, k4)
                else:
                    _mk16(at, m0 * kp, kp, bq, boff, c, m0 * ldc + pb * nr, ldc, k4)
        folded, m32, cf, sf, prm = _requant_params(bb, mult, shift, mult_neg, shift_neg, n)
        if folded:
            _requant_folded8(c, ldc, ib * m, m, m, n, y, yrs, ypitch, ycoff, m32, cf, sf, lo,
                             hi)
        else:
            _requant_out(c, ldc, ib * m, m, m, n, y, yrs, ypitch, ycoff, folded, m32, cf, sf,
                         bb, prm, lo, hi)
    return


@helper
def _quad(b0, b1, b2, b3):
    """Four int8 values as the bytes of one little-endian 32-bit word (a quad of the panel)."""
    w = np.uint32(np.uint8(b0)) | (np.uint32(np.uint8(b1)) << np.uint32(8))
    w |= np.uint32(np.uint8(b2)) << np.uint32(16)
    return w | (np.uint32(np.uint8(b3)) << np.uint32(24))


@kernel(nogil=True)
def matmul_dynamic_int16_bytes(a, ars, apitch, acoff, b, brs, bpitch, bcoff, batch, m, k, n, bt,
                               nr, bias, mult, shift, mult_neg, shift_neg, lo, hi, y, yrs,
                               ypitch, ycoff, ib_lo, ib_hi):
    """`matmul_dynamic` of int16 operands on the byte GEMM (`bgemm.gemm_int16_bytes`, AVX-512
    VNNI only, K <= `bgemm.MAX_K`): per batch, A's rows as byte planes, B split into the
    planes ``wh``, ``wl'`` of `bgemm.int16_weights` and packed into its panels (`nr` is
    unused: the panels are `bgemm.NR` wide) while their column sums make the bias's
    correction. Batch items ``ib_lo..ib_hi`` only."""
    kp = (k + 3) // 4 * 4
    k4 = kp // 4
    ldx = 2 * ((k + 1) // 2)
    rows = (m + MR - 1) // MR * MR
    nb = (n + BNR - 1) // BNR
    ldc = nb * BNR
    xt = np.zeros(rows * ldx, dtype=np.int16)  # row padding stays 0
    ab = np.empty(rows * 2 * kp, dtype=np.uint8)
    rsum = np.empty(rows, dtype=np.int64)
    bq = np.zeros(nb * 2 * k4 * BNR * 4, dtype=np.int8)  # N and K padding stay 0
    c = np.empty(rows * ldc, dtype=np.int64)
    tmp = np.empty(3 * MR * BNR, dtype=np.int32)
    bb = np.empty(n, dtype=np.int64)
    none = np.empty((0, n), dtype=np.int64)
    half = k4 * BNR * 4  # the wl' quads follow the wh quads in a panel
    for ib in range(ib_lo, ib_hi):
        for i in range(m):
            src = ib * ars + i * apitch + acoff
            _cp(xt[i * ldx:i * ldx + k], a[src:src + k])
        byte_planes(xt, ldx, rows, k, kp, ab, rsum)
        for j in range(n):
            bb[j] = bias[j]
        for pb in range(nb):
            j0 = pb * BNR
            wdt = min(BNR, n - j0)
            pbase = pb * 2 * half
            for nn in range(wdt):
                sh = np.int64(0)
                sl = np.int64(0)
                for kk in range(k):
                    if bt:  # B^T rows: one column of B, contiguous over K
                        v = np.int32(b[np.uint64(ib * brs + (j0 + nn) * bpitch + bcoff + kk)])
                    else:
                        v = np.int32(b[np.uint64(ib * brs + kk * bpitch + bcoff + j0 + nn)])
                    vh = v >> 8
                    vl = (v & 255) - 128
                    q = np.uint64(pbase + (kk >> 2) * BNR * 4 + 4 * nn + (kk & 3))
                    bq[q] = vh
                    bq[q + np.uint64(half)] = vl
                    sh += vh
                    sl += vl
                bb[j0 + nn] -= (sh << 23) + (sl << 15)
        gemm_int16_bytes(ab, kp, rows, bq, n, tmp, c, np.int64(0), ldc, rsum)
        _requant_tile(c, ldc, none, bb, np.int64(0), ib * m, m, m, n, y, yrs, ypitch, ycoff,
                      np.int64(0), mult, shift, mult_neg, shift_neg, lo, hi)
    return


@helper
def _digits(v):
    """``(hi, lo)`` with ``v == 256 * hi + lo``, ``lo`` in [-128, 127] (`igemm.split_digits`)."""
    w = np.int32(v)
    lo = ((w + 128) & 255) - 128
    return (w - lo) >> 8, lo


@kernel(nogil=True)
def matmul_dynamic_int16(a, ars, apitch, acoff, b, brs, bpitch, bcoff, batch, m, k, n, bt, nr,
                         bias, mult, shift, mult_neg, shift_neg, lo, hi, y, yrs, ypitch, ycoff,
                         ib_lo, ib_hi):
    """`matmul_dynamic` of int16 operands on the integer GEMM's digit form: per batch, B split
    into two digit panels (``b = 256 * hi + lo``; the ``hi`` GEMM skipped when every digit is
    0), K in chunks of 255 pairs (``2 * 255 * 2**15 * 2**7 < 2**31``: exact in int32), summed
    into int64 (`igemm.gemm_pairs_wide`), requantized in runs of whole rows. Batch items
    ``ib_lo..ib_hi`` only."""
    k2 = (k + 1) // 2
    lda = 2 * k2
    kc2 = min(k2, (2**31 - 1) // (2**15 * 2**7) // 2)
    rows = (m + MR - 1) // MR * MR
    nb = (n + nr - 1) // nr
    ldc = nb * nr
    at = np.zeros(rows * lda, dtype=np.int16)  # K and row padding stay 0
    bqh = np.zeros(nb * k2 * nr * 2, dtype=np.int16)  # N and K padding stay 0
    bql = np.zeros(nb * k2 * nr * 2, dtype=np.int16)
    nohi = np.empty(0, dtype=np.int16)
    c = np.empty(rows * ldc, dtype=np.int64)
    tmp = np.empty(2 * MR * nr, dtype=np.int32)
    none = np.empty((0, n), dtype=np.int64)
    for ib in range(ib_lo, ib_hi):
        for i in range(m):
            src = ib * ars + i * apitch + acoff
            _cp(at[i * lda:i * lda + k], a[src:src + k])
        anyhi = False
        for pb in range(nb):  # B into pair panels: bq[(pb, k // 2, n, k % 2)]
            j0 = pb * nr
            wdt = min(nr, n - j0)
            pbase = pb * k2 * nr * 2
            for nn in range(wdt):
                for kk in range(k):
                    if bt:
                        src = ib * brs + (j0 + nn) * bpitch + bcoff + kk
                    else:
                        src = ib * brs + kk * bpitch + bcoff + j0 + nn
                    dh, dl = _digits(b[np.uint64(src)])
                    d = np.uint64(pbase + (kk >> 1) * 2 * nr + 2 * nn + (kk & 1))
                    bqh[d] = dh
                    bql[d] = dl
                    anyhi = anyhi or dh != 0
        gemm_pairs_wide(at, lda, rows, bqh if anyhi else nohi, bql, k2, kc2, n, nr, tmp, c,
                        np.int64(0), ldc)
        _requant_tile(c, ldc, none, bias, np.int64(0), ib * m, m, m, n, y, yrs, ypitch, ycoff,
                      np.int64(0), mult, shift, mult_neg, shift_neg, lo, hi)
    return


@kernel
def matmul_dynamic(a, ars, apitch, acoff, b, brs, bpitch, bcoff,
                   batch, m, k, n, bt, fdummy, kc,
                   bias, mult, shift, mult_neg, shift_neg, lo, hi,
                   y, yrs, ypitch, ycoff):
    """Batched ``A (batch, M, K) @ B (batch, K, N)`` with both operands feature maps.

    A is stored as H=batch, W=M, C=K; B as H=batch, W=K, C=N (`bt`: transposed, W=N, C=K);
    the result as H=batch, W=M, C=N.
    `fdummy` is a 0-d-like array whose dtype selects float32 / float64 for the exact GEMM.
    """
    af = np.empty((m, min(k, kc)), dtype=fdummy.dtype)
    bf = np.empty((min(k, kc), n), dtype=fdummy.dtype)
    acc = np.empty((m, n), dtype=np.int64)
    for ib in range(batch):
        for i in range(m):
            for j in range(n):
                acc[i, j] = bias[j]
        for k0 in range(0, k, kc):
            k1 = min(k, k0 + kc)
            kl = k1 - k0
            for i in range(m):
                src = ib * ars + i * apitch + acoff + k0
                for kk in range(kl):
                    af[i, kk] = a[src + kk]
            if bt:
                for j in range(n):
                    src = ib * brs + j * bpitch + bcoff + k0
                    for kk in range(kl):
                        bf[kk, j] = b[src + kk]
            else:
                for kk in range(kl):
                    src = ib * brs + (k0 + kk) * bpitch + bcoff
                    for j in range(n):
                        bf[kk, j] = b[src + j]
            part = np.dot(np.ascontiguousarray(af[:, :kl]), np.ascontiguousarray(bf[:kl]))
            for i in range(m):
                for j in range(n):
                    acc[i, j] += np.int64(part[i, j])
        for i in range(m):
            base = ib * yrs + i * ypitch + ycoff
            for j in range(n):
                y[base + j] = requantize_one(acc[i, j], mult[j], shift[j], mult_neg[j],
                                             shift_neg[j], lo, hi)
    return


#: the integer matmuls split over batch items on the thread pool (`pool.Split`)
MATMUL_INT = Split(matmul_dynamic_int, extent=("batch",), work=("batch", "m", "k", "n"))
MATMUL_INT8_BYTES = Split(matmul_dynamic_int8_bytes, extent=("batch",),
                          work=("batch", "m", "k", "n"))
MATMUL_INT16_BYTES = Split(matmul_dynamic_int16_bytes, extent=("batch",),
                           work=("batch", "m", "k", "n"))
MATMUL_INT16 = Split(matmul_dynamic_int16, extent=("batch",), work=("batch", "m", "k", "n"))

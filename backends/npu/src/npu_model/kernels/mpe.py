"""MPE-array kernels: convolution (dense, grouped, depthwise), bit-exact (matmuls of two feature
maps: `matmul`).

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
from numba import types
from numba.extending import intrinsic

from .bgemm import NR as BNR
from .bgemm import byte_planes, gemm_int8_bytes, gemm_int16_bytes
from .grouped import _requant8
from .igemm import MR, gemm_pairs, gemm_pairs_wide
from .jit import helper, inline, kernel
from .pool import Split

#: Numba kernels called from this file's kernels but defined in other files, with a stamp of
#: their source (and of the kernels they call). Numba's on-disk cache notices changes to this
#: file only, so when a dependency changes, `tests/test_kernel_stamps.py`
#: fails until the stamp here is updated, and that edit makes Numba recompile these kernels.
NUMBA_DEPENDS = {"npu_model.kernels.bgemm.gemm_int8_bytes": "e6f20004b1623a0c",
                 "npu_model.kernels.bgemm.byte_planes": "c12b5a7aa4a50943",
                 "npu_model.kernels.bgemm.gemm_int16_bytes": "1ab1468d97ccde9c",
                 "npu_model.kernels.igemm.gemm_pairs": "0ef95014f7dc6162",
                 "npu_model.kernels.igemm.gemm_pairs_wide": "a5f9715e2922bfc7"}

#: A stamp of the source of `npu_model.kernels.grouped._requant8`, an intrinsic this file's
#: kernels are compiled with: Numba's on-disk cache notices changes to this file only (and
#: `tests/test_kernel_stamps.py` tracks kernels, not intrinsics), so
#: `tests/backends/npu_model/test_kernels_fast_paths.py` fails when it changes until the stamp
#: here is updated, and that edit makes Numba recompile these kernels.
REQUANT8_STAMP = "044ba5d30fa31e23"

#: K-chunk lengths that keep float partial sums exact
KC_INT8_F32 = 1024
KC_INT16_F64 = 1 << 22


def unpack_conv_weights(packed: np.ndarray, groups: int, kh: int, kw: int, cin_g: int,
                        cout_g: int, icb: int, ocb: int, wf: np.ndarray) -> np.ndarray:
    """Packed ``(G, NOB, KH, KW, NIB, ICB, OCB)`` -> dense ``wf[g, (ky*KW+kx)*cin_g + c, o]``
    (converted to `wf`'s dtype). A reshape and a transpose in numpy, once per weight blob (the
    caller caches the result): no Numba kernel to compile on a fresh install's first forward."""
    nob = -(-cout_g // ocb)
    nib = -(-cin_g // icb)
    blocks = packed[:groups * nob * kh * kw * nib * icb * ocb].reshape(
        groups, nob, kh, kw, nib, icb, ocb)
    dense = blocks.transpose(0, 2, 3, 4, 5, 1, 6).reshape(groups, kh * kw, nib * icb, nob * ocb)
    wf.reshape(groups, kh * kw, cin_g, cout_g)[...] = dense[:, :, :cin_g, :cout_g]
    return wf


@helper
def _cp(dst, src):
    """``dst[:] = src`` with conversion (contiguous 1-D slices, vectorises)."""
    for i in range(dst.shape[0]):
        dst[i] = src[i]


@helper
def _zero(dst):
    for i in range(dst.shape[0]):
        dst[i] = 0


@helper
def _requant_params(mult, shift, mult_neg, shift_neg, ch0, n):
    """Rows (mult, rounding, shift) for ``a >= 0`` then for ``a < 0`` of channels ch0..ch0+n:
    a non-positive shift means no shift (shift 0, rounding 0), as in `requantize_one`."""
    prm = np.empty((6, n), dtype=np.int64)
    for o in range(n):
        c = ch0 + o
        for k, m, s in ((0, mult[c], shift[c]), (3, mult_neg[c], shift_neg[c])):
            prm[k, o] = m
            prm[k + 1, o] = (np.int64(1) << np.int64(s - 1)) if s > 0 else 0
            prm[k + 2, o] = s if s > 0 else 0
    return prm


@helper
def _tiled(prm, reps):
    """`prm` repeated `reps` times along its columns (parameters for `reps` pixels in a row)."""
    n = prm.shape[1]
    out = np.empty((prm.shape[0], reps * n), dtype=prm.dtype)
    for i in range(prm.shape[0]):  # element loops: a 2-D slice store costs seconds to compile
        for r in range(reps):
            for j in range(n):
                out[i, r * n + j] = prm[i, j]
    return out


#: elements requantized per call where output pixels are contiguous (amortises the call)
RQ_RUN = 512


@helper
def _requant_row(acc, prm, lo, hi, out):
    """``out[o] = requantize_one(acc[o], ...)`` for one pixel's channels, branch-free over the
    sign (both computed, one selected) so the channel loop vectorises."""
    mp, rp, sp, mn, rn, sn = prm[0], prm[1], prm[2], prm[3], prm[4], prm[5]
    lo64 = np.int64(lo)
    hi64 = np.int64(hi)
    for o in range(acc.shape[0]):
        a = acc[o]
        vp = (a * mp[o] + rp[o]) >> sp[o]
        vn = (a * mn[o] + rn[o]) >> sn[o]
        v = vn if a < 0 else vp
        v = lo64 if v < lo64 else v
        v = hi64 if v > hi64 else v
        out[o] = v


@helper
def _one_sided(mult, shift, mult_neg, shift_neg, ch0, n):
    """Whether channels ch0..ch0+n requantize alike for both signs of the accumulator (no
    LeakyReLU: the same multiplier, the same effective shift) with multipliers that fit int32
    (the chip's parameter records hold int32): the condition of `_fold_params`."""
    for o in range(n):
        c = ch0 + o
        sp = shift[c] if shift[c] > 0 else 0
        sn = shift_neg[c] if shift_neg[c] > 0 else 0
        if mult[c] != mult_neg[c] or sp != sn or mult[c] < -(1 << 31) or mult[c] >= 1 << 31:
            return False
    return True


@helper
def _fold_params(mult, shift, bias, boff, ch0, n, reps):
    """One-sided requantization (`_one_sided`) with the bias folded into the rounding term,
    each parameter repeated `reps` times along (a run of pixels): int32 multipliers, int64
    ``c = bias * m + rounding`` and shifts, so that ``(a * m + c) >> s`` is ``((a + bias) * m +
    rounding) >> s`` bit for bit (both are int64 sums and products, wrapping alike modulo
    2^64) without a pass adding the bias, and ``a * m`` of an int32 accumulator is one
    32 x 32 -> 64 multiply (``vpmuldq``) where two 64-bit operands take three."""
    m32 = np.empty(reps * n, dtype=np.int32)
    cf = np.empty(reps * n, dtype=np.int64)
    sf = np.empty(reps * n, dtype=np.int64)
    for o in range(n):
        c = ch0 + o
        s = shift[c] if shift[c] > 0 else 0
        r = (np.int64(1) << np.int64(s - 1)) if s > 0 else np.int64(0)
        m = mult[c]
        cv = bias[boff + o] * m + r
        for k in range(reps):
            m32[k * n + o] = m
            cf[k * n + o] = cv
            sf[k * n + o] = s
    return m32, cf, sf


@intrinsic
def _is_int32(typingctx, a):
    """Whether array `a` holds int32 (a constant of its type: float32 accumulators of the
    float path are 4 bytes too, and `grouped._requant8` reads int32)."""
    sig = types.boolean(a)

    def codegen(context, builder, sig, args):
        return context.get_constant(types.boolean, sig.args[0].dtype == types.int32)

    return sig, codegen


@helper
def _requant_folded(acc, m32, cf, sf, lo, hi, out):
    """``out[i] = clip((acc[i] * m32[i] + cf[i]) >> sf[i], lo, hi)`` (`_fold_params`); int32
    accumulators eight a 512-bit pass (`grouped._requant8`: Numba vectorises loops 256 bits
    wide on this CPU's tuning), the rest one by one."""
    lo64 = np.int64(lo)
    hi64 = np.int64(hi)
    n8 = out.shape[0] // 8 * 8 if _is_int32(acc) else 0
    for i in range(0, n8, 8):
        _requant8(acc, i, m32, cf, sf, i, lo64, hi64, out, i)
    for i in range(n8, out.shape[0]):
        v = (np.int64(acc[i]) * np.int64(m32[i]) + cf[i]) >> sf[i]
        v = lo64 if v < lo64 else v
        v = hi64 if v > hi64 else v
        out[i] = v


@helper
def _requant_tile(src, ld, first, bias, boff, p0, npix, ow_n, n, y, yrs, ypitch, ycoff, ch0,
                  mult, shift, mult_neg, shift_neg, lo, hi):
    """Requantize the tile `src` (flat, float or int, rows `ld` apart) plus ``first`` (int64
    partial sums; empty when there is one K-chunk, then the bias) for output pixels p0.. and
    channels ch0.. into y.

    Runs of whole pixels are requantized at once (`_requant_row` over ``run * n`` values):
    straight into y where the tile's pixels are one run of it, else into a scratch row that
    is then copied out pixel by pixel (a channel window, a wider pitch)."""
    use_first = first.shape[0] > 0
    dense = ypitch == n and yrs == ow_n * n
    run = max(1, RQ_RUN // n)
    base = (p0 // ow_n) * yrs + (p0 % ow_n) * ypitch + ycoff + ch0
    if not use_first and _one_sided(mult, shift, mult_neg, shift_neg, ch0, n):
        m32, cf, sf = _fold_params(mult, shift, bias, boff, ch0, n, run)
        gat = np.empty(run * n, dtype=src.dtype)
        tmp = np.empty(0 if dense else run * n, dtype=y.dtype)
        for r0 in range(0, npix, run):
            r1 = min(npix, r0 + run)
            for p in range(r0, r1):  # the run's pixels, dense (GEMM rows are `ld` apart)
                _cp(gat[(p - r0) * n:(p - r0 + 1) * n], src[p * ld:p * ld + n])
            m = (r1 - r0) * n
            if dense:
                _requant_folded(gat[:m], m32, cf, sf, lo, hi,
                                y[base + r0 * n:base + r0 * n + m])
                continue
            _requant_folded(gat[:m], m32, cf, sf, lo, hi, tmp[:m])
            _put_pixels(y, tmp, p0 + r0, r1 - r0, n, ow_n, yrs, ypitch, ycoff + ch0)
        return
    prm = _requant_params(mult, shift, mult_neg, shift_neg, ch0, n)
    bv = bias[boff:boff + n]
    prm_r = _tiled(prm, run)
    acc = np.empty(run * n, dtype=np.int64)
    tmp = np.empty(0 if dense else run * n, dtype=y.dtype)
    for r0 in range(0, npix, run):
        r1 = min(npix, r0 + run)
        for p in range(r0, r1):
            add = first[p] if use_first else bv
            sr = src[p * ld:p * ld + n]
            k = (p - r0) * n
            ac = acc[k:k + n]
            for o in range(n):
                ac[o] = np.int64(sr[o]) + add[o]
        m = (r1 - r0) * n
        if dense:
            _requant_row(acc[:m], prm_r, lo, hi, y[base + r0 * n:base + r0 * n + m])
            continue
        _requant_row(acc[:m], prm_r, lo, hi, tmp[:m])
        _put_pixels(y, tmp, p0 + r0, r1 - r0, n, ow_n, yrs, ypitch, ycoff + ch0)


@helper
def _put_pixels(y, src, q0, npix, n, ow_n, yrs, ypitch, coff):
    """Copy `npix` pixels of `n` channels, dense in `src`, into y from output pixel `q0` on
    (rows `yrs`, pixels `ypitch` apart, channels from `coff`)."""
    oh = q0 // ow_n
    ow = q0 - oh * ow_n
    for p in range(npix):
        at = oh * yrs + ow * ypitch + coff
        s0 = p * n
        for i in range(n):  # inline, unsigned indices: a few channels per pixel cost no call
            y[np.uint64(at + i)] = src[np.uint64(s0 + i)]
        ow += 1
        if ow == ow_n:
            ow = 0
            oh += 1


@helper
def _im2col(x, xrs, xpitch, cbase, ih_n, iw_n, colbuf, p0, npix, ow_n, klen,
            t0, t1, ncc, kw, sh, sw, dh, dw, pt, pl):
    """Rows ``p0..p0+npix`` of the im2col matrix for taps t0..t1 and ``ncc`` channels from
    input channel offset ``cbase`` into the flat `colbuf` (``npix * klen`` elements)."""
    contig = ncc == xpitch and dw == 1
    oh = p0 // ow_n
    ow = p0 - oh * ow_n - 1
    for p in range(npix):
        ow += 1
        if ow == ow_n:
            ow = 0
            oh += 1
        ihb = oh * sh - pt
        iwb = ow * sw - pl
        d = p * klen
        t = t0
        while t < t1:
            ky = t // kw
            kx = t - ky * kw
            nrow = min(kw - kx, t1 - t)
            ih = ihb + ky * dh
            if ih < 0 or ih >= ih_n:
                _zero(colbuf[d:d + nrow * ncc])
                d += nrow * ncc
            elif contig:
                iw0 = iwb + kx
                lead = min(nrow, max(0, -iw0))
                nin = max(0, min(nrow - lead, iw_n - (iw0 + lead)))
                if lead > 0:
                    _zero(colbuf[d:d + lead * ncc])
                d += lead * ncc
                src = ih * xrs + (iw0 + lead) * xpitch + cbase
                _cp(colbuf[d:d + nin * ncc], x[src:src + nin * ncc])
                d += nin * ncc
                tail = (nrow - lead - nin) * ncc
                if tail > 0:
                    _zero(colbuf[d:d + tail])
                d += tail
            else:
                rowb = ih * xrs + cbase
                for j in range(nrow):
                    iw = iwb + (kx + j) * dw
                    if iw < 0 or iw >= iw_n:
                        _zero(colbuf[d:d + ncc])
                    else:
                        src = rowb + iw * xpitch
                        _cp(colbuf[d:d + ncc], x[src:src + ncc])
                    d += ncc
            t += nrow


@helper
def _pad_compact(x, xrs, xpitch, cbase, ih_n, iw_n, ncc, pt, pl, h0, h1, wp, xp):
    """Channels ``cbase..cbase+ncc`` of the input, zero-padded (``pt`` rows / ``pl`` columns
    before), as a dense map ``xp[(h * wp + w) * ncc + c]`` of `wp` pixels a row: rows
    ``h0..h1`` of it (those a part of the output reads; the others are left as they are)."""
    rs = wp * ncc
    for h in range(h0, h1):
        ih = h - pt
        row = xp[h * rs:(h + 1) * rs]
        if ih < 0 or ih >= ih_n:
            _zero(row)
            continue
        w0 = min(max(pl, 0), wp)
        w1 = max(w0, min(wp, pl + iw_n))
        _zero(row[:w0 * ncc])
        _zero(row[w1 * ncc:])
        src = ih * xrs + cbase
        if ncc == xpitch:  # dense pixels (an RGB stem's input): the row is one run
            s0 = src + (w0 - pl) * ncc
            _cp(row[w0 * ncc:w1 * ncc], x[s0:s0 + (w1 - w0) * ncc])
            continue
        if ncc >= 16:
            for w in range(w0, w1):
                s0 = src + (w - pl) * xpitch
                _cp(row[w * ncc:(w + 1) * ncc], x[s0:s0 + ncc])
            continue
        # a few channels (an RGB stem): one loop over the row, unsigned indices (no
        # wraparound test) instead of a call per pixel
        xr = x[src + (w0 - pl) * xpitch:]
        dst = row[w0 * ncc:w1 * ncc]
        for j in range(w1 - w0):
            for c in range(ncc):
                dst[np.uint64(j * ncc + c)] = xr[np.uint64(j * xpitch + c)]


@helper
def _im2col_padded(xp, wp, colbuf, p0, npix, ow_n, ldc, t0, t1, ncc, kw, sh, sw, dh):
    """im2col rows from the padded dense map of `_pad_compact` (unit column dilation): a
    tap row is one contiguous run, no bounds checks. Rows are ``ldc`` apart; columns past
    the taps (K padding) are zeroed. The runs' offsets are worked out once and the pixel is
    stepped along its row (no divisions per pixel: they cost more than a stem's copies)."""
    rs = wp * ncc
    offs = np.empty(t1 - t0, dtype=np.int64)
    lens = np.empty(t1 - t0, dtype=np.int64)
    nr = 0
    t = t0
    while t < t1:
        ky = t // kw
        kx = t - ky * kw
        n = min(kw - kx, t1 - t)
        offs[nr] = ky * dh * rs + kx * ncc
        lens[nr] = n * ncc
        nr += 1
        t += n
    klen = (t1 - t0) * ncc
    oh = p0 // ow_n
    ow = p0 - oh * ow_n
    for p in range(npix):
        b = oh * sh * rs + ow * sw * ncc
        d = p * ldc
        for r in range(nr):
            n = lens[r]
            s0 = b + offs[r]
            if n >= 16:
                _cp(colbuf[d:d + n], xp[s0:s0 + n])
            else:  # a short run (a stem's 3 x 3 channels): no call, no wraparound test
                for i in range(n):
                    colbuf[np.uint64(d + i)] = xp[np.uint64(s0 + i)]
            d += n
        for i in range(p * ldc + klen, (p + 1) * ldc):
            colbuf[np.uint64(i)] = 0
        ow += 1
        if ow == ow_n:
            ow = 0
            oh += 1


@helper
def _rows_1x1(x, xrs, xpitch, cbase, colbuf, p0, npix, ow_n, ldc, ncc):
    """GEMM rows of a 1x1 convolution: pixel p's ``ncc`` channels from ``cbase``, rows ``ldc``
    apart (columns past ``ncc`` zeroed: K padding)."""
    oh = p0 // ow_n
    ow = p0 - oh * ow_n
    for p in range(npix):
        src = oh * xrs + ow * xpitch + cbase
        d = p * ldc
        _cp(colbuf[d:d + ncc], x[src:src + ncc])
        if ldc > ncc:
            _zero(colbuf[d + ncc:d + ldc])
        ow += 1
        if ow == ow_n:
            ow = 0
            oh += 1


@helper
def _grouped_1x1(x, xrs, xpitch, xcoff, wf, bias, mult, shift, mult_neg, shift_neg, lo, hi,
                 y, yrs, ypitch, ycoff, ow_n, npix_all, tile, groups, cin_g, cout_g, colbuf,
                 partbuf):
    """A grouped 1x1 convolution, pixel tile by tile: every group's GEMM into its columns of
    one wide tile, requantized across all the channels at once (a pixel's output channels
    are one run of the map, where group by group each would be a short one)."""
    cout = groups * cout_g
    wide = np.empty((tile, cout), dtype=wf.dtype)
    none = np.empty((0, cout), dtype=np.int64)
    for p0 in range(0, npix_all, tile):
        npix = min(tile, npix_all - p0)
        part = partbuf[:npix]
        rows = colbuf[:npix * cin_g].reshape((npix, cin_g))
        for g in range(groups):
            _rows_1x1(x, xrs, xpitch, xcoff + g * cin_g, colbuf, p0, npix, ow_n, cin_g, cin_g)
            np.dot(rows, wf[g], part)
            for p in range(npix):
                _cp(wide[p, g * cout_g:(g + 1) * cout_g], part[p])
        _requant_tile(wide.reshape(tile * cout), cout, none, bias, np.int64(0), p0, npix, ow_n,
                      cout, y, yrs, ypitch, ycoff, np.int64(0), mult, shift, mult_neg, shift_neg,
                      lo, hi)


@kernel
def conv_dense(x, xrs, xpitch, xcoff, ih_n, iw_n,
               wf, bias, mult, shift, mult_neg, shift_neg, lo, hi,
               y, yrs, ypitch, ycoff, oh_n, ow_n,
               kh, kw, sh, sw, dh, dw, pt, pl, groups, cin_g, cout_g, kc):
    """Dense / grouped convolution: im2col per pixel tile and K-chunk, exact float GEMM.

    `wf` is float32 (int8 operands, kc <= 1024) or float64 (int16 operands). Each chunk's
    float result is exact; chunks are summed in int64 (the first chunk plus the bias seeds
    the accumulator, the last one is added while requantizing).
    """
    npix_all = oh_n * ow_n
    taps = kh * kw
    full = cin_g <= kc
    if full:
        # balanced tap chunks: same number of chunks as greedy filling, none tiny
        tmax = kc // cin_g
        nt = (taps + tmax - 1) // tmax
        tpc = (taps + nt - 1) // nt
    else:
        tpc = 1
    nchunks_c = 1 if full else (cin_g + kc - 1) // kc
    nchunks = ((taps + tpc - 1) // tpc) * nchunks_c
    kmax = min(kc, tpc * cin_g)
    # pixel tile: large enough that BLAS amortises its packing of the weight panel, small
    # enough that the column buffer stays in L2
    tile = max(256, 32768 // max(kmax, 1))
    if tile > npix_all:
        tile = npix_all
    pointwise = (kh == 1 and kw == 1 and sh == 1 and sw == 1 and pt == 0 and pl == 0
                 and full and oh_n == ih_n and ow_n == iw_n)
    # 1x1 / stride 1 / unpadded over a dense map: the input tile is already the im2col matrix
    direct = (pointwise and groups == 1 and xcoff == 0 and xpitch == cin_g
              and xrs == iw_n * xpitch)
    # 1x1 over a channel window (a group, a concat slice): each pixel's run is one GEMM row;
    # grouped, all groups of a pixel tile are requantized together (`_grouped_1x1`)
    gather = pointwise and not direct
    grouped_1x1 = gather and groups > 1
    # narrow channel runs inside a wider pitch (e.g. an RGB input in a 32-channel buffer):
    # compact and zero-pad the group's input once so every tap row is one contiguous run
    padded = (not direct and not gather and full and dw == 1 and cin_g != xpitch)
    # single-chunk K not a multiple of 16 (e.g. 6*6*3 = 108): pad K with zero columns and
    # zero weight rows (exact) so the GEMM rows are vector aligned
    ktot = taps * cin_g
    padk = (padded or gather) and not grouped_1x1 and nchunks == 1 and ktot % 16 != 0
    kp = (ktot + 15) // 16 * 16 if padk else kmax
    wpad = np.zeros((kp if padk else 0, cout_g), dtype=wf.dtype)
    colbuf = np.empty(tile * kp, dtype=wf.dtype)
    partbuf = np.empty((tile, cout_g), dtype=wf.dtype)
    acc = np.empty((tile if nchunks > 1 else 0, cout_g), dtype=np.int64)
    hp = (oh_n - 1) * sh + (kh - 1) * dh + 1
    wp = (ow_n - 1) * sw + (kw - 1) * dw + 1
    xp = np.empty(hp * wp * cin_g if padded else 0, dtype=wf.dtype)
    if grouped_1x1:
        _grouped_1x1(x, xrs, xpitch, xcoff, wf, bias, mult, shift, mult_neg, shift_neg, lo, hi,
                     y, yrs, ypitch, ycoff, ow_n, npix_all, tile, groups, cin_g, cout_g,
                     colbuf, partbuf)
        return y
    for g in range(groups):
        wg = wf[g]
        cin0 = xcoff + g * cin_g
        boff = g * cout_g
        if padk:
            wpad[:ktot] = wg
        if padded:
            _pad_compact(x, xrs, xpitch, cin0, ih_n, iw_n, cin_g, pt, pl, np.int64(0), hp, wp, xp)
        for p0 in range(0, npix_all, tile):
            npix = min(tile, npix_all - p0)
            part = partbuf[:npix]
            ci = 0
            for t0 in range(0, taps, tpc):
                t1 = min(taps, t0 + tpc)
                for cc in range(nchunks_c):
                    c0 = cc * kc
                    c1 = cin_g if full else min(cin_g, c0 + kc)
                    ncc = c1 - c0
                    klen = (t1 - t0) * ncc
                    if direct:
                        s0 = p0 * cin_g
                        ntot = npix * cin_g
                        _cp(colbuf[:ntot], x[s0:s0 + ntot])
                    elif gather:
                        _rows_1x1(x, xrs, xpitch, cin0, colbuf, p0, npix, ow_n,
                                  kp if padk else klen, ncc)
                    elif padded:
                        _im2col_padded(xp, wp, colbuf, p0, npix, ow_n, kp if padk else klen,
                                       t0, t1, ncc, kw, sh, sw, dh)
                    else:
                        _im2col(x, xrs, xpitch, cin0 + c0, ih_n, iw_n, colbuf, p0, npix, ow_n,
                                klen, t0, t1, ncc, kw, sh, sw, dh, dw, pt, pl)
                    if padk:
                        np.dot(colbuf[:npix * kp].reshape((npix, kp)), wpad, part)
                    else:
                        r0 = t0 * cin_g if full else t0 * cin_g + c0
                        np.dot(colbuf[:npix * klen].reshape((npix, klen)),
                               wg[r0:r0 + klen], part)
                    if ci < nchunks - 1:
                        if ci == 0:
                            for p in range(npix):
                                for o in range(cout_g):
                                    acc[p, o] = bias[boff + o] + np.int64(part[p, o])
                        else:
                            for p in range(npix):
                                for o in range(cout_g):
                                    acc[p, o] += np.int64(part[p, o])
                    ci += 1
            _requant_tile(partbuf.reshape(tile * cout_g), cout_g, acc, bias, boff, p0, npix,
                          ow_n, cout_g, y, yrs, ypitch, ycoff, g * cout_g, mult, shift, mult_neg,
                          shift_neg, lo, hi)
    return y


@inline
def _dense_plan(x, xrs, xpitch, xcoff, ih_n, iw_n, oh_n, ow_n, kh, kw, sh, sw, dh, dw, pt, pl,
                groups, cin_g, cout_g, nr, p_lo, p_hi):
    """The geometry both dense convolutions share: K in int16 pairs (`k2`, rows `ldc` apart),
    the output width with panel padding, the pixel tile, how rows are gathered (a 1x1 reads
    them in place; narrow channel runs inside a wider pitch, or short tap rows (a stem), are
    compacted and padded once, so every tap row is one run with no bounds test) and that
    padded map, holding only the rows output pixels ``p_lo..p_hi`` read."""
    k2 = (kh * kw * cin_g + 1) // 2
    ldc = 2 * k2
    cout = groups * cout_g
    width = cout + nr
    tile = max(1, min(p_hi - p_lo, max(MR, 65536 // ldc)))
    tile_pad = (tile + MR - 1) // MR * MR
    pointwise = (kh == 1 and kw == 1 and sh == 1 and sw == 1 and pt == 0 and pl == 0
                 and oh_n == ih_n and ow_n == iw_n)
    padded = (not pointwise and dw == 1 and groups == 1
              and (cin_g != xpitch or kw * cin_g < 64))
    hp = (oh_n - 1) * sh + (kh - 1) * dh + 1
    wp = (ow_n - 1) * sw + (kw - 1) * dw + 1
    xp = np.empty(hp * wp * cin_g if padded else 0, dtype=np.int16)
    if padded:
        h0 = (p_lo // ow_n) * sh
        h1 = min(hp, ((p_hi - 1) // ow_n) * sh + (kh - 1) * dh + 1)
        _pad_compact(x, xrs, xpitch, xcoff, ih_n, iw_n, cin_g, pt, pl, h0, h1, wp, xp)
    return k2, ldc, cout, width, tile, tile_pad, pointwise, padded, wp, xp


@inline
def _dense_rows(x, xrs, xpitch, cin0, ih_n, iw_n, colbuf, p0, npix, ow_n, ldc, cin_g,
                kh, kw, sh, sw, dh, dw, pt, pl, pointwise, padded, xp, wp):
    """One group's im2col rows of pixels ``p0..p0+npix`` into `colbuf`, the way `_dense_plan`
    chose; rows `ldc` apart, an odd K leaves one column unwritten (its weights are 0)."""
    taps = kh * kw
    if pointwise:
        _rows_1x1(x, xrs, xpitch, cin0, colbuf, p0, npix, ow_n, ldc, cin_g)
    elif padded:
        _im2col_padded(xp, wp, colbuf, p0, npix, ow_n, ldc, np.int64(0), taps, cin_g, kw, sh, sw,
                       dh)
    else:
        _im2col(x, xrs, xpitch, cin0, ih_n, iw_n, colbuf, p0, npix, ow_n, ldc, np.int64(0), taps,
                cin_g, kw, sh, sw, dh, dw, pt, pl)


@kernel(nogil=True)
def conv_dense_int(x, xrs, xpitch, xcoff, ih_n, iw_n,
                   wq, nr, bias, mult, shift, mult_neg, shift_neg, lo, hi,
                   y, yrs, ypitch, ycoff, oh_n, ow_n,
                   kh, kw, sh, sw, dh, dw, pt, pl, groups, cin_g, cout_g, p_lo, p_hi):
    """Dense / grouped int8 convolution on the integer GEMM (`igemm`): im2col rows in int16,
    int32 accumulation, no float and no K-chunks (K <= `igemm.MAX_K`). `wq[g]` is group g's B
    in `igemm.pack_pairs` layout with panels `nr` wide. Every group of a pixel tile lands in one
    wide int32 tile (a later group overwrites the previous one's panel padding), requantized
    across all output channels at once. Output pixels ``p_lo..p_hi`` (row-major) only: the
    pool's part (`pool.Split`)."""
    k2, ldc, cout, width, tile, tile_pad, pointwise, padded, wp, xp = _dense_plan(
        x, xrs, xpitch, xcoff, ih_n, iw_n, oh_n, ow_n, kh, kw, sh, sw, dh, dw, pt, pl,
        groups, cin_g, cout_g, nr, p_lo, p_hi)
    colbuf = np.empty(tile_pad * ldc, dtype=np.int16)
    ctile = np.empty((tile_pad, width), dtype=np.int32)
    flat = ctile.reshape(tile_pad * width)
    none = np.empty((0, cout), dtype=np.int64)
    for p0 in range(p_lo, p_hi, tile):
        npix = min(tile, p_hi - p0)
        rows = (npix + MR - 1) // MR * MR
        for g in range(groups):
            _dense_rows(x, xrs, xpitch, xcoff + g * cin_g, ih_n, iw_n, colbuf, p0, npix,
                        ow_n, ldc, cin_g, kh, kw, sh, sw, dh, dw, pt, pl, pointwise, padded,
                        xp, wp)
            gemm_pairs(colbuf, ldc, rows, wq[g], k2, cout_g, nr, flat, g * cout_g, width)
        _requant_tile(flat, width, none, bias, np.int64(0), p0, npix, ow_n, cout, y, yrs, ypitch,
                      ycoff, np.int64(0), mult, shift, mult_neg, shift_neg, lo, hi)
    return y


@kernel(nogil=True)
def conv_dense_int16(x, xrs, xpitch, xcoff, ih_n, iw_n,
                     wqh, wql, nr, kc2, bias, mult, shift, mult_neg, shift_neg, lo, hi,
                     y, yrs, ypitch, ycoff, oh_n, ow_n,
                     kh, kw, sh, sw, dh, dw, pt, pl, groups, cin_g, cout_g, p_lo, p_hi):
    """Dense / grouped int16 convolution on the integer GEMM: as `conv_dense_int`, with the
    weights as two digit panels (`igemm.split_digits`; `wqh` of shape ``(G, 0)`` when every
    weight fits in a digit) and K in chunks of `kc2` pairs, each exact in int32, summed into an
    int64 tile (`igemm.gemm_pairs_wide`). Output pixels ``p_lo..p_hi`` only."""
    k2, ldc, cout, width, tile, tile_pad, pointwise, padded, wp, xp = _dense_plan(
        x, xrs, xpitch, xcoff, ih_n, iw_n, oh_n, ow_n, kh, kw, sh, sw, dh, dw, pt, pl,
        groups, cin_g, cout_g, nr, p_lo, p_hi)
    colbuf = np.empty(tile_pad * ldc, dtype=np.int16)
    ctile = np.empty((tile_pad, width), dtype=np.int64)
    flat = ctile.reshape(tile_pad * width)
    tmp = np.empty(2 * MR * nr, dtype=np.int32)
    none = np.empty((0, cout), dtype=np.int64)
    for p0 in range(p_lo, p_hi, tile):
        npix = min(tile, p_hi - p0)
        rows = (npix + MR - 1) // MR * MR
        for g in range(groups):
            _dense_rows(x, xrs, xpitch, xcoff + g * cin_g, ih_n, iw_n, colbuf, p0, npix,
                        ow_n, ldc, cin_g, kh, kw, sh, sw, dh, dw, pt, pl, pointwise, padded,
                        xp, wp)
            gemm_pairs_wide(colbuf, ldc, rows, wqh[g], wql[g], k2, kc2, cout_g, nr, tmp, flat,
                            g * cout_g, width)
        _requant_tile(flat, width, none, bias, np.int64(0), p0, npix, ow_n, cout, y, yrs, ypitch,
                      ycoff, np.int64(0), mult, shift, mult_neg, shift_neg, lo, hi)
    return y


@kernel(nogil=True)
def conv_dense_int8_bytes(x, xrs, xpitch, xcoff, ih_n, iw_n,
                          wq, nr, bias, mult, shift, mult_neg, shift_neg, lo, hi,
                          y, yrs, ypitch, ycoff, oh_n, ow_n,
                          kh, kw, sh, sw, dh, dw, pt, pl, groups, cin_g, cout_g, p_lo, p_hi):
    """Dense / grouped int8 convolution on the byte GEMM (`bgemm`, AVX-512 VNNI only): im2col
    rows in int8, K padded to quads, each activation read as ``x + 128`` by the GEMM (the
    ``-128 sum(w)`` this adds is in the bias: `bgemm.int8_weights`), int32 accumulation,
    ``K <= bgemm.MAX_K8``. Otherwise as `conv_dense_int`. Output pixels ``p_lo..p_hi``."""
    k2, ldc, cout, width, tile, tile_pad, pointwise, padded, wp, xp = _dense_plan(
        x, xrs, xpitch, xcoff, ih_n, iw_n, oh_n, ow_n, kh, kw, sh, sw, dh, dw, pt, pl,
        groups, cin_g, cout_g, nr, p_lo, p_hi)
    kp = (kh * kw * cin_g + 3) // 4 * 4
    colbuf = np.empty(tile_pad * kp, dtype=np.int8)
    ctile = np.empty((tile_pad, width), dtype=np.int32)
    flat = ctile.reshape(tile_pad * width)
    none = np.empty((0, cout), dtype=np.int64)
    for p0 in range(p_lo, p_hi, tile):
        npix = min(tile, p_hi - p0)
        rows = (npix + MR - 1) // MR * MR
        for g in range(groups):
            _dense_rows(x, xrs, xpitch, xcoff + g * cin_g, ih_n, iw_n, colbuf, p0, npix,
                        ow_n, kp, cin_g, kh, kw, sh, sw, dh, dw, pt, pl, pointwise, padded,
                        xp, wp)
            gemm_int8_bytes(colbuf, kp, rows, wq[g], kp // 4, cout_g, nr, flat, g * cout_g,
                            width)
        _requant_tile(flat, width, none, bias, np.int64(0), p0, npix, ow_n, cout, y, yrs, ypitch,
                      ycoff, np.int64(0), mult, shift, mult_neg, shift_neg, lo, hi)
    return y


@kernel(nogil=True)
def conv_dense_int16_bytes(x, xrs, xpitch, xcoff, ih_n, iw_n,
                           wq, bias, mult, shift, mult_neg, shift_neg, lo, hi,
                           y, yrs, ypitch, ycoff, oh_n, ow_n,
                           kh, kw, sh, sw, dh, dw, pt, pl, groups, cin_g, cout_g, p_lo, p_hi):
    """Dense / grouped int16 convolution on the byte GEMM (`bgemm`, AVX-512 VNNI only): each
    group's im2col rows in int16 as by `conv_dense_int16`, turned into byte planes, three byte
    GEMMs into an int64 tile. `wq[g]` and the bias come from `bgemm.int16_weights` (the bias
    already holds its weight-plane correction). K <= `bgemm.MAX_K`. Output pixels
    ``p_lo..p_hi`` only."""
    k2, ldc, cout, width, tile, tile_pad, pointwise, padded, wp, xp = _dense_plan(
        x, xrs, xpitch, xcoff, ih_n, iw_n, oh_n, ow_n, kh, kw, sh, sw, dh, dw, pt, pl,
        groups, cin_g, cout_g, BNR, p_lo, p_hi)
    k = kh * kw * cin_g
    kp = (k + 3) // 4 * 4
    colbuf = np.empty(tile_pad * ldc, dtype=np.int16)
    ab = np.empty(tile_pad * 2 * kp, dtype=np.uint8)
    rsum = np.empty(tile_pad, dtype=np.int64)
    ctile = np.empty((tile_pad, width), dtype=np.int64)
    flat = ctile.reshape(tile_pad * width)
    tmp = np.empty(3 * MR * BNR, dtype=np.int32)
    none = np.empty((0, cout), dtype=np.int64)
    for p0 in range(p_lo, p_hi, tile):
        npix = min(tile, p_hi - p0)
        rows = (npix + MR - 1) // MR * MR
        for g in range(groups):
            _dense_rows(x, xrs, xpitch, xcoff + g * cin_g, ih_n, iw_n, colbuf, p0, npix,
                        ow_n, ldc, cin_g, kh, kw, sh, sw, dh, dw, pt, pl, pointwise, padded,
                        xp, wp)
            byte_planes(colbuf, ldc, rows, k, kp, ab, rsum)
            gemm_int16_bytes(ab, kp, rows, wq[g], cout_g, tmp, flat, g * cout_g, width, rsum)
        _requant_tile(flat, width, none, bias, np.int64(0), p0, npix, ow_n, cout, y, yrs, ypitch,
                      ycoff, np.int64(0), mult, shift, mult_neg, shift_neg, lo, hi)
    return y


@kernel(nogil=True)
def conv_depthwise(x, xrs, xpitch, xcoff, ih_n, iw_n,
                   packed, cu, bias, mult, shift, mult_neg, shift_neg, lo, hi,
                   y, yrs, ypitch, ycoff, oh_n, ow_n, c_n,
                   kh, kw, sh, sw, dh, dw, pt, pl, acc_like, oh_lo, oh_hi):
    """Depthwise convolution (one channel per group), channel innermost.

    `packed` is the lane layout ``(NCB, KH, KW, CU)``. int8 operands accumulate the taps in
    int32 (|product| <= 2^14, so up to 2^16 taps are exact) and add the bias in int64 when
    requantizing: 32-bit lanes vectorise where 64-bit multiplies do not; int16 operands
    accumulate in int64, their weights held in int32 so that every product is a multiply of
    two sign-extended 32-bit lanes into 64 (``vpmuldq``, exact: |product| <= 2^30) instead of a
    full 64-bit multiply (`acc_like`'s dtype is the accumulator's: `depthwise_acc`). Output
    rows ``oh_lo..oh_hi`` only (the pool's part).
    """
    # one output row at a time: every tap adds its weight row times the input pixels it
    # reaches (the columns inside the input, found once per tap, so no per-pixel bounds
    # test). With unit column stride a tap's pixels are one run of the input row, multiplied
    # by the tap's weights repeated along the row: one long loop, whatever the channel count
    # (16 channels would leave a per-pixel loop one vector long). One kernel, not a driver
    # and a row helper: a helper is compiled on its own and again inside its caller (issue 30,
    # item 4).
    w2 = _dw_weights(packed, cu, kh * kw, c_n, np.empty(0, dtype=np.int32))
    # Where the input's pitch is wider than its channels (a 88-channel map in 96-channel
    # pixels) a unit-stride row is still one run: it takes the pitch's channels too, their
    # weights 0 (`cc` accumulators a pixel), when that costs at most twice the MACs and the
    # run stays inside x; only the layer's channels are requantized. (A staged form summing
    # two taps' int8 products in int16 measured 5-8% faster on MobileNetV3's layers for about
    # 3 s more of a cold start's compile: not kept.)
    last = xcoff + (ih_n - 1) * xrs + iw_n * xpitch  # the end of the last row's pitched run
    flat = sw == 1 and (xpitch == c_n or (xpitch <= 2 * c_n and last <= x.shape[0]))
    cc = xpitch if flat else c_n
    acc = np.empty((ow_n, cc), dtype=acc_like.dtype)
    # an output row is requantized in runs of pixels, parameters repeated: straight into y
    # where the row is dense, else into a scratch run copied out pixel by pixel
    dense_out = ypitch == c_n
    reps = max(1, min(ow_n, RQ_RUN // c_n))
    folded = _one_sided(mult, shift, mult_neg, shift_neg, np.int64(0), c_n)
    m32, cf, sf = _fold_params(mult, shift, bias, np.int64(0), np.int64(0),
                               c_n if folded else np.int64(0), reps)
    two = np.int64(0) if folded else c_n  # the two-sided form's parameters, else none
    prm = _tiled(_requant_params(mult, shift, mult_neg, shift_neg, np.int64(0), two), reps)
    brep = _tiled(bias[:two].reshape((1, two)), reps)[0]
    tmp = np.empty(reps * two, dtype=np.int64)
    ytmp = np.empty(0 if dense_out else reps * c_n, dtype=y.dtype)
    # a pitch-wide accumulator row, compacted to the layer's channels before requantizing
    # a pitch-wide accumulator row, compacted to the layer's channels before requantizing
    dense_acc = np.empty(ow_n * c_n if cc != c_n else 0, dtype=acc_like.dtype)
    wrep = np.zeros((kh * kw if flat else 0, ow_n * cc), dtype=w2.dtype)
    for t in range(wrep.shape[0]):
        for ow in range(ow_n):
            for c in range(c_n):
                wrep[t, ow * cc + c] = w2[t, c]
    accf = acc.reshape(ow_n * cc)
    for oh in range(oh_lo, oh_hi):
        _zero(accf)
        for ky in range(kh):
            ih = oh * sh - pt + ky * dh
            if ih < 0 or ih >= ih_n:
                continue
            rb = ih * xrs + xcoff
            if flat and kw == 3:
                _dw_row3(accf, x, rb, wrep, ky * 3, ow_n, cc, iw_n, dw, pl)
                continue
            for kx in range(kw):
                off = kx * dw - pl
                # 0 <= ow * sw + off <= iw_n - 1
                ow0 = 0 if off >= 0 else (-off + sw - 1) // sw
                ow1 = min(ow_n, (iw_n - 1 - off) // sw + 1) if iw_n - 1 - off >= 0 else 0
                if ow1 <= ow0:
                    continue
                if flat:
                    n = (ow1 - ow0) * cc
                    src = rb + (ow0 + off) * cc
                    _mac_run(accf[ow0 * cc:ow0 * cc + n], x[src:src + n],
                             wrep[ky * kw + kx, ow0 * cc:ow0 * cc + n])
                    continue
                _mac_pixels(acc, x, rb + off * xpitch, sw * xpitch, w2[ky * kw + kx], ow0,
                            ow1, c_n)
        if cc != c_n:
            for ow in range(ow_n):
                _cp(dense_acc[ow * c_n:(ow + 1) * c_n], accf[ow * cc:ow * cc + c_n])
            arow = dense_acc
        else:
            arow = accf
        for r0 in range(0, ow_n, reps):
            r1 = min(ow_n, r0 + reps)
            m = (r1 - r0) * c_n
            a0 = r0 * c_n
            av = arow[a0:a0 + m]
            out = y[oh * yrs + ycoff + a0:oh * yrs + ycoff + a0 + m] if dense_out else ytmp[:m]
            if folded:
                _requant_folded(av, m32, cf, sf, lo, hi, out)
            else:
                for i in range(m):
                    tmp[i] = np.int64(av[i]) + brep[i]
                _requant_row(tmp[:m], prm, lo, hi, out)
            if not dense_out:
                _put_pixels(y, ytmp, oh * ow_n + r0, r1 - r0, c_n, ow_n, yrs, ypitch, ycoff)
    return y


def depthwise_acc(itemsize: int, taps: int) -> np.ndarray:
    """The ``acc_like`` of `conv_depthwise`: int32 accumulators for int8 operands up to 2^16
    taps, int64 otherwise (chosen here, so each kernel type compiles one accumulator)."""
    return _ACC_I32 if itemsize == 1 and taps <= 65536 else _ACC_I64


_ACC_I32 = np.empty(0, np.int32)
_ACC_I64 = np.empty(0, np.int64)


@helper
def _dw_weights(packed, cu, taps, c_n, like):
    """Depthwise weights as ``(taps, C)`` in the accumulator's dtype (`like`)."""
    w2 = np.empty((taps, c_n), dtype=like.dtype)
    for c in range(c_n):
        cb = c // cu
        lane = c - cb * cu
        for t in range(taps):
            w2[t, c] = packed[(cb * taps + t) * cu + lane]
    return w2


@inline
def _dw_row3(accf, x, rb, wrep, t0, ow_n, c_n, iw_n, dw, pl):
    """The three taps of one kernel row of a depthwise layer with unit column stride over a
    dense map (`conv_depthwise`'s flat case): one pass over the output pixels all three taps
    reach, the accumulators read and written once instead of three times, then each tap alone
    over the pixels at the ends that only it reaches."""
    a = 0
    b = ow_n
    for k in range(3):  # the pixels every tap reaches: 0 <= ow + off < iw_n
        off = k * dw - pl
        a = max(a, -off)
        b = min(b, iw_n - off)
    if b > a:
        n = (b - a) * c_n
        s = a * c_n
        x0 = rb + (a - pl) * c_n
        x1 = x0 + dw * c_n
        x2 = x1 + dw * c_n
        _mac_run3(accf[s:s + n], x[x0:x0 + n], x[x1:x1 + n], x[x2:x2 + n],
                  wrep[t0, s:s + n], wrep[t0 + 1, s:s + n], wrep[t0 + 2, s:s + n])
    for k in range(3):
        off = k * dw - pl
        ak = max(0, -off)
        bk = max(ak, min(ow_n, iw_n - off))
        if b > a:  # the ends outside the common run
            for p, q in ((ak, min(bk, a)), (max(ak, b), bk)):
                if q > p:
                    n = (q - p) * c_n
                    src = rb + (p + off) * c_n
                    _mac_run(accf[p * c_n:p * c_n + n], x[src:src + n],
                             wrep[t0 + k, p * c_n:p * c_n + n])
        elif bk > ak:
            n = (bk - ak) * c_n
            src = rb + (ak + off) * c_n
            _mac_run(accf[ak * c_n:ak * c_n + n], x[src:src + n],
                     wrep[t0 + k, ak * c_n:ak * c_n + n])


@helper
def _mac_run3(acc, x0, x1, x2, w0, w1, w2):
    """``acc += x0 * w0 + x1 * w1 + x2 * w2`` elementwise (slices, so it vectorises)."""
    for c in range(acc.shape[0]):
        acc[c] += (np.int32(x0[c]) * w0[c] + np.int32(x1[c]) * w1[c]
                   + np.int32(x2[c]) * w2[c])


@helper
def _mac_run(acc, xs, ws):
    """``acc += xs * ws`` elementwise (slices: no index wraparound test, so it vectorises)."""
    for c in range(acc.shape[0]):
        acc[c] += np.int32(xs[c]) * ws[c]


@helper
def _mac_pixels(acc, x, base, step, wt, ow0, ow1, c_n):
    """``acc[ow] += x[base + ow * step:][:c_n] * wt`` for output pixels ow0..ow1 (a strided or
    pitched row: one pixel's channels per vector, unsigned indices, no slices made)."""
    for ow in range(ow0, ow1):
        s0 = base + ow * step
        for c in range(c_n):
            acc[ow, c] += x[np.uint64(s0 + c)] * wt[c]


_CONV_WORK = ("oh_n", "ow_n", "kh", "kw", "groups", "cin_g", "cout_g")
#: the integer convolutions split over output pixels, depthwise over output rows, on the
#: thread pool (`pool.Split`)
CONV_INT = Split(conv_dense_int, extent=("oh_n", "ow_n"), work=_CONV_WORK)
CONV_INT16 = Split(conv_dense_int16, extent=("oh_n", "ow_n"), work=_CONV_WORK)
CONV_INT8_BYTES = Split(conv_dense_int8_bytes, extent=("oh_n", "ow_n"), work=_CONV_WORK)
CONV_INT16_BYTES = Split(conv_dense_int16_bytes, extent=("oh_n", "ow_n"), work=_CONV_WORK)
CONV_DEPTHWISE = Split(conv_depthwise, extent=("oh_n",), work=("oh_n", "ow_n", "c_n", "kh", "kw"),
                       min_work=1 << 18)  # ~10x fewer MACs per second than the GEMMs

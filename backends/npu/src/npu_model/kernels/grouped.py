"""Grouped 1x1 int8 convolutions (ShuffleNet's pointwise layers) on the byte GEMM, every group
of a pixel tile from one gather.

`mpe.conv_dense_int8_bytes` runs a grouped layer group by group: each group's channel window
of every pixel gathered into rows of its own and turned unsigned (``x + 128``, `bgemm`), then
its GEMM. For a 1x1 layer the rows of all groups are the same pixels' channels side by side,
so here a pixel tile's channels are gathered (and flipped) once and each group's byte GEMM
reads its window of those rows in place: group g's K quads start at byte ``g * cin_g`` of a
row and run ``4 * ceil(cin_g / 4)`` bytes, past its own channels into the next group's (or the
row's padding), which meet the zero rows `bgemm.pack_quads` pads the weights with, so they
add nothing (the ``-128 sum(w)`` of `bgemm.int8_weights` is over the same zero-padded K). The
C tile is kept to ~32 KB, in L1 (a 56 x 56 layer's whole-map tile was 1.8 MB, written by the GEMM
and read back by the requantization from L2), and the requantization goes straight from the
tile into the output pixel by pixel: with one multiplier and shift for both signs (no
LeakyReLU, every layer the quantizer writes) folded as ``(acc * m + (bias * m + r)) >> s``,
the same int64 arithmetic as ``((acc + bias) * m + r) >> s``, modulo 2^64 alike; otherwise
both signs as `xir.quant.fixed_point.requantize_one`. The folded form runs eight channels per
512-bit pass (`_requant8`, LLVM vector IR: Numba vectorises loops 256 bits wide on this CPU's
tuning, and int64 lanes are what the requantization is made of). ShuffleNet's 32 grouped 1x1
layers: 2.74 -> 1.47 ms a forward on one core, the same bytes.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .bgemm import MAX_K8, MR, NR, _mk, _mk16
from .jit import helper, kernel
from .pool import Split

#: A stamp of `npu_model.kernels.bgemm`'s source, whose micro-kernel intrinsics (`_mk`,
#: `_mk16`) this file's kernels are compiled with. Numba's on-disk cache notices changes to
#: this file only (and `tests/test_kernel_stamps.py` tracks kernels, not intrinsics), so
#: `tests/backends/npu_model/test_kernels_grouped.py` fails when bgemm changes until the
#: stamp here is updated, and that edit makes Numba recompile these kernels.
BGEMM_STAMP = "c6797e1a3dcfdf8d"

#: bytes of the int32 C tile of one pixel tile (32 KB: 5-15% faster than 64 KB, about as 16 KB)
C_TILE_BYTES = 32768


def fits(kh: int, kw: int, sh: int, sw: int, pads: tuple[int, int, int, int], groups: int,
         in_hw: tuple[int, int], out_hw: tuple[int, int], cin_g: int) -> bool:
    """Whether a CONV takes `conv_grouped_1x1_int8`: a grouped (``groups > 1``) 1x1 layer of
    unit stride and no padding over int8 operands with ``cin_g <= bgemm.MAX_K8``."""
    return (kh == kw == sh == sw == 1 and not any(pads) and groups > 1
            and tuple(in_hw) == tuple(out_hw) and 1 <= cin_g <= MAX_K8)


@helper
def _gemm_window(a, aoff, lda, rows, bq, k4, n, nr, c, coff, ldc):
    """``C[:rows, coff:coff + n] = A[:rows, aoff:aoff + 4 k4] @ W`` (int32) for one group: A
    unsigned bytes already (no flip here), rows `lda` apart, W packed by `bgemm.int8_weights`
    with panels `nr` wide; whole micro tiles."""
    nb = (n + nr - 1) // nr
    for pb in range(nb):
        boff = pb * k4 * nr * 4
        for m0 in range(0, rows, MR):
            if nr == NR:
                _mk(a, m0 * lda + aoff, lda, bq, boff, c, m0 * ldc + coff + pb * nr, ldc, k4)
            else:
                _mk16(a, m0 * lda + aoff, lda, bq, boff, c, m0 * ldc + coff + pb * nr, ldc, k4)


@helper
def _one_sided(mult, shift, mult_neg, shift_neg, n):
    """Whether every channel requantizes alike for both signs (the same multiplier and
    effective shift) with a multiplier that fits int32."""
    for o in range(n):
        sp = shift[o] if shift[o] > 0 else 0
        sn = shift_neg[o] if shift_neg[o] > 0 else 0
        if mult[o] != mult_neg[o] or sp != sn or mult[o] < -(1 << 31) or mult[o] >= 1 << 31:
            return False
    return True


@helper
def _requant_folded(src, ld, p0, npix, ow_n, n, y, yrs, ypitch, ycoff, m32, cf, sf, lo, hi):
    """``y = clip((acc * m + c) >> s)`` for pixels p0.. (rows of `src` `ld` apart), each
    pixel's `n` channels one run of y."""
    lo64 = np.int64(lo)
    hi64 = np.int64(hi)
    oh = p0 // ow_n
    ow = p0 - oh * ow_n
    for p in range(npix):
        sr = src[p * ld:p * ld + n]
        at = oh * yrs + ow * ypitch + ycoff
        yv = y[at:at + n]
        for o in range(n):
            v = (np.int64(sr[o]) * np.int64(m32[o]) + cf[o]) >> sf[o]
            v = lo64 if v < lo64 else v
            v = hi64 if v > hi64 else v
            yv[o] = v
        ow += 1
        if ow == ow_n:
            ow = 0
            oh += 1


@intrinsic
def _requant8(typingctx, src, so, m32, cf, sf, mo, lo, hi, y, yo):
    """Eight channels of `_requant_folded` in one 512-bit pass: ``y[yo + i] = clip((src[so + i]
    * m32[mo + i] + cf[mo + i]) >> sf[mo + i], lo, hi)`` for i < 8, in int64 lanes (the
    same wrapping products and sums). Written as LLVM vector IR because Numba's loops are
    vectorised 256 bits wide on this CPU's tuning (a third slower on these int64 lanes)."""
    sig = types.void(src, so, m32, cf, sf, mo, lo, hi, y, yo)
    ybits = y.dtype.bitwidth

    def codegen(context, builder, sig, args):
        src_, so_, m_, cf_, sf_, mo_, lo_, hi_, y_, yo_ = args
        i32, i64 = ir.IntType(32), ir.IntType(64)
        v8i32, v8i64 = ir.VectorType(i32, 8), ir.VectorType(i64, 8)
        v8y = ir.VectorType(ir.IntType(ybits), 8)

        def at(k, arg, off, vt):
            arr = context.make_array(sig.args[k])(context, builder, arg)
            return builder.bitcast(builder.gep(arr.data, [off]), ir.PointerType(vt))

        def splat(v):
            one = builder.insert_element(ir.Constant(v8i64, ir.Undefined), v, ir.Constant(i32, 0))
            return builder.shuffle_vector(one, one, ir.Constant(v8i32, [0] * 8))

        a = builder.sext(builder.load(at(0, src_, so_, v8i32), align=1), v8i64)
        m = builder.sext(builder.load(at(2, m_, mo_, v8i32), align=1), v8i64)
        c = builder.load(at(3, cf_, mo_, v8i64), align=1)
        sh = builder.load(at(4, sf_, mo_, v8i64), align=1)
        v = builder.ashr(builder.add(builder.mul(a, m), c), sh)
        lov, hiv = splat(lo_), splat(hi_)
        v = builder.select(builder.icmp_signed("<", v, lov), lov, v)
        v = builder.select(builder.icmp_signed(">", v, hiv), hiv, v)
        builder.store(builder.trunc(v, v8y), at(8, y_, yo_, v8y), align=1)
        return context.get_dummy_value()

    return sig, codegen


@helper
def _requant_folded8(src, ld, p0, npix, ow_n, n, y, yrs, ypitch, ycoff, m32, cf, sf, lo, hi):
    """`_requant_folded` eight channels at a time (`_requant8`), the last ``n % 8`` one by
    one: 1.5x faster from 112 channels a pixel."""
    lo64 = np.int64(lo)
    hi64 = np.int64(hi)
    n8 = n // 8 * 8
    oh = p0 // ow_n
    ow = p0 - oh * ow_n
    for p in range(npix):
        so = p * ld
        at = oh * yrs + ow * ypitch + ycoff
        for o in range(0, n8, 8):
            _requant8(src, so + o, m32, cf, sf, o, lo64, hi64, y, at + o)
        for o in range(n8, n):
            v = (np.int64(src[so + o]) * np.int64(m32[o]) + cf[o]) >> sf[o]
            v = lo64 if v < lo64 else v
            v = hi64 if v > hi64 else v
            y[at + o] = v
        ow += 1
        if ow == ow_n:
            ow = 0
            oh += 1


@helper
def _requant_both(src, ld, bias, p0, npix, ow_n, n, y, yrs, ypitch, ycoff, prm, lo, hi):
    """`requantize_one` of ``acc + bias`` with the sign's own multiplier and shift (`prm`:
    rows mult, rounding, shift for ``a >= 0`` then for ``a < 0``)."""
    lo64 = np.int64(lo)
    hi64 = np.int64(hi)
    oh = p0 // ow_n
    ow = p0 - oh * ow_n
    for p in range(npix):
        sr = src[p * ld:p * ld + n]
        at = oh * yrs + ow * ypitch + ycoff
        yv = y[at:at + n]
        for o in range(n):
            a = np.int64(sr[o]) + bias[o]
            vp = (a * prm[0, o] + prm[1, o]) >> prm[2, o]
            vn = (a * prm[3, o] + prm[4, o]) >> prm[5, o]
            v = vn if a < 0 else vp
            v = lo64 if v < lo64 else v
            v = hi64 if v > hi64 else v
            yv[o] = v
        ow += 1
        if ow == ow_n:
            ow = 0
            oh += 1


@kernel(nogil=True)
def conv_grouped_1x1_int8(x, xrs, xpitch, xcoff, ih_n, iw_n,
                          wq, nr, bias, mult, shift, mult_neg, shift_neg, lo, hi,
                          y, yrs, ypitch, ycoff, oh_n, ow_n,
                          kh, kw, sh, sw, dh, dw, pt, pl, groups, cin_g, cout_g, p_lo, p_hi):
    """A grouped 1x1 int8 convolution (`fits`), the arguments of `mpe.conv_dense_int8_bytes`
    (`wq[g]` and the bias from `bgemm.int8_weights`), output pixels ``p_lo..p_hi`` only:
    per pixel tile one gather of every group's channels, turned unsigned, and each group's
    byte GEMM over its window of the rows (module docstring)."""
    cin = groups * cin_g
    cout = groups * cout_g
    k4 = (cin_g + 3) // 4
    lda = ((groups - 1) * cin_g + 4 * k4 + 15) // 16 * 16  # the last group's quads fit
    width = cout + nr  # a group's panel padding runs into the next group's columns
    tile = max(MR, min(p_hi - p_lo, C_TILE_BYTES // (4 * width) // MR * MR))
    tile_pad = (tile + MR - 1) // MR * MR
    rows_buf = np.empty(tile_pad * lda, dtype=np.int8)
    ctile = np.empty(tile_pad * width, dtype=np.int32)
    folded = _one_sided(mult, shift, mult_neg, shift_neg, cout)
    m32 = np.empty(cout if folded else 0, dtype=np.int32)
    cf = np.empty(cout if folded else 0, dtype=np.int64)
    sf = np.empty(cout if folded else 0, dtype=np.int64)
    prm = np.empty((6, 0 if folded else cout), dtype=np.int64)
    for o in range(cout):
        s = shift[o] if shift[o] > 0 else 0
        r = (np.int64(1) << np.int64(s - 1)) if s > 0 else np.int64(0)
        if folded:
            m32[o] = mult[o]
            cf[o] = bias[o] * mult[o] + r
            sf[o] = s
        else:
            sn = shift_neg[o] if shift_neg[o] > 0 else 0
            prm[0, o] = mult[o]
            prm[1, o] = r
            prm[2, o] = s
            prm[3, o] = mult_neg[o]
            prm[4, o] = (np.int64(1) << np.int64(sn - 1)) if sn > 0 else np.int64(0)
            prm[5, o] = sn
    for p0 in range(p_lo, p_hi, tile):
        npix = min(tile, p_hi - p0)
        rows = (npix + MR - 1) // MR * MR
        oh = p0 // ow_n
        ow = p0 - oh * ow_n
        for p in range(npix):  # every group's channels of the pixel, as x + 128
            src = oh * xrs + ow * xpitch + xcoff
            d = rows_buf[p * lda:p * lda + cin]
            s_ = x[src:src + cin]
            for i in range(cin):
                d[i] = s_[i] ^ -128
            ow += 1
            if ow == ow_n:
                ow = 0
                oh += 1
        for g in range(groups):
            _gemm_window(rows_buf, g * cin_g, lda, rows, wq[g], k4, cout_g, nr, ctile,
                         g * cout_g, width)
        if folded:
            _requant_folded8(ctile, width, p0, npix, ow_n, cout, y, yrs, ypitch, ycoff, m32, cf,
                             sf, lo, hi)
        else:
            _requant_both(ctile, width, bias, p0, npix, ow_n, cout, y, yrs, ypitch, ycoff, prm,
                          lo, hi)
    return y


#: on the thread pool over output pixels, as `mpe.CONV_INT8_BYTES`
CONV_G1X1_INT8 = Split(conv_grouped_1x1_int8, extent=("oh_n", "ow_n"),
                       work=("oh_n", "ow_n", "kh", "kw", "groups", "cin_g", "cout_g"))

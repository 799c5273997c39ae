"""One-group int8 convolutions on the byte GEMM without im2col ("implicit GEMM"), and int16 1x1
ones requantized from their tile (AVX-512 VNNI only).

`mpe.conv_dense_int8_bytes` copies every output pixel's taps into an im2col row before its byte
GEMM. Where the channels of an input pixel are few, that copy is most of the layer: yolov5s's
6x6 stem over 3 channels spent 22 of its 30 ms gathering 18-byte runs, the 2x2 convolution of
PP-OCRv4's ConvTranspose head (24 channels, 128x256) 2.2 of its 3.9 ms (one core's CPU time).

Here the input is compacted once, per layer, into a padded dense map ``xp`` of unsigned bytes:
pixel ``(h, w)`` of the padded input holds its ``cpad`` channels (``cin`` rounded up to a
quad) at ``(h * wp + w) * cpad``, each as ``x + 128`` (`bgemm.gemm_int8_bytes`' operand; the
``-128 sum(w)`` this adds is in the bias, `bgemm.int8_weights`), padding pixels and channels
as 128 (an x of 0). The rows of the GEMM of output row ``oh`` and kernel row ``ky`` are then
already in ``xp``: output pixel ``ow`` reads the ``kw * cpad`` bytes from pixel
``(oh * sh + ky * dh, ow * sw)`` on (unit column dilation: the taps of a kernel row are
neighbouring pixels), consecutive pixels ``sw * cpad`` bytes apart, which is the byte GEMM's
row stride. So each output row is ``kh`` byte GEMMs (``kh * kw`` with a column dilation, K of
``cpad`` each) reading ``xp`` in place, summed in the int32 micro tile (the first stores it,
the others load and add to it), then requantized. Exact: every product and partial sum is the
one of the im2col form, the int32 sum bounded as there (``K <= bgemm.MAX_K8``).

Weights (`row_weights`): dense ``[K, N]`` in ``(ky, kx, c)`` order with ``c`` padded to
``cpad`` by zero rows, packed in quads by `bgemm.pack_quads`; a kernel row (or tap) is a
contiguous range of a panel's quads.

Output pixels past the row (up to a multiple of `MR`) are computed from the padding columns
``xp`` holds for them and never read.

A 1x1 layer of unit stride without padding (`_pointwise`) has no taps to find in a map: its
pixels are the GEMM's rows in tiles across map rows, compacted and turned unsigned in one pass
(where `mpe.conv_dense_int8_bytes` copies them, then flips them in place), requantized from a
tile kept in L1. PP-OCRv4 detector's 1x1 layers 1.13 -> 0.89 ms, yolov5s-640's 21.5 -> 20 ms.

Every layer is requantized straight from the tile, pixel by pixel, into y: without LeakyReLU
the bias folded into the rounding term (`grouped._requant_folded`, the same int64 bits), with
it each sign its own multiplier and shift (`grouped._requant_both`).

int16 1x1 layers (`conv_pointwise_int16`, mixed precision's usual int16 layer) take the same
pixel tiles through `bgemm`'s byte-plane form (three byte GEMMs into int64) and the same
requantization from the tile.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .bgemm import MR, NR, NR16, byte_planes, gemm_int16_bytes, int8_weights, pack_quads
from .grouped import _one_sided, _requant_both, _requant_folded
from .jit import helper, inline, kernel
from .pool import Split

#: Numba kernels called from this file's kernels but defined in other files, with a stamp of
#: their source (tests/test_kernel_stamps.py; see `mpe.NUMBA_DEPENDS`)
NUMBA_DEPENDS = {"npu_model.kernels.bgemm.byte_planes": "c12b5a7aa4a50943",
                 "npu_model.kernels.bgemm.gemm_int16_bytes": "1ab1468d97ccde9c",
                 "npu_model.kernels.grouped._one_sided": "67095b1173abce66",
                 "npu_model.kernels.grouped._requant_both": "76a733feb2693ff4",
                 "npu_model.kernels.grouped._requant_folded": "e947f4a1b3685faf"}

#: products of a depthwise 1x1 layer requantized per call (`depthwise_1x1_int8`)
DW_RUN = 4096
#: a layer whose weights are more than this many bytes, and `WEIGHT_HEAVY` times its input's,
#: is cut over groups of its output channels as well as rows (`channel_groups`): about half
#: an L2 (2 MB a core on the Xeons this was measured on)
WEIGHT_BYTES = 1 << 20
WEIGHT_HEAVY = 4
#: bytes of the int32 results of the output rows a tile holds (several rows where they fit)
ROWS_TILE_BYTES = 131072
#: bytes of a 1x1 layer's int32 tile (`_pointwise`), as `grouped.C_TILE_BYTES`: kept in L1
C_TILE_BYTES = 32768


def _micro_kernel(nr: int):
    """An intrinsic ``mk(a, aoff, lda, b, boff, c, coff, ldc, k4n, add)``: the ``MR x nr``
    int32 tile ``C (+)= A[:, :4*k4n] @ B_panel`` (A unsigned bytes, rows `lda` apart; B signed
    bytes in `bgemm.pack_quads` layout) at ``c[coff + r * ldc + n]``; where `add` is not 0 the
    tile in C is the accumulators' start, else zero (`bgemm`'s micro kernel). One form for
    both, the tile read either way (an unused read of a few cache lines): half the inlined
    copies a fresh install compiles."""
    lanes = nr // 16

    @intrinsic
    def mk(typingctx, a, aoff, lda, b, boff, c, coff, ldc, k4n, add):
        sig = types.void(a, aoff, lda, b, boff, c, coff, ldc, k4n, add)

        def codegen(context, builder, sig, args):
            a_, aoff_, lda_, b_, boff_, c_, coff_, ldc_, k4n_, add_ = args
            i64, i32, i8 = ir.IntType(64), ir.IntType(32), ir.IntType(8)
            v64i8, v16i32 = ir.VectorType(i8, 64), ir.VectorType(i32, 16)
            mod = builder.module
            name = "llvm.x86.avx512.vpdpbusd.512"
            dp = mod.globals.get(name) or ir.Function(
                mod, ir.FunctionType(v16i32, [v16i32, v64i8, v64i8]), name)

            def data(k, arg, off):
                arr = context.make_array(sig.args[k])(context, builder, arg)
                return builder.gep(arr.data, [off])

            ad, bd, cd = data(0, a_, aoff_), data(3, b_, boff_), data(5, c_, coff_)
            rows = [builder.bitcast(builder.gep(ad, [builder.mul(lda_, ir.Constant(i64, r))]),
                                    ir.PointerType(i32)) for r in range(MR)]
            cptr = [[builder.bitcast(
                builder.gep(cd, [builder.add(builder.mul(ldc_, ir.Constant(i64, r)),
                                             ir.Constant(i64, 16 * j))]),
                ir.PointerType(v16i32)) for j in range(lanes)] for r in range(MR)]
            bvec = builder.bitcast(bd, ir.PointerType(v64i8))
            splat0 = ir.Constant(v16i32, [0] * 16)
            zero = ir.Constant(v16i32, None)
            keep = builder.icmp_signed("!=", add_, ir.Constant(i64, 0))
            init = [[builder.select(keep, builder.load(cptr[r][j], align=4), zero)
                     for j in range(lanes)] for r in range(MR)]
            entry = builder.block
            loop = builder.append_basic_block("igemm_k")
            done = builder.append_basic_block("igemm_done")
            builder.cbranch(builder.icmp_signed(">", k4n_, ir.Constant(i64, 0)), loop, done)

            builder.position_at_end(loop)
            k = builder.phi(i64)
            k.add_incoming(ir.Constant(i64, 0), entry)
            acc = [[builder.phi(v16i32) for _ in range(lanes)] for _ in range(MR)]
            for r in range(MR):
                for j in range(lanes):
                    acc[r][j].add_incoming(init[r][j], entry)
            kb = builder.mul(k, ir.Constant(i64, lanes))
            bs = [builder.load(builder.gep(bvec, [builder.add(kb, ir.Constant(i64, j))]),
                               align=1) for j in range(lanes)]
            new = []
            for r in range(MR):
                quad = builder.load(builder.gep(rows[r], [k]), align=1)
                av = builder.insert_element(ir.Constant(v16i32, ir.Undefined), quad,
                                            ir.Constant(i32, 0))
                av = builder.bitcast(builder.shuffle_vector(av, av, splat0), v64i8)
                new.append([builder.call(dp, [acc[r][j], av, bs[j]]) for j in range(lanes)])
            for r in range(MR):
                for j in range(lanes):
                    acc[r][j].add_incoming(new[r][j], loop)
            k1 = builder.add(k, ir.Constant(i64, 1))
            k.add_incoming(k1, loop)
            builder.cbranch(builder.icmp_signed("<", k1, k4n_), loop, done)

            builder.position_at_end(done)
            res = []
            for r in range(MR):
                for j in range(lanes):
                    p = builder.phi(v16i32)
                    p.add_incoming(init[r][j], entry)
                    p.add_incoming(new[r][j], loop)
                    res.append((r, j, p))
            for r, j, p in res:
                builder.store(p, cptr[r][j], align=4)
            return context.get_dummy_value()

        return sig, codegen

    return mk


_mk = _micro_kernel(NR)
_mk16 = _micro_kernel(NR16)


def channel_pad(cin_g: int) -> int:
    """Channels of a pixel in the compacted map: `cin_g` rounded up to a quad."""
    return -(-cin_g // 4) * 4


def row_weights(wf: np.ndarray, kh: int, kw: int, nr: int) -> tuple[np.ndarray, np.ndarray]:
    """int8 weights ``wf[1, kh * kw * cin, N]`` (``(ky, kx, c)`` order) -> (packed B with each
    tap's channels padded to `channel_pad` by zero rows, bias correction ``-128 sum(w)`` per
    output channel, as `bgemm.int8_weights`)."""
    g, k, n = wf.shape
    cin = k // (kh * kw)
    cpad = channel_pad(cin)
    w = np.zeros((g, kh * kw, cpad, n), dtype=np.int8)
    w[:, :, :cin] = wf.reshape(g, kh * kw, cin, n)
    _, corr = int8_weights(wf, nr)
    return pack_quads(w.reshape(g, kh * kw * cpad, n), nr), corr


@inline
def _compact(x, xrs, xpitch, xcoff, ih_n, iw_n, cin, cpad, pt, pl, h0, h1, wp, xp):
    """Rows ``h0..h1`` of the padded input as unsigned bytes ``x + 128`` (module docstring),
    row ``h`` at ``(h - h0) * wp * cpad``; padding pixels and channels 128."""
    rs = wp * cpad
    w0 = min(max(pl, 0), wp)
    w1 = max(w0, min(wp, pl + iw_n))
    for h in range(h0, h1):
        row = xp[(h - h0) * rs:(h - h0 + 1) * rs]
        ih = h - pt
        if ih < 0 or ih >= ih_n:
            for i in range(rs):
                row[i] = 128
            continue
        for i in range(w0 * cpad):
            row[i] = 128
        for i in range(w1 * cpad, rs):
            row[i] = 128
        src = ih * xrs + xcoff + (w0 - pl) * xpitch
        if cin == cpad and xpitch == cin:  # dense pixels: the row is one run
            n = (w1 - w0) * cin
            xs = x[src:src + n]
            ds = row[w0 * cin:w0 * cin + n]
            for i in range(n):
                ds[i] = np.uint8(np.int16(xs[i]) + 128)
            continue
        # pixel by pixel, unsigned indices and no slices (a slice per pixel costs more than a
        # stem's three channels)
        rb = (h - h0) * rs + w0 * cpad
        for w in range(w1 - w0):
            s0 = src + w * xpitch
            d0 = rb + w * cpad
            for c in range(cin):
                xp[np.uint64(d0 + c)] = np.uint8(np.int16(x[np.uint64(s0 + c)]) + 128)
            for c in range(cin, cpad):
                xp[np.uint64(d0 + c)] = 128


@helper
def _requant_params(bias, mult, shift, mult_neg, shift_neg, cout):
    """(folded, m32, cf, sf, prm): with one multiplier and shift for both signs (no
    LeakyReLU) the int32 multipliers, ``bias * m + rounding`` and shifts of
    `grouped._requant_folded`, else the rows (mult, rounding, shift) for ``a >= 0`` then for
    ``a < 0`` of `grouped._requant_both`."""
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
    return folded, m32, cf, sf, prm


@helper
def _requant_out(ctile, width, p0, npix, ow_n, cout, y, yrs, ypitch, ycoff, folded, m32, cf,
                 sf, bias, prm, lo, hi):
    """Output pixels ``p0..p0+npix`` from the int32 tile (rows `width` apart) into y: with the
    bias folded into the rounding term where one multiplier and shift serve both signs
    (`grouped._requant_folded`), else each sign its own (`grouped._requant_both`)."""
    if folded:
        _requant_folded(ctile, width, p0, npix, ow_n, cout, y, yrs, ypitch, ycoff, m32, cf, sf,
                        lo, hi)
    else:
        _requant_both(ctile, width, bias, p0, npix, ow_n, cout, y, yrs, ypitch, ycoff, prm,
                      lo, hi)


@inline
def _pointwise(x, xrs, xpitch, xcoff, wq, nr, y, yrs, ypitch, ycoff, ow_n, cin, cout, p_lo,
               p_hi, pb_lo, pb_hi, folded, m32, cf, sf, bias, prm, lo, hi):
    """A 1x1 convolution of unit stride without padding, output pixels ``p_lo..p_hi`` and the
    channels of panels ``pb_lo..pb_hi``: the pixels are the GEMM's rows whatever the map's
    rows, so they are taken in tiles of about `C_TILE_BYTES` of int32 results (no padding
    pixels at the end of each map row), each tile's channels compacted and turned unsigned
    in one pass, one byte GEMM per panel, requantized from the tile (the requantization's
    parameters those of the panels' channels, `_requant_params`)."""
    cpad = (cin + 3) // 4 * 4
    c0 = pb_lo * nr
    nc = min(pb_hi * nr, cout) - c0
    width = nc + nr
    k4 = cpad // 4
    tile = max(MR, min(p_hi - p_lo, C_TILE_BYTES // (4 * width)) // MR * MR)
    if tile < 64:  # wide outputs: a bigger tile, each weight panel streamed for more pixels
        tile = max(MR, min(p_hi - p_lo, ROWS_TILE_BYTES // (4 * width)) // MR * MR)
    xp = np.empty(tile * cpad, dtype=np.uint8)
    ctile = np.empty(tile * width, dtype=np.int32)
    for p0 in range(p_lo, p_hi, tile):
        npix = min(tile, p_hi - p0)
        oh = p0 // ow_n
        ow = p0 - oh * ow_n
        for p in range(npix):
            s0 = oh * xrs + ow * xpitch + xcoff
            d0 = p * cpad
            for c in range(cin):
                xp[np.uint64(d0 + c)] = np.uint8(np.int16(x[np.uint64(s0 + c)]) + 128)
            for c in range(cin, cpad):
                xp[np.uint64(d0 + c)] = 128
            ow += 1
            if ow == ow_n:
                ow = 0
                oh += 1
        rows = (npix + MR - 1) // MR * MR
        for pb in range(pb_lo, pb_hi):
            bo = pb * k4 * nr * 4
            cb = (pb - pb_lo) * nr
            for m0 in range(0, rows, MR):
                if nr == NR:
                    _mk(xp, m0 * cpad, cpad, wq, bo, ctile, m0 * width + cb, width, k4, 0)
                else:
                    _mk16(xp, m0 * cpad, cpad, wq, bo, ctile, m0 * width + cb, width, k4, 0)
        _requant_out(ctile, width, p0, npix, ow_n, nc, y, yrs, ypitch, ycoff + c0, folded, m32,
                     cf, sf, bias, prm, lo, hi)


@helper
def channel_groups(ih_n, iw_n, oh_n, kh, kw, cin, cout, nr):
    """How many groups of output channels `conv_implicit_int8`'s range runs over: one panel
    each (``ceil(cout / nr)``) where the layer's weights outgrow `WEIGHT_BYTES` and its input
    `WEIGHT_HEAVY` times over, else 1 (output rows only). A part of output rows streams every
    weight of the layer, from L3 once they outgrow a core's L2 (again for each part: resnet50's
    7x7 3x3 512 -> 512, 2.4 MB, cut in 8 row parts took 1.48x its whole time on one core,
    in 8 channel parts 1.03x); a part of channels reads and compacts the whole input but only
    its own panels' weights. Weights a core's L2 holds stay rows: there the parts' weights
    come from L2, and compacting the input again costs more (14x14 3x3 256 -> 256: 1.24x in
    channel parts, 1.06x in row parts). Also called as Python (``py_func``) by the `Split`
    that sizes the range."""
    if oh_n < 2:
        return 1
    weights = kh * kw * ((cin + 3) // 4 * 4) * cout
    if weights <= WEIGHT_BYTES or weights <= WEIGHT_HEAVY * ih_n * iw_n * cin:
        return 1
    return (cout + nr - 1) // nr


@kernel(nogil=True)
def conv_implicit_int8(x, xrs, xpitch, xcoff, ih_n, iw_n,
                       wq, nr, bias, mult, shift, mult_neg, shift_neg, lo, hi,
                       y, yrs, ypitch, ycoff, oh_n, ow_n,
                       kh, kw, sh, sw, dh, dw, pt, pl, cin, cout, u_lo, u_hi):
    """Dense int8 convolution (one group) by the implicit byte GEMM of the module docstring:
    `wq` from `row_weights` with panels `nr` wide, the bias holding its correction. Its range
    is ``channel_groups(...) * oh_n`` units, unit ``g * oh_n + oh`` output row ``oh`` of
    channel group ``g`` (group g: panels ``nb g / cg`` to ``nb (g + 1) / cg``); units
    ``u_lo..u_hi`` only (the pool's part, `pool.Split`), the whole groups among them in one
    pass over their panels (one group, the usual case: output rows ``u_lo..u_hi``). A 1x1
    layer of unit stride without padding takes its pixels as GEMM rows across map rows
    (`_pointwise`)."""
    if u_hi <= u_lo:
        return y
    cg = channel_groups(ih_n, iw_n, oh_n, kh, kw, cin, cout, nr)
    nb = (cout + nr - 1) // nr
    u = u_lo
    while u < u_hi:
        g = u // oh_n
        oh_lo = u - g * oh_n
        if oh_lo == 0 and u_hi >= (g + 1) * oh_n:  # whole groups g..g1-1: one pass
            g1 = u_hi // oh_n
            oh_hi = oh_n
        else:
            g1 = g + 1
            oh_hi = min(oh_n, u_hi - g * oh_n)
        u = (g1 - 1) * oh_n + oh_hi
        pb_lo = nb * g // cg
        pb_hi = nb * g1 // cg
        c0 = pb_lo * nr
        c1 = min(pb_hi * nr, cout)
        folded, m32, cf, sf, prm = _requant_params(bias[c0:c1], mult[c0:c1], shift[c0:c1],
                                                   mult_neg[c0:c1], shift_neg[c0:c1], c1 - c0)
        bq = bias[c0:c1]
        if (kh == 1 and kw == 1 and sh == 1 and sw == 1 and pt == 0 and pl == 0
                and oh_n == ih_n and ow_n == iw_n):
            _pointwise(x, xrs, xpitch, xcoff, wq, nr, y, yrs, ypitch, ycoff, ow_n, cin, cout,
                       oh_lo * ow_n, oh_hi * ow_n, pb_lo, pb_hi, folded, m32, cf, sf, bq, prm,
                       lo, hi)
            continue
        nc = c1 - c0
        cpad = (cin + 3) // 4 * 4
        ow_pad = (ow_n + MR - 1) // MR * MR
        wp = (ow_pad - 1) * sw + (kw - 1) * dw + 1
        h0 = oh_lo * sh
        h1 = (oh_hi - 1) * sh + (kh - 1) * dh + 1
        xp = np.empty((h1 - h0) * wp * cpad, dtype=np.uint8)
        _compact(x, xrs, xpitch, xcoff, ih_n, iw_n, cin, cpad, pt, pl, h0, h1, wp, xp)
        width = nc + nr
        k4 = kh * kw * cpad // 4
        # a kernel row is one run of quads where the columns are not dilated, else a tap is
        nseg = kh if dw == 1 else kh * kw
        seg4 = k4 // nseg
        rs = wp * cpad
        lda = sw * cpad
        # whole output rows per tile, as many as `ROWS_TILE_BYTES` of int32 results hold,
        # each panel's weights used for every row of the tile before the next panel's (a
        # small map's weights can outgrow L2: 3x3 512 -> 512 is 2.4 MB)
        rpt = max(1, min(oh_hi - oh_lo, ROWS_TILE_BYTES // (4 * ow_pad * width)))
        ctile = np.empty(rpt * ow_pad * width, dtype=np.int32)
        for r0 in range(oh_lo, oh_hi, rpt):
            r1 = min(oh_hi, r0 + rpt)
            for pb in range(pb_lo, pb_hi):
                bp = pb * k4 * nr * 4
                for oh in range(r0, r1):
                    rb = (oh * sh - h0) * rs
                    cb = (oh - r0) * ow_pad * width + (pb - pb_lo) * nr
                    for m0 in range(0, ow_pad, MR):
                        ab = rb + m0 * lda
                        co = cb + m0 * width
                        for s in range(nseg):
                            if dw == 1:
                                ao = ab + s * dh * rs
                            else:
                                ky = s // kw
                                ao = ab + ky * dh * rs + (s - ky * kw) * dw * cpad
                            bo = bp + s * seg4 * nr * 4
                            if nr == NR:
                                _mk(xp, ao, lda, wq, bo, ctile, co, width, seg4, s)
                            else:
                                _mk16(xp, ao, lda, wq, bo, ctile, co, width, seg4, s)
            if ow_pad == ow_n:  # the tile's rows are one run of pixels
                _requant_out(ctile, width, r0 * ow_n, (r1 - r0) * ow_n, ow_n, nc, y, yrs,
                             ypitch, ycoff + c0, folded, m32, cf, sf, bq, prm, lo, hi)
                continue
            for oh in range(r0, r1):
                _requant_out(ctile[(oh - r0) * ow_pad * width:], width, oh * ow_n, ow_n, ow_n,
                             nc, y, yrs, ypitch, ycoff + c0, folded, m32, cf, sf, bq, prm, lo,
                             hi)
    return y


@kernel(nogil=True)
def conv_pointwise_int16(x, xrs, xpitch, xcoff, wq, bias, mult, shift, mult_neg, shift_neg, lo,
                         hi, y, yrs, ypitch, ycoff, oh_n, ow_n, cin, cout, oh_lo, oh_hi):
    """An int16 1x1 convolution of unit stride without padding (one group) on the byte GEMM's
    int16 form (`bgemm.byte_planes`, `bgemm.gemm_int16_bytes`; `wq` and the bias's
    correction from `bgemm.int16_weights` with panels `bgemm.NR` wide): pixels across map
    rows in tiles, each tile's int64 results requantized straight into y (`_requant_out`:
    where `mpe.conv_dense_int16_bytes` goes through `mpe._requant_tile`'s gather, 3.4 ns a
    value on PP-OCRv4 detector's 64x128 16 -> 32 layer, against 0.7 here). Output rows
    ``oh_lo..oh_hi`` only."""
    if oh_hi <= oh_lo:
        return y
    folded, m32, cf, sf, prm = _requant_params(bias, mult, shift, mult_neg, shift_neg, cout)
    kp = (cin + 3) // 4 * 4
    ldc = 2 * ((cin + 1) // 2)
    width = cout + NR
    p_lo = oh_lo * ow_n
    p_hi = oh_hi * ow_n
    tile = max(MR, min(p_hi - p_lo, ROWS_TILE_BYTES // (8 * width)) // MR * MR)
    colbuf = np.zeros(tile * ldc, dtype=np.int16)
    ab = np.empty(tile * 2 * kp, dtype=np.uint8)
    rsum = np.empty(tile, dtype=np.int64)
    ctile = np.empty(tile * width, dtype=np.int64)
    tmp = np.empty(3 * MR * NR, dtype=np.int32)
    for p0 in range(p_lo, p_hi, tile):
        npix = min(tile, p_hi - p0)
        oh = p0 // ow_n
        ow = p0 - oh * ow_n
        for p in range(npix):
            s0 = oh * xrs + ow * xpitch + xcoff
            d0 = p * ldc
            for c in range(cin):
                colbuf[np.uint64(d0 + c)] = x[np.uint64(s0 + c)]
            ow += 1
            if ow == ow_n:
                ow = 0
                oh += 1
        rows = (npix + MR - 1) // MR * MR
        byte_planes(colbuf, ldc, rows, cin, kp, ab, rsum)
        gemm_int16_bytes(ab, kp, rows, wq, cout, tmp, ctile, np.int64(0), width, rsum)
        _requant_out(ctile, width, p0, npix, ow_n, cout, y, yrs, ypitch, ycoff, folded, m32, cf,
                     sf, bias, prm, lo, hi)
    return y


@kernel(nogil=True)
def depthwise_1x1_int8(x, xrs, xpitch, xcoff, packed, bias, mult, shift, mult_neg, shift_neg,
                       lo, hi, y, yrs, ypitch, ycoff, oh_n, ow_n, c_n, oh_lo, oh_hi):
    """An int8 depthwise 1x1 convolution of unit stride without padding (a per-channel scale:
    PP-OCRv4 detector has 30 of them): each pixel's channels times their weights (`packed` in
    the depthwise lane layout, one tap: channel c at c) in int32, runs of pixels requantized
    from that tile (`_requant_out`), no tap loop. Output rows ``oh_lo..oh_hi`` only."""
    if oh_hi <= oh_lo:
        return y
    folded, m32, cf, sf, prm = _requant_params(bias, mult, shift, mult_neg, shift_neg, c_n)
    w = np.empty(c_n, dtype=np.int32)
    for c in range(c_n):
        w[c] = packed[c]
    run = max(1, min(ow_n, DW_RUN // c_n))
    acc = np.empty(run * c_n, dtype=np.int32)
    for oh in range(oh_lo, oh_hi):
        for ow0 in range(0, ow_n, run):
            n = min(run, ow_n - ow0)
            for p in range(n):
                s0 = oh * xrs + (ow0 + p) * xpitch + xcoff
                d0 = p * c_n
                for c in range(c_n):
                    acc[np.uint64(d0 + c)] = np.int32(x[np.uint64(s0 + c)]) * w[c]
            _requant_out(acc, c_n, oh * ow_n + ow0, n, ow_n, c_n, y, yrs, ypitch, ycoff, folded,
                         m32, cf, sf, bias, prm, lo, hi)
    return y


#: split over output rows, and over channel groups where weights outweigh the input
#: (`channel_groups`), on the thread pool
CONV_IMPLICIT = Split(conv_implicit_int8, extent=("oh_n",),
                      work=("oh_n", "ow_n", "kh", "kw", "cin", "cout"),
                      groups=(getattr(channel_groups, "py_func", channel_groups),
                              ("ih_n", "iw_n", "oh_n", "kh", "kw", "cin", "cout", "nr")))
CONV_POINTWISE_INT16 = Split(conv_pointwise_int16, extent=("oh_n",),
                             work=("oh_n", "ow_n", "cin", "cout"))
DEPTHWISE_1X1 = Split(depthwise_1x1_int8, extent=("oh_n",), work=("oh_n", "ow_n", "c_n"),
                      min_work=1 << 18)

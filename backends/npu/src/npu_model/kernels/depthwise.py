"""int8 and int16 depthwise convolutions on pairs of taps (AVX-512 VNNI ``vpdpwssd``).

`mpe.conv_depthwise` adds one tap at a time to a row of int32 accumulators: a load, a
multiply (``vpmulld``, two micro-ops), an add and a store per 16 products, the accumulators
going through memory once per tap (25 times for a 5x5 layer). ``vpdpwssd`` multiplies 32 pairs
of int16 and adds each pair's two products to one of 16 int32 lanes in one instruction. A
depthwise layer has no channel sum to use it on, but each output lane sums over taps: two taps
of one channel, side by side in one 32-bit word, are one lane's pair. So:

* each input row needed is turned once into a row of tap pairs (`_pair_row`): column ``w``
  holds, for every channel ``c``, ``x[ih, w - pl + dw, c] << 16 | x[ih, w - pl, c] & 0xFFFF``
  (the input one column and its neighbour a column dilation on; zero outside the input, which
  is the padding adding nothing), channels padded to a multiple of 16 lanes. Pairs are
  ``(kx, kx + 1)`` of one kernel row (an odd row's last tap pairs with a zero weight). Rows
  live in a ring of ``(kh - 1) dh + 1`` rows: an output row after the first builds only the
  input rows it adds (``sh`` of them);
* the weights are pairs the same way (`pair_weights`, made once when the run is decoded, as
  the GEMMs' unpacked weights are: a replay runs only while the weight bytes it was decoded
  from are unchanged), ``(kh * npr, cp)`` int32 words;
* an output row is tiles of `NPX` output pixels by 16 channels (`_tile`): NPX accumulators in
  registers, one ``vpdpwssd`` per pixel per pair of taps over the kernel rows inside the
  input (rows of padding are skipped, not multiplied), stored once into a row of int32 sums;
* an int8 layer with one multiplier and shift for both signs (no LeakyReLU) requantizes each
  tile in registers as it is made (`_tile_rq`: the bias folded into the rounding term, int64
  lanes, the channels inside the layer stored by a masked store: 5-10% a layer); otherwise the
  row of sums is requantized pixel by pixel straight into y (folded, eight channels a pass,
  `grouped._requant8`; or both signs, `mpe._requant_row`).

int16 layers (mixed precision's raised depthwise layers) go the same way over two byte planes
of the input: ``x = 256 xh + xl`` with ``xl = x & 0xFF`` (0..255) and ``xh = x >> 8``
(-128..127), each plane its own ring and int32 sums against the int16 weights, joined as
``256 hi + lo`` in int64 before the requantization.

Exact: every product ``x * w`` of int8 operands is the int16 x int16 product of their sign
extensions, at most 2^14 in magnitude; lanes past the layer's channels multiply zero weights
(whatever their input words hold, their products are 0 and they are never requantized); with
at most 2^16 taps (`fits`) every int32 sum is exact, as `mpe.conv_depthwise`'s int32 sums are.
An int16 plane's products are below 2^23 in magnitude (32768 x 255), so up to 255 taps its
int32 sums are exact, and ``256 hi + lo`` in int64 is the layer's sum. Requantization is
`xir.quant.fixed_point.requantize_one`'s int64 arithmetic, as in `mpe`.

Measured, each layer called alone (one core's CPU time, load 8-12), against
`mpe.conv_depthwise`: ch_ppocr_mobile_v2.0_cls's 11 layers (3x3 and 5x5 at strides 1 and
(2, 1), 8-200 channels) 505 -> 239 us, mobilenetv3-small's 8 (3x3 and 5x5, 16-576 channels)
686 -> 387 us, shufflenet's 16 (3x3, 112-544 channels) 1138 -> 776 us; bit for bit.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .grouped import _requant8
from .jit import helper, kernel, twin_of
from .mpe import _one_sided, _requant_params, _requant_row
from .pool import Split
from .twins import conv_depthwise as _twin_depthwise

#: Numba kernels called from this file's kernels but defined in other files, with a stamp of
#: their source (tests/test_kernel_stamps.py; see `mpe.NUMBA_DEPENDS`)
NUMBA_DEPENDS = {"npu_model.kernels.mpe._one_sided": "56b075a4f250a316",
                 "npu_model.kernels.mpe._requant_params": "efdd6de0f8145fc6",
                 "npu_model.kernels.mpe._requant_row": "bc485680313969ae"}

#: A stamp of the source of `grouped._requant8`, an intrinsic the kernel here is compiled with
#: (see `mpe.REQUANT8_STAMP`: tests/backends/npu_model/test_kernels_depthwise_pairs.py fails
#: when it changes until this is updated, and that edit makes Numba recompile this file)
REQUANT8_STAMP = "044ba5d30fa31e23"

#: output pixels a tile accumulates at once: as many independent ``vpdpwssd`` chains (a
#: chain waits ~5 cycles for its last result; 8 keep the unit busy)
NPX = 8
#: int32 lanes of a 512-bit vector: channels a tile holds
LANES = 16
#: taps up to which int32 sums of int8 products are exact (|product| <= 2^14)
MAX_TAPS = 1 << 16
#: taps up to which an int16 layer's byte planes sum exactly in int32 (|w * low byte| < 2^23)
MAX_TAPS16 = 255
#: taps from which an int16 layer is faster here, over two planes, than on
#: `mpe.conv_depthwise`: its 3x3 layers run fused three-tap rows there (measured at 64x128x16
#: 262 us there, 284 here; a 5x5 at 3x96x32 59 us there, 33 here)
MIN_TAPS16 = 10


def fits(dtype: str, taps: int) -> bool:
    """Whether a depthwise layer of operand type `dtype` and `taps` taps takes
    `conv_depthwise_pairs` (on CPUs with the byte GEMM's VNNI: the caller checks
    `bgemm.enabled`)."""
    if dtype == "int16":
        return MIN_TAPS16 <= taps <= MAX_TAPS16
    return dtype == "int8" and taps <= MAX_TAPS


def _tile_kernel(requant: bool):
    """`_tile`, or with `requant` `_tile_rq`: the same sums, requantized in registers."""

    def typer(typingctx, ring, base, pstride, offs, o0, npairs, wq, wo, wstride, acc, ao,
              astride, m32, cf, sf, co, lo, hi, npix, nlanes):
        sig = types.void(ring, base, pstride, offs, o0, npairs, wq, wo, wstride, acc, ao,
                         astride, m32, cf, sf, co, lo, hi, npix, nlanes)
        ybits = acc.dtype.bitwidth

        def codegen(context, builder, sig, args):
            (ring_, base_, ps_, offs_, o0_, np_, wq_, wo_, ws_, acc_, ao_, as_, m_, cf_, sf_,
             co_, lo_, hi_, npix_, nl_) = args
            i64, i32, i16 = ir.IntType(64), ir.IntType(32), ir.IntType(16)
            v16i32, v32i16 = ir.VectorType(i32, LANES), ir.VectorType(i16, 2 * LANES)
            mod = builder.module
            name = "llvm.x86.avx512.vpdpwssd.512"
            dp = mod.globals.get(name) or ir.Function(
                mod, ir.FunctionType(v16i32, [v16i32, v32i16, v32i16]), name)

            def data(k, arg):
                return context.make_array(sig.args[k])(context, builder, arg).data

            rd, od, wd, ad = data(0, ring_), data(3, offs_), data(6, wq_), data(9, acc_)
            zero = ir.Constant(v16i32, None)
            entry = builder.block
            loop = builder.append_basic_block("dw_pairs")
            done = builder.append_basic_block("dw_done")
            builder.cbranch(builder.icmp_signed(">", np_, ir.Constant(i64, 0)), loop, done)

            builder.position_at_end(loop)
            p = builder.phi(i64)
            p.add_incoming(ir.Constant(i64, 0), entry)
            accs = [builder.phi(v16i32) for _ in range(NPX)]
            for a in accs:
                a.add_incoming(zero, entry)
            wptr = builder.gep(wd, [builder.add(wo_, builder.mul(p, ws_))])
            w = builder.bitcast(builder.load(builder.bitcast(wptr, ir.PointerType(v16i32)),
                                             align=4), v32i16)
            b0 = builder.add(base_, builder.load(builder.gep(od, [builder.add(o0_, p)])))
            new = []
            for j in range(NPX):
                xo = builder.add(b0, builder.mul(ps_, ir.Constant(i64, j)))
                xv = builder.load(builder.bitcast(builder.gep(rd, [xo]),
                                                  ir.PointerType(v16i32)), align=4)
                new.append(builder.call(dp, [accs[j], builder.bitcast(xv, v32i16), w]))
            for a, v in zip(accs, new):
                a.add_incoming(v, loop)
            p1 = builder.add(p, ir.Constant(i64, 1))
            p.add_incoming(p1, loop)
            builder.cbranch(builder.icmp_signed("<", p1, np_), loop, done)

            builder.position_at_end(done)
            res = []
            for j in range(NPX):
                r = builder.phi(v16i32)
                r.add_incoming(zero, entry)
                r.add_incoming(new[j], loop)
                res.append(r)
            if not requant:
                for j, r in enumerate(res):
                    at = builder.add(ao_, builder.mul(as_, ir.Constant(i64, j)))
                    builder.store(r, builder.bitcast(builder.gep(ad, [at]),
                                                     ir.PointerType(v16i32)), align=4)
                return context.get_dummy_value()
            # requantize each pixel's 16 sums in int64 lanes (`grouped._requant8`'s
            # arithmetic, eight a half), store the lanes inside the layer's channels
            v8i64 = ir.VectorType(i64, 8)
            vy8 = ir.VectorType(ir.IntType(ybits), 8)
            vy16 = ir.VectorType(ir.IntType(ybits), LANES)
            v16i1 = ir.VectorType(ir.IntType(1), LANES)
            md, cd, sd = data(12, m_), data(13, cf_), data(14, sf_)
            halves = [ir.Constant(ir.VectorType(i32, 8), list(range(8 * h, 8 * h + 8)))
                      for h in range(2)]
            mv = builder.load(builder.bitcast(builder.gep(md, [co_]), ir.PointerType(v16i32)),
                              align=4)
            ms, cs, ss = [], [], []
            for h in range(2):
                ms.append(builder.sext(builder.shuffle_vector(mv, mv, halves[h]), v8i64))
                off = builder.add(co_, ir.Constant(i64, 8 * h))
                cs.append(builder.load(builder.bitcast(builder.gep(cd, [off]),
                                                       ir.PointerType(v8i64)), align=8))
                ss.append(builder.load(builder.bitcast(builder.gep(sd, [off]),
                                                       ir.PointerType(v8i64)), align=8))

            def splat(v, vt, n):
                one = builder.insert_element(ir.Constant(vt, ir.Undefined), v,
                                             ir.Constant(i32, 0))
                return builder.shuffle_vector(one, one, ir.Constant(ir.VectorType(i32, n),
                                                                    [0] * n))

            lov, hiv = splat(lo_, v8i64, 8), splat(hi_, v8i64, 8)
            name = f"llvm.masked.store.v16i{ybits}.p0"
            mst = mod.globals.get(name) or ir.Function(
                mod, ir.FunctionType(ir.VoidType(), [vy16, ir.PointerType(vy16), i32, v16i1]),
                name)
            lanes = ir.Constant(v16i32, list(range(LANES)))
            nl32 = builder.trunc(nl_, i32)
            for j, r in enumerate(res):
                outs = []
                for h in range(2):
                    a = builder.sext(builder.shuffle_vector(r, r, halves[h]), v8i64)
                    v = builder.ashr(builder.add(builder.mul(a, ms[h]), cs[h]), ss[h])
                    v = builder.select(builder.icmp_signed("<", v, lov), lov, v)
                    v = builder.select(builder.icmp_signed(">", v, hiv), hiv, v)
                    outs.append(builder.trunc(v, vy8))
                out = builder.shuffle_vector(outs[0], outs[1],
                                             ir.Constant(ir.VectorType(i32, LANES),
                                                         list(range(LANES))))
                valid = builder.icmp_signed("<", ir.Constant(i64, j), npix_)
                n = builder.select(valid, nl32, ir.Constant(i32, 0))
                mask = builder.icmp_signed("<", lanes, splat(n, v16i32, LANES))
                at = builder.add(ao_, builder.mul(as_, ir.Constant(i64, j)))
                ptr = builder.bitcast(builder.gep(ad, [at]), ir.PointerType(vy16))
                builder.call(mst, [out, ptr, ir.Constant(i32, 1), mask])
            return context.get_dummy_value()

        return sig, codegen

    return intrinsic(typer)


#: ``NPX`` pixels x 16 lanes of int32 sums: pixel j's lanes are ``sum over p < npairs of
#: dot2(ring[base + j * pstride + offs[o0 + p]:][:16], wq[wo + p * wstride:][:16])`` where
#: dot2 is ``vpdpwssd``'s per-lane sum of two int16 products; stored at
#: ``acc[ao + j * astride:][:16]`` (the requantization arguments are not read)
_tile = _tile_kernel(False)
#: `_tile`'s sums requantized in registers (int64 lanes: ``clip((s * m32 + cf) >> sf, lo,
#: hi)`` with the parameters of channels ``co..co + 16``) and stored into the output `acc`
#: (y) at ``ao + j * astride``: the first `nlanes` lanes of the first `npix` pixels only
_tile_rq = _tile_kernel(True)


def pair_weights(packed: np.ndarray, cu: int, kh: int, kw: int, c_n: int) -> np.ndarray:
    """Depthwise weights in the lane layout ``(NCB, KH, KW, CU)`` (`packed`, int8 or int16) as
    pairs of taps ``(kx, kx + 1)`` of each kernel row: word ``(ky * npr + j) * cp + c`` holds
    ``w[ky, 2j + 1, c] << 16 | w[ky, 2j, c] & 0xFFFF`` (the tap past an odd row's end and the
    lanes past `c_n` zero), ``npr = ceil(kw / 2)``, ``cp`` the channels rounded up to 16."""
    taps = kh * kw
    ncb = -(-c_n // cu)
    w = np.asarray(packed[:ncb * taps * cu]).reshape(ncb, taps, cu).transpose(1, 0, 2)
    w = w.reshape(taps, ncb * cu)[:, :c_n].astype(np.int32).reshape(kh, kw, c_n)
    npr = (kw + 1) // 2
    cp = -(-c_n // LANES) * LANES
    both = np.zeros((kh, 2 * npr, cp), np.int32)
    both[:, :kw, :c_n] = w
    lo, hi = both[:, 0::2], both[:, 1::2]
    return ((hi << 16) | (lo & 0xFFFF)).astype(np.int32).reshape(kh * npr * cp)


@helper
def _pair_row(ring, at, x, xrs, xpitch, xcoff, ih, iw_n, c_n, cp, wcols, pl, dw, g, shr, msk):
    """Input row `ih` as tap pairs (module docstring) into ``ring[at:at + wcols * cp]``:
    column ``q`` pairs input columns ``q g - pl`` (low half) and ``q g - pl + dw`` (high
    half), each 0 outside ``0..iw_n - 1`` (`g`: the step between the columns a layer's pairs
    start on), each input value taken as ``(x >> shr) & msk`` (an int16 map's byte planes;
    ``0, -1`` for int8); lanes past `c_n` are left as they are."""
    xb = ih * xrs + xcoff
    # the columns whose two inputs are both inside the row: w0 <= q < w1
    w0 = min((pl + g - 1) // g, wcols)
    w1 = max(w0, min(wcols, (iw_n - dw + pl + g - 1) // g))
    for w in range(w0, w1):
        d0 = at + w * cp
        s0 = xb + (w * g - pl) * xpitch
        s1 = s0 + dw * xpitch
        for c in range(c_n):
            v0 = (np.int32(x[np.uint64(s0 + c)]) >> shr) & msk
            v1 = (np.int32(x[np.uint64(s1 + c)]) >> shr) & msk
            ring[np.uint64(d0 + c)] = (v1 << 16) | (v0 & 0xFFFF)
    for w in range(wcols):
        if w0 <= w < w1:
            continue
        d0 = at + w * cp
        i0 = w * g - pl
        i1 = i0 + dw
        in0 = 0 <= i0 < iw_n
        in1 = 0 <= i1 < iw_n
        for c in range(c_n):
            v0 = (np.int32(x[np.uint64(xb + i0 * xpitch + c)]) >> shr) & msk if in0 else 0
            v1 = (np.int32(x[np.uint64(xb + i1 * xpitch + c)]) >> shr) & msk if in1 else 0
            ring[np.uint64(d0 + c)] = (v1 << 16) | (v0 & 0xFFFF)


@helper
def _gcd(a, b):
    while b:
        a, b = b, a % b
    return a


@kernel(nogil=True)
def conv_depthwise_pairs(x, xrs, xpitch, xcoff, ih_n, iw_n,
                         packed, cu, bias, mult, shift, mult_neg, shift_neg, lo, hi,
                         y, yrs, ypitch, ycoff, oh_n, ow_n, c_n,
                         kh, kw, sh, sw, dh, dw, pt, pl, acc_like, wq, oh_lo, oh_hi):
    """Depthwise convolution on pairs of taps (module docstring), the arguments and results of
    `mpe.conv_depthwise` and `wq`, the weights `packed` holds as `pair_weights` (only those
    are read; `acc_like` is not: the sums are int32 by construction, an int16 map's two byte
    planes' each; `fits` says which layers may come here). Output rows ``oh_lo..oh_hi`` only
    (the pool's part). Returns nothing (a returned view costs its boxing on every call)."""
    if oh_hi <= oh_lo:
        return
    cp = (c_n + LANES - 1) // LANES * LANES
    npr = (kw + 1) // 2
    ow_pad = (ow_n + NPX - 1) // NPX * NPX
    # pairs start on columns ow * sw + 2 j dw: multiples of g (with stride 2 and no dilation
    # every other column), the only ones the ring holds
    g = _gcd(sw, 2 * dw)
    wcols = ((ow_pad - 1) * sw + 2 * (npr - 1) * dw) // g + 1  # pair columns a tile row reads
    rowlen = wcols * cp
    span = (kh - 1) * dh + 1
    planes = 1 if x.itemsize == 1 else 2  # int16: the low bytes (unsigned), the high (signed)
    ring = np.empty(planes * span * rowlen, dtype=np.int32)
    offs = np.empty(kh * npr, dtype=np.int64)
    acc = np.empty(planes * ow_pad * cp, dtype=np.int32)
    hb = (planes - 1) * ow_pad * cp  # the high plane's sums (int16)
    folded = _one_sided(mult, shift, mult_neg, shift_neg, np.int64(0), c_n)
    # int8 one-sided: each tile requantized in registers (`_tile_rq`), its parameters read
    # 16 lanes at a time (zero past the layer's channels: those lanes are not stored)
    fused = folded and planes == 1
    m32 = np.zeros(cp, dtype=np.int32)
    cf = np.zeros(cp, dtype=np.int64)
    sf = np.zeros(cp, dtype=np.int64)
    for o in range(c_n):
        s = shift[o] if shift[o] > 0 else 0
        m32[o] = mult[o]
        cf[o] = bias[o] * mult[o] + ((np.int64(1) << np.int64(s - 1)) if s > 0 else 0)
        sf[o] = s
    two = np.int64(0) if folded else c_n
    prm = _requant_params(mult, shift, mult_neg, shift_neg, np.int64(0), two)
    tmp = np.empty(c_n, dtype=np.int64)
    lo64 = np.int64(lo)
    hi64 = np.int64(hi)
    n8 = c_n // 8 * 8 if planes == 1 else 0
    first = oh_lo * sh - pt  # input row of ring slot 0
    built = first - 1  # the last input row put in the ring
    for oh in range(oh_lo, oh_hi):
        top = oh * sh - pt
        # the kernel rows inside the input: ky0..ky1 (padding rows add nothing: skipped)
        ky0 = 0 if top >= 0 else (-top + dh - 1) // dh
        ky1 = min(kh - 1, (ih_n - 1 - top) // dh) if ih_n - 1 - top >= 0 else -1
        for ih in range(max(built + 1, top), top + (kh - 1) * dh + 1):
            if 0 <= ih < ih_n:
                at = ((ih - first) % span) * rowlen
                if planes == 1:
                    _pair_row(ring, at, x, xrs, xpitch, xcoff, ih, iw_n, c_n, cp, wcols, pl,
                              dw, g, np.int32(0), np.int32(-1))
                else:
                    _pair_row(ring, at, x, xrs, xpitch, xcoff, ih, iw_n, c_n, cp, wcols, pl,
                              dw, g, np.int32(0), np.int32(0xFF))
                    _pair_row(ring, at + span * rowlen, x, xrs, xpitch, xcoff, ih, iw_n, c_n,
                              cp, wcols, pl, dw, g, np.int32(8), np.int32(-1))
        built = top + (kh - 1) * dh
        if ky1 < ky0:  # no kernel row inside the input: the sums are 0
            for i in range(acc.shape[0]):
                acc[i] = 0
        else:
            for ky in range(ky0, ky1 + 1):
                slot = (top + ky * dh - first) % span
                for j in range(npr):
                    offs[ky * npr + j] = slot * rowlen + 2 * j * dw // g * cp
            o0 = ky0 * npr
            npairs = (ky1 - ky0 + 1) * npr
            if fused:  # requantized in registers, straight into y
                yb = oh * yrs + ycoff
                for cb in range(0, cp, LANES):
                    for ow0 in range(0, ow_n, NPX):
                        _tile_rq(ring, ow0 * (sw // g) * cp + cb, sw // g * cp, offs, o0,
                                 npairs, wq, o0 * cp + cb, cp, y, yb + ow0 * ypitch + cb,
                                 ypitch, m32, cf, sf, np.int64(cb), lo64, hi64,
                                 min(NPX, ow_n - ow0), min(LANES, c_n - cb))
                continue
            for pln in range(planes):
                rb = pln * span * rowlen
                ab = pln * ow_pad * cp
                for cb in range(0, cp, LANES):
                    for ow0 in range(0, ow_n, NPX):
                        _tile(ring, rb + ow0 * (sw // g) * cp + cb, sw // g * cp, offs, o0,
                              npairs, wq, o0 * cp + cb, cp, acc, ab + ow0 * cp + cb, cp,
                              m32, cf, sf, np.int64(0), lo64, hi64, np.int64(0), np.int64(0))
        for ow in range(ow_n):
            yo = oh * yrs + ow * ypitch + ycoff
            ao = ow * cp
            if folded:
                for i in range(0, n8, 8):
                    _requant8(acc, ao + i, m32, cf, sf, i, lo64, hi64, y, yo + i)
            if folded and planes == 1:
                for i in range(n8, c_n):
                    v = (np.int64(acc[ao + i]) * np.int64(m32[i]) + cf[i]) >> sf[i]
                    v = lo64 if v < lo64 else v
                    v = hi64 if v > hi64 else v
                    y[yo + i] = v
            elif folded:  # int16: the planes' sums joined in int64
                for i in range(c_n):
                    a = (np.int64(acc[np.uint64(hb + ao + i)]) << 8) + \
                        np.int64(acc[np.uint64(ao + i)])
                    v = (a * np.int64(m32[i]) + cf[i]) >> sf[i]
                    v = lo64 if v < lo64 else v
                    v = hi64 if v > hi64 else v
                    y[np.uint64(yo + i)] = v
            else:
                for i in range(c_n):
                    a = np.int64(acc[ao + i])
                    if planes == 2:
                        a = (np.int64(acc[hb + ao + i]) << 8) + a
                    tmp[i] = a + bias[i]
                _requant_row(tmp, prm, lo, hi, y[yo:yo + c_n])


@twin_of(conv_depthwise_pairs)
def twin(x, xrs, xpitch, xcoff, ih_n, iw_n, packed, cu, bias, mult, shift, mult_neg, shift_neg,
         lo, hi, y, yrs, ypitch, ycoff, oh_n, ow_n, c_n, kh, kw, sh, sw, dh, dw, pt, pl,
         acc_like, wq, oh_lo, oh_hi):
    """The numpy form run while a compile worker has the kernel (`jit.twin_of`):
    `twins.conv_depthwise`, `mpe.conv_depthwise`'s twin, on the same weights in their lane
    layout (`wq` is `packed`'s pairs)."""
    return _twin_depthwise(x, xrs, xpitch, xcoff, ih_n, iw_n, packed, cu, bias, mult, shift,
                           mult_neg, shift_neg, lo, hi, y, yrs, ypitch, ycoff, oh_n, ow_n, c_n,
                           kh, kw, sh, sw, dh, dw, pt, pl, acc_like, oh_lo, oh_hi)


#: split over output rows on the thread pool (each part builds the input rows it reads)
CONV_DEPTHWISE_PAIRS = Split(conv_depthwise_pairs, extent=("oh_n",),
                             work=("oh_n", "ow_n", "c_n", "kh", "kw"), min_work=1 << 19)

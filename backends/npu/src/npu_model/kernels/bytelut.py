"""Byte table lookup: an int8 -> int8 LUT layer 64 values an instruction (AVX-512 VBMI).

``vpermi2b`` picks 64 bytes out of two 64-byte registers by the low 7 bits of 64 index bytes:
a 128-entry table. The 256 entries of an int8 table are two such lookups, the index's top bit
choosing between them. The table index of a value ``x`` is ``x - qmin = x + 128``, the byte
with its top bit flipped. A pixel's channels (any count) are read and written with masked
loads and stores, so the channels of a pitched map outside the layer's window stay as they
are. Where the scalar form (`vector.lut_walk`) looks every value up alone, this one takes a
MobileNetV3 hard-swish of 112 x 112 x 16 in a 32-channel pitch from 93 to 39 us CPU
(issue 30; a masked step a pixel).

The instruction exists only with AVX-512 VBMI (`enabled`): LLVM cannot lower the intrinsic
elsewhere, so `lut_bytes` is compiled only where it is true.
"""

from __future__ import annotations

import os

import llvmlite.binding as ll
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .jit import kernel


@intrinsic
def _lut_pixels(typingctx, x, xoff, xstep, y, yoff, ystep, npix, c, tab):
    """``y[yoff + p * ystep + i] = tab[x[xoff + p * xstep + i] + 128]`` for pixels p < npix and
    channels i < c (int8 maps, a 256-byte int8 table), 64 channels a step, the last step
    masked."""
    sig = types.void(x, xoff, xstep, y, yoff, ystep, npix, c, tab)

    def codegen(context, builder, sig, args):
        x_, xoff_, xstep_, y_, yoff_, ystep_, npix_, c_, tab_ = args
        i1, i8, i32, i64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
        v64, m64 = ir.VectorType(i8, 64), ir.VectorType(i1, 64)
        mod = builder.module

        def fn(name, ty):
            return mod.globals.get(name) or ir.Function(mod, ty, name)

        perm = fn("llvm.x86.avx512.vpermi2var.qi.512", ir.FunctionType(v64, [v64, v64, v64]))
        mload = fn("llvm.masked.load.v64i8.p0",
                   ir.FunctionType(v64, [ir.PointerType(v64), i32, m64, v64]))
        mstore = fn("llvm.masked.store.v64i8.p0",
                    ir.FunctionType(ir.VoidType(), [v64, ir.PointerType(v64), i32, m64]))

        def base(k, arg):
            return context.make_array(sig.args[k])(context, builder, arg).data

        xd, yd, td = base(0, x_), base(3, y_), base(8, tab_)
        tv = builder.bitcast(td, ir.PointerType(v64))
        tabs = [builder.load(builder.gep(tv, [ir.Constant(i64, k)]), align=1) for k in range(4)]
        flip = ir.Constant(v64, [0x80] * 64)
        zero = ir.Constant(v64, None)
        one32 = ir.Constant(i32, 1)
        c64 = ir.Constant(i64, 64)
        # chunks of 64 channels a pixel; the last one's mask: lanes below c - 64 * (chunks - 1)
        chunks = builder.udiv(builder.add(c_, ir.Constant(i64, 63)), c64)
        rem = builder.sub(c_, builder.mul(builder.sub(chunks, ir.Constant(i64, 1)), c64))
        tail_bits = builder.select(builder.icmp_signed(">=", rem, c64), ir.Constant(i64, -1),
                                   builder.sub(builder.shl(ir.Constant(i64, 1), rem),
                                               ir.Constant(i64, 1)))
        tail = builder.bitcast(tail_bits, m64)
        full = builder.bitcast(ir.Constant(i64, -1), m64)

        entry = builder.block
        ploop = builder.append_basic_block("lut_pix")
        kloop = builder.append_basic_block("lut_chunk")
        pnext = builder.append_basic_block("lut_pix_next")
        done = builder.append_basic_block("lut_done")
        builder.cbranch(builder.and_(builder.icmp_signed(">", npix_, ir.Constant(i64, 0)),
                                     builder.icmp_signed(">", c_, ir.Constant(i64, 0))),
                        ploop, done)

        builder.position_at_end(ploop)
        p = builder.phi(i64)
        p.add_incoming(ir.Constant(i64, 0), entry)
        xrow = builder.add(xoff_, builder.mul(p, xstep_))
        yrow = builder.add(yoff_, builder.mul(p, ystep_))
        builder.branch(kloop)

        builder.position_at_end(kloop)
        k = builder.phi(i64)
        k.add_incoming(ir.Constant(i64, 0), ploop)
        k1 = builder.add(k, ir.Constant(i64, 1))
        mask = builder.select(builder.icmp_signed("<", k1, chunks), full, tail)
        at = builder.mul(k, c64)
        xp = builder.bitcast(builder.gep(xd, [builder.add(xrow, at)]), ir.PointerType(v64))
        yp = builder.bitcast(builder.gep(yd, [builder.add(yrow, at)]), ir.PointerType(v64))
        v = builder.call(mload, [xp, one32, mask, zero])
        idx = builder.xor(v, flip)
        lo = builder.call(perm, [tabs[0], idx, tabs[1]])
        hi = builder.call(perm, [tabs[2], idx, tabs[3]])
        r = builder.select(builder.icmp_signed("<", idx, zero), hi, lo)
        builder.call(mstore, [r, yp, one32, mask])
        k.add_incoming(k1, kloop)
        builder.cbranch(builder.icmp_signed("<", k1, chunks), kloop, pnext)

        builder.position_at_end(pnext)
        p1 = builder.add(p, ir.Constant(i64, 1))
        p.add_incoming(p1, pnext)
        builder.cbranch(builder.icmp_signed("<", p1, npix_), ploop, done)

        builder.position_at_end(done)
        return context.get_dummy_value()

    return sig, codegen


@kernel
def lut_bytes(x, xrs, xpitch, xcoff, table, y, yrs, ypitch, ycoff, h_n, w_n, c_n):
    """`vector.lut` of an int8 map through a 256-entry int8 table (qmin = -128): rows of
    pixels, or the whole map as one run where both maps are dense."""
    if xpitch == c_n and ypitch == c_n and xrs == w_n * c_n and yrs == w_n * c_n:
        _lut_pixels(x, xcoff, np.int64(0), y, ycoff, np.int64(0), np.int64(1),
                    h_n * w_n * c_n, table)
        return y
    for h in range(h_n):
        _lut_pixels(x, h * xrs + xcoff, xpitch, y, h * yrs + ycoff, ypitch, w_n, c_n, table)
    return y


def enabled() -> bool:
    """Whether int8 LUT layers take `lut_bytes`: on CPUs with AVX-512 VBMI (``vpermi2b`` on
    bytes); ``NPU_BYTE_LUT=0`` turns it off (the scalar `vector.lut_walk` runs instead; both
    give the same bytes)."""
    if os.environ.get("NPU_BYTE_LUT", "").strip() == "0":
        return False
    f = ll.get_host_cpu_features()
    return bool(f.get("avx512vbmi") and f.get("avx512bw"))

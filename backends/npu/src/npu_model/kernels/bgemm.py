"""Byte GEMM: unsigned 8-bit times signed 8-bit, four products per int32 lane (``vpdpbusd``).

AVX-512 VNNI multiplies 64 unsigned bytes by 64 signed bytes and adds each group of four
products into an int32 lane in one instruction: 64 multiply-adds, where the int16-pair GEMM
(`igemm`, ``vpmaddwd`` + ``vpaddd``) does 32 in two. Measured on an 8 x 32 micro tile
(3136 x 1152 x 128, one thread's CPU time): 1.4 ms against 4.5 ms for the pair GEMM.

int8 operands (`mpe.conv_dense_int8_bytes`): `gemm_int8_bytes` turns each activation ``x``
into the unsigned ``x + 128`` (its sign bit flipped, in place, once per tile), so the GEMM
gives ``sum((x + 128) w)``, exact in int32 for K <= `MAX_K8`; the ``128 sum(w)`` it adds per
output channel is taken off the bias (`int8_weights`). One byte GEMM for what the pair GEMM
did in two K-halves: 3x3 128 -> 128 at 56x56, 5.7 -> 2.1 ms per layer.

int16 operands as bytes (`mpe.conv_dense_int16_bytes`): with
``x = 256 h + l`` (``l`` in [0, 255], ``h`` in [-128, 127]) and ``w = 256 wh + wl``, the
activations become two unsigned byte planes ``l`` and ``h' = h + 128`` and the weights two
signed planes ``wh`` and ``wl' = wl - 128``. Three byte GEMMs over K (``G1 = h'.wh``,
``G23 = l.wh + h'.wl'`` as one GEMM over 2K, ``G4 = l.wl'``), each exact in int32 while
``2 K 255 128 < 2^31`` (K <= `MAX_K`), give exactly::

    sum(x w) = 65536 G1 + 256 G23 + G4 + 128 sum(x) - 2^23 sum(wh) - 2^15 sum(wl')

(the row sum of the activations per output pixel, the column sums of the weight planes per
output channel, folded into the bias). Four K-lengths of byte GEMM, about 1.2 int16-pair
GEMMs, where the digit form (`igemm.gemm_pairs_wide`) takes two.

Layouts (element offsets):
* A: ``rows`` rows of ``lda`` bytes (uint8), a row's quads of K at ``4 k4``; rows past the
  caller's last pixel may hold anything, their results are not read.
* B (`pack_quads`): per group, ``NB = ceil(N / NR)`` panels of ``K4 x NR x 4`` int8,
  ``b[(panel * K4 + k4) * NR * 4 + n * 4 + j] = w[4 * k4 + j, panel * NR + n]`` (0 past N, K).
* C: int32, rows ``ldc`` apart; whole ``MR x NR`` tiles are written.

The instruction exists only with AVX-512 VNNI (`enabled`): LLVM cannot lower the intrinsic
elsewhere, so these kernels are compiled only where it is true.
"""

from __future__ import annotations

import os

import llvmlite.binding as ll
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .jit import helper, kernel

#: micro-tile rows (pixels) and columns (output channels), as the pair GEMM's
MR = 8
NR = 32
NR16 = 16
#: longest K of the int16 byte form: ``2 K 255 128 < 2^31`` (G23 runs over 2K)
MAX_K = (2**31 - 1) // (2 * 255 * 128)
#: longest K of int8 operands: ``K 255 128 < 2^31``
MAX_K8 = (2**31 - 1) // (255 * 128)


def _micro_kernel(nr: int):
    """An intrinsic ``mk(a, aoff, lda, b, boff, c, coff, ldc, k4n)``: the ``MR x nr`` int32
    tile ``C = A[:, :4*k4n] @ B_panel`` (A unsigned bytes, B signed bytes) at
    ``c[coff + r * ldc + n]``."""
    lanes = nr // 16

    @intrinsic
    def mk(typingctx, a, aoff, lda, b, boff, c, coff, ldc, k4n):
        sig = types.void(a, aoff, lda, b, boff, c, coff, ldc, k4n)

        def codegen(context, builder, sig, args):
            a_, aoff_, lda_, b_, boff_, c_, coff_, ldc_, k4n_ = args
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
            bvec = builder.bitcast(bd, ir.PointerType(v64i8))
            zero = ir.Constant(v16i32, None)
            splat0 = ir.Constant(v16i32, [0] * 16)
            entry = builder.block
            loop = builder.append_basic_block("bgemm_k")
            done = builder.append_basic_block("bgemm_done")
            builder.cbranch(builder.icmp_signed(">", k4n_, ir.Constant(i64, 0)), loop, done)

            builder.position_at_end(loop)
            k = builder.phi(i64)
            k.add_incoming(ir.Constant(i64, 0), entry)
            acc = [[builder.phi(v16i32) for _ in range(lanes)] for _ in range(MR)]
            for row in acc:
                for p in row:
                    p.add_incoming(zero, entry)
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
                    p.add_incoming(zero, entry)
                    p.add_incoming(new[r][j], loop)
                    res.append((r, j, p))
            for r, j, p in res:
                at = builder.gep(cd, [builder.add(builder.mul(ldc_, ir.Constant(i64, r)),
                                                  ir.Constant(i64, 16 * j))])
                builder.store(p, builder.bitcast(at, ir.PointerType(v16i32)), align=4)
            return context.get_dummy_value()

        return sig, codegen

    return mk


_mk = _micro_kernel(NR)
_mk16 = _micro_kernel(NR16)


def pack_quads(wb: np.ndarray, nr: int = NR) -> np.ndarray:
    """Dense int8 weights ``wb[g, K, N]`` -> the B layout above (K in quads, panels `nr`
    wide), per group: ``(g, NB * K4 * nr * 4)``."""
    g, k, n = wb.shape
    k4, nb = -(-k // 4), -(-n // nr)
    w = np.zeros((g, 4 * k4, nb * nr), dtype=np.int8)
    w[:, :k, :n] = wb
    return np.ascontiguousarray(w.reshape(g, k4, 4, nb, nr).transpose(0, 3, 1, 4, 2)).reshape(
        g, -1)


def int8_weights(wf: np.ndarray, nr: int) -> tuple[np.ndarray, np.ndarray]:
    """int8 weights ``wf[g, K, N]`` -> (packed B, bias correction ``-128 sum(w)`` per output
    channel): the kernel reads each activation as ``x + 128`` (`gemm_int8_bytes`)."""
    g, k, n = wf.shape
    corr = -128 * wf.astype(np.int64).sum(axis=1)
    return pack_quads(wf.astype(np.int8), nr), corr.reshape(g * n)


def int16_weights(wf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int16 weights ``wf[g, K, N]`` -> (packed B, bias correction per output channel).

    B holds, per group and panel, ``Kp / 4`` quads of ``wh = w >> 8`` followed by ``Kp / 4``
    quads of ``wl' = (w & 255) - 128`` (``Kp``: K rounded up to 4), so that the panel's first
    half, its second half and the whole of it are the B of G1, G4 and G23 (module docstring).
    The correction ``-(2^23 sum(wh) + 2^15 sum(wl'))`` over K is added to the bias (int64)."""
    g, k, n = wf.shape
    kp = -(-k // 4) * 4
    w = wf.astype(np.int32)
    wh = np.zeros((g, kp, n), dtype=np.int8)
    wl = np.zeros((g, kp, n), dtype=np.int8)
    wh[:, :k] = w >> 8
    wl[:, :k] = (w & 255) - 128
    corr = -((wh[:, :k].astype(np.int64).sum(axis=1) << 23)
             + (wl[:, :k].astype(np.int64).sum(axis=1) << 15))
    both = pack_quads(np.concatenate([wh, wl], axis=1))
    return both, corr.reshape(g * n)


@helper
def byte_planes(colbuf, ldc, rows, k, kp, ab, rsum):
    """int16 im2col rows (``ldc`` apart, K = `k` columns) -> rows of ``2 kp`` bytes in `ab`:
    ``l = x & 255`` over ``kp`` then ``h' = (x >> 8) + 128`` over ``kp`` (padding: x = 0), and
    ``rsum[r] = 128 * sum(x)`` of each row, the activation term of the byte form."""
    lda = 2 * kp
    for r in range(rows):
        src = colbuf[r * ldc:r * ldc + k]
        lo = ab[r * lda:r * lda + kp]
        hi = ab[r * lda + kp:(r + 1) * lda]
        s = np.int64(0)
        for i in range(k):
            v = np.int32(src[i])
            lo[i] = v & 255
            hi[i] = (v >> 8) + 128
            s += v
        for i in range(k, kp):
            lo[i] = 0
            hi[i] = 128
        rsum[r] = s * 128


@kernel
def gemm_int16_bytes(ab, kp, rows, bq, n, tmp, c, coff, ldc, rsum):
    """``C[:rows, coff:coff+n] = X @ W`` (int64) for one group, from the byte planes of X
    (`byte_planes`: rows of ``2 kp`` bytes, ``128 sum(x)`` per row in `rsum`) and the packed
    weight planes of `int16_weights`, without its bias correction. `tmp` holds ``3 * MR * NR``
    int32; whole micro tiles are written; ``rows`` a multiple of `MR`."""
    lda = 2 * kp
    k4 = kp // 4
    nb = (n + NR - 1) // NR
    t = MR * NR
    for pb in range(nb):
        boff = pb * 2 * k4 * NR * 4
        for m0 in range(0, rows, MR):
            ao = m0 * lda
            _mk(ab, ao + kp, lda, bq, boff, tmp, 0, NR, k4)  # G1 = h' . wh
            _mk(ab, ao, lda, bq, boff, tmp, t, NR, 2 * k4)  # G23 = l . wh + h' . wl'
            _mk(ab, ao, lda, bq, boff + k4 * NR * 4, tmp, 2 * t, NR, k4)  # G4 = l . wl'
            for r in range(MR):
                at = (m0 + r) * ldc + coff + pb * NR
                cr = c[at:at + NR]
                g1 = tmp[r * NR:r * NR + NR]
                g23 = tmp[t + r * NR:t + r * NR + NR]
                g4 = tmp[2 * t + r * NR:2 * t + r * NR + NR]
                rs = rsum[m0 + r]
                for j in range(NR):
                    cr[j] = (np.int64(g1[j]) << 16) + (np.int64(g23[j]) << 8) + g4[j] + rs
    return c


@kernel
def gemm_int8_bytes(a, lda, rows, bq, k4, n, nr, c, coff, ldc):
    """``C[:rows, coff:coff+n] = (X + 128) @ W`` (int32) for one group: X int8 rows of `lda`
    bytes (K in quads, ``lda >= 4 k4``), W packed by `int8_weights` with panels `nr` wide
    (the ``-128 sum(w)`` is the caller's, in the bias); whole micro tiles. X is the caller's
    scratch: its first ``rows * lda`` bytes are turned into the unsigned ``x + 128`` in place
    (the sign bit flipped once per byte, not once per byte and output panel in the micro
    kernel: 1.9 -> 1.3 ms on 3136 x 1152 x 128)."""
    for i in range(rows * lda):
        a[i] = a[i] ^ -128
    nb = (n + nr - 1) // nr
    for pb in range(nb):
        boff = pb * k4 * nr * 4
        for m0 in range(0, rows, MR):
            if nr == NR:
                _mk(a, m0 * lda, lda, bq, boff, c, m0 * ldc + coff + pb * nr, ldc, k4)
            else:
                _mk16(a, m0 * lda, lda, bq, boff, c, m0 * ldc + coff + pb * nr, ldc, k4)
    return c


def enabled() -> bool:
    """Whether integer convolutions take the byte GEMM: on CPUs with AVX-512 VNNI (the only ones
    where ``vpdpbusd`` on 512-bit vectors exists); ``NPU_GEMM=float`` turns it off, and so does
    ``NPU_BYTE_GEMM=0`` (the int16-pair GEMM of `igemm` runs instead; all are bit-exact)."""
    if os.environ.get("NPU_GEMM", "").strip().lower() == "float":
        return False
    if os.environ.get("NPU_BYTE_GEMM", "").strip() == "0":
        return False
    f = ll.get_host_cpu_features()
    return bool(f.get("avx512vnni") and f.get("avx512bw"))

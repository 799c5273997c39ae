"""Integer GEMM on the CPU's integer SIMD: int16 pairs multiplied and added into int32 lanes.

The MPE array multiplies int8 by int8 into int32 accumulators; so does this GEMM, exactly, with
no float in between. Its micro-kernel is written in LLVM vector IR (a Numba intrinsic): per pair
of K it sign-extends 32 packed weights, multiplies them by a broadcast pair of activations,
adds the even and odd products and accumulates -- the pattern LLVM's X86 back end selects as
one ``vpdpwssd`` (AVX-512 VNNI / AVX-VNNI) or ``vpmaddwd`` + ``vpaddd`` (AVX2, SSE2) per 16
lanes. Being plain IR, it compiles on any CPU; `tests/backends/npu_model/test_igemm.py` reads the
generated assembly to check the instruction.

Exactness: operands are int8 values held in int16, so a pair sum is at most ``2 * 2**14`` and
``K`` products stay inside int32 while ``K <= MAX_K`` (the caller chunks longer K or falls
back to the float path).

int16 operands (`gemm_pairs_wide`): one int16 x int16 product reaches ``2**30``, so K of them
do not fit in int32. The weights are split into two signed digits, ``w = 256 * hi + lo`` with
``lo`` in [-128, 127] and ``hi`` in [-128, 128] (`split_digits`): a product of an int16
activation and a digit is at most ``2**22``, so a K-chunk of `chunk_pairs` pairs sums exactly
in int32 (255 pairs for full-range digits, more where the layer's digits are smaller). Each
chunk's two int32 tiles are combined as ``256 * hi + lo`` into int64, which is the hardware's
wide accumulation. Weights that fit in [-128, 127] need only the ``lo`` GEMM.

Layouts (all element offsets):
* A: ``rows`` rows of ``lda`` int16 (``lda`` even, K padded with anything: its weights are 0);
  rows past the caller's last pixel may hold anything, their results are not read.
* B (packed by `pack_pairs`): per group, ``NB = ceil(N / NR)`` panels of ``K2 x NR x 2`` int16,
  ``b[(panel * K2 + k2) * NR * 2 + n * 2 + j] = w[2 * k2 + j, panel * NR + n]`` (0 past N, K).
* C: int32, rows ``ldc`` apart; a call writes whole ``MR x NR`` tiles, so C has ``MR``-rounded
  rows and ``NR`` columns of room past the last panel's first column.
"""

from __future__ import annotations

import os

import llvmlite.binding as ll
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .jit import kernel

#: micro-tile rows (pixels) and columns (output channels); NR16 for narrow outputs
MR = 8
NR = 32
NR16 = 16
#: longest K whose int8 x int8 sum cannot leave int32
MAX_K = (2**31 - 1) // 2**14


def _micro_kernel(nr: int):
    """An intrinsic ``mk(a, aoff, lda, b, boff, c, coff, ldc, k2n)``: the ``MR x nr`` int32 tile
    ``C = A[:, :2*k2n] @ B_panel`` written at ``c[coff + r * ldc + n]``."""
    lanes = nr // 16

    @intrinsic
    def mk(typingctx, a, aoff, lda, b, boff, c, coff, ldc, k2n):
        sig = types.void(a, aoff, lda, b, boff, c, coff, ldc, k2n)

        def codegen(context, builder, sig, args):
            a_, aoff_, lda_, b_, boff_, c_, coff_, ldc_, k2n_ = args
            i64, i32, i16 = ir.IntType(64), ir.IntType(32), ir.IntType(16)
            v32i16, v32i32, v16i32 = (ir.VectorType(i16, 32), ir.VectorType(i32, 32),
                                      ir.VectorType(i32, 16))

            def data(k, arg, off):
                arr = context.make_array(sig.args[k])(context, builder, arg)
                return builder.gep(arr.data, [off])

            ad, bd, cd = data(0, a_, aoff_), data(3, b_, boff_), data(5, c_, coff_)
            rows = [builder.bitcast(builder.gep(ad, [builder.mul(lda_, ir.Constant(i64, r))]),
                                    ir.PointerType(i32)) for r in range(MR)]
            bvec = builder.bitcast(bd, ir.PointerType(v32i16))
            zero = ir.Constant(v16i32, None)
            even = ir.Constant(v16i32, [2 * i for i in range(16)])
            odd = ir.Constant(v16i32, [2 * i + 1 for i in range(16)])
            splat = ir.Constant(v32i32, [i % 2 for i in range(32)])
            entry = builder.block
            loop = builder.append_basic_block("igemm_k")
            done = builder.append_basic_block("igemm_done")
            builder.cbranch(builder.icmp_signed(">", k2n_, ir.Constant(i64, 0)), loop, done)

            builder.position_at_end(loop)
            k = builder.phi(i64)
            k.add_incoming(ir.Constant(i64, 0), entry)
            acc = [[builder.phi(v16i32) for _ in range(lanes)] for _ in range(MR)]
            for row in acc:
                for p in row:
                    p.add_incoming(zero, entry)
            kb = builder.mul(k, ir.Constant(i64, lanes))
            bs = [builder.sext(builder.load(builder.gep(bvec, [builder.add(
                kb, ir.Constant(i64, j))]), align=2), v32i32) for j in range(lanes)]
            new = []
            for r in range(MR):
                pair = builder.bitcast(builder.load(builder.gep(rows[r], [k]), align=2),
                                       ir.VectorType(i16, 2))
                av = builder.sext(builder.shuffle_vector(pair, pair, splat), v32i32)
                out = []
                for j in range(lanes):
                    prod = builder.mul(av, bs[j])
                    pairs = builder.add(builder.shuffle_vector(prod, prod, even),
                                        builder.shuffle_vector(prod, prod, odd))
                    out.append(builder.add(acc[r][j], pairs))
                new.append(out)
            for r in range(MR):
                for j in range(lanes):
                    acc[r][j].add_incoming(new[r][j], loop)
            k1 = builder.add(k, ir.Constant(i64, 1))
            k.add_incoming(k1, loop)
            builder.cbranch(builder.icmp_signed("<", k1, k2n_), loop, done)

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


_mk32 = _micro_kernel(NR)
_mk16 = _micro_kernel(NR16)


def panel_width(n: int) -> int:
    """Columns of a B panel for an output of `n` channels (narrow outputs waste less at 16)."""
    return NR16 if n <= NR16 else NR


def pack_pairs(wf: np.ndarray, nr: int) -> np.ndarray:
    """Dense int weights ``wf[g, K, N]`` -> the flat int16 B layout above, per group."""
    g, k, n = wf.shape
    k2, nb = (k + 1) // 2, -(-n // nr)
    w = np.zeros((g, 2 * k2, nb * nr), dtype=np.int16)
    w[:, :k, :n] = wf
    return np.ascontiguousarray(w.reshape(g, k2, 2, nb, nr).transpose(0, 3, 1, 4, 2))


@kernel
def gemm_pairs(a, lda, rows, bq, k2, n, nr, c, coff, ldc):
    """``C[:rows, coff:coff+n] = A @ B`` for one group's packed B (`bq`, flat), whole micro
    tiles (see the module docstring for the room C and A need)."""
    nb = (n + nr - 1) // nr
    for pb in range(nb):
        boff = pb * k2 * nr * 2
        for m0 in range(0, rows, MR):
            if nr == NR:
                _mk32(a, m0 * lda, lda, bq, boff, c, m0 * ldc + coff + pb * nr, ldc, k2)
            else:
                _mk16(a, m0 * lda, lda, bq, boff, c, m0 * ldc + coff + pb * nr, ldc, k2)
    return c


def split_digits(wf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int16 weights -> signed digits ``(hi, lo)`` with ``wf == 256 * hi + lo`` exactly,
    ``lo`` in [-128, 127], ``hi`` in [-128, 128] (both int16)."""
    w = wf.astype(np.int32)
    lo = ((w + 128) & 255) - 128
    hi = (w - lo) >> 8
    return hi.astype(np.int16), lo.astype(np.int16)


def chunk_pairs(xmax: int, dmax: int, k2: int) -> int:
    """Pairs of K per chunk so that a chunk's sum of products (|x| <= `xmax`, |digit| <=
    `dmax`) cannot leave int32; at least 1, at most `k2` (the whole K: one chunk)."""
    if xmax * dmax == 0:
        return max(k2, 1)
    return max(1, min(max(k2, 1), (2**31 - 1) // (xmax * dmax) // 2))


@kernel
def gemm_pairs_wide(a, lda, rows, bh, bl, k2, kc2, n, nr, tmp, c, coff, ldc):
    """``C[:rows, coff:coff+n] = A @ (256 * Bh + Bl)`` into int64 `c` for one group's packed
    digit panels `bh`, `bl` (flat, `pack_pairs` layout; `bh` empty: ``A @ Bl``), K in chunks
    of `kc2` pairs, each exact in int32 (see the module docstring). `tmp` holds ``2 * MR * nr``
    int32; whole micro tiles are written, as by `gemm_pairs`; ``k2 >= 1``. K chunks are the
    outer loop of a panel, so a chunk's B (2 x 32 KiB for 255 pairs) is read from cache by
    every row block."""
    nb = (n + nr - 1) // nr
    two = bh.shape[0] > 0
    t = MR * nr
    for pb in range(nb):
        boff = pb * k2 * nr * 2
        for k0 in range(0, k2, kc2):  # a chunk of B (both digits) stays in cache over A
            kn = min(kc2, k2 - k0)
            for m0 in range(0, rows, MR):
                ao = m0 * lda + 2 * k0
                bo = boff + k0 * nr * 2
                if nr == NR:
                    _mk32(a, ao, lda, bl, bo, tmp, 0, nr, kn)
                    if two:
                        _mk32(a, ao, lda, bh, bo, tmp, t, nr, kn)
                else:
                    _mk16(a, ao, lda, bl, bo, tmp, 0, nr, kn)
                    if two:
                        _mk16(a, ao, lda, bh, bo, tmp, t, nr, kn)
                for r in range(MR):
                    cr = c[(m0 + r) * ldc + coff + pb * nr:(m0 + r) * ldc + coff + pb * nr + nr]
                    lo = tmp[r * nr:r * nr + nr]
                    if two:
                        hi = tmp[t + r * nr:t + r * nr + nr]
                        if k0 == 0:
                            for j in range(nr):
                                cr[j] = np.int64(hi[j]) * 256 + lo[j]
                        else:
                            for j in range(nr):
                                cr[j] += np.int64(hi[j]) * 256 + lo[j]
                    elif k0 == 0:
                        for j in range(nr):
                            cr[j] = lo[j]
                    else:
                        for j in range(nr):
                            cr[j] += lo[j]
    return c


def enabled() -> bool:
    """Whether the MPE kernels use this GEMM: on CPUs with VNNI (a fused ``vpdpwssd``) by
    default, where it beats fp32 BLAS by 2x and more; elsewhere the exact float K-chunk path.
    ``NPU_GEMM=int`` or ``NPU_GEMM=float`` decides instead (both are bit-exact)."""
    choice = os.environ.get("NPU_GEMM", "").strip().lower()
    if choice in ("int", "float"):
        return choice == "int"
    features = ll.get_host_cpu_features()
    return bool(features.get("avx512vnni") or features.get("avxvnni"))


def enabled_int16() -> bool:
    """Whether int16 MPE kernels use `gemm_pairs_wide`: wherever the CPU has AVX2 (two
    ``vpmaddwd`` GEMMs beat the float64 K-chunk path even without VNNI); `NPU_GEMM` decides
    instead when set, as for int8. Without AVX2 the exact float64 path runs."""
    choice = os.environ.get("NPU_GEMM", "").strip().lower()
    if choice in ("int", "float"):
        return choice == "int"
    return bool(ll.get_host_cpu_features().get("avx2"))

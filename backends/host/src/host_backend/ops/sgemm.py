"""Single-precision GEMM for the float convolutions, register-tiled in LLVM vector IR.

OpenBLAS reaches 70-100 GFLOPS single-threaded on the convolution shapes of a CNN (small M for
late layers, K = 27..4608); onnxruntime's own kernels reach about 115, this core's peak. This
GEMM reaches 111-116 with one micro-kernel written as a Numba intrinsic: an ``MR x NR`` tile of
C held in vector registers, per K step one load of the B row and one broadcast of each A
element, fused multiply-adds (``llvm.fma``, one ``vfmadd231ps`` per 16 lanes).

B (the HWIO weights as a ``K x N`` matrix) is packed on every call, one K block at a time
(nothing is cached between forwards, so weights edited in place are always seen); A is read
through a list of row offsets, so a convolution reads its taps straight from the padded input
(no im2col copy). Work buffers are per-thread scratch, reused from call to call.

It is used on CPUs with AVX-512 (32 vector registers hold the 6 x 64 tile); elsewhere, or with
``HOST_GEMM=blas``, the convolutions keep numpy's BLAS matmul. Results are float32 sums in a
different order than BLAS's, so they agree to rounding, not bit for bit.
"""

from __future__ import annotations

import functools
import os
import threading

import llvmlite.binding as ll
import numpy as np
from llvmlite import ir
from numba import get_num_threads, njit, types
from numba.extending import intrinsic

from ._common import fresh
from .parts import worker_pool

#: float32 lanes per vector register (AVX-512)
VW = 16
#: micro-tile rows (output pixels) and the widest panel of columns (output channels)
MR = 6
NR = 4 * VW
#: fewer rows than this are a matrix-vector product (`_gemv_taps`)
FEW_ROWS = 4 * MR
#: bytes a work buffer's start is aligned to (a cache line; one 16-lane vector)
ALIGN = 64
#: B rows per K block at most: a 64-column block of 1024 rows (256 KiB) stays in the L2 cache
KC = 1024
#: bytes of one packed K block of all columns at most (`block_rows`): wide B (512 columns, the
#: late layers of a CNN, few rows of A) packed 1024 rows at a time filled 2 MiB, the whole L2,
#: and each block was evicted before its panels were used (resnet18's 7x7x512 layers: 256-row
#: blocks 2.3 -> 2.0 ms, CPU time)
PACK_BYTES = 512 * 1024


def block_rows(n: int) -> int:
    """B rows per K block for `n` columns: `KC`, fewer where a block would pass `PACK_BYTES`."""
    return max(VW, min(KC, PACK_BYTES // (4 * max(n, 1))))


def _micro_kernel(lanes: int, mr: int = MR):
    """An intrinsic ``mk(a, aoff, lda, b, boff, ldb, c, coff, ldc, kn)``:
    ``C[r, :lanes*VW] += A[r, :kn] @ B[:kn, :lanes*VW]`` for the ``mr`` rows ``r`` of one tile,
    with ``A[r, k] = a[aoff + r*lda + k]``, ``B[k, j] = b[boff + k*ldb + j]``,
    ``C[r, j] = c[coff + r*ldc + j]`` (flat float32 arrays)."""

    @intrinsic
    def mk(typingctx, a, aoff, lda, b, boff, ldb, c, coff, ldc, kn):
        sig = types.void(a, aoff, lda, b, boff, ldb, c, coff, ldc, kn)

        def codegen(context, builder, sig, args):
            a_, aoff_, lda_, b_, boff_, ldb_, c_, coff_, ldc_, kn_ = args
            i32, i64 = ir.IntType(32), ir.IntType(64)
            vec = ir.VectorType(ir.FloatType(), VW)
            vptr = ir.PointerType(vec)
            module = builder.module
            fma_name = f"llvm.fma.v{VW}f32"
            fma = module.globals.get(fma_name) or ir.Function(
                module, ir.FunctionType(vec, [vec, vec, vec]), name=fma_name)

            def data(k, arg, off):
                arr = context.make_array(sig.args[k])(context, builder, arg)
                return builder.gep(arr.data, [off])

            def const(v):
                return ir.Constant(i64, v)

            ad, bd, cd = data(0, a_, aoff_), data(3, b_, boff_), data(6, c_, coff_)
            rows = [builder.gep(ad, [builder.mul(lda_, const(r))]) for r in range(mr)]
            cptr = [[builder.bitcast(builder.gep(cd, [builder.add(builder.mul(ldc_, const(r)),
                                                                  const(VW * j))]),
                                         vptr)
                     for j in range(lanes)] for r in range(mr)]
            init = [[builder.load(p, align=4) for p in row] for row in cptr]
            splat = ir.Constant(ir.VectorType(i32, VW), None)
            entry = builder.block
            loop = builder.append_basic_block("sgemm_k")
            done = builder.append_basic_block("sgemm_done")
            builder.cbranch(builder.icmp_signed(">", kn_, const(0)), loop, done)

            builder.position_at_end(loop)
            k = builder.phi(i64)
            k.add_incoming(const(0), entry)
            acc = [[builder.phi(vec) for _ in range(lanes)] for _ in range(mr)]
            for r in range(mr):
                for j in range(lanes):
                    acc[r][j].add_incoming(init[r][j], entry)
            brow = builder.gep(bd, [builder.mul(k, ldb_)])
            bs = [builder.load(builder.bitcast(builder.gep(brow, [const(VW * j)]), vptr), align=4)
                  for j in range(lanes)]
            new = []
            for r in range(mr):
                s = builder.load(builder.gep(rows[r], [k]), align=4)
                one = builder.insert_element(ir.Constant(vec, ir.Undefined), s, ir.Constant(i32, 0))
                av = builder.shuffle_vector(one, one, splat)
                new.append([builder.call(fma, [av, bs[j], acc[r][j]]) for j in range(lanes)])
            for r in range(mr):
                for j in range(lanes):
                    acc[r][j].add_incoming(new[r][j], loop)
            k1 = builder.add(k, const(1))
            k.add_incoming(k1, loop)
            builder.cbranch(builder.icmp_signed("<", k1, kn_), loop, done)

            builder.position_at_end(done)
            out = []
            for r in range(mr):
                for j in range(lanes):
                    p = builder.phi(vec)
                    p.add_incoming(init[r][j], entry)
                    p.add_incoming(new[r][j], loop)
                    out.append((cptr[r][j], p))
            for ptr, p in out:
                builder.store(p, ptr, align=4)
            return context.get_dummy_value()

        return sig, codegen

    return mk


def _row_copy(lanes: int):
    """An intrinsic ``cp(src, soff, dst, doff)``: ``lanes * VW`` float32 from ``src[soff:]`` to
    ``dst[doff:]`` as whole vectors (packing B rows at memory speed)."""

    @intrinsic
    def cp(typingctx, src, soff, dst, doff):
        sig = types.void(src, soff, dst, doff)

        def codegen(context, builder, sig, args):
            src_, soff_, dst_, doff_ = args
            vptr = ir.PointerType(ir.VectorType(ir.FloatType(), VW))
            sd = builder.gep(context.make_array(sig.args[0])(context, builder, src_).data, [soff_])
            dd = builder.gep(context.make_array(sig.args[2])(context, builder, dst_).data, [doff_])
            for j in range(lanes):
                at = ir.Constant(ir.IntType(64), VW * j)
                v = builder.load(builder.bitcast(builder.gep(sd, [at]), vptr), align=4)
                builder.store(v, builder.bitcast(builder.gep(dd, [at]), vptr), align=4)
            return context.get_dummy_value()

        return sig, codegen

    return cp


_mk1, _mk2, _mk3, _mk4 = (_micro_kernel(lanes) for lanes in (1, 2, 3, 4))
_row1, _row2, _row3, _row4 = (_micro_kernel(lanes, 1) for lanes in (1, 2, 3, 4))
_cp1, _cp2, _cp3, _cp4 = (_row_copy(lanes) for lanes in (1, 2, 3, 4))


@njit(cache=True)
def _tile(lanes, a, aoff, lda, b, boff, ldb, c, coff, ldc, kn):
    if lanes == 4:
        _mk4(a, aoff, lda, b, boff, ldb, c, coff, ldc, kn)
    elif lanes == 3:
        _mk3(a, aoff, lda, b, boff, ldb, c, coff, ldc, kn)
    elif lanes == 2:
        _mk2(a, aoff, lda, b, boff, ldb, c, coff, ldc, kn)
    else:
        _mk1(a, aoff, lda, b, boff, ldb, c, coff, ldc, kn)


@njit(cache=True)
def _row(lanes, a, aoff, b, boff, ldb, c, coff, kn):
    if lanes == 4:
        _row4(a, aoff, 0, b, boff, ldb, c, coff, 0, kn)
    elif lanes == 3:
        _row3(a, aoff, 0, b, boff, ldb, c, coff, 0, kn)
    elif lanes == 2:
        _row2(a, aoff, 0, b, boff, ldb, c, coff, 0, kn)
    else:
        _row1(a, aoff, 0, b, boff, ldb, c, coff, 0, kn)


@njit(cache=True)
def _copy(lanes, src, soff, dst, doff):
    if lanes == 4:
        _cp4(src, soff, dst, doff)
    elif lanes == 3:
        _cp3(src, soff, dst, doff)
    elif lanes == 2:
        _cp2(src, soff, dst, doff)
    else:
        _cp1(src, soff, dst, doff)


@njit(cache=True)
def _blocks(offs, kt, kc):
    """The K range cut into segments (A offset, B row, rows) of at most kc rows, and the
    segments grouped into blocks of at most kc rows (one segment at least)."""
    nseg = offs.size * ((kt + kc - 1) // kc)
    seg_a = np.empty(nseg, np.int64)
    seg_b = np.empty(nseg, np.int64)
    seg_n = np.empty(nseg, np.int64)
    i = 0
    for t in range(offs.size):
        for k0 in range(0, kt, kc):
            seg_a[i] = offs[t] + k0
            seg_b[i] = t * kt + k0
            seg_n[i] = min(kc, kt - k0)
            i += 1
    starts = np.empty(nseg + 1, np.int64)
    nblk = 0
    rows = kc
    for s in range(nseg):
        if rows + seg_n[s] > kc:
            starts[nblk] = s
            nblk += 1
            rows = 0
        rows += seg_n[s]
    starts[nblk] = nseg
    return seg_a, seg_b, seg_n, starts[:nblk + 1]


def gemm_taps(a: np.ndarray, lda: int, offs: np.ndarray, kt: int, rows: int, b: np.ndarray,
              ldb: int, n: int, c: np.ndarray, ldc: int, group_rows: int = 0,
              group_stride: int = 0) -> None:
    """``C[:rows, :n] += sum_t A_t @ B[t*kt:(t+1)*kt, :n]`` with ``A_t[r, k] = a[offs[t] +
    r*lda + k]`` (flat float32 ``a``, ``b``, ``c``; ``b`` rows ``ldb`` apart, ``c`` rows ``ldc``
    apart). Rows go MR at a time, the few left over one at a time, and ``n`` must be a
    multiple of VW; below `FEW_ROWS` rows (a matrix-vector product) B is read in place and
    ``n`` may be anything.

    With ``group_rows`` (dividing ``rows``) the rows come in groups whose A rows start
    ``group_stride`` elements apart: row ``g * group_rows + q`` reads ``a[g * group_stride +
    q * lda + ...]`` (one output row of a strided convolution per group). With more than one
    Numba thread (``NUMBA_NUM_THREADS``) the work is shared out among that many Python
    threads, the kernel running without the GIL: no OpenMP pool is left spinning between
    convolutions. A part no worker has started when the caller finishes its own runs on the
    caller: a worker pre-empted on a loaded machine holds nothing up."""
    group_rows = group_rows or rows
    if rows < FEW_ROWS:
        _gemv_taps(a, lda, offs, kt, rows, b, ldb, n, c, ldc, group_rows, group_stride)
        return
    units = rows // group_rows * (group_rows // MR + group_rows % MR)
    parts = max(1, min(get_num_threads(), rows // FEW_ROWS))
    cuts = [units * p // parts for p in range(parts + 1)]
    kc = block_rows(n)
    args = (a, lda, offs, kt, b, ldb, n, c, ldc, group_rows, group_stride, kc)
    packs = [scratch(f"pack{p}", kc * n) for p in range(parts)]
    pending = [(p, worker_pool(parts).submit(_gemm_taps, *args, cuts[p], cuts[p + 1], packs[p]))
               for p in range(1, parts)]
    _gemm_taps(*args, cuts[0], cuts[1], packs[0])
    for p, job in pending:  # a part no worker has started yet (a busy machine): run it here
        if job.cancel():
            _gemm_taps(*args, cuts[p], cuts[p + 1], packs[p])
        else:
            job.result()


#: B rows per pass over all panels in `_gemv_taps`
GEMV_KC = 16


@njit(cache=True, nogil=True)
def _gemv_taps(a, lda, offs, kt, rows, b, ldb, n, c, ldc, group_rows, group_stride):
    """`gemm_taps` for a few rows, one at a time: each B row is used once per row, so B is
    read in place, a few rows at a time across all columns (near the order it lies in
    memory, which the prefetchers follow); columns past the last whole vector one by one."""
    nv = n - n % VW
    for r in range(rows):
        a0 = (r // group_rows) * group_stride + (r % group_rows) * lda
        for t in range(offs.size):
            for k0 in range(0, kt, GEMV_KC):
                kn = min(GEMV_KC, kt - k0)
                for pb in range(0, nv, NR):
                    _row(min(NR, nv - pb) // VW, a, offs[t] + a0 + k0, b,
                         (t * kt + k0) * ldb + pb, ldb, c, r * ldc + pb, kn)
                for j in range(nv, n):
                    acc = c[r * ldc + j]
                    for k in range(k0, k0 + kn):
                        acc += a[offs[t] + a0 + k] * b[(t * kt + k) * ldb + j]
                    c[r * ldc + j] = acc


@njit(cache=True, nogil=True)
def _gemm_taps(a, lda, offs, kt, b, ldb, n, c, ldc, group_rows, group_stride, kc, u0, u1,
               packed):
    """`gemm_taps` over work units ``u0 .. u1``: per group, its whole MR-row tiles, then its
    left-over rows one by one. Per K block, B is packed panel-major once (into ``packed``,
    kc * n floats), then each panel serves every unit."""
    seg_a, seg_b, seg_n, starts = _blocks(offs, kt, kc)
    full = group_rows // MR
    per_group = full + group_rows % MR
    # one K block of B, all columns, packed panel-major: B rows are read whole (a stream
    # through memory) and each panel is then contiguous for the micro-kernel
    for blk in range(starts.size - 1):
        rows_blk = 0
        for s in range(starts[blk], starts[blk + 1]):
            for kk in range(seg_n[s]):
                src = (seg_b[s] + kk) * ldb
                for pb in range(0, n, NR):
                    width = min(NR, n - pb)
                    _copy(width // VW, b, src + pb, packed, pb * kc + rows_blk * width)
                rows_blk += 1
        for pb in range(0, n, NR):
            width = min(NR, n - pb)
            lanes = width // VW
            for u in range(u0, u1):
                g, j = u // per_group, u % per_group
                q = j * MR if j < full else full * MR + j - full
                a0 = g * group_stride + q * lda
                c0 = (g * group_rows + q) * ldc + pb
                row = 0
                for s in range(starts[blk], starts[blk + 1]):
                    if j < full:
                        _tile(lanes, a, seg_a[s] + a0, lda, packed, pb * kc + row * width,
                              width, c, c0, ldc, seg_n[s])
                    else:
                        _row(lanes, a, seg_a[s] + a0, packed, pb * kc + row * width, width,
                             c, c0, seg_n[s])
                    row += seg_n[s]


def padded_b(b: np.ndarray) -> tuple[np.ndarray, int]:
    """The ``K x N`` matrix B as `gemm_taps` reads it: float32, rows of a whole number of
    vectors (``npad`` columns, zeros past N); no copy when N already is one."""
    k, n = b.shape
    npad = -(-n // VW) * VW
    if npad == n:
        return np.ascontiguousarray(b, dtype=np.float32), npad
    out = np.zeros((k, npad), np.float32)
    out[:, :n] = b
    return out, npad


_LOCAL = threading.local()


def scratch(tag: str, size: int) -> np.ndarray:
    """This thread's work buffer `tag`: `size` float32 (contents undefined), reused from call
    to call. A fresh multi-megabyte array comes from the kernel as untouched pages, and the
    page faults on first use cost more than a convolution's arithmetic (measured: 1,500
    faults, 3 ms, on resnet's first layer); the buffers grow to the largest layer and stay.
    They start on a cache line (`ALIGN`): numpy's 16-byte alignment made every 64-byte load
    of packed B and of C straddle two lines (measured: resnet18's 3x3 layers 125-140 ->
    145-165 GFLOPS, CPU time)."""
    bufs = getattr(_LOCAL, "bufs", None)
    if bufs is None:
        bufs = _LOCAL.bufs = {}
    buf = bufs.get(tag)
    if buf is None or buf.size < size:
        raw = np.empty(size + VW, np.float32)
        skip = (-raw.ctypes.data % ALIGN) // 4
        buf = bufs[tag] = raw[skip:skip + size]
    return buf[:size]


def accumulator(bias: np.ndarray | None, rows: int, npad: int) -> np.ndarray:
    """C for `gemm_taps` (this thread's scratch: copy the result out): ``rows x npad``
    float32, each row starting at the bias (0 past it)."""
    c = scratch("c", rows * npad).reshape(rows, npad)
    if bias is None:
        c[...] = 0.0
    else:
        c[:, :bias.size] = bias
        c[:, bias.size:] = 0.0
    return c


def matmul(a: np.ndarray, b: np.ndarray, bias: np.ndarray | None = None,
           view: bool = False) -> np.ndarray:
    """``a @ b (+ bias)`` for a 2-D float32 ``a`` (M x K) and ``b`` (K x N): C-contiguous
    float32 (M x N). A few rows read B as it is; whole tiles read it padded to vectors. With
    `view`, C itself: this thread's scratch, M x npad (``npad >= N``, zeros past N), no copy."""
    m, k = a.shape
    n = b.shape[1]
    if m < FEW_ROWS:
        bp, npad = np.ascontiguousarray(b, dtype=np.float32), n
    else:
        bp, npad = padded_b(b)
    c = accumulator(bias, m, npad)
    gemm_taps(np.ascontiguousarray(a, dtype=np.float32).reshape(-1), k, np.zeros(1, np.int64),
              k, m, bp.reshape(-1), npad, npad, c.reshape(-1), npad)
    return c if view else fresh(c[:, :n])


def enabled() -> bool:
    """Whether the float convolutions use this GEMM: on CPUs with AVX-512 by default;
    ``HOST_GEMM=blas`` or ``HOST_GEMM=own`` decides instead."""
    choice = os.environ.get("HOST_GEMM", "").strip().lower()
    if choice in ("blas", "own"):
        return choice == "own"
    return _has_avx512()


@functools.cache
def _has_avx512() -> bool:
    """Asked once: LLVM's CPU query takes about 0.1 ms."""
    return bool(ll.get_host_cpu_features().get("avx512f"))

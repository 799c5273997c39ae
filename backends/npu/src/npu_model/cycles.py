"""The cycle model of one layer (runs in Numba; the tile loop never runs in Python).

A layer is a sequence of row tiles (the `TILE` field of its instructions). Each tile is loaded
(input rows with their halo, plus weights when they do not stay resident), computed, and stored.
The DMA and the compute units are double-buffered, so the layer takes

    L_0 + sum_i max(C_i, L_{i+1} + S_{i-1}) + S_last + fixed overhead

cycles, where a transfer's cycles are ``max(etm_bytes / etm_bw, ocm_bytes / ocm_bw)`` (ETM and
OCM have separate ports) and every transfer is rounded up to whole DMA bursts. Since every load
and store appears in exactly one term, the result is never below the total compute cycles nor
below total bytes / bandwidth (the bounds the tests check).

Compute cycles come from the MPE mapping: an MPE pass consumes one input-channel block (the
channel unit) of one kernel tap for one output pixel per column and ``out_lanes`` output
channels per row, so a dense conv takes
``groups * ceil(cout_g / (out_lanes * rows)) * ceil(pixels / cols) * taps * ceil(cin_g / cu)``
cycles. The vector unit handles `vector_lanes` elements per cycle (pools: per window tap).
"""

from __future__ import annotations

import numpy as np

from .kernels.jit import helper, kernel, tiered

# --- hw vector indices (NpuConfig.hw_vector) -----------------------------------------------------
HW_ROWS, HW_COLS, HW_VLANES, HW_ETM_BW1024, HW_OCM_BW1024, HW_IBUF, HW_WBUF, HW_OBUF, \
    HW_BURST, HW_HARDOP, HW_SYNC = range(11)

# --- layer vector indices ------------------------------------------------------------------------
(L_KIND, L_ESZ_IN, L_ESZ_OUT, L_IN_H, L_IN_W, L_IN_C, L_OUT_H, L_OUT_W, L_OUT_C, L_KH, L_KW,
 L_SH, L_DH, L_GROUPS, L_CIN_G, L_COUT_G, L_TILE_ROWS, L_TILE_OCB, L_ICB, L_OCB_EFF, L_OCB,
 L_WGT_BYTES, L_PRM_BYTES, L_IN_MEM, L_IN1_MEM, L_OUT_MEM, L_WGT_MEM, L_IN1_BYTES, L_MACS,
 L_TAPS) = range(30)
L_SIZE = 32

# layer kinds
K_CONV, K_DW, K_MATMUL, K_ELTW, K_MAXPOOL, K_AVGPOOL, K_LUT, K_UPSAMPLE, K_COPY, K_RESIZE, \
    K_NORM = range(11)

# --- result vector indices -----------------------------------------------------------------------
(R_CYCLES, R_COMPUTE, R_DMA, R_ETM_RD, R_ETM_WR, R_OCM_RD, R_OCM_WR, R_RTILES, R_WTILES,
 R_MACS) = range(10)
R_SIZE = 10


@helper
def _cdiv(a, b):
    return (a + b - 1) // b


@helper
def _xfer(etm_bytes, ocm_bytes, hw):
    """Cycles of one transfer (ETM and OCM ports in parallel), bytes per 1024 cycles."""
    te = _cdiv(etm_bytes * 1024, hw[HW_ETM_BW1024])
    to = _cdiv(ocm_bytes * 1024, hw[HW_OCM_BW1024])
    return te if te > to else to


@helper
def _burst(nbytes, hw):
    return _cdiv(nbytes, hw[HW_BURST]) * hw[HW_BURST]


@kernel
def layer_cycles_kernel(lv, hw, res):
    """Fill `res` (R_* indices, int64) for layer vector `lv` on hardware `hw`; return res
    (called as `layer_cycles`)."""
    for i in range(R_SIZE):
        res[i] = 0
    kind = lv[L_KIND]
    rows_en = hw[HW_ROWS]
    cols_en = hw[HW_COLS]
    out_h = lv[L_OUT_H]
    out_w = lv[L_OUT_W]
    out_c = lv[L_OUT_C]
    in_h = lv[L_IN_H]
    in_w = lv[L_IN_W]
    in_c = lv[L_IN_C]
    esz_in = lv[L_ESZ_IN]
    esz_out = lv[L_ESZ_OUT]
    tile_rows = lv[L_TILE_ROWS]
    if tile_rows <= 0 or tile_rows > out_h:
        tile_rows = out_h
    if tile_rows <= 0:
        tile_rows = 1
    n_rt = _cdiv(out_h, tile_rows) if out_h > 0 else 1
    kh = lv[L_KH]
    sh = lv[L_SH]
    dh = lv[L_DH]
    # weights: resident when they fit half the weight buffer, else streamed per row tile
    wbytes = lv[L_WGT_BYTES]
    w_resident = wbytes <= hw[HW_WBUF]
    nob = _cdiv(lv[L_COUT_G], lv[L_OCB]) if lv[L_OCB] > 0 else 1
    ocb_tile = lv[L_TILE_OCB] if lv[L_TILE_OCB] > 0 else nob
    n_oct = _cdiv(nob, ocb_tile) * lv[L_GROUPS] if wbytes > 0 else 0
    total = 0
    prev_store = 0
    etm_rd = 0
    etm_wr = 0
    ocm_rd = 0
    ocm_wr = 0
    rtiles = 0
    wtiles = 0
    compute_total = 0
    dma_total = 0
    prev_comp = 0
    store_2back = 0
    for r in range(n_rt):
        ro = tile_rows if (r + 1) * tile_rows <= out_h else out_h - r * tile_rows
        # --- loads of this tile -----------------------------------------------------------------
        if kind == K_MATMUL or kind == K_ELTW or kind == K_LUT or kind == K_COPY or \
                kind == K_NORM:
            ri = ro
        elif kind == K_UPSAMPLE:
            ri = _cdiv(ro, sh) + 1
        elif kind == K_RESIZE:  # the input rows a tile's output rows span, plus the lower one
            ri = _cdiv(ro * in_h, out_h) + 1
        else:
            ri = (ro - 1) * sh + (kh - 1) * dh + 1
        if ri > in_h:
            ri = in_h
        ld_e = 0
        ld_o = 0
        b_in = _burst(ri * in_w * in_c * esz_in, hw)
        if lv[L_IN_MEM] == 0:
            ld_e += b_in
        else:
            ld_o += b_in
        rtiles += 1
        if lv[L_IN1_BYTES] > 0:
            if kind == K_ELTW:  # B streams with A, row for row
                b1 = _burst(_cdiv(lv[L_IN1_BYTES] * ro, out_h), hw)
            else:  # matmul B: loaded once, with the first tile
                b1 = _burst(lv[L_IN1_BYTES], hw) if r == 0 else 0
            if lv[L_IN1_MEM] == 0:
                ld_e += b1
            else:
                ld_o += b1
            if b1 > 0:
                rtiles += 1
        if wbytes > 0 and (r == 0 or not w_resident):
            bw = _burst(wbytes, hw)
            if lv[L_WGT_MEM] == 0:
                ld_e += bw
            else:
                ld_o += bw
            rtiles += n_oct
        if r == 0 and lv[L_PRM_BYTES] > 0:
            ld_e += _burst(lv[L_PRM_BYTES], hw)
            rtiles += 1
        load = _xfer(ld_e, ld_o, hw)
        etm_rd += ld_e
        ocm_rd += ld_o
        # --- compute of this tile ---------------------------------------------------------------
        pix = ro * out_w
        if kind == K_CONV or kind == K_MATMUL:
            comp = lv[L_GROUPS] * _cdiv(lv[L_COUT_G], lv[L_OCB_EFF]) * _cdiv(pix, cols_en) \
                * lv[L_TAPS] * _cdiv(lv[L_CIN_G], lv[L_ICB])
        elif kind == K_DW:
            comp = _cdiv(out_c, lv[L_ICB] * rows_en) * _cdiv(pix, cols_en) * lv[L_TAPS]
        else:
            comp = _cdiv(pix * out_c, hw[HW_VLANES]) * (lv[L_TAPS] if lv[L_TAPS] > 0 else 1)
        # --- store of this tile -----------------------------------------------------------------
        b_out = _burst(pix * out_c * esz_out, hw)
        if lv[L_OUT_MEM] == 0:
            etm_wr += b_out
            store = _xfer(b_out, np.int64(0), hw)
        else:
            ocm_wr += b_out
            store = _xfer(np.int64(0), b_out, hw)
        wtiles += 1
        # --- double-buffered pipeline -----------------------------------------------------------
        # while tile r-1 computes, the DMA loads tile r and stores tile r-2
        if r == 0:
            total += load
        else:
            total += max(prev_comp, load + store_2back)
        store_2back = prev_store
        prev_comp = comp
        prev_store = store
        compute_total += comp
        dma_total += load + store
    total += max(prev_comp, store_2back) + prev_store
    total += hw[HW_HARDOP]
    res[R_CYCLES] = total
    res[R_COMPUTE] = compute_total
    res[R_DMA] = dma_total
    res[R_ETM_RD] = etm_rd
    res[R_ETM_WR] = etm_wr
    res[R_OCM_RD] = ocm_rd
    res[R_OCM_WR] = ocm_wr
    res[R_RTILES] = rtiles
    res[R_WTILES] = wtiles
    res[R_MACS] = lv[L_MACS]
    return res


#: `layer_cycles_kernel` as the icore calls it: interpreted while not compiled, until its
#: interpreted calls have cost about a compile (`jit.Tiered`). A network's first run calls it
#: once per layer (tens to hundreds of calls, ~0.1 ms each as Python); later runs replay the
#: recorded results, so a fresh install need not compile it for a network's first forward.
layer_cycles = tiered(layer_cycles_kernel)


def new_layer_vector() -> np.ndarray:
    return np.zeros(L_SIZE, dtype=np.int64)


def new_result_vector() -> np.ndarray:
    return np.zeros(R_SIZE, dtype=np.int64)

"""Helpers of the NPU simulator tests: a device harness with one mapped ETM window, and the
numpy integer references the simulator is compared against (imported by the tests)."""

from __future__ import annotations

import numpy as np

from npu_model import asm
from xir.quant.fixed_point import requantize_one  # noqa: F401  (the twin under test)

LOGICAL = 0x1000_0000


class Harness:
    """A ZG330 device with one ETM chunk mapped at logical LOGICAL; a bump allocator in it."""

    def __init__(self, dev, size: int = 16 << 20) -> None:
        self.dev = dev
        self.chunk = dev.malloc(size)
        dev.mmuMap(0, LOGICAL, self.chunk.addr, size)
        self.off = 64
        self.cfg = dev.config

    def alloc(self, nbytes: int) -> int:
        """Logical address of `nbytes` fresh bytes (64-aligned)."""
        a = self.off
        self.off = asm.align(self.off + max(int(nbytes), 1), 64)
        assert self.off <= self.chunk.byte_size
        return LOGICAL + a

    def put(self, data: np.ndarray) -> int:
        data = np.ascontiguousarray(data)
        addr = self.alloc(data.nbytes)
        self.write(addr, data)
        return addr

    def write(self, logical: int, data: np.ndarray) -> None:
        self.chunk.write(logical - LOGICAL, np.ascontiguousarray(data).view(np.uint8).ravel())

    def fmap_in(self, x: np.ndarray, pitch: int | None = None, c_off: int = 0) -> asm.FMap:
        """Upload an (h, w, c) int8/int16 map padded to `pitch` channels at `c_off`."""
        h, w, c = x.shape
        dt = "int16" if x.dtype == np.int16 else "int8"
        pitch = pitch or asm.align(c_off + c, self.cfg.channel_unit(dt))
        buf = np.zeros((h, w, pitch), dtype=x.dtype)
        buf[:, :, c_off:c_off + c] = x
        return asm.FMap(self.put(buf), h, w, c, pitch, c_off, dt)

    def fmap_out(self, h: int, w: int, c: int, dtype: str = "int8", pitch: int | None = None,
                 c_off: int = 0, fill: int = 0x5A) -> asm.FMap:
        """A fresh output buffer pre-filled with garbage (so unwritten bytes show)."""
        pitch = pitch or asm.align(c_off + c, self.cfg.channel_unit(dtype))
        esz = 2 if dtype == "int16" else 1
        addr = self.alloc(h * w * pitch * esz)
        self.chunk.fill(fill, addr - LOGICAL, h * w * pitch * esz)
        return asm.FMap(addr, h, w, c, pitch, c_off, dtype)

    def read(self, f: asm.FMap, all_channels: bool = False) -> np.ndarray:
        r = f.resolved(self.cfg)
        dt = np.int16 if r.dtype == "int16" else np.int8
        raw = self.chunk.view(r.addr - LOGICAL, r.h * r.row_stride).view(dt)
        arr = raw.reshape(r.h, r.row_stride // r.esize)[:, : r.w * r.pitch].reshape(
            r.h, r.w, r.pitch)
        return arr.copy() if all_channels else arr[:, :, r.c_off:r.c_off + r.c].copy()

    def run(self, layers, end: bool = True) -> tuple[int, int]:
        """Emit, upload and run `layers`; return (physical address, bytes) of the program."""
        prog = asm.emit_program(list(layers), self.cfg, end=end)
        addr = self.put(prog)
        phys = self.chunk.addr + (addr - LOGICAL)
        self.dev.icoreCalc(phys, prog.nbytes)
        return phys, prog.nbytes


# --- integer references ---------------------------------------------------------------------------


def ref_requant(acc, mult, shift, lo, hi, mult_neg=None, shift_neg=None):
    """numpy requantization, written out independently of xir (round half up, clamp)."""
    acc = np.asarray(acc, dtype=np.int64)
    m = np.broadcast_to(np.asarray(mult, dtype=np.int64), acc.shape)
    s = np.broadcast_to(np.asarray(shift, dtype=np.int64), acc.shape)
    if mult_neg is not None:
        m = np.where(acc < 0, np.broadcast_to(np.asarray(mult_neg, np.int64), acc.shape), m)
        s = np.where(acc < 0, np.broadcast_to(np.asarray(shift_neg, np.int64), acc.shape), s)
    p = acc * m
    half = np.where(s > 0, np.left_shift(np.int64(1), np.maximum(s - 1, 0)), 0)
    r = np.right_shift(p + half, s)
    return np.clip(r, lo, hi)


def ref_conv_acc(x, w, bias, stride=(1, 1), pad=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    """Integer convolution accumulator (int64), NHWC x HWIO."""
    h, wd, cin = x.shape
    kh, kw, cin_g, cout = w.shape
    sh, sw = stride
    dh, dw = dilation
    pt, pb, pl, pr = pad
    xp = np.pad(x.astype(np.int64), ((pt, pb), (pl, pr), (0, 0)))
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    cout_g = cout // groups
    acc = np.zeros((oh, ow, cout), dtype=np.int64)
    for g in range(groups):
        xs = xp[:, :, g * cin_g:(g + 1) * cin_g]
        ws = w[:, :, :, g * cout_g:(g + 1) * cout_g].astype(np.int64)
        for ky in range(kh):
            for kx in range(kw):
                win = xs[ky * dh: ky * dh + (oh - 1) * sh + 1: sh,
                         kx * dw: kx * dw + (ow - 1) * sw + 1: sw]
                acc[:, :, g * cout_g:(g + 1) * cout_g] += win @ ws[ky, kx]
    return acc + np.asarray(bias, dtype=np.int64)


def rand_requant(rng, n, scale=None):
    """Random per-channel (mult, shift) around `scale` (a real multiplier)."""
    from xir.quant.fixed_point import quantize_multiplier

    real = (scale or 1e-3) * rng.uniform(0.5, 2.0, n)
    return quantize_multiplier(real)

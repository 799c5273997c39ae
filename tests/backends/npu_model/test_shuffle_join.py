"""A channel shuffle's COPY STRIDED_OUT layers replay as one `interleave` call
(`npu_model.program.join_shuffles`): the same bytes as the copies one by one, on any thread
count, and only where that is exact (otherwise the copies stay as they were)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from npu_model import asm, program
from npu_model.kernels import interleave, pool, vector


def _shuffle_layers(src: asm.FMap, dst: asm.FMap, g: int) -> list[asm.Copy]:
    """The COPY layers `lower_channel_shuffle` emits for `g` groups."""
    n = src.c // g
    return [asm.Copy(replace(src, c_off=src.c_off + i * n, c=n),
                     replace(dst, c_off=dst.c_off + i, c=(n - 1) * g + 1), out_step=g)
            for i in range(g)]


def _ref_shuffle(x: np.ndarray, g: int) -> np.ndarray:
    h, w, c = x.shape
    return x.reshape(h, w, g, c // g).transpose(0, 1, 3, 2).reshape(h, w, c)


@pytest.fixture
def joined_calls(monkeypatch):
    """How many times a joined shuffle kernel ran."""
    calls = [0]
    pick = interleave.for_groups

    def counted(k_n):
        fn, takes_k = pick(k_n)

        def run(*a):
            calls[0] += 1
            return fn(*a)

        return run, takes_k

    monkeypatch.setattr(interleave, "for_groups", counted)
    return calls


@pytest.mark.parametrize("g, n, h, w, dtype", [(4, 28, 5, 6, "int8"), (2, 17, 3, 4, "int8"),
                                               (3, 12, 4, 1, "int16"), (5, 3, 2, 7, "int8"),
                                               (4, 34, 1, 1, "int16")])
def test_shuffle_replays_as_one_call(hw, rng, decodes, joined_calls, g, n, h, w, dtype):
    """Decoded once (the copies one by one), then replayed as one call per shuffle on new
    inputs: the output equals the reference shuffle, the channels past C in the output's
    pitch keep their garbage, at 1, 2 and 4 threads alike."""
    npdt = np.int16 if dtype == "int16" else np.int8
    info = np.iinfo(npdt)
    c = g * n
    x = rng.integers(info.min, info.max + 1, (h, w, c)).astype(npdt)
    fi = hw.fmap_in(x)
    fo = hw.fmap_out(h, w, c, dtype, pitch=asm.align(c, 16) + 16)  # padding past C shows
    phys, nbytes = hw.run(_shuffle_layers(fi, fo, g))
    want = np.full((h, w, fo.pitch), 0x5A5A if dtype == "int16" else 0x5A, npdt)
    want[:, :, :c] = _ref_shuffle(x, g)
    np.testing.assert_array_equal(hw.read(fo, all_channels=True), want)
    assert (decodes[0], joined_calls[0]) == (1, 0)
    outs = []
    try:
        for threads in (1, 2, 4):
            pool.set_threads(threads)
            x2 = rng.integers(info.min, info.max + 1, (h, w, c)).astype(npdt)
            buf = np.zeros((h, w, fi.pitch), npdt)
            buf[:, :, :c] = x2
            hw.write(fi.addr, buf)
            hw.dev.reset(1)
            hw.dev.icoreCalc(phys, nbytes)
            want[:, :, :c] = _ref_shuffle(x2, g)
            got = hw.read(fo, all_channels=True)
            np.testing.assert_array_equal(got, want)
            outs.append((x2.tobytes(), got.tobytes()))
    finally:
        pool.set_threads(None)
    assert decodes[0] == 1  # every later run replayed ...
    assert joined_calls[0] == 3  # ... the shuffle as one call


def _copy_steps(x, y, g, n, h, w, xrs, xpitch, yrs, ypitch, xoff=0, yoff=0, offs=None):
    """The `vector.copy` steps of a shuffle as the icore records them."""
    offs = offs or [(xoff + k * n, yoff + k) for k in range(g)]
    return [(vector.copy, (x, xrs, xpitch, xo, y, yrs, ypitch, yo, h, w, n, g))
            for xo, yo in offs]


def _run(steps):
    for fn, args in steps:
        fn(*args)


def test_joined_steps_write_the_bytes_of_the_copies(rng):
    g, n, h, w = 4, 9, 3, 5
    x = rng.integers(-128, 128, h * w * 40).astype(np.int8)
    ya, yb = (np.full(h * w * 40, 7, np.int8) for _ in range(2))
    steps_a = _copy_steps(x, ya, g, n, h, w, w * 40, 40, w * 40, 40, xoff=2, yoff=3)
    steps_b = program.join_shuffles(_copy_steps(x, yb, g, n, h, w, w * 40, 40, w * 40, 40,
                                                xoff=2, yoff=3))
    assert len(steps_b) == 1 and steps_b[0][0] is interleave.interleave4
    _run(steps_a)
    _run(steps_b)
    np.testing.assert_array_equal(ya, yb)


def test_what_cannot_be_proven_stays_as_it_was(rng):
    g, n, h, w = 4, 8, 2, 3
    x = rng.integers(-128, 128, 4096).astype(np.int8)
    y = np.zeros(4096, np.int8)
    geo = (g, n, h, w, w * 32, 32, w * 32, 32)
    cases = {
        "output overlaps the input": _copy_steps(x, x[16:], *geo),
        "pixels overlap (pitch below K n)": _copy_steps(x, y, g, n, h, w, w * 32, 32, w * 16,
                                                         16),
        "not the shuffle's offsets": _copy_steps(x, y, *geo, offs=[(0, 0), (8, 2), (16, 1),
                                                                    (24, 3)]),
        "one copy short": _copy_steps(x, y, *geo)[:3],
        "another output array": _copy_steps(x, y, *geo)[:3] + _copy_steps(x, y[1:], *geo)[3:],
        "past the view": _copy_steps(x[:100], y, *geo),
    }
    for why, steps in cases.items():
        assert program.join_shuffles(steps) == steps, why
    dense = [(vector.copy, (x, 96, 32, 0, y, 96, 32, 0, 2, 3, 8, 1))] * 2  # plain copies
    assert program.join_shuffles(dense) == dense
    mixed = _copy_steps(x, y, *geo)
    mixed.insert(2, (np.copyto, (y[:4], x[:4])))  # another step between the copies
    assert program.join_shuffles(mixed) == mixed


def test_two_shuffles_in_a_row_join_each(rng):
    x = rng.integers(-128, 128, 2048).astype(np.int8)
    y1, y2 = np.zeros(2048, np.int8), np.zeros(2048, np.int8)
    steps = _copy_steps(x, y1, 2, 16, 2, 2, 64, 32, 64, 32) + \
        _copy_steps(x, y2, 4, 8, 2, 2, 64, 32, 64, 32)
    joined = program.join_shuffles(steps)
    assert [fn for fn, _ in joined] == [interleave.interleave2, interleave.interleave4]
    ref1, ref2 = y1.copy(), y2.copy()
    _run(steps)
    ref1[:], ref2[:] = y1, y2
    y1[:] = 0
    y2[:] = 0
    _run(joined)
    np.testing.assert_array_equal(y1, ref1)
    np.testing.assert_array_equal(y2, ref2)

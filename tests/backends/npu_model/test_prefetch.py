"""The kernel calls of a run, known before it runs (`npu_model.prefetch`, issue 30 item 4): the
dry decode lists exactly the calls the real decode makes (same kernels, same operands, same
order), runs none of them, and changes nothing of the icore (counters, tiles) or of memory."""

from __future__ import annotations

import numpy as np
from npu_testlib import rand_requant

from npu_model import asm, prefetch
from npu_model.core import Icore
from npu_model.kernels import compile_pool


def _layers(hw, rng):
    x = rng.integers(-128, 128, (9, 10, 24)).astype(np.int8)
    wq = rng.integers(-127, 128, (3, 3, 24, 32)).astype(np.int8)
    m, s = rand_requant(rng, 32, 2.0 / (9 * 24 * 30))
    fi, fc = hw.fmap_in(x), hw.fmap_out(9, 10, 32)
    conv = asm.Conv(fi, fc, hw.put(asm.pack_conv_weights(wq, 1, "int8", hw.cfg)),
                    hw.put(asm.pack_requant_params(5, m, s)), kernel=(3, 3), pad=(1, 1, 1, 1))
    fp = hw.fmap_out(4, 5, 32)
    pool = asm.Pool(fc, fp, "max", 2, 2, 0)
    return [conv, pool], fp


def _arg(a):
    """An operand as a kernel sees it (a view of memory, or an array the decode derived from
    constants: the same bytes either way)."""
    if isinstance(a, np.ndarray):
        return ("array", a.dtype.str, a.shape, a.tobytes())
    return ("scalar", int(a) if isinstance(a, (int, np.integer)) else a)


def test_the_dry_decode_lists_the_runs_kernel_calls_and_runs_none(hw, rng, monkeypatch):
    layers, out = _layers(hw, rng)
    interpret = Icore._interpret
    seen = {}

    def spied(self, *decode):
        before = self.stats(), self.tiles.read.copy(), hw.chunk.view(0, hw.off).copy()
        seen["dry"] = prefetch.kernel_calls_of_run(self, *decode)
        after = self.stats(), self.tiles.read.copy(), hw.chunk.view(0, hw.off).copy()
        assert before[0] == after[0]
        np.testing.assert_array_equal(before[1], after[1])
        np.testing.assert_array_equal(before[2], after[2])  # no kernel ran
        res = interpret(self, *decode)
        seen["real"] = compile_pool.kernel_calls(self._rec.steps)
        return res

    monkeypatch.setattr(Icore, "_interpret", spied)
    hw.run(layers)
    dry, real = seen["dry"], seen["real"]
    assert len(real) == 2 and [f for f, _ in dry] == [f for f, _ in real]
    for (_, a), (_, b) in zip(dry, real):
        assert [_arg(v) for v in a] == [_arg(v) for v in b]
    assert hw.read(out).any()


def test_a_warm_process_stops_dry_decoding(hw, rng, monkeypatch):
    """Every kernel of the run compiled (or cached) already: nothing queued, and no more dry
    decodes in this process."""
    layers, _ = _layers(hw, rng)
    hw.run(layers)  # compiles (or loads) the run's kernels in this process
    monkeypatch.setattr(prefetch, "active", True)
    monkeypatch.setattr(compile_pool, "available", lambda: True)
    calls = []
    monkeypatch.setattr(compile_pool, "prefetch", lambda c: calls.append(c) or 0)
    interpret = Icore._interpret
    monkeypatch.setattr(Icore, "_interpret",
                        lambda self, *d: (prefetch.prefetch_run(self, *d), interpret(self, *d))[1])
    hw2_layers, _ = _layers(hw, rng)  # a new program: decoded, not replayed
    hw.run(hw2_layers)
    assert prefetch.active is False and calls == []

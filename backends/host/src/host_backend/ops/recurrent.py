"""Host kernels of xir.ops.recurrent: the recurrence of ONNX's LSTM, GRU and RNN.

The input projection ``X @ W^T + Wb`` arrives precomputed (`xw`, made by a Matmul before the
op). What is left runs here: one Python loop over the timesteps, every step one batched matmul
``h @ R^T`` over the directions and numpy element-wise gate updates over (direction, batch,
hidden). A reverse direction reads each sequence backwards within its own length: step s of
batch item b is timestep ``len[b] - 1 - s`` (steps past the length keep the state and write
zeros to Y, as onnxruntime does), so both directions share the same step loop.

Sums are in float32 (float64 for float64 inputs); float16 inputs compute in float32. There is
no integer form: quantized networks keep these ops float between Casts.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from xir.ops.recurrent import (
    DIRECTIONS,
    GRURecurrence,
    LSTMRecurrence,
    RNNRecurrence,
    resolve_activations,
)
from xrt.errors import InvalidArgumentError

_DEFAULT_ACTS = {cls.op_type: cls.DEFAULT_ACTS
                 for cls in (LSTMRecurrence, GRURecurrence, RNNRecurrence)}


def _sigmoid(x, a, b):
    """1 / (1 + e^-x) as (1 + tanh(x / 2)) / 2: one transcendental, no overflow, no branch
    (within 6e-8 of the float64 logistic; a third of the time of the exp form here)."""
    half = x.dtype.type(0.5)
    y = np.tanh(x * half)
    y += 1
    y *= half
    return y


_ACTS: dict[str, Callable[[np.ndarray, float, float], np.ndarray]] = {
    "sigmoid": _sigmoid,
    "tanh": lambda x, a, b: np.tanh(x),
    "relu": lambda x, a, b: np.maximum(x, 0),
    "affine": lambda x, a, b: a * x + b,
    "leakyrelu": lambda x, a, b: np.where(x >= 0, x, a * x),
    "thresholdedrelu": lambda x, a, b: np.where(x > a, x, 0),
    "scaledtanh": lambda x, a, b: a * np.tanh(b * x),
    "hardsigmoid": lambda x, a, b: np.clip(a * x + b, 0, 1),
    "elu": lambda x, a, b: np.where(x >= 0, x, a * np.expm1(np.minimum(x, 0))),
    "softsign": lambda x, a, b: x / (1 + np.abs(x)),
    "softplus": lambda x, a, b: np.logaddexp(0, x),
}


class _Act:
    """One activation slot (f, g or h) for every direction: applied to a [D, B, H] array at
    once when the directions agree, else direction by direction."""

    def __init__(self, per_dir: list[tuple[str, float, float]], dt) -> None:
        self.per_dir = [(_ACTS[n], dt.type(a), dt.type(b)) for n, a, b in per_dir]
        self.same = len(set(per_dir)) == 1

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if self.same:
            fn, a, b = self.per_dir[0]
            return fn(x, a, b).astype(x.dtype, copy=False)
        return np.stack([fn(x[d], a, b).astype(x.dtype, copy=False)
                         for d, (fn, a, b) in enumerate(self.per_dir)])


def _acts(op_type: str, attrs: dict, n_dirs: int, dt) -> list[_Act]:
    defaults = _DEFAULT_ACTS[op_type]
    names = list(attrs.get("activations") or []) or list(defaults) * n_dirs
    table = resolve_activations(names, attrs.get("activation_alpha") or [],
                                attrs.get("activation_beta") or [])
    k = len(defaults)
    return [_Act([table[d * k + j] for d in range(n_dirs)], dt) for j in range(k)]


class _Seq:
    """The sequence geometry of one call: time-major gathered projection, step masks, and
    where each step's output goes."""

    def __init__(self, xw: np.ndarray, seq_lens: np.ndarray, attrs: dict, n_gates: int,
                 dt) -> None:
        direction = attrs.get("direction", "forward")
        if direction not in DIRECTIONS:
            raise InvalidArgumentError(f"recurrence: unknown direction {direction!r}")
        self.layout = int(attrs.get("layout", 0))
        h = int(attrs["hidden_size"])
        d = 2 if direction == "bidirectional" else 1
        x = np.asarray(xw)
        if self.layout == 1:
            x = x.transpose(1, 0, 2)
        t, b = x.shape[0], x.shape[1]
        x = x.reshape(t, b, d, n_gates * h)
        lens = np.asarray(seq_lens).astype(np.int64).reshape(-1)
        if lens.shape != (b,) or (lens < 0).any() or (lens > t).any():
            raise InvalidArgumentError(
                f"recurrence: sequence_lens {lens.tolist()} must hold {b} lengths in 0..{t}")
        steps = np.arange(t)[:, None]
        self.valid = steps < lens[None, :]                       # [T, B]
        self.full = bool(self.valid.all())
        self.empty = lens == 0                                   # [B]
        back = np.where(self.valid, lens[None, :] - 1 - steps, steps)
        reverse = [direction == "reverse" or (direction == "bidirectional" and k == 1)
                   for k in range(d)]
        #: tidx[s, d, b]: the timestep that step s of direction d reads and writes
        self.tidx = np.stack([back if r else np.broadcast_to(steps, (t, b)) for r in reverse],
                             axis=1)
        self.bidx = np.arange(b)[None, None, :]
        self.didx = np.arange(d)[None, :, None]
        #: xs[s, d, b, :] = the projection of timestep tidx[s, d, b], time-major, contiguous
        self.xs = np.ascontiguousarray(x[self.tidx, self.bidx, self.didx], dtype=dt)
        self.t, self.b, self.d, self.h = t, b, d, h

    def add_bias(self, bias: np.ndarray) -> None:
        """Add a per-direction bias [D, 1, G*H] to every step's projection once."""
        self.xs += bias[None]

    def keep(self, s: int, new: np.ndarray, old: np.ndarray) -> np.ndarray:
        """The state after step s: `new` where the item's sequence still runs, else `old`."""
        return new if self.full else np.where(self.valid[s][None, :, None], new, old)

    def emit(self, s: int, new: np.ndarray) -> np.ndarray:
        """Step s's Y: `new`, zero past an item's length."""
        return new if self.full else np.where(self.valid[s][None, :, None], new, 0)

    def output(self, ys: np.ndarray) -> np.ndarray:
        """Y from the per-step outputs ys[s, d, b, h]: back to timestep order, in the layout."""
        y = np.zeros_like(ys)
        y[self.tidx, self.didx, self.bidx] = ys
        return y.transpose(2, 0, 1, 3) if self.layout == 1 else y

    def state(self, hs: np.ndarray) -> np.ndarray:
        """A final state [D, B, H] in the layout ([B, D, H] for layout 1); zeros for an item
        of length 0 (not its initial state), as onnxruntime gives."""
        if self.empty.any():
            hs = np.where(self.empty[None, :, None], 0, hs).astype(hs.dtype, copy=False)
        return hs.transpose(1, 0, 2) if self.layout == 1 else hs

    def initial(self, x: np.ndarray, dt) -> np.ndarray:
        s = np.asarray(x, dtype=dt)
        return np.array(s.transpose(1, 0, 2) if self.layout == 1 else s, order="C")


def _dtype(x: np.ndarray):
    return np.dtype(np.float64) if np.asarray(x).dtype == np.float64 else np.dtype(np.float32)


def _clipper(attrs: dict, dt) -> Callable[[np.ndarray], np.ndarray]:
    c = float(attrs.get("clip", np.inf))
    if not np.isfinite(c):
        return lambda x: x
    lo, hi = dt.type(-c), dt.type(c)
    return lambda x: np.clip(x, lo, hi, out=x)


def lstm_recurrence(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """ONNX LSTM after the input projection. Inputs xw, r [D, 4H, H], b [D, 8H], initial_h,
    initial_c, p [D, 3H], sequence_lens; outputs Y, Y_h, Y_c (gate order i, o, f, c)."""
    xw, r, bias, h0, c0, p, lens = inputs
    dt = _dtype(xw)
    seq = _Seq(xw, lens, attrs, 4, dt)
    H = seq.h
    f, g, hact = _acts("LSTMRecurrence", attrs, seq.d, dt)
    clip = _clipper(attrs, dt)
    rt = np.ascontiguousarray(np.asarray(r, dt).transpose(0, 2, 1))       # [D, H, 4H]
    bias = np.asarray(bias, dt)
    seq.add_bias(bias[:, None, :4 * H] + bias[:, None, 4 * H:])         # Wb + Rb, [D, 1, 4H]
    pv = np.asarray(p, dt)[:, None, :]
    pi, po, pf = pv[..., :H], pv[..., H:2 * H], pv[..., 2 * H:]
    couple = bool(attrs.get("input_forget", False))
    hs, cs = seq.initial(h0, dt), seq.initial(c0, dt)
    ys = np.empty((seq.t, seq.d, seq.b, H), dt)
    for s in range(seq.t):
        gates = seq.xs[s] + np.matmul(hs, rt)                               # [D, B, 4H]
        i = f(clip(gates[..., :H] + pi * cs))
        fg = 1 - i if couple else f(clip(gates[..., 2 * H:3 * H] + pf * cs))
        c_new = fg * cs + i * g(clip(gates[..., 3 * H:]))
        o = f(clip(gates[..., H:2 * H] + po * c_new))
        h_new = o * hact(c_new)
        hs, cs = seq.keep(s, h_new, hs), seq.keep(s, c_new, cs)
        ys[s] = seq.emit(s, h_new)
    out = xw.dtype if np.asarray(xw).dtype.kind == "f" else dt
    return [seq.output(ys).astype(out), seq.state(hs).astype(out), seq.state(cs).astype(out)]


def gru_recurrence(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """ONNX GRU after the input projection. Inputs xw, r [D, 3H, H], b [D, 6H], initial_h,
    sequence_lens; outputs Y, Y_h (gate order z, r, h)."""
    xw, r, bias, h0, lens = inputs
    dt = _dtype(xw)
    seq = _Seq(xw, lens, attrs, 3, dt)
    H = seq.h
    f, g = _acts("GRURecurrence", attrs, seq.d, dt)
    clip = _clipper(attrs, dt)
    r = np.asarray(r, dt)
    r_zr = np.ascontiguousarray(r[:, :2 * H].transpose(0, 2, 1))         # [D, H, 2H]
    r_h = np.ascontiguousarray(r[:, 2 * H:].transpose(0, 2, 1))          # [D, H, H]
    bias = np.asarray(bias, dt)
    before = bool(attrs.get("linear_before_reset", False))
    rb_h = bias[:, None, 5 * H:]                                          # [D, 1, H]
    pre = bias[:, None, :3 * H].copy()                                    # Wb, then Rb z, r
    pre[..., :2 * H] += bias[:, None, 3 * H:5 * H]
    if not before:  # Rb of gate h adds outside the reset gate: with the rest
        pre[..., 2 * H:] += rb_h
    seq.add_bias(pre)
    hs = seq.initial(h0, dt)
    ys = np.empty((seq.t, seq.d, seq.b, H), dt)
    for s in range(seq.t):
        gx = seq.xs[s]                                                      # [D, B, 3H]
        zr = f(clip(gx[..., :2 * H] + np.matmul(hs, r_zr)))
        z, rg = zr[..., :H], zr[..., H:]
        if before:
            hh = g(clip(gx[..., 2 * H:] + rg * (np.matmul(hs, r_h) + rb_h)))
        else:
            hh = g(clip(gx[..., 2 * H:] + np.matmul(rg * hs, r_h)))
        h_new = (1 - z) * hh + z * hs
        hs = seq.keep(s, h_new, hs)
        ys[s] = seq.emit(s, h_new)
    out = xw.dtype if np.asarray(xw).dtype.kind == "f" else dt
    return [seq.output(ys).astype(out), seq.state(hs).astype(out)]


def rnn_recurrence(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """ONNX RNN after the input projection: ``H = f(xw + Wb + H @ R^T + Rb)``. Inputs xw,
    r [D, H, H], b [D, 2H], initial_h, sequence_lens; outputs Y, Y_h."""
    xw, r, bias, h0, lens = inputs
    dt = _dtype(xw)
    seq = _Seq(xw, lens, attrs, 1, dt)
    H = seq.h
    (f,) = _acts("RNNRecurrence", attrs, seq.d, dt)
    clip = _clipper(attrs, dt)
    rt = np.ascontiguousarray(np.asarray(r, dt).transpose(0, 2, 1))
    bias = np.asarray(bias, dt)
    seq.add_bias(bias[:, None, :H] + bias[:, None, H:])
    hs = seq.initial(h0, dt)
    ys = np.empty((seq.t, seq.d, seq.b, H), dt)
    for s in range(seq.t):
        h_new = f(clip(seq.xs[s] + np.matmul(hs, rt)))
        hs = seq.keep(s, h_new, hs)
        ys[s] = seq.emit(s, h_new)
    out = xw.dtype if np.asarray(xw).dtype.kind == "f" else dt
    return [seq.output(ys).astype(out), seq.state(hs).astype(out)]


FLOAT_KERNELS: dict = {
    "LSTMRecurrence": lstm_recurrence,
    "GRURecurrence": gru_recurrence,
    "RNNRecurrence": rnn_recurrence,
}
INT_KERNELS: dict = {}

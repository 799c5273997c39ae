"""Activation bias correction: each convolution's output mean, as the integer network computes
it, brought back to the float network's, in network order (the "empirical" bias correction of
Nagel et al., "Data-Free Quantization", 2019, section 4.2, measured on the calibration samples).

Rounding an activation is unbiased, but what the next layers make of it is not: a table reads
a rounded input, and a convex function of a noisy input is larger on average (hard-swish is
``x^2 / 6 + x / 2`` on ``(-3, 3)``: ``E[h(x + e)] = h(x) + var(e) / 6``); a map clipped at its
threshold loses its tail on one side; a depthwise filter sums those shifts over its window. A
convolution reading such values writes a per-channel mean shift that every later layer
inherits. PaddleOCR's PP-OCRv4 detector is the case measured (docs/quantization.md section 8):
its stem's int8 values (per-tensor scales over channels 50x apart) carry a shift of up to 8
standard deviations of the rounding error at ``p2o.Conv.3``, and the probability map's error
falls by a fifth once every convolution's shift is removed.

How: the float network is run once more over the calibration samples as the integer network
computes it -- every quantized value rounded to its scale (round half away from zero,
saturated to its dtype), the convolutions' weights still float (their rounding has its own
correction: GPTQ, or `bias_correction.weight_error_shift`) -- in network order; at each
convolution without a folded activation (so that a bias shift moves its output exactly) the
mean over samples and positions of ``its output - the float network's output`` per channel is
subtracted from its bias, and from the output carried on, before it is rounded. Later layers
thus see the corrected earlier ones, as in the integer network. One emulated forward of the
calibration set; the float network's per-channel means come from one float forward.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from xcompile.runner import Runner, default_runner
from xir.network import Network
from xir.ops.base import Operation
from xir.values import Params

__all__ = ["activation_bias_shifts", "apply_bias_shifts", "correctable"]

#: the ops corrected (channels on the output's last axis, a bias per output channel). The
#: PP-OCRv4 detector's logits come from a ConvTranspose2d: correcting it too moved its error
#: by the noise of the measure (mean 1 - cosine over 16 held-out images 0.0083 -> 0.0089)
CONVOLUTIONS = ("Conv2d",)
#: Every channel's mean shift is applied, however small. Applying only those the samples
#: agree on (3 standard errors from 0 over the eight calibration samples) measured worse on
#: the PP-OCRv4 detector (mean 1 - cosine over 16 held-out images 0.0083 -> 0.0094, lowest
#: 0.983 -> 0.977) and changed the zoo's seeded networks by 1e-4 (MobileNetV2 held out
#: 0.99726 without correction, 0.99703 corrected, 0.99715 with only the agreed shifts)


def correctable(op: Operation, int_ops: set[int]) -> bool:
    """A convolution whose output mean a bias shift moves exactly: an integer Conv2d with a
    constant bias, no folded activation, channels on the output's last axis."""
    if op.op_type not in CONVOLUTIONS or op.op_id not in int_ops or len(op.inputs) < 3:
        return False
    b = op.inputs[2]
    if not b.is_params or b.data is None:
        return False
    if op.attrs.get("act", "none") != "none":
        return False
    y = op.outputs[0]
    return len(y.shape) == 4 and int(np.size(b.data)) == int(y.shape[-1])


def _round_to(a: np.ndarray, scale: float, qmin: int, qmax: int) -> np.ndarray:
    """`a` rounded to its codes (half away from zero, saturated) and read back."""
    x = np.asarray(a, np.float64) / scale
    q = np.clip(np.sign(x) * np.floor(np.abs(x) + 0.5), qmin, qmax)
    return (q * scale).astype(np.asarray(a).dtype, copy=False)


def _float_means(net: Network, data: list[list[np.ndarray]], vids: set[int],
                 runner: Runner) -> dict[int, list[np.ndarray]]:
    """Per-channel (last axis) means of the values `vids` over the positions of each sample,
    one array per sample."""
    means: dict[int, list[np.ndarray]] = {}

    def keep(v: Any, arr: np.ndarray) -> None:
        if v.v_id in vids:
            a = np.asarray(arr, np.float64)
            means.setdefault(v.v_id, []).append(a.reshape(-1, a.shape[-1]).mean(axis=0))

    runner.run(net, data, keep)
    return means


def activation_bias_shifts(net: Network, data: list[list[np.ndarray]], int_ops: set[int],
                           rounding: dict[int, tuple[float, int, int]],
                           runner: Runner | None = None,
                           ops: Callable[[Operation], bool] | None = None
                           ) -> dict[int, np.ndarray]:
    """`{op_id: per-channel shift}` to subtract from the bias of each correctable convolution
    of `net` (the float network the quantizer builds from), measured in network order on the
    calibration samples `data` with every value in `rounding` (`{v_id: (scale, qmin, qmax)}`)
    rounded as the integer network rounds it. `ops` narrows the convolutions corrected.
    Empty when the runner has no float kernel for an op on the way (nothing is emulated
    then)."""
    runner = runner or default_runner()
    targets = {op.op_id for op in net.ops if correctable(op, int_ops) and (ops is None or ops(op))}
    if not targets or not data:
        return {}
    fmean = _float_means(net, data, {net.getOpById(i).outputs[0].v_id for i in targets}, runner)
    pending: dict[int, int] = {}
    for op in net.ops:
        for v in op.feature_inputs():
            pending[v.v_id] = pending.get(v.v_id, 0) + 1
    live: dict[int, list[np.ndarray]] = {}
    shifts: dict[int, np.ndarray] = {}

    def settle(vid: int, arrays: list[np.ndarray]) -> None:
        if vid in rounding:
            s, lo, hi = rounding[vid]
            arrays = [_round_to(a, s, lo, hi) for a in arrays]
        if pending.get(vid, 0):
            live[vid] = arrays

    for op in net.ops:
        if op.op_type == "Input":
            for k, v in enumerate(op.outputs):
                settle(v.v_id, [np.asarray(sample[k]) for sample in data])
            continue
        if op.op_type == "Output":
            continue
        feeds = [live[v.v_id] for v in op.feature_inputs()]
        outs: list[list[np.ndarray]] = [[] for _ in op.outputs]
        for sample in zip(*feeds):
            res = runner.run_op(op, list(sample))
            if res is None:
                return {}
            for k, a in enumerate(res):
                outs[k].append(np.array(a, copy=True).reshape(op.outputs[k].shape))
        if op.op_id in targets:
            y = op.outputs[0]
            got = [a.astype(np.float64).reshape(-1, a.shape[-1]).mean(axis=0) for a in outs[0]]
            m = np.mean(got, axis=0) - np.mean(fmean[y.v_id], axis=0)
            shifts[op.op_id] = m
            outs[0] = [(a - m.astype(a.dtype)) for a in outs[0]]
        for v in op.feature_inputs():
            pending[v.v_id] -= 1
            if not pending[v.v_id]:
                live.pop(v.v_id, None)
        for v, arrays in zip(op.outputs, outs):
            settle(v.v_id, arrays)
    return shifts


def apply_bias_shifts(net: Network, shifts: dict[int, np.ndarray]) -> int:
    """Subtract each shift from its convolution's bias in `net` (in place); returns how many
    biases changed."""
    for op_id, m in shifts.items():
        op = net.getOpById(op_id)
        b = op.inputs[2]
        op.inputs[2] = Params(b.v_id, b.dtype,
                              (np.asarray(b.data, np.float64).reshape(-1) - m)
                              .reshape(np.shape(b.data)).astype(np.float32),
                              b.name, b.mtype, dict(b.tags))
    net.relink()
    return len(shifts)

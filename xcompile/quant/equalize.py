"""Cross-layer equalisation (Nagel et al., "Data-Free Quantization", 2019) on a float network.

Two convolutions in a row, the first's output read only by the second through nothing or a
ReLU (positively homogeneous: ``relu(x / s) = relu(x) / s`` for ``s > 0``), compute the same
function when output channel ``i`` of the first is divided by ``s_i`` and input channel ``i`` of
the second multiplied by it. With ``s_i = sqrt(r1_i / r2_i)`` (``r1_i``, ``r2_i``: the channel's
largest weight magnitude in each) both ranges become ``sqrt(r1_i * r2_i)``, so a per-tensor
weight scale no longer spends its codes on one loud channel. With per-channel weights the
first convolution gains nothing and the second's columns little, so the quantizer runs it only
for per-tensor weights (`quantize_network(equalize=...)`, docs/quantization.md).
"""

from __future__ import annotations

import numpy as np

from xir.network import Network
from xir.ops.base import Operation
from xir.values import Params

__all__ = ["equalize"]

#: passes over the network: a chain of convolutions converges within a few
PASSES = 4
#: bound on one channel's factor, so a dead channel (range 0) cannot blow another up
MAX_FACTOR = 1e3


def _weight(op: Operation) -> np.ndarray | None:
    w = op.inputs[1] if len(op.inputs) > 1 else None
    if w is None or not (w.is_params and w.data is not None) or np.ndim(w.data) != 4:
        return None
    return np.asarray(w.data, np.float64)


def _homogeneous(op: Operation) -> bool:
    """A folded activation that commutes with a positive per-channel scale."""
    act = op.attrs.get("act", "none")
    return act == "none" or (act == "relu" and float(op.attrs.get("act_max", np.inf)) == np.inf)


def _pairs(net: Network) -> list[tuple[Operation, Operation]]:
    outputs = {v.v_id for v in net.outputs()}
    found = []
    for op in net.ops:
        if op.op_type != "Conv2d" or _weight(op) is None or not _homogeneous(op):
            continue
        y = op.outputs[0]
        if y.v_id in outputs or len(y.consumers) != 1:
            continue
        nxt = y.consumers[0]
        if nxt.op_type != "Conv2d" or nxt.inputs[0] is not y or _weight(nxt) is None:
            continue
        c = y.shape[3]
        g = int(nxt.attrs.get("groups", 1))
        if g == 1 or (g == c and _weight(nxt).shape[2] == 1):
            found.append((op, nxt))
    return found


def _set(net: Network, op: Operation, k: int, data: np.ndarray) -> None:
    p = op.inputs[k]
    op.inputs[k] = Params(p.v_id, p.dtype, data.astype(np.float32), p.name, p.mtype,
                          dict(p.tags))


def equalize(net: Network) -> int:
    """Equalise every eligible convolution pair of `net` in place (float weights only);
    returns the number of pairs changed."""
    changed: set[int] = set()
    for _ in range(PASSES):
        for first, second in _pairs(net):
            w1, w2 = _weight(first), _weight(second)
            depthwise = int(second.attrs.get("groups", 1)) > 1
            r1 = np.abs(w1).max(axis=(0, 1, 2))
            r2 = np.abs(w2).max(axis=(0, 1, 2)) if depthwise else np.abs(w2).max(axis=(0, 1, 3))
            ok = (r1 > 0) & (r2 > 0)
            s = np.ones_like(r1)
            s[ok] = np.clip(np.sqrt(r1[ok] / r2[ok]), 1 / MAX_FACTOR, MAX_FACTOR)
            if np.allclose(s, 1.0, rtol=1e-3):
                continue
            _set(net, first, 1, w1 / s)
            if len(first.inputs) > 2:
                _set(net, first, 2, np.asarray(first.inputs[2].data, np.float64) / s)
            _set(net, second, 1, w2 * (s if depthwise else s.reshape(1, 1, -1, 1)))
            changed.add(first.op_id)
    net.relink()
    return len(changed)

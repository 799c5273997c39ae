"""Headroom for a network's head: the few values per input that a dense head computes after
its last global pool, and the scores it writes (docs/quantization.md section 8, "Log-power
spectra" measured it on DNSMOS).

Each element of such a value is one number per input, so four calibration samples are four
draws of it: no histogram for an observer to trade clipping against rounding, and the largest
draw underestimates the next input's (which exceeds the largest of N draws with probability
1 / (N + 1), for every element). A clipped score is silently wrong where a cosine cannot see
it: DNSMOS P.835's SIG read 3.875 for 4.14 (cosine 0.9997); its dense layers' 128 and 64
features, clipped on held-out speech, moved the scores by up to 0.29 more. Those values keep
twice their calibrated range at 8 bits (one bit of step; the scores' step is 0.06 MOS)."""

from __future__ import annotations

import numpy as np

from xcompile.quant.capability import shares_scale
from xir.network import Network

#: the amax multiplier of a head value at 8 bits
OUTPUT_HEADROOM = 2.0
#: at most this many elements make a head value (a dense layer's features, a few scores)
SMALL_VALUE = 256
#: ops whose output lies in [-1, 1]: the headroom stops there
BOUNDED_OPS = ("Sigmoid", "Tanh", "Softmax")


def _small(v) -> bool:
    return int(np.prod(v.shape)) <= SMALL_VALUE


def head_values(net: Network) -> dict[int, float]:
    """`{v_id: bound}` of the head values of `net` (optimized, float): each network output of
    at most `SMALL_VALUE` elements, and back from it every small value whose readers are all
    head ops, through ops that rescale (a code-moving op shares its input's scale group, which
    may hold a whole feature map: DNSMOS's global max). `bound` is 1.0 after a bounded op
    (`BOUNDED_OPS`), else inf."""
    head: dict[int, float] = {}
    inside: set[int] = set()  # ops of the head
    todo = [v for v in net.outputs() if _small(v)]
    while todo:
        v = todo.pop()
        if v.v_id in head:
            continue
        prod = v.producer
        if prod is None or prod.op_type == "Input" or shares_scale(prod):
            continue
        head[v.v_id] = 1.0 if prod.op_type in BOUNDED_OPS else np.inf
        inside.add(prod.op_id)
        for u in prod.feature_inputs():
            if _small(u) and all(c.op_id in inside for c in u.consumers) and \
                    u.v_id not in {o.v_id for o in net.outputs()}:
                todo.append(u)
    return head


def widen_head(amax: dict[int, float], head: dict[int, float], eight_bit) -> list[int]:
    """Multiply the thresholds of the 8-bit head values by `OUTPUT_HEADROOM`, up to each one's
    bound (in place); returns the v_ids widened."""
    done = []
    for vid, bound in head.items():
        if vid in amax and eight_bit(vid):
            amax[vid] = max(amax[vid], min(amax[vid] * OUTPUT_HEADROOM, bound))
            done.append(vid)
    return sorted(done)

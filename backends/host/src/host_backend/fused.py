"""Float Conv2d chains in one pass: a Conv2d followed by its BatchNorm2d, residual Add and Relu
(the exporters' conv / bn / add / relu blocks of a ResNet) computed as the convolution's GEMM
result plus one pass that applies the three and writes the chain's output.

Op by op, each of those ops reads and writes a whole feature map: on resnet18 (1x224x224x3)
BatchNorm2d, Add and Relu cost 6 ms of a 44 ms forward and the convolution's copy out of its
GEMM buffer 1 ms more, all memory traffic (CPU time, load ~10). A chain reads the GEMM result
once and writes its output once.

The results are the op-by-op results byte for byte (`HostBackend.forwardSegment`'s contract):
the same GEMM sums, then each float32 operation of the kernels it replaces, in their order and
with their rounding -- ``x * a + b`` rounded after the multiply and after the add as
BatchNorm2d does (no fused multiply-add), the Add one float32 sum, the Relu ``x if x > 0 or x
is NaN else 0``. Only the intermediate values nobody reads (not wanted after the segment, one
reader inside it) are left out; anything else runs op by op.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit
from numpy.lib.stride_tricks import as_strided

from .ops.conv import sgemm_sums
from .ops.norm import batch_norm_scale_shift


@dataclass(frozen=True)
class Chain:
    """A Conv2d and the ops fused after it (each optional, at least one, in this order)."""

    conv: Any
    bn: Any | None
    add: Any | None
    relu: Any | None
    #: the Add's other input (the residual), a v_id
    residual: int | None

    @property
    def last(self) -> Any:
        """The op whose output is the chain's result."""
        return self.relu or self.add or self.bn


def _float(op: Any) -> bool:
    """A float op the float kernel runs (no quantized value, not Cast), float32 outputs."""
    return not op.is_quantized() and op.op_type != "Cast" and all(
        v.dtype.numpy_dtype == np.float32 for v in op.outputs)


def _no_act(op: Any) -> bool:
    return str(op.attrs.get("act", "none")) == "none"


def _plain_relu(op: Any) -> bool:
    a = op.attrs
    return float(a.get("alpha", 0.0)) == 0.0 and float(a.get("threshold", 0.0)) == 0.0 and \
        float(a.get("max_value", np.inf)) == np.inf


def _conv_head(op: Any) -> bool:
    return op.op_type == "Conv2d" and _float(op) and _no_act(op) and \
        int(op.attrs.get("groups", 1)) == 1 and len(op.outputs) == 1 and \
        not op.inputs[0].is_params and all(v.is_params for v in op.inputs[1:])


def _takes(nxt: Any, prev: Any, shape: tuple, uses: Counter) -> bool:
    """Whether `nxt` may join a chain whose value so far is `prev`: `prev` has one reader and
    is not wanted, `nxt` a float op of one output of the chain's shape."""
    return uses[prev.v_id] == 1 and len(nxt.outputs) == 1 and _float(nxt) and \
        tuple(nxt.outputs[0].dtype.shape) == shape


def plan_segment(ops: tuple[Any, ...], wanted: tuple[int, ...]) -> list[Any]:
    """The steps of a segment: each op alone, or a `Chain` of consecutive ops where every
    intermediate value has one reader (the next op of the chain) and is not wanted."""
    uses: Counter[int] = Counter(wanted)
    for op in ops:
        if op.op_type != "Input":
            uses.update(v.v_id for v in op.inputs if not v.is_params)
    steps: list[Any] = []
    i = 0
    while i < len(ops):
        op = ops[i]
        if not _conv_head(op):
            steps.append(op)
            i += 1
            continue
        prev = op.outputs[0]
        shape = tuple(prev.dtype.shape)
        found: dict[str, Any] = {}
        residual = None
        j = i + 1

        nxt = ops[j] if j < len(ops) else None
        if nxt is not None and nxt.op_type == "BatchNorm2d" and \
                _takes(nxt, prev, shape, uses) and nxt.inputs[0].v_id == prev.v_id and \
                len(nxt.inputs) == 5 and all(v.is_params for v in nxt.inputs[1:]):
            found["bn"], prev, j = nxt, nxt.outputs[0], j + 1
        nxt = ops[j] if j < len(ops) else None
        if nxt is not None and nxt.op_type == "Add" and _takes(nxt, prev, shape, uses) and \
                _no_act(nxt) and len(nxt.inputs) == 2:
            x0, x1 = nxt.inputs
            other = x1 if x0.v_id == prev.v_id else x0 if x1.v_id == prev.v_id else None
            if other is not None and other.v_id != prev.v_id and not other.is_params and \
                    tuple(other.dtype.shape) == shape and other.dtype.numpy_dtype == np.float32:
                found["add"], residual, prev, j = nxt, other.v_id, nxt.outputs[0], j + 1
        nxt = ops[j] if j < len(ops) else None
        if nxt is not None and nxt.op_type == "Relu" and _takes(nxt, prev, shape, uses) and \
                nxt.inputs[0].v_id == prev.v_id and _plain_relu(nxt):
            found["relu"], prev, j = nxt, nxt.outputs[0], j + 1
        if not found:
            steps.append(op)
            i += 1
            continue
        steps.append(Chain(op, found.get("bn"), found.get("add"), found.get("relu"), residual))
        i = j
    return steps


def run_chain(chain: Chain, conv_inputs: list[np.ndarray], bn_inputs: list[np.ndarray] | None,
              residual: np.ndarray | None) -> np.ndarray | None:
    """The chain's output (float32, C-contiguous, the conv's (n, ho, wo, cout)), or None where
    the convolution does not run on `sgemm` (run the ops one by one then)."""
    sums = sgemm_sums(conv_inputs, chain.conv.attrs)
    if sums is None:
        return None
    cout = conv_inputs[1].shape[3]
    y = np.empty(sums.shape[:3] + (cout,), np.float32)
    if chain.bn is not None:
        a, b = batch_norm_scale_shift(bn_inputs, chain.bn.attrs, cout)
    else:
        a = b = np.zeros(cout, np.float32)
    res = residual if residual is not None else y  # not read without the Add
    if res.shape != y.shape or res.dtype != np.float32:
        return None
    n, ho, wo = y.shape[:3]
    c2, hp, wp = _rows(sums)
    _epilogue(c2, hp, wp, y.reshape(-1, cout), ho, wo, a, b,
              np.ascontiguousarray(res).reshape(-1, cout), chain.bn is not None,
              residual is not None, chain.relu is not None)
    return y


def _rows(sums: np.ndarray) -> tuple[np.ndarray, int, int]:
    """The GEMM result (n, ho, wo, npad) as rows of a (hp, wp) pixel grid: (C as a 2-D
    array, hp, wp), pixel (i, p, q) being row ``(i * hp + p) * wp + q``. A stride-1
    convolution's result is a window of a grid with pad pixels (`conv._conv2d_taps`); the
    epilogue indexes its rows instead of taking a view per pixel (reference counting)."""
    n, ho, wo, npad = sums.shape
    s0, s1, s2, s3 = sums.strides
    if s3 == 4 and s2 == 4 * npad and s2 > 0 and s1 % s2 == 0 and s1 > 0 and s0 % s1 == 0 \
            and s1 // s2 >= wo and (n == 1 or s0 // s1 >= ho):
        wp, hp = s1 // s2, (s0 // s1 if n > 1 else ho)
        rows = ((n - 1) * hp + ho - 1) * wp + wo
        return as_strided(sums, shape=(rows, npad), strides=(s2, 4), writeable=False), hp, wp
    return np.ascontiguousarray(sums).reshape(-1, npad), ho, wo


@njit(cache=True)
def _epilogue(c, hp, wp, y, ho, wo, a, b, res, bn, add, relu):
    """``y = relu(c * a + b + res)`` per pixel over y's channels, each part optional, each
    float32 operation rounded as the op-by-op kernels round it (no fused multiply-add); c's
    rows a (hp, wp) grid per image (`_rows`), y's and res's (ho, wo)."""
    cout = y.shape[1]
    zero = np.float32(0)
    for i in range(y.shape[0] // (ho * wo)):
        for p in range(ho):
            for q in range(wo):
                cr = (i * hp + p) * wp + q
                yr = (i * ho + p) * wo + q
                if bn and add and relu:
                    for j in range(cout):
                        v = c[cr, j] * a[j] + b[j] + res[yr, j]
                        y[yr, j] = v if (v > zero or v != v) else zero
                elif bn and relu:
                    for j in range(cout):
                        v = c[cr, j] * a[j] + b[j]
                        y[yr, j] = v if (v > zero or v != v) else zero
                elif bn and add:
                    for j in range(cout):
                        y[yr, j] = c[cr, j] * a[j] + b[j] + res[yr, j]
                elif bn:
                    for j in range(cout):
                        y[yr, j] = c[cr, j] * a[j] + b[j]
                else:
                    for j in range(cout):
                        v = c[cr, j] + res[yr, j] if add else c[cr, j]
                        if relu:
                            v = v if (v > zero or v != v) else zero
                        y[yr, j] = v

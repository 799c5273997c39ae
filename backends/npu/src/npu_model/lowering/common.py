"""Shared helpers of the NPU lowering: the target description, dtypes, network cloning.

Every FMSH NPU target (ZG330, Buyi) lowers the same way; what differs is a `TargetConfig`:
the hardware (`NpuConfig`: channel units, MPE array), the data types it computes, the
``compile_target`` string its HardOps carry, the file suffix of the compile hook and the key
of the lowering's annotations in value / op / network tags.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from npu_model.config import NpuConfig
from xir.network import Network
from xir.types import QuantizedType
from xir.values import Params, Value

from ..config import DEFAULT


@dataclass(frozen=True)
class TargetConfig:
    """What a lowering target is: the parameters of the shared lowering."""

    #: target name (``xrt compile --target NAME``; ``device_info["target"]`` of the HardOps)
    name: str
    #: the hardware model the instructions are emitted and weights packed for
    npu: NpuConfig
    #: compile_target of every HardOp this lowering makes
    compile_target: str
    #: file suffix of the generated stage (``*_<suffix>.json/raw``)
    suffix: str
    #: key of the lowering's annotations in value / op / network tags
    tag: str
    #: feature-map dtypes the NPU computes
    dtypes: tuple[str, ...] = ("int8", "int16")

    def channel_unit(self, bits_or_dtype: Any) -> int:
        return channel_unit(bits_or_dtype, self.npu)

#: the compiler's ETM layout: the first 64 logical addresses are reserved, every block 64-aligned
ETM_RESERVED = 64
ETM_ALIGN = 64


def align(n: int, unit: int) -> int:
    return -(-int(n) // int(unit)) * int(unit)


def npu_dtype(v: Value) -> str | None:
    """'int8' / 'int16' for a per-tensor quantized value with that storage, else None."""
    el = v.dtype.element_dtype
    if not isinstance(el, QuantizedType) or el.axis is not None:
        return None
    if np.any(el.zero_point != 0):
        return None
    return {np.dtype(np.int8): "int8", np.dtype(np.int16): "int16"}.get(np.dtype(el.numpy_dtype))


def scale_of(v: Value) -> float:
    return float(v.dtype.element_dtype.scale[0])


def channel_unit(bits_or_dtype: Any, cfg: NpuConfig = DEFAULT) -> int:
    """The channel unit for 8/16 bits or 'int8'/'int16'."""
    dt = bits_or_dtype if isinstance(bits_or_dtype, str) else \
        ("int8" if int(bits_or_dtype) == 8 else "int16")
    return cfg.channel_unit(dt)


def map3(shape: tuple[int, ...]) -> tuple[int, int, int] | None:
    """A value shape as the NPU's (h, w, c) feature map of one batch item, or None when it has
    no such form.

    NHWC (N, H, W, C) -> (H, W, C) per item (`items` gives N; the N items lie one after the
    other in the buffer, N * H rows); (B, M, K) -> (B, M, K); (M, K) -> (1, M, K).
    """
    s = tuple(int(d) for d in shape)
    if len(s) == 4:
        out = (s[1], s[2], s[3])
        if s[0] < 1 or s[0] * s[1] >= 1 << 16:
            return None
    elif len(s) == 3:
        out = s
    elif len(s) == 2:
        out = (1, s[0], s[1])
    else:
        return None
    if min(out) < 1 or max(out) >= 1 << 16:
        return None
    return out


def items(shape: tuple[int, ...]) -> int:
    """The batch items of a value's NPU map: N of an NHWC (N, H, W, C) value, else 1 (a 3-D
    or 2-D value is one map whose h is its leading axis)."""
    return int(shape[0]) if len(shape) == 4 else 1


def clone_network(net: Network) -> tuple[Network, dict[int, Value]]:
    """A copy of `net` with fresh Value / op objects (Params share their data arrays)."""
    out = Network(net.name, framework_kind=net.framework_kind,
                  framework_version=net.framework_version, icraft_version=net.icraft_version,
                  icraft_xir_version=net.icraft_xir_version, tags=_deep(net.tags))
    vals: dict[int, Value] = {}

    def cv(v: Value) -> Value:
        if v.v_id not in vals:
            if v.is_params:
                nv: Value = Params(v.v_id, v.dtype, v.data, v.name, v.mtype, _deep(v.tags))
            else:
                nv = Value(v.v_id, v.dtype, v.name, v.mtype, _deep(v.tags))
            vals[v.v_id] = nv
        return vals[v.v_id]

    for op in net.ops:
        new = op.clone_with([cv(v) for v in op.inputs], [cv(v) for v in op.outputs])
        new.tags = _deep(op.tags)
        out.ops.append(new)
    out.relink()
    out.reserveIds(max(out.opIds(), default=-1), max(vals, default=-1))
    out.reserveIdsOf(net)
    return out, vals


def _deep(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _deep(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_deep(v) for v in x]
    return x

"""Concat, Split, Slice and Pad: axis-generic ops that work in whatever view their input has.

Axes and per-axis lists are remapped to that view, so no Transpose is emitted for them.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from xcompile.frontend.onnx_import.registry import _handles, _Unsupported
from xcompile.frontend.onnx_import.tensor import NHWC, _ident

if TYPE_CHECKING:
    from xcompile.frontend.onnx_import.importer import _Importer


@_handles("Concat")
def _concat(im: _Importer, node, a, ins):
    parts = [t for t in ins if math.prod(t.shape) > 0 or t.rank != ins[0].rank]
    if len(parts) == 1:
        return [parts[0]]
    r = parts[0].rank
    axis = int(a["axis"]) % r
    perm = next((t.base for t in parts if not t.is_const), _ident(r))
    values = [im.value(t, perm) for t in parts]
    layout = "NHWC" if perm == NHWC else None
    return [im.result(im.emit1("Concat", values, layout, axis=perm.index(axis)), perm)]


@_handles("Split")
def _split(im: _Importer, node, a, ins):
    x = ins[0]
    axis = int(a.get("axis", 0)) % x.rank
    n = len(node.output)
    dim = x.shape[axis]
    sizes = im.const_of(ins[1] if len(ins) > 1 else None, "Split sizes")
    if sizes is not None:
        sizes = [int(s) for s in sizes]
    elif "split" in a:
        sizes = [int(s) for s in a["split"]]
    else:
        n = int(a.get("num_outputs", n))
        chunk = -(-dim // n)
        sizes = [min(chunk, dim - i * chunk) for i in range(n)]
    perm = x.base
    outs = im.emit("Split", [im.value(x, perm)], ["NHWC" if perm == NHWC else None] * len(sizes),
                   axis=perm.index(axis), sections=sizes)
    return [im.result(v, perm) for v in outs]


def _onnx_slice(start: int, end: int, step: int, dim: int) -> tuple[int, int]:
    """ONNX Slice clamping, expressed as python slice bounds."""
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        start, end = min(max(start, 0), dim), min(max(end, 0), dim)
    else:
        start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
        if end < 0:
            end = -dim - 1
    return start, end


@_handles("Slice")
def _slice(im: _Importer, node, a, ins):
    x = ins[0]
    if im.opset < 10:
        starts, ends = list(a["starts"]), list(a["ends"])
        axes = list(a.get("axes", range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts = [int(v) for v in im.const_of(ins[1], "Slice starts")]
        ends = [int(v) for v in im.const_of(ins[2], "Slice ends")]
        ax = im.const_of(ins[3] if len(ins) > 3 else None, "Slice axes")
        st = im.const_of(ins[4] if len(ins) > 4 else None, "Slice steps")
        axes = list(range(len(starts))) if ax is None else [int(v) for v in ax]
        steps = [1] * len(starts) if st is None else [int(v) for v in st]
    r = x.rank
    begin, end, step = [0] * r, list(x.shape), [1] * r
    for s, e, ax_, k in zip(starts, ends, axes, steps):
        ax_ %= r
        begin[ax_], end[ax_] = _onnx_slice(s, e, k, x.shape[ax_])
        step[ax_] = k
    perm = x.base
    v = im.emit1("Slice", [im.value(x, perm)], "NHWC" if perm == NHWC else None,
                 begin=[begin[p] for p in perm], end=[end[p] for p in perm],
                 step=[step[p] for p in perm])
    return [im.result(v, perm)]


@_handles("Pad")
def _pad(im: _Importer, node, a, ins):
    x = ins[0]
    r = x.rank
    mode = a.get("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise _Unsupported(f"pad mode '{mode}'")
    if im.opset < 11:
        pads, value = list(a.get("pads", a.get("paddings", []))), float(a.get("value", 0.0))
        axes = list(range(r))
    else:
        pads = [int(p) for p in im.const_of(ins[1], "Pad pads")]
        cv = im.const_of(ins[2] if len(ins) > 2 else None, "Pad constant_value")
        value = 0.0 if cv is None or cv.size == 0 else float(cv.reshape(-1)[0])
        ax = im.const_of(ins[3] if len(ins) > 3 else None, "Pad axes")
        axes = list(range(r)) if ax is None else [int(v) % r for v in ax]
    before, after = [0] * r, [0] * r
    n = len(axes)
    for i, ax_ in enumerate(axes):
        before[ax_], after[ax_] = pads[i], pads[i + n]
    perm = x.base
    layout = "NHWC" if perm == NHWC else None
    v = im.value(x, perm)
    if any(p < 0 for p in before + after):  # crop first (a Slice), then pad what is left
        cut_b = [max(-p, 0) for p in before]
        cut_a = [x.shape[i] - max(-p, 0) for i, p in enumerate(after)]
        v = im.emit1("Slice", [v], layout, begin=[cut_b[p] for p in perm],
                     end=[cut_a[p] for p in perm], step=[1] * r)
        before = [max(p, 0) for p in before]
        after = [max(p, 0) for p in after]
    if any(before) or any(after):
        v = im.emit1("Pad", [v], layout, pad_before=[before[p] for p in perm],
                     pad_after=[after[p] for p in perm], mode=mode, value=value)
    return [im.result(v, perm)]

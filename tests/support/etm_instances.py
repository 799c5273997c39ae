"""Synthetic network-shaped instances for tests and benchmarks: CNN-like stages with concats,
reshapes and splits, or an irregular stress family harder than real networks."""

from __future__ import annotations

from typing import Any

import numpy as np

from npu_model.planners.etm.errors import BufferSpecError
from npu_model.planners.etm.instance import DEFAULT_ALIGNMENT


def random_network_instance(n_ops: int, seed: int = 0, *, alias: bool = True,
                            irregular: bool = False,
                            alignment: int = DEFAULT_ALIGNMENT) -> dict[str, Any]:
    """A synthetic network-shaped instance for tests and benchmarks.

    Ops in execution order: each reads one to three recent values (skips reach back a few ops
    now and then) and writes one value; with `alias`, some ops are concats (inputs aliased into
    the output), reshapes (output at offset 0 of the input) or splits (outputs aliased into the
    input). Feature-map sizes follow resolution stages like a CNN's, in multiples of
    `alignment`. With `irregular`, sizes are uniform in 1..4095 units instead and three ops in
    ten also read a value up to 40 values back: a stress family, harder than real networks.
    The last value is the network output, live to the end.
    """
    if n_ops < 2:
        raise BufferSpecError(f"a random network needs at least 2 ops, not {n_ops}")
    rng = np.random.default_rng(seed)
    sizes: list[int] = []
    starts: list[int] = []
    ends: list[int] = []
    owner: list[int] = []
    offset: list[int] = []

    def new(size: int, pos: int, own: int = -1, off: int = 0) -> int:
        sizes.append(int(size))
        starts.append(pos)
        ends.append(pos)
        owner.append(own)
        offset.append(off)
        return len(sizes) - 1

    def read(k: int, pos: int) -> None:
        ends[k] = max(ends[k], pos)

    stage_units = int(rng.integers(256, 4096))  # units of `alignment` at full resolution
    live: list[int] = [new(stage_units * alignment, 0)]
    for pos in range(1, n_ops - 1):
        u = rng.random()
        if u < 0.03:  # a new resolution stage: down, or (FPN-like) up now and then
            stage_units = max(1, stage_units // int(rng.choice([2, 4])))
        elif u < 0.04:
            stage_units = min(8192, stage_units * 2)
        units = max(1, int(stage_units * rng.choice([0.25, 0.5, 1.0, 1.0, 2.0, 3.0])))
        back = min(len(live), 1 + int(rng.geometric(0.35)))
        if irregular:
            units = int(rng.integers(1, 4096))
            if rng.random() < 0.3:
                back = min(len(live), int(rng.integers(2, 41)))
        recent = live[-back:]
        u = rng.random()
        if alias and u < 0.08 and len(recent) >= 2:  # concat of 2-3 fresh-ish values
            parts = [k for k in dict.fromkeys(recent[-3:]) if owner[k] < 0]
            if len(parts) >= 2:
                out = new(sum(sizes[k] for k in parts), pos)
                acc = 0
                for k in parts:
                    read(k, pos)
                    owner[k], offset[k] = out, acc
                    acc += sizes[k]
                live.append(out)
                continue
        if alias and u < 0.14:  # reshape of the newest value
            k = live[-1]
            read(k, pos)
            live.append(new(sizes[k], pos, k, 0))
            continue
        if alias and u < 0.18:  # split of the newest value into 2-3 pieces
            k = live[-1]
            read(k, pos)
            pieces = int(rng.integers(2, 4))
            units_k = sizes[k] // alignment
            if units_k >= pieces:
                cuts = np.sort(rng.choice(np.arange(1, units_k), pieces - 1, replace=False))
                bounds = [0, *cuts.tolist(), units_k]
                for a, b in zip(bounds[:-1], bounds[1:]):
                    live.append(new((b - a) * alignment, pos, k, a * alignment))
                continue
        n_in = 1 + int(rng.random() < 0.3) + int(rng.random() < 0.1)
        srcs = {live[-1]} | {int(rng.choice(recent)) for _ in range(n_in - 1)}
        for k in srcs:
            read(k, pos)
        live.append(new(units * alignment, pos))
    out = live[-1]
    read(out, n_ops - 1)
    ends[out] = n_ops - 1
    return {
        "sizes": np.asarray(sizes, dtype=np.int64),
        "starts": np.asarray(starts, dtype=np.int64),
        "ends": np.asarray(ends, dtype=np.int64),
        "alias_owner": np.asarray(owner, dtype=np.int64),
        "alias_offset": np.asarray(offset, dtype=np.int64),
        "alignment": int(alignment),
    }

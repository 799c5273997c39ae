"""The compile half of a refit: a source of new weights -> every affected layer re-quantized at
the frozen activation scales, with the report (docs/memory-and-weights.md, "Refit from ONNX").

    plan = plan_refit(network, "model_v2.onnx")     # or a ModelProto, or {name: array}
    plan.layers[op_id].op                              # the layer with its new parameters
    plan.report                                        # per layer: initializers, saturation, error

What stays: every activation scale and bit width, the weight granularity (per channel or per
tensor), the ops and their attributes (`xcompile.refit.record`, frozen by the quantize stage).
What is recomputed per layer: the float weight and bias from the initializers (BatchNorms folded
again, `xcompile.refit.provenance`), the per-channel weight scales, the weight codes (nearest
rounding: a refit has no calibration data, so no GPTQ and no bias correction), the bias in
accumulator units. The requantization words are the target's business: its backend packs the
layer again from `plan.layers[...].op` (`NpuBackend`), or the host reads the Params.

Every check runs before anything is returned, so a refused source changes nothing: an unknown
name, a shape or dtype that differs, a whole model of another graph, a layer given some of its
initializers but not all (the missing partners named), an initializer that changed but feeds no
layer a refit can update, a non-finite value, a bias beyond the accumulator's range.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from xcompile.quant.observers import scale_from_amax, weight_scales
from xir.quant.fixed_point import DEFAULT_MULT_BITS, MAX_SHIFT, quantize, quantize_bias
from xrt.errors import InvalidArgumentError

from .provenance import GRAPH_TAG, INITIALIZERS_TAG, evaluate, initializer_digest, names
from .record import RECORDS_TAG, rebuild_op
from .report import RefitReport, RefitRow

__all__ = ["RefitLayer", "RefitPlan", "plan_refit"]


@dataclass
class RefitLayer:
    """One layer to write: `op` carries its new parameters (integer codes with their quantized
    types, or floats) and the frozen input / output types; `names` its initializers."""

    op_id: int
    op: Any
    names: list[str]
    row: RefitRow


@dataclass
class RefitPlan:
    """What `plan_refit` computed; `finish(network)` records the new initializer digests once
    the backends wrote everything."""

    layers: dict[int, RefitLayer]
    report: RefitReport
    digests: dict[str, list] = field(default_factory=dict)

    def finish(self, network: Any) -> None:
        root = getattr(network, "network", network)
        tags = dict(root.tags.get(INITIALIZERS_TAG) or {})
        tags.update(self.digests)
        root.tags[INITIALIZERS_TAG] = tags


def _read_source(source: Any) -> tuple[dict[str, np.ndarray], str, Any]:
    """(arrays, label, graph or None): a whole model gives every initializer and its graph, a
    dict only its entries."""
    if isinstance(source, Mapping):
        out = {}
        for k, v in source.items():
            if not isinstance(k, str):
                raise InvalidArgumentError(f"refitWeights: a dict source maps ONNX initializer "
                                           f"names to arrays; got the key {k!r}")
            try:
                out[k] = np.asarray(v)
            except Exception as exc:  # noqa: BLE001 - anything numpy cannot read
                raise InvalidArgumentError(f"refitWeights: initializer '{k}' is not an array: "
                                           f"{exc}") from exc
        return out, f"a dict of {len(out)} initializers", None
    from xcompile.frontend.onnx_import.loading import _load, _onnx

    onnx = _onnx()
    if isinstance(source, (str, os.PathLike)):
        if not os.path.exists(os.fspath(source)):
            raise InvalidArgumentError(f"refitWeights: no ONNX file '{os.fspath(source)}'")
        label = os.fspath(source)
    elif isinstance(source, onnx.ModelProto):
        label = "a ModelProto"
    else:
        raise InvalidArgumentError(f"refitWeights: the source is an ONNX file path, an "
                                   f"onnx.ModelProto or a dict of initializer names to arrays, "
                                   f"not {type(source).__name__}")
    try:
        proto, _ = _load(source)
    except Exception as exc:  # noqa: BLE001 - the loader's own errors name the file
        raise InvalidArgumentError(f"refitWeights: {label} cannot be read: {exc}") from exc
    arrays = {init.name: onnx.numpy_helper.to_array(init) for init in proto.graph.initializer}
    return arrays, label, proto.graph


def _check_names(arrays: dict[str, np.ndarray], known: dict[str, list], graph: Any,
                 graph_tag: str | None, label: str) -> None:
    from .provenance import graph_digest

    for name, a in arrays.items():
        if name not in known:
            raise InvalidArgumentError(f"refitWeights: initializer '{name}' ({label}) is not one "
                                       f"of the model this network was compiled from")
        _, shape, dtype = known[name]
        if list(a.shape) != list(shape):
            raise InvalidArgumentError(f"refitWeights: initializer '{name}' has shape "
                                       f"{list(a.shape)}, the compiled model's has {shape}")
        if a.dtype.str != dtype:
            raise InvalidArgumentError(f"refitWeights: initializer '{name}' is {a.dtype}, the "
                                       f"compiled model's is {np.dtype(dtype)}")
    if graph is None:
        return
    missing = sorted(set(known) - set(arrays))
    if missing:
        raise InvalidArgumentError(f"refitWeights: {label} lacks initializer '{missing[0]}'"
                                   f"{f' and {len(missing) - 1} more' if len(missing) > 1 else ''}"
                                   f": not the graph this network was compiled from")
    if graph_tag is not None and graph_digest(graph) != graph_tag:
        raise InvalidArgumentError(f"refitWeights: {label} is another graph (its nodes differ "
                                   f"from the model this network was compiled from); compile "
                                   f"it instead")


def _shaped(a: np.ndarray, shape: list[int], what: str) -> np.ndarray:
    n = int(np.prod(shape)) if shape else 1
    if a.size == n:
        return a.reshape(shape)
    if a.size == 1:
        return np.broadcast_to(a.reshape(()), shape).copy()
    raise InvalidArgumentError(f"refitWeights: {what} evaluates to {a.size} values, the "
                               f"compiled layer holds {list(shape)}")


def _layer(op_id: int, rec: dict[str, Any], arrays: Mapping[str, np.ndarray]) -> RefitLayer:
    wr, br = rec["w"], rec.get("b")
    used = names(wr["src"]) + [n for n in names(br["src"] if br else None)
                               if n not in names(wr["src"])]
    where = f"layer '{rec['name']}' (op {op_id}; {', '.join(used)})"
    w = _shaped(evaluate(wr["src"], arrays), wr["shape"], f"the weight of {where}")
    b = None if br is None else _shaped(evaluate(br["src"], arrays), br["shape"],
                                        f"the bias of {where}")
    for what, a in (("weight", w), ("bias", b)):
        if a is not None and not np.all(np.isfinite(a)):
            raise InvalidArgumentError(f"refitWeights: the {what} of {where} holds NaN or "
                                       f"inf")
    refolded = any(isinstance(e, dict) and e.get("op", "").startswith("bn_")
                   for e in (wr["src"], br["src"] if br else None))
    if not rec.get("integer", True):
        op = rebuild_op(op_id, rec, w.astype(np.float32), None,
                        None if b is None else b.astype(np.float32), None)
        return RefitLayer(op_id, op, used, RefitRow(op_id, rec["name"], used, None, 0, 0, 0.0,
                                                    0.0, refolded))
    wdt = np.dtype(wr["dtype"])
    qmax = int(np.iinfo(wdt).max)
    axis = wr.get("axis")
    if axis is None:  # per tensor: the quantize stage's _weight_q
        s_w = np.asarray([scale_from_amax(float(np.abs(np.asarray(w, np.float64))
                                                .max(initial=0.0)), wdt)])
        wq = quantize(w, float(s_w[0]), wdt, narrow_range=True)
        bshape = [1] * w.ndim
    else:
        s_w = weight_scales(w, axis, wdt)
        wq = quantize(w, s_w, wdt, axis, narrow_range=True)
        bshape = [1] * w.ndim
        bshape[axis % w.ndim] = -1
    s_full = np.asarray(s_w, np.float64).reshape(bshape)
    w_sat = int(np.count_nonzero(np.abs(np.asarray(w, np.float64) / s_full) > qmax + 0.5))
    err = np.abs(wq.astype(np.float64) * s_full - np.asarray(w, np.float64))
    bq = b_scale = None
    b_sat = 0
    if b is not None:
        s_in = float(rec["x"]["scale"][0])
        bdt = np.dtype(br["dtype"])
        b_scale = np.float64(s_in) * np.asarray(s_w, np.float64)
        lim = float(np.iinfo(bdt).max)
        b_sat = int(np.count_nonzero(np.abs(np.asarray(b, np.float64) / b_scale) > lim))
        if b_sat:
            raise InvalidArgumentError(
                f"refitWeights: the bias of {where}: {b_sat} value(s) beyond the {bdt} "
                f"accumulator at the frozen input scale {s_in:.6g} (largest |bias| "
                f"{float(np.abs(b).max()):.6g}); deploy a network compiled for these weights")
        bq = quantize_bias(b, s_in, s_w if s_w.size > 1 else float(s_w[0]), bdt)
    _check_multipliers(rec, s_w, where)
    op = rebuild_op(op_id, rec, wq, s_w, bq, b_scale)
    row = RefitRow(op_id, rec["name"], used, int(wdt.itemsize * 8), w_sat, b_sat,
                   float(err.max(initial=0.0)), float(err.mean()) if err.size else 0.0,
                   refolded)
    return RefitLayer(op_id, op, used, row)


def _check_multipliers(rec: dict[str, Any], s_w: np.ndarray, where: str) -> None:
    """Refuse new weights whose requantization ``s_in * s_w / s_out`` at the frozen activation
    scales has no (mult, shift) pair: at or above 2**mult_bits the shift would be negative
    (`quantize_multiplier` would clamp it, saturating every output), below 2**(mult_bits - 64)
    it would exceed the hardware's 63 (the layer would output zeros). A compile would have
    chosen other scales; a refit keeps them, so it says so."""
    if not rec["x"].get("scale") or not rec["y"].get("scale"):
        return
    real = (np.float64(rec["x"]["scale"][0]) * np.asarray(s_w, np.float64)) / np.float64(
        rec["y"]["scale"][0])
    hi, lo = 2.0 ** DEFAULT_MULT_BITS - 0.5, 2.0 ** (DEFAULT_MULT_BITS - MAX_SHIFT - 1)
    bad = np.flatnonzero((real >= hi) | ((real < lo) & (real > 0)))
    if bad.size:
        c = int(bad[0])
        raise InvalidArgumentError(
            f"refitWeights: {where}: the requantization multiplier of output channel {c} is "
            f"{real[c]:.6g} at the frozen activation scales, outside the hardware's range "
            f"[{lo:.3g}, {hi:.6g}) (shift 0..{MAX_SHIFT}); {bad.size} channel(s): these weights "
            f"need another output scale, compile the model instead")


def plan_refit(network: Any, source: Any) -> RefitPlan:
    """The layers of `network` (a compiled network or view: quantized, adapted or lowered) that
    `source` changes, re-quantized at the frozen scales; raises `InvalidArgumentError` naming
    the initializer or layer at fault, before anything is computed for the device."""
    root = getattr(network, "network", network)
    tags = getattr(root, "tags", None) or {}
    records, known = tags.get(RECORDS_TAG), tags.get(INITIALIZERS_TAG)
    if not records or not known:
        raise InvalidArgumentError(
            f"refitWeights: network '{getattr(root, 'name', '?')}' carries no refit records "
            f"(it was not imported from ONNX and quantized by this compiler, or was compiled "
            f"before refits were recorded): recompile it with `xrt compile`")
    quant = tags.get("quantization") or {}
    if quant.get("equalized_pairs"):
        raise InvalidArgumentError(
            f"refitWeights: network '{root.name}' was compiled with cross-layer equalisation "
            f"({quant['equalized_pairs']} convolution pairs rescaled by factors of the old "
            f"weights): its layers cannot be recomputed from new initializers; recompile")
    arrays, label, graph = _read_source(source)
    _check_names(arrays, known, graph, tags.get(GRAPH_TAG), label)
    digests = {n: [initializer_digest(a), list(a.shape), a.dtype.str] for n, a in arrays.items()}
    changed = {n for n in arrays if graph is None or digests[n][0] != known[n][0]}
    by_name: dict[str, list[int]] = {}
    for oid, rec in records.items():
        for n in names(rec["w"]["src"]) + names((rec.get("b") or {}).get("src")):
            by_name.setdefault(n, []).append(int(oid))
    orphans = sorted(n for n in changed if n not in by_name)
    if orphans:
        raise InvalidArgumentError(
            f"refitWeights: initializer '{orphans[0]}'"
            f"{f' (and {len(orphans) - 1} more)' if len(orphans) > 1 else ''} "
            f"{'changed' if graph is not None else 'was given'} but feeds no layer a refit "
            f"can update (only constant weights and biases of convolutions and matmuls, with "
            f"their folded BatchNorms, are refitted); recompile for that change")
    touched = sorted({oid for n in changed for oid in by_name[n]})
    for oid in touched:
        rec = records[str(oid)]
        need = names(rec["w"]["src"]) + names((rec.get("b") or {}).get("src"))
        missing = [n for n in need if n not in arrays]
        if missing:
            given = [n for n in need if n in arrays]
            raise InvalidArgumentError(
                f"refitWeights: layer '{rec['name']}' (op {oid}) is computed from "
                f"{', '.join(need)}; the source gives {', '.join(given)} but not "
                f"'{missing[0]}'{' and more' if len(missing) > 1 else ''}: give every "
                f"partner of a folded pair together")
    layers = {oid: _layer(oid, records[str(oid)], arrays) for oid in touched}
    report = RefitReport(label, [layers[o].row for o in touched],
                         unchanged=len(records) - len(touched))
    return RefitPlan(layers, report, digests)

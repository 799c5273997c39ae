"""The staged compile driver: parse -> optimize -> quantize -> adapt -> generate, as the vendor's
`icraft compile` runs it, usable from Python without the CLI (`xrt compile` calls it).

    written = compile_model({"model": "model.onnx", "target": "zg330", "calib": "imgs/",
                             "output": "out"})      # {stage: json path}

Every stage is written to a temporary folder first and moved into the output folder only when
all succeeded, so a failure leaves nothing half-written. The target's lowering comes from the
plugins' `xrt_register_targets` hook.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import tempfile
import weakref
from typing import Any

import numpy as np

from xcompile import zoo
from xcompile.cycles import CyclesUnavailable, cycles_device_url, forward_cycles
from xcompile.passes import optimize
from xcompile.quant.calibrate import load_calibration
from xcompile.quant.int16_reasons import explain, hardop_record, summary_lines
from xcompile.quant.layers import layer_counts
from xcompile.quant.mixed import (
    DEFAULT_MAX_INT16,
    MixedPrecision,
    choose_bits,
    int16_share,
    parse_share,
    worst_part,
)
from xcompile.quant.probes import Probes
from xcompile.quant.qdq import import_qdq
from xcompile.quant.quantize import quantize_network, reuse_float_statistics
from xcompile.quant.report import accuracy_report
from xcompile.quant.score_calibration import recalibrate_scores, score_heads
from xcompile.quant.widening import measure_without, stream_ops, widened_concats
from xcompile.runner import Runner
from xir.errors import XirError
from xrt import plugins
from xrt.console import stage
from xrt.errors import XrtError

__all__ = ["DEFAULTS", "compile_model", "file_stem"]

log = logging.getLogger(__name__)

#: every option of a compile and its default ("model" has none)
DEFAULTS = {"target": None, "calib": None, "output": "out", "bits": 8, "method": "mse",
            "input_shape": None, "input_value": None, "name": None, "calib_count": 8,
            "input_size": None,
            "input_bits": None, "op_bits": None, "min_cosine": 0.99,
            "max_int16": DEFAULT_MAX_INT16, "equalize": None, "bundle_shapes": None}


def parse_shapes(spec: Any) -> dict[str, list[int]] | None:
    if not spec:
        return None
    if isinstance(spec, dict):
        return {k: [int(d) for d in v] for k, v in spec.items()}
    out = {}
    for item in spec:
        name, _, dims = item.partition("=")
        out[name] = [int(d) for d in dims.split(",") if d]
    return out


def parse_values(spec: Any) -> dict[str, Any] | None:
    """`--input-value NAME=V[,V...]` flags, or the TOML table `input_value = {NAME = V}`: graph
    inputs fixed to constants at import (a sample rate that decides an If). One number is a
    scalar, a comma list a 1-D array; the importer converts to the input's element type."""
    if not spec:
        return None
    pairs = list(spec.items()) if isinstance(spec, dict) else \
        [tuple(item.partition("=")[::2]) for item in spec]
    out: dict[str, Any] = {}
    for name, value in pairs:
        text = value if isinstance(value, str) else None
        try:
            nums = [float(v) for v in text.split(",")] if text is not None else value
            arr = np.asarray(nums, np.float64)
        except (TypeError, ValueError) as exc:
            raise XrtError(f"--input-value {name}={value!r}: not a number or a list of "
                           f"numbers") from exc
        if not name or arr.size == 0:
            raise XrtError(f"--input-value {name}={value!r} is not NAME=V[,V...]")
        out[str(name)] = arr.reshape(()) if text is not None and "," not in text else arr
    return out


def _op_bits(spec: Any) -> dict[str, int] | None:
    """`--op-bits NAME=16` flags, or the TOML table `op_bits = {NAME = 16}`."""
    if not spec:
        return None
    if isinstance(spec, dict):
        return {str(k): int(v) for k, v in spec.items()}
    out = {}
    for item in spec:
        name, _, bits = item.rpartition("=")
        if not name or not bits.isdigit():
            raise XrtError(f"--op-bits {item!r} is not NAME=BITS")
        out[name] = int(bits)
    return out


def _quantizer(optimized: Any, samples: Any, opts: dict[str, Any], runner: Runner | None,
               probes: Probes | None = None, **kw: Any) -> Any:
    """`op_bits -> quantized network` with `opts`' bits, method, input bits and equalisation
    (`kw`: more of `quantize_network`'s options), its score heads recalibrated on `probes`
    (`xcompile.quant.score_calibration`) where given."""

    def quantize(op_bits: Any) -> Any:
        q = quantize_network(optimized, samples, bits=int(opts["bits"]),
                             method=opts["method"], input_bits=opts.get("input_bits"),
                             op_bits=op_bits, runner=runner,
                             equalize=opts.get("equalize"), **kw)
        if probes is not None:
            recalibrate_scores(q, probes)
        return q

    return quantize


def _outlier_aware(optimized: Any, samples: Any, opts: dict[str, Any], runner: Runner | None,
                   probes: Probes) -> dict[str, Any]:
    """The int8 quantizers the mixed-precision search falls back on when it misses: outlier-
    aware thresholds with GPTQ weights and with nearest ones (bias-corrected; GPTQ minimises
    the same squared error over every position that clipped a detector's objects: ddddocr's
    0.967 -> 0.986 on its probes, where the ViT block needs GPTQ: 0.963 against 0.941)."""
    return {rounding: _quantizer(optimized, samples, opts, runner, probes, outlier_aware=True,
                                 weight_rounding=rounding) for rounding in ("gptq", "nearest")}


def _take_raise(mixed: MixedPrecision, found: MixedPrecision) -> None:
    """`mixed` (the first search's record) takes the raise a search from the outlier-aware
    int8 found: its ops, what ranked them, its cosines, cost and warning."""
    mixed.op_bits, mixed.names, mixed.after = found.op_bits, found.names, found.after
    mixed.sensitivity = getattr(found, "sensitivity", {})
    mixed.share_after, mixed.int16_ops = found.share_after, found.int16_ops
    mixed.warning = found.warning


def raise_from_outlier_aware(optimized: Any, kept: Any, mixed: MixedPrecision,
                             quantize: Any, samples: Any, min_cosine: float, *,
                             max_int16: float = DEFAULT_MAX_INT16, op_bits: Any = None,
                             runner: Runner | None = None, probes: Probes | None = None
                             ) -> tuple[Any, MixedPrecision]:
    """When the search (`choose_bits`) kept the int8 network with outlier-aware thresholds
    (`kept`, made by `quantize`, `op_bits -> network`) and it still misses `min_cosine`: the
    same search again from it, its layers ranked on it and raised with its thresholds and
    weight rounding. The first search raised from the squared-error thresholds, whose clipped
    objects no int16 layer brings back: ddddocr's YOLOX text detector reads 0.9575 on its
    probes with 20 ops raised from them, 0.9825 in int8 with the outlier-aware ones, and
    0.9900 with 14 ops (5.1% of the MACs) raised from those (held out, 12 inputs, the same
    tree: objectness 1 - cosine 0.0204 -> 0.0129 on average, worst 0.909 -> 0.958; the
    other parts 0.993 -> 0.998 at worst). Returns the network to keep and `mixed`
    updated: the raise, its cosines and attempts (after the first search's), and the warning
    (None once the target is reached). The caller holds no other reference to `kept`."""
    again, found = choose_bits(optimized, kept, quantize, samples, min_cosine,
                               max_int16=max_int16, op_bits=op_bits, runner=runner,
                               probes=probes)
    del kept
    mixed.attempts.extend(found.attempts)
    if found.op_bits:  # a raise reached the target (or came closest, with a larger cap)
        _take_raise(mixed, found)
    elif found.warning:
        mixed.warning = (f"{mixed.warning}; raising from the outlier-aware thresholds: "
                         f"{found.warning}")
    return again, mixed


def search_from_outlier_aware(optimized: Any, kept: Any, mixed: MixedPrecision,
                              quantize: Any, samples: Any, min_cosine: float, *,
                              max_int16: float = DEFAULT_MAX_INT16, op_bits: Any = None,
                              runner: Runner | None = None, probes: Probes | None = None
                              ) -> tuple[Any, MixedPrecision, bool]:
    """When the search (`choose_bits`) missed `min_cosine` and kept a network other than the
    int8 one with outlier-aware thresholds, which it measured within `OUTLIER_AWARE_MARGIN`
    of the kept one (`quantize`, `op_bits -> network`, makes it): the same search again from
    that network. Its raise is kept where that search keeps one (it reaches `min_cosine`, or
    comes closest taking out most of the error, `KEEP_CLOSEST`) and it beats `kept` on the
    probes. The probes of the calibration samples and their variants
    (`xcompile.quant.probes`) read ddddocr's YOLOX text detector 0.9593 in int8, 0.9625 with
    outlier-aware thresholds and 0.9052 with its 20-op raise from the first: the int8 network
    was kept and a held-out text line lost (0.51; 0.70 read 0.37); raised from the
    outlier-aware int8 it reads 0.989-0.990. Returns the network to keep, `mixed` updated and
    whether the raise from the outlier-aware int8 was kept. The caller holds no other
    reference to `kept`."""
    again, found = choose_bits(optimized, quantize(op_bits), quantize, samples, min_cosine,
                               max_int16=max_int16, op_bits=op_bits, runner=runner,
                               probes=probes)
    mixed.attempts.extend(found.attempts)
    if not found.op_bits or worst_part(found.after)[1] <= worst_part(mixed.after)[1]:
        del again
        mixed.warning = (f"{mixed.warning}; raising from the outlier-aware thresholds "
                         f"reaches {worst_part(found.after)[1]:.4f}: not kept")
        return kept, mixed, False
    del kept
    _take_raise(mixed, found)
    mixed.outlier_aware_kept = True
    return again, mixed, True


def _same(network: Any) -> Any:
    return network


class _KeepInt8:
    """Writes the all-int8 network (json + raw at `path`) the first time the mixed-precision
    search asks for a raised one, while the search still holds it (a weak reference: nothing
    is kept alive), so that the cost of a raise can be counted on it later without quantizing
    it again (vgg19: calibration and GPTQ, about 20 s of CPU, against a 1-2 s save)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.saved = False
        self._ref: Any = None

    def watch(self, network: Any) -> Any:
        self._ref = weakref.ref(network)
        return network

    def wrap(self, quantize: Any) -> Any:
        def raised(op_bits: Any) -> Any:
            int8 = self._ref() if self._ref is not None and not self.saved else None
            if int8 is not None:
                try:
                    int8.save(self.path)
                    self.saved = True
                except OSError as exc:  # only a figure depends on it: quantize it again then
                    log.info("the int8 network was not kept for the cost of a raise: %s", exc)
            del int8
            return quantize(op_bits)

        return raised


def quantize_stage(optimized: Any, samples: Any, opts: dict[str, Any], runner: Runner | None,
              name: str, keep_int8: _KeepInt8 | None = None) -> Any:
    """The quantize stage: `opts`' bits, method and op_bits, convolution pairs equalised when
    `equalize` says so (None: the quantizer's default, with per-tensor weights only; measured
    in docs/quantization.md section 10), then automatic mixed precision
    (`xcompile.quant.mixed.choose_bits`) when an output part's cosine is below `min_cosine`:
    the fewest most sensitive layers raised to int16 that reach it, within `max_int16` (share
    of MACs and of layers, `xcompile.quant.layers`); where it falls back on the int8 network
    with outlier-aware thresholds and that misses too, the search again from it
    (`raise_from_outlier_aware`; `mixed_precision.outlier_aware.raise_from`); where the search
    missed and did not fall back on it, the search from it too, its raise kept where that
    search keeps one and it measures better (`search_from_outlier_aware`). What it measured
    and chose goes to `tags["quantization"]["mixed_precision"]`. With `keep_int8`, the int8
    network is written where it says before the first raise is quantized. Every quantized
    network's score heads are refit (or lined) on the probes
    (`xcompile.quant.score_calibration`)."""

    user_bits = _op_bits(opts.get("op_bits"))
    min_cos = float(opts.get("min_cosine") or 0.0)
    max_int16 = parse_share(opts.get("max_int16", DEFAULTS["max_int16"]))
    if min_cos <= 0.0 or int(opts["bits"]) != 8:
        quantized = _quantizer(optimized, samples, opts, runner)(user_bits)
        if score_heads(quantized):
            recalibrate_scores(quantized, Probes(optimized, samples, runner,
                                                 what="score calibration"))
        _explain_int16(quantized, None, name)
        return quantized
    # choose_bits holds the only reference: it drops the int8 network once it keeps another
    with reuse_float_statistics():  # the search's quantizations share GPTQ's statistics
        # one set of probes, their float outputs computed once, for every search and rule,
        # and every network's score heads recalibrated on them
        probes = Probes(optimized, samples, runner)
        quantize = _quantizer(optimized, samples, opts, runner, probes)
        search, watch = (quantize, _same) if keep_int8 is None else \
            (keep_int8.wrap(quantize), keep_int8.watch)
        alternatives = _outlier_aware(optimized, samples, opts, runner, probes)
        quantized, mixed = choose_bits(optimized, watch(quantize(user_bits)), search, samples,
                                       min_cos, max_int16=max_int16, op_bits=user_bits,
                                       runner=runner, outlier_aware=alternatives,
                                       probes=probes)
        from_oa = mixed.outlier_aware_kept and not mixed.reached
        if from_oa:
            quantized, mixed = raise_from_outlier_aware(
                optimized, quantized, mixed, alternatives[mixed.outlier_aware_variant],
                samples, min_cos, max_int16=max_int16, op_bits=user_bits, runner=runner,
                probes=probes)
        elif not mixed.reached and mixed.outlier_aware_variant is not None:
            quantized, mixed, from_oa = search_from_outlier_aware(
                optimized, quantized, mixed, alternatives[mixed.outlier_aware_variant],
                samples, min_cos, max_int16=max_int16, op_bits=user_bits, runner=runner,
                probes=probes)
        quantized = _measure_rules(optimized, quantized, mixed, samples, opts, runner,
                                   user_bits, min_cos, probes)
    tag = mixed.to_tag()
    tag["int16_layers"], tag["layers"] = layer_counts(
        optimized, {int(k) for k in quantized.tags["quantization"].get("op_bits", {})})
    if from_oa:
        tag["outlier_aware"]["raise_from"] = True
    quantized.tags["quantization"]["mixed_precision"] = tag
    _explain_int16(quantized, tag, name)
    if mixed.warning:
        log.warning("%s: %s", name, mixed.warning)
    elif mixed.outlier_aware_kept and mixed.op_bits:
        log.info("%s: %d ops raised to int16 from the int8 network with outlier-aware "
                 "thresholds (%s): worst part %s %.4f -> %.4f", name, len(mixed.op_bits),
                 ", ".join(mixed.names), worst_part(mixed.before)[0],
                 worst_part(mixed.before)[1], worst_part(mixed.after)[1])
    elif mixed.outlier_aware_kept:
        log.info("%s: int8 with outlier-aware thresholds kept: worst part %s %.4f -> %.4f",
                 name, worst_part(mixed.before)[0], worst_part(mixed.before)[1],
                 worst_part(mixed.after)[1])
    elif mixed.op_bits:
        log.info("%s: %d ops raised to int16 (%s): worst part %s %.4f -> %.4f", name,
                 len(mixed.op_bits), ", ".join(mixed.names), worst_part(mixed.before)[0],
                 worst_part(mixed.before)[1], worst_part(mixed.after)[1])
    return quantized


def _measure_rules(optimized: Any, quantized: Any, mixed: MixedPrecision, samples: Any,
                   opts: dict[str, Any], runner: Runner | None, user_bits: Any,
                   min_cos: float, probes: Probes) -> Any:
    """The kept network, or the same quantized without a 16-bit rule that measures as well
    without (`xcompile.quant.widening`): Concats stored in 16 bits for far branches
    (`widen_concats`), then the residual stream (`residual_stream`); each time the same
    op_bits (the user's and the search's), thresholds and weight rounding, and the rules
    dropped before, measured on the search's `probes`. `mixed` is updated to the network
    kept; the records go to `tags["quantization"]["measured_rules"]`. The caller holds no
    other reference to `quantized`."""
    kw: dict[str, Any] = {}
    if mixed.outlier_aware_kept:
        kw.update(outlier_aware=True, weight_rounding=mixed.outlier_aware_variant)
    raised = {**(user_bits or {}), **mixed.op_bits}
    measured: dict[str, dict] = {}
    for rule, names_of, flag in (("concat", widened_concats, "widen_concats"),
                                 ("stream", stream_ops, "residual_stream")):
        names = names_of(quantized)
        if not names:
            continue
        narrow = _quantizer(optimized, samples, opts, runner, probes, **kw, **{flag: False})
        quantized, rec = measure_without(probes, quantized, lambda q=narrow: q(raised),
                                         min_cos, rule, names)
        measured[rule] = rec
        if not rec["kept"]:
            kw[flag] = False
    if not measured:
        return quantized
    quantized.tags["quantization"]["measured_rules"] = measured
    last = list(measured.values())[-1]
    mixed.after = dict(last["cosine_with"] if last["kept"] else last["cosine_without"])
    at16 = {int(k) for k in quantized.tags["quantization"]["op_bits"]}
    mixed.share_after = int16_share(optimized, at16)
    mixed.int16_ops = len(at16)
    return quantized


def _explain_int16(quantized: Any, tag: dict | None, name: str) -> None:
    """Why each op computing or storing in 16 bits does: the quantizer's record
    (`tags["quantization"]["int16"]`) with the ops the search raised told apart from the
    user's op_bits (`int16_reasons.explain`), in the mixed-precision tag when there is one,
    else in the quantizer's place; its summary logged."""
    rec = quantized.tags["quantization"].get("int16")
    if rec is None:
        return
    done = explain(rec, (tag or {}).get("op_bits"), (tag or {}).get("sensitivity"))
    measured = quantized.tags["quantization"].get("measured_rules")
    if measured:
        done["measured_rules"] = measured
    if tag is not None:
        tag["int16"] = done
    else:
        quantized.tags["quantization"]["int16"] = done
    for line in summary_lines(done):
        log.info("%s: %s", name, line.strip())


def _record_hardops(generated: Any, name: str) -> None:
    """The HardOps of the lowered network holding a 16-bit value, with their reasons
    (`int16_reasons.hardop_record`), added to its int16 record (`int16_record`)."""
    q = generated.tags.get("quantization")
    if not q:
        return
    q = generated.tags["quantization"] = dict(q)  # the quantized stage's tags stay as saved
    mp = q.get("mixed_precision")
    where = q
    if mp and mp.get("int16") is not None:
        where = q["mixed_precision"] = dict(mp)
    rec = where.get("int16")
    if rec is None:
        return
    rec = where["int16"] = dict(rec)
    rec["hardops"] = hardop_record(generated, rec, int(q.get("bits", 8)))
    h = rec["hardops"]
    log.info("%s: %d of %d HardOps hold a 16-bit value (%s)", name, h["int16"], h["hardops"],
             ", ".join(f"{k} {n}" for k, n in h["counts"].items()) or "none")


def _lower(lower: Any, quantized: Any, opts: dict[str, Any]) -> Any:
    adapted = lower.adapt(quantized, opts) if hasattr(lower, "adapt") else quantized
    return lower(adapted, opts)


def _int8_cycles(optimized: Any, samples: Any, opts: dict[str, Any], runner: Runner | None,
                 lower: Any, name: str, saved: str | None = None) -> int | str:
    """What the int16 raise is compared with: the all-int8 network (the user's op_bits only,
    as `choose_bits` first quantized it: read back from `saved`, else re-quantized, since the
    search drops it to keep two networks alive at most) lowered for the target and run once
    on its cycles-only device. Its chip cycles, or why they could not be counted (a target without
    `sim://<target>?mode=cycles`)."""
    target = str(opts["target"])
    if saved is not None:  # written by `_KeepInt8` while the search held it
        from xir.serialize import load_network

        int8 = load_network(saved)
    else:
        int8 = _quantizer(optimized, samples, opts, runner)(_op_bits(opts.get("op_bits")))
    generated = _lower(lower, int8, opts)
    del int8
    try:
        return forward_cycles(generated, target)
    except CyclesUnavailable as exc:
        log.info("%s: cost of the int16 raise not counted: %s", name, exc)
        return str(exc)
    except (XrtError, XirError) as exc:  # a figure for the user: it does not fail the compile
        log.warning("%s: cost of the int16 raise not counted, the int8 network's cycles-only "
                    "forward failed: %s", name, exc)
        return f"the int8 network's cycles-only forward failed: {exc}"


def _record_cycles(network: Any, int8: int | str, target: str, name: str) -> None:
    """`cycles_int8`, `cycles_mixed` (the lowered network with its raises, one cycles-only
    forward) in `network`'s `tags["quantization"]["mixed_precision"]`, or `cycles_skipped`
    saying why they are absent."""
    mp = network.tags.setdefault("quantization", {}).get("mixed_precision")
    if mp is None:
        return
    mp = network.tags["quantization"]["mixed_precision"] = dict(mp)
    if isinstance(int8, str):
        mp["cycles_skipped"] = int8
        return
    try:
        mixed = forward_cycles(network, target)
    except (XrtError, XirError) as exc:  # CyclesUnavailable, or a forward that failed
        log.warning("%s: cost of the int16 raise not counted: %s", name, exc)
        mp["cycles_skipped"] = str(exc)
        return
    mp["cycles_int8"], mp["cycles_mixed"] = int(int8), int(mixed)
    log.info("%s: int16 raise: %d layers, cycles %d -> %d", name, len(mp.get("raised", [])),
             int8, mixed)


def file_stem(name: str) -> str:
    """`name` made safe for a file name whatever the graph is called: runs of anything but
    letters, digits, '-' and '_' become one '_', without leading or trailing '_' or '.'
    (`"Model from PaddlePaddle."` -> `"Model_from_PaddlePaddle"`; nothing left: "network")."""
    stem = re.sub(r"[^A-Za-z0-9_-]+", "_", str(name)).strip("_.")
    return stem or "network"


def float_network(path: str) -> Any:
    """An xir network saved with `net.save(...)`, which the compile starts from as it would
    from an imported ONNX model: it must still be float (not already quantized or lowered)."""
    from xir.serialize import load_network

    net = load_network(path)
    done = [op.op_type for op in net.ops if op.op_type == "HardOp" or op.is_quantized()]
    if done or "quantization" in net.tags:
        raise XrtError(f"{path}: already quantized or compiled ({len(done)} integer/HardOp "
                       "ops); xrt compile takes an ONNX model, a zoo name or a float xir "
                       "network (json + raw)")
    return net


def is_onnx_model(model: str) -> bool:
    """Whether the compile's MODEL names an ONNX file (not a float xir json, not a zoo name)."""
    return not model.endswith(".json") and (model.endswith(".onnx") or os.path.exists(model))


def parse_model(opts: dict[str, Any], shapes: dict[str, list[int]] | None
                ) -> tuple[Any, str, Any]:
    """The parse stage and the calibration samples: `opts["model"]` (an ONNX file imported at
    `shapes`, a float xir json or a zoo name) as a float network, the file stem the outputs
    are named with, and the samples from `--calib` (a zoo model's own set without it)."""
    model = str(opts["model"])
    with stage(f"parse {model}"):
        if model.endswith(".json"):  # an xir float network (json + raw), e.g. from Python
            net = float_network(model)
        elif is_onnx_model(model):
            # a QDQ model imports as its float model, its pairs' scales kept (quant.qdq)
            net = import_qdq(model, shapes, name=opts.get("name"),
                             input_values=parse_values(opts.get("input_value")))
        else:
            size = opts.get("input_size")
            net = zoo.build(model, input_size=int(size)) if size else zoo.build(model)
    name = file_stem(opts.get("name") or net.name)
    if opts.get("calib"):
        with stage(f"read calibration samples from {opts['calib']}"):
            samples = load_calibration(opts["calib"], net)
    elif model in zoo.names():
        size = opts.get("input_size")
        samples = zoo.calibration_set(model, count=int(opts["calib_count"]),
                                      **({"input_size": int(size)} if size else {}))
    else:
        raise XrtError("--calib DIR is required for an ONNX model")
    return net, name, samples


def compile_model(opts: dict[str, Any], report: bool = False, runner: Runner | None = None
                  ) -> dict[str, str]:
    """Run every stage with `opts` (keys of `DEFAULTS` plus "model"); returns {stage: json
    path} in the output folder. `runner` executes networks for calibration, GPTQ and the
    report (default: the HostBackend)."""
    if opts.get("bundle_shapes"):  # one quantization, a network per shape, one bundle file
        from xcompile.bundle import compile_bundle

        return compile_bundle(opts, runner)
    parse_share(opts.get("max_int16", DEFAULTS["max_int16"]))  # a bad cap fails before work
    lower = plugins.target(opts["target"]) if opts.get("target") else None
    net, name, samples = parse_model(opts, parse_shapes(opts.get("input_shape")))
    out_dir = os.path.abspath(opts["output"])
    os.makedirs(os.path.dirname(out_dir) or ".", exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".xrt-compile-", dir=os.path.dirname(out_dir) or ".")
    stages: list[str] = []

    def done(kind: str, network: Any) -> None:
        """Write a stage as soon as it exists, so only the stages still needed stay in
        memory (a large model's float copies are what a compile's peak is made of)."""
        network.save(os.path.join(tmp, f"{name}_{kind}.json"))
        stages.append(kind)

    written: dict[str, str] = {}
    try:
        done("parsed", net)
        with stage(f"optimize {name}"):
            optimized = optimize(net)
            del net
            done("optimized", optimized)
        with stage(f"quantize {name}: int{opts['bits']}, {opts['method']} scales"):
            keep_int8 = _KeepInt8(os.path.join(tmp, ".int8.json")) if lower is not None \
                else None
            quantized = quantize_stage(optimized, samples, opts, runner, name, keep_int8)
        mp = quantized.tags["quantization"].get("mixed_precision") or {}
        int8_cycles: int | str | None = None
        if lower is not None and mp.get("raised"):
            with stage(f"cost of the int16 raise: the int8 network on "
                       f"{cycles_device_url(str(opts['target']))}"):
                int8_cycles = _int8_cycles(optimized, samples, opts, runner, lower, name,
                                           keep_int8.path if keep_int8.saved else None)
        if keep_int8 is not None and keep_int8.saved:
            for ext in (".json", ".raw"):
                with contextlib.suppress(OSError):
                    os.remove(keep_int8.path[:-len(".json")] + ext)
        if report:
            accuracy_report(optimized, quantized, samples, runner).print()
        del optimized
        done("quantized", quantized)
        if lower is not None:
            target = opts["target"]
            with stage(f"lower {name} for {target}: adapt"):
                adapted = lower.adapt(quantized, opts) if hasattr(lower, "adapt") \
                    else quantized
                del quantized
                done("adapted", adapted)
            with stage(f"lower {name} for {target}: instructions, ETM layout"):
                generated = lower(adapted, opts)
                del adapted
                if int8_cycles is not None:  # the mixed network's cycles beside the int8's
                    _record_cycles(generated, int8_cycles, str(target), name)
                _record_hardops(generated, name)
                done(getattr(lower, "suffix", str(target).upper()), generated)
                del generated
        else:
            done("adapted", quantized)
            del quantized
        os.makedirs(out_dir, exist_ok=True)
        for fname in sorted(os.listdir(tmp)):
            os.replace(os.path.join(tmp, fname), os.path.join(out_dir, fname))
        for kind in stages:
            written[kind] = os.path.join(out_dir, f"{name}_{kind}.json")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return written

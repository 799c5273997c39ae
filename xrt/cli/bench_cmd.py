"""`xrt bench MODEL`: latency and throughput of a network on its backends, in the manner of
TensorRT's `trtexec`, OpenVINO's `benchmark_app` and Ascend's `ais_bench` (warm-up, a loop of
N forwards or S seconds, min/mean/median/p90/p99 host latency, throughput, a JSON summary).

A simulator can say what no board tool can, so each result also has the simulated chip's side:
its latency per forward and throughput at its clock, the cycles, MACs and MAC utilisation, and
the ETM/OCM traffic, all read from the session's time profile (the NPU backends' profiler
records). `--compare` runs deployment options (`ocm=NONE,BEST_SCORE`, `merge=off`) or device URL
variants (`sim://zg330?mpe=2x4`, `mpe=2x4,4x4`) of the same network side by side.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass, field
from typing import Any

HELP = "benchmark a network: host latency and throughput, simulated chip time, --compare variants"

#: deployment options `--compare` knows: key -> {value: (vendor method, argument or None)},
#: tried in order on the chip backend (the first backend that has the method); any other key
#: is a device URL query parameter of the first backend (`mpe`, `ocm_kib`, `icore_mhz`...)
OPTIONS: dict[str, dict[str, list[str]]] = {
    "merge": {"off": ["disableMergeHardOp"], "on": ["speedMode"]},
    "etm_optimize": {"off": ["disableEtmOptimize"], "on": ["compressFtmp"]},
}
#: `ocm=NAME` calls ocmOptimize with the backend's own OcmOpt member of that name
OCM_KEY = "ocm"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="network json (raw beside it), a zoo name or an .onnx file")
    parser.add_argument("--raw", help="params file (default: the json's stem + .raw)")
    parser.add_argument("--target", help="compile a zoo network for this target first")
    parser.add_argument("--input-size", type=int, help="zoo network input size")
    parser.add_argument("--backends", default="Host",
                        help="';'-separated 'Backend[,device-url]' list, as for xrt run")
    parser.add_argument("--inputs", nargs="*", default=[],
                        help=".npy files, one per input (default: generated)")
    parser.add_argument("--warmup", type=int, default=2, help="forwards before timing (2)")
    loop = parser.add_mutually_exclusive_group()
    loop.add_argument("--iterations", type=int, help="timed forwards (default 10)")
    loop.add_argument("--time", type=float, metavar="S", help="time forwards for S seconds")
    parser.add_argument("--compare", nargs="+", metavar="VARIANT", default=[],
                        help="variants run side by side: deployment options KEY=V1,V2 (ocm, "
                             "merge, etm_optimize), URL query keys (mpe=2x4,4x4) or device "
                             "URLs (sim://zg330?mpe=2x4) of the first backend")
    parser.add_argument("--json", metavar="FILE", help="write the results as json")
    parser.add_argument("--report", metavar="FILE",
                        help="write a one-page HTML report of the (first) variant")


@dataclass
class Variant:
    """One configuration to benchmark: a label, the backends' URLs, deployment options."""

    label: str
    pairs: list[tuple[str, str]]
    options: dict[str, str] = field(default_factory=dict)


def variants(pairs: list[tuple[str, str]], specs: list[str]) -> list[Variant]:
    """The baseline ("as given") and one variant per value of each `--compare` spec."""
    from ..errors import XrtError

    out = [Variant("as given", list(pairs))]
    for spec in specs:
        spec = spec.strip()
        if "://" in spec:
            out.append(Variant(spec, [(pairs[0][0], spec)] + pairs[1:]))
            continue
        key, eq, values = spec.partition("=")
        key = key.strip()
        if not eq or not key or not values.strip():
            raise XrtError(f"--compare {spec!r}: give KEY=V1,V2 (e.g. ocm=NONE,BEST_SCORE) or a "
                           f"device URL (e.g. sim://zg330?mpe=2x4)")
        for value in [v.strip() for v in values.split(",") if v.strip()]:
            if key == OCM_KEY or key in OPTIONS:
                out.append(Variant(f"{key}={value}", list(pairs), {key: value}))
            else:
                url = pairs[0][1]
                url += ("&" if "?" in url else "?") + f"{key}={value}"
                out.append(Variant(f"{key}={value}", [(pairs[0][0], url)] + pairs[1:]))
    return out


def configure_backends(backends: list[Any], options: dict[str, str]) -> None:
    """Apply deployment options (`ocm`, `merge`, `etm_optimize`) to the first backend that
    offers them, before apply; XrtError naming the option when none does."""
    from ..errors import XrtError

    for key, value in options.items():
        if key == OCM_KEY:
            chip = next((b for b in backends if hasattr(b, "ocmOptimize")), None)
            if chip is None:
                raise XrtError(f"--compare {key}={value}: no backend of this session has "
                               f"ocmOptimize() (it is a ZG330 / Buyi option)")
            kind = type(chip.ocmopt)  # the backend's own option type: xrt imports no plugin
            try:
                chip.ocmOptimize(kind[value.upper()])
            except KeyError:
                raise XrtError(f"--compare {key}={value}: not one of "
                               f"{[o.name for o in kind]}") from None
            continue
        table = OPTIONS[key]
        if value.lower() not in table:
            raise XrtError(f"--compare {key}={value}: give one of {sorted(table)}")
        methods = table[value.lower()]
        for b in backends:
            fn = next((getattr(b, m) for m in methods if hasattr(b, m)), None)
            if fn is not None:
                fn()
                break
        else:
            # the option may already be the chip's default (merge=on on the ZG330)
            state = {"merge": "is_mergeHardop", "etm_optimize": "is_etmOptimize"}[key]
            chip = next((b for b in backends if hasattr(b, state)), None)
            if chip is None or getattr(chip, state) != (value.lower() == "on"):
                raise XrtError(f"--compare {key}={value}: no backend of this session offers "
                               f"{' / '.join(methods)}()")


def latency_stats(samples_ms: list[float], elapsed_s: float) -> dict[str, float]:
    """min / mean / median / p90 / p99 of host latencies (ms) and forwards per second."""
    import numpy as np

    a = np.asarray(samples_ms, dtype=np.float64)
    return {"count": int(a.size), "min_ms": float(a.min()), "mean_ms": float(a.mean()),
            "median_ms": float(np.median(a)), "p90_ms": float(np.percentile(a, 90)),
            "p99_ms": float(np.percentile(a, 99)), "max_ms": float(a.max()),
            "throughput_fps": float(a.size / elapsed_s) if elapsed_s > 0 else math.inf}


def chip_figures(rows: list[dict[str, Any]], backends: list[Any]) -> dict[str, Any] | None:
    """The simulated chip's side of one forward, from the profile rows (None without a
    simulated chip): latency (its layers' and runs' simulated ms), throughput at its clock,
    cycles, MACs, MAC utilisation, ETM and OCM bytes; plus the deployment report's OCM option,
    feature-map and OCM footprints where the backend gives one."""
    hw = [r for r in rows if "cycles" in r]
    chip_ms = sum(r.get("hard_ms", 0.0) for r in rows)
    if not hw or chip_ms <= 0:
        return None
    cycles = sum(int(r["cycles"]) for r in hw)
    macs = sum(int(r.get("macs") or 0) for r in hw)
    # the icore clock from the chip's device (sim:// and socket:// devices both carry their
    # NpuConfig); the peak MACs per cycle read back from the rows (each layer's utilisation is
    # its MACs over cycles x the peak of the enabled MPE array)
    clock_hz = 0.0
    for b in backends:
        cfg = getattr(getattr(b, "device", None), "config", None)
        if hasattr(b, "profileInfo") and hasattr(cfg, "icore_clk_hz"):
            clock_hz = float(cfg.icore_clk_hz)
            break
    if not clock_hz:  # no config: merged layers' ms are their cycles at the clock
        layer_ms = sum(r["hard_ms"] for r in hw if r.get("hard_ms", 0) > 0)
        clock_hz = cycles / (layer_ms * 1e-3) if layer_ms > 0 else 0.0
    peaks = [r["macs"] / (r["utilisation"] * r["cycles"]) for r in hw
             if r.get("utilisation") and r.get("cycles")]
    peak = max(peaks) if peaks else 0.0
    total_cycles = chip_ms * 1e-3 * clock_hz
    out: dict[str, Any] = {
        "latency_ms": chip_ms, "throughput_fps": 1e3 / chip_ms,
        "clock_mhz": clock_hz / 1e6, "cycles": int(round(total_cycles)), "layer_cycles": cycles,
        "macs": macs, "peak_macs_per_cycle": round(peak),
        "utilisation": macs / (total_cycles * peak) if peak and total_cycles else 0.0,
        "etm_bytes": sum(int(r.get("etm_bytes", 0)) for r in hw),
        "ocm_bytes": sum(int(r.get("ocm_bytes", 0)) for r in hw),
        "layers": len(hw)}
    for b in backends:
        report = getattr(b, "deployment_report", None)
        if callable(report):
            rep = report()
            out["ocm_option"] = rep["ocm"]["option"]
            out["ocm_footprint"] = int(rep["ocm"]["footprint"])
            out["ftmp_bytes"] = int(rep["etm"]["ftmp_bytes"])
            out["merge"] = bool(rep["merge"])
            break
    return out


def bench_variant(net: Any, variant: Variant, inputs: list[Any], warmup: int,
                  iterations: int | None, seconds: float | None, keep: bool = False
                  ) -> tuple[dict[str, Any], Any]:
    """Deploy `net` as `variant` says, warm up, time the loop, profile one forward; returns the
    result and (with `keep`) the open session for a report (the caller closes it), else None."""
    from ..console import progress_bar, stage
    from ..profiling import profile_rows
    from ..session import Session
    from .run_cmd import open_backends

    classes, devices = open_backends(variant.pairs)
    sess = None
    try:
        sess = Session.Create(classes, net.view(0), devices)
        configure_backends(sess.backends, variant.options)
        with stage(f"[{variant.label}] apply"):
            sess.apply()
        if warmup:  # none: the first timed forward pays the cold start (JIT, caches)
            with stage(f"[{variant.label}] warm-up: {warmup} forward(s)"):
                for _ in range(warmup):
                    sess.forward(inputs)
        samples: list[float] = []
        perf = time.perf_counter
        t_start = perf()
        if seconds is not None:
            total_ms = max(1, int(seconds * 1e3))
            with progress_bar(total_ms, f"[{variant.label}] timing for {seconds:g} s (ms)"
                              ) as advance:
                done = 0
                while perf() - t_start < seconds or not samples:
                    t0 = perf()
                    sess.forward(inputs)
                    samples.append((perf() - t0) * 1e3)
                    now = min(total_ms, int((perf() - t_start) * 1e3))
                    advance(now - done)
                    done = now
        else:
            with progress_bar(iterations, f"[{variant.label}] forwards") as advance:
                for _ in range(iterations):
                    t0 = perf()
                    sess.forward(inputs)
                    samples.append((perf() - t0) * 1e3)
                    advance()
        elapsed = perf() - t_start
        # one profiled forward after the timed loop: the profile's bookkeeping stays out of it
        sess.enableTimeProfile(True)
        sess.forward(inputs)
        rows = profile_rows(sess)
        sess.enableTimeProfile(False)
        result = {"variant": variant.label, "backends": ";".join(f"{n},{u}" for n, u in
                                                                 variant.pairs),
                  "options": dict(variant.options),
                  "host": latency_stats(samples, elapsed),
                  "chip": chip_figures(rows, sess.backends),
                  "placement": _placement(rows)}
        if keep:
            return result, (sess, devices, rows)
        return result, None
    except BaseException:
        keep = False
        raise
    finally:
        if not keep:
            if sess is not None:
                sess.close()
            for d in devices:
                d.close()


def _placement(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Profiled ops per backend."""
    out: dict[str, int] = {}
    for r in rows:
        if r["backend"]:
            out[r["backend"]] = out.get(r["backend"], 0) + 1
    return out


def print_results(results: list[dict[str, Any]], title: str) -> None:
    """One rich table: a row per variant, host latency and throughput, then the chip's side."""
    from rich.table import Table

    from ..console import report_console

    chip = any(r["chip"] for r in results)
    table = Table(title=title)
    cols = ["variant", "min ms", "mean ms", "median ms", "p90 ms", "p99 ms", "host fps"]
    if chip:
        cols += ["chip ms", "chip fps", "MHz", "kcycles", "GMACs", "MAC util", "ETM KiB",
                 "OCM KiB", "OCM opt"]
    for i, c in enumerate(cols):
        table.add_column(c, justify="left" if i == 0 or c == "OCM opt" else "right")
    for r in results:
        h = r["host"]
        cells = [r["variant"], *(f"{h[k]:.3f}" for k in ("min_ms", "mean_ms", "median_ms",
                                                         "p90_ms", "p99_ms")),
                 f"{h['throughput_fps']:.1f}"]
        c = r["chip"]
        if chip and c:
            cells += [f"{c['latency_ms']:.4f}", f"{c['throughput_fps']:.1f}",
                      f"{c['clock_mhz']:.0f}", f"{c['cycles'] / 1e3:.1f}",
                      f"{c['macs'] / 1e9:.4f}", f"{c['utilisation'] * 100:.1f}%",
                      f"{c['etm_bytes'] / 1024:.0f}", f"{c['ocm_bytes'] / 1024:.0f}",
                      str(c.get("ocm_option", ""))]
        elif chip:
            cells += [""] * 9
        table.add_row(*cells)
    report_console().print(table)


def run(args: argparse.Namespace) -> int:
    import json

    from ..console import stage
    from ..errors import XrtError
    from .files import read_npy, writable
    from .run_cmd import backend_urls, default_inputs, load_model

    for opt in ("json", "report"):
        if getattr(args, opt):
            writable(getattr(args, opt), "--" + opt)
    if args.warmup < 0:
        raise XrtError(f"--warmup {args.warmup}: give 0 or more forwards")
    iterations = args.iterations if args.iterations is not None else (
        None if args.time is not None else 10)
    if iterations is not None and iterations < 1:
        raise XrtError(f"--iterations {iterations}: give at least 1 forward")
    if args.time is not None and not args.time > 0:
        raise XrtError(f"--time {args.time}: give a positive number of seconds")
    inputs = [read_npy(p, "--inputs") for p in args.inputs]
    pairs = backend_urls(args.backends)
    todo = variants(pairs, args.compare)
    with stage(f"load {args.model}" + (f" compiled for {args.target}" if args.target else "")):
        net = load_model(args.model, args.raw, args.target, args.input_size)
    if not inputs:
        inputs = default_inputs(args.model, net, args.input_size)
    results, kept = [], None
    for k, v in enumerate(todo):
        result, held = bench_variant(net, v, inputs, args.warmup, iterations, args.time,
                                     keep=bool(args.report) and k == 0)
        results.append(result)
        kept = kept or held
    print_results(results, f"{net.name}: xrt bench ({args.backends}, warm-up {args.warmup}, "
                           + (f"{args.time:g} s" if args.time is not None
                              else f"{iterations} forwards") + ")")
    summary = {"model": args.model, "network": net.name, "backends": args.backends,
               "warmup": args.warmup, "iterations": iterations, "time_s": args.time,
               "results": results}
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(summary, fh, indent=1)
    if kept is not None:
        sess, devices, rows = kept
        try:
            from ..report_html import write_report

            write_report(args.report, sess, rows, title=f"{net.name} on {args.backends}",
                         bench=summary)
            print(f"report: {args.report}")
        finally:
            sess.close()
            for d in devices:
                d.close()
    return 0

"""`xrt compile`: parse, optimize, quantize, adapt, generate — every stage as json+raw.

Like the vendor's `icraft compile`, options come from flags or a TOML file (`[compile]` table).
All stages are written to a temporary folder first and moved into the output folder only when
every stage succeeded, so a failure leaves nothing half-written.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from typing import Any

HELP = "compile an ONNX model (or a zoo network) through every stage to a target's HardOps"

DEFAULTS = {"target": None, "calib": None, "output": "out", "bits": 8, "method": "kl",
            "input_shape": None, "name": None, "calib_count": 8, "input_size": None,
            "input_bits": None, "op_bits": None}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", nargs="?", help=".onnx file or a zoo name (tiny_cnn, ...)")
    parser.add_argument("--config", help="TOML file with a [compile] table of these options")
    parser.add_argument("--target", help="compile target from a plugin (e.g. zg330, buyi); "
                                         "without it compilation stops after quantization")
    parser.add_argument("--calib", help="calibration folder (.npy or images); zoo networks "
                                        "default to their generated set")
    parser.add_argument("-o", "--output", help="output folder (default: out)")
    parser.add_argument("--bits", type=int, choices=(8, 16), help="8 (default) or 16")
    parser.add_argument("--method", choices=("minmax", "percentile", "kl", "mse"),
                        help="calibration method (default kl)")
    parser.add_argument("--input-bits", type=int, choices=(16,),
                        help="mixed precision: the network inputs and the layers reading them "
                             "in 16 bits (an int16 stem writing int8)")
    parser.add_argument("--op-bits", action="append", metavar="OP=16",
                        help="mixed precision: compute this op (name in the optimized "
                             "network) in 16 bits; repeatable")
    parser.add_argument("--input-shape", action="append", metavar="NAME=D0,D1,...",
                        help="shape of a dynamic ONNX input")
    parser.add_argument("--name", help="network name (default: the model's)")
    parser.add_argument("--input-size", type=int, help="input size of a zoo network")
    parser.add_argument("--report", action="store_true", help="print the accuracy report")


def options(args: argparse.Namespace) -> dict[str, Any]:
    """Flags over TOML over defaults."""
    from ..errors import XrtError

    opts = dict(DEFAULTS)
    if args.config:
        import tomllib

        try:
            with open(args.config, "rb") as fh:
                table = tomllib.load(fh).get("compile", {})
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise XrtError(f"compile config {args.config}: {exc}") from exc
        unknown = sorted(set(table) - set(DEFAULTS) - {"model", "report"})
        if unknown:
            raise XrtError(f"compile config {args.config}: unknown keys {unknown}; known: "
                           f"{sorted(DEFAULTS)}")
        opts.update(table)
    for key in list(DEFAULTS) + ["model", "report"]:
        val = getattr(args, key, None)
        if val not in (None, False):
            opts[key] = val
    if not opts.get("model"):
        raise XrtError("xrt compile: give a model (.onnx or zoo name) or 'model' in --config")
    return opts


def _shapes(spec: Any) -> dict[str, list[int]] | None:
    if not spec:
        return None
    if isinstance(spec, dict):
        return {k: [int(d) for d in v] for k, v in spec.items()}
    out = {}
    for item in spec:
        name, _, dims = item.partition("=")
        out[name] = [int(d) for d in dims.split(",") if d]
    return out


def _op_bits(spec: Any) -> dict[str, int] | None:
    """`--op-bits NAME=16` flags, or the TOML table `op_bits = {NAME = 16}`."""
    from ..errors import XrtError

    if not spec:
        return None
    if isinstance(spec, dict):
        return {str(k): int(v) for k, v in spec.items()}
    out = {}
    for item in spec:
        name, _, bits = item.rpartition("=")
        if not name or not bits.isdigit():
            raise XrtError(f"xrt compile: --op-bits {item!r} is not NAME=BITS")
        out[name] = int(bits)
    return out


def compile_model(opts: dict[str, Any], report: bool = False) -> dict[str, str]:
    """Run every stage; returns {stage: json path} in the output folder."""
    from xir import zoo
    from xir.passes import optimize
    from xir.quant.calibrate import load_calibration
    from xir.quant.quantize import quantize_network

    from .. import plugins

    model = str(opts["model"])
    lower = plugins.target(opts["target"]) if opts.get("target") else None
    if model.endswith(".onnx") or os.path.exists(model):
        from xir.frontend import import_onnx

        net = import_onnx(model, _shapes(opts.get("input_shape")), name=opts.get("name"))
    else:
        size = opts.get("input_size")
        net = zoo.build(model, input_size=int(size)) if size else zoo.build(model)
    name = opts.get("name") or net.name
    if opts.get("calib"):
        samples = load_calibration(opts["calib"], net)
    elif model in zoo.names():
        size = opts.get("input_size")
        samples = zoo.calibration_set(model, count=int(opts["calib_count"]),
                                      **({"input_size": int(size)} if size else {}))
    else:
        from ..errors import XrtError

        raise XrtError("xrt compile: --calib DIR is required for an ONNX model")
    stages: list[tuple[str, Any]] = [("parsed", net)]
    optimized = optimize(net)
    stages.append(("optimized", optimized))
    quantized = quantize_network(optimized, samples, bits=int(opts["bits"]),
                                 method=opts["method"], input_bits=opts.get("input_bits"),
                                 op_bits=_op_bits(opts.get("op_bits")))
    stages.append(("quantized", quantized))
    adapted = lower.adapt(quantized, opts) if lower is not None and hasattr(lower, "adapt") \
        else quantized
    stages.append(("adapted", adapted))
    if lower is not None:
        stages.append((getattr(lower, "suffix", str(opts["target"]).upper()),
                       lower(adapted, opts)))
    if report:
        from xir.quant.report import accuracy_report

        accuracy_report(optimized, quantized, samples).print()
    out_dir = os.path.abspath(opts["output"])
    os.makedirs(os.path.dirname(out_dir) or ".", exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".xrt-compile-", dir=os.path.dirname(out_dir) or ".")
    written: dict[str, str] = {}
    try:
        for stage, network in stages:
            network.save(os.path.join(tmp, f"{name}_{stage}.json"))
        os.makedirs(out_dir, exist_ok=True)
        for fname in sorted(os.listdir(tmp)):
            os.replace(os.path.join(tmp, fname), os.path.join(out_dir, fname))
        for stage, _ in stages:
            written[stage] = os.path.join(out_dir, f"{name}_{stage}.json")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return written


def run(args: argparse.Namespace) -> int:
    opts = options(args)
    written = compile_model(opts, report=bool(opts.get("report")))
    for stage, path in written.items():
        print(f"{stage:>10}: {path}")
    return 0

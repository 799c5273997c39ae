"""`xrt compile` (registered by the xcompile plugin): the options of `xcompile.pipeline`
from flags and a TOML file; every stage as json+raw.

Like the vendor's `icraft compile`, options come from flags or a TOML file (`[compile]` table).
"""

from __future__ import annotations

import argparse
from typing import Any

from xcompile.pipeline import DEFAULTS, compile_model
from xrt.errors import XrtError

HELP = "compile an ONNX model (or a zoo network) through every stage to a target's HardOps"



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
                        help="calibration method (default mse; KL clips trained networks' "
                             "activations too hard: PaddleOCR's classifier 0.923 output cosine "
                             "with kl, 0.9998 with mse)")
    parser.add_argument("--input-bits", type=int, choices=(16,),
                        help="mixed precision: the network inputs and the layers reading them "
                             "in 16 bits (an int16 stem writing int8)")
    parser.add_argument("--op-bits", action="append", metavar="OP=16",
                        help="mixed precision: compute this op (name in the optimized "
                             "network) in 16 bits; repeatable")
    parser.add_argument("--min-cosine", type=float, metavar="C",
                        help="automatic mixed precision: while the int8 outputs' cosine to "
                             "float on the calibration samples is below C (default 0.99), "
                             "raise the layers that lose most to int16; 0 turns it off")
    parser.add_argument("--input-shape", action="append", metavar="NAME=D0,D1,...",
                        help="shape of a dynamic ONNX input")
    parser.add_argument("--name", help="network name (default: the model's)")
    parser.add_argument("--input-size", type=int, help="input size of a zoo network")
    parser.add_argument("--report", action="store_true", help="print the accuracy report")


def options(args: argparse.Namespace) -> dict[str, Any]:
    """Flags over TOML over defaults."""
    opts = dict(DEFAULTS)
    if args.config:
        try:
            import tomllib
        except ModuleNotFoundError:  # Python 3.10: the same parser, as a package
            import tomli as tomllib

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
        if val is not None and val is not False:
            opts[key] = val
    if not opts.get("model"):
        raise XrtError("give a model (.onnx or zoo name) or 'model' in --config")
    return opts


def _op_key(op: str) -> tuple:
    """Op ids in numeric order, then op names."""
    return (0, int(op), "") if op.isdigit() else (1, 0, op)


def run(args: argparse.Namespace) -> int:
    opts = options(args)
    try:
        written = compile_model(opts, report=bool(opts.get("report")))
    except MemoryError:
        raise XrtError(f"out of memory compiling {opts['model']}: a compile needs about 3x "
                       f"the float model's bytes + 1 GB; close other programs or compile on "
                       f"a machine with more memory") from None
    for stage, path in written.items():
        print(f"{stage:>10}: {path}")
    import xir

    # the last stage carries the quantization tags of every stage before it
    last = xir.Network.CreateFromJsonFile(list(written.values())[-1])
    mp = last.tags.get("quantization", {}).get("mixed_precision") or {}
    if len(mp.get("cosines", [])) > 1:
        print(f"mixed precision: int8 output cosine {mp['cosines'][0]:.4f} < "
              f"{mp['min_cosine']}; {len(mp['op_bits'])} ops raised to int16 -> "
              f"{max(mp['cosines']):.4f} (ops {', '.join(sorted(mp['op_bits'], key=_op_key))})")
    if opts.get("target"):
        from xcompile.placement import placement

        for line in placement(last, str(opts["target"])).lines():
            print(line)
    return 0

"""`xrt compile` (registered by the xcompile plugin): the options of `xcompile.pipeline`
from flags and a TOML file; every stage as json+raw.

Like the vendor's `icraft compile`, options come from flags or a TOML file (`[compile]` table).
"""

from __future__ import annotations

import argparse
from typing import Any

from xcompile.pipeline import DEFAULTS, compile_model
from xcompile.quant.int16_reasons import int16_record, summary_lines
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
                        help="automatic mixed precision: when an output part's int8 cosine to "
                             "float (lowest over a mirrored or half-rolled variant of each "
                             "calibration sample) is below C (default 0.99), raise the fewest, "
                             "most sensitive layers to int16 that reach C; 0 turns it off")
    parser.add_argument("--max-int16", metavar="SHARE",
                        help="cap of automatic mixed precision: at most this share of the "
                             "network's MACs computed in int16, and of its layers holding a "
                             "16-bit value, as a "
                             "percentage (10%%, the default) or a fraction (0.1); when the cap "
                             "cannot reach --min-cosine the compile warns and keeps int8 (a "
                             "cap above 10%% keeps the raise that came closest)")
    parser.add_argument("--input-shape", action="append", metavar="NAME=D0,D1,...",
                        help="shape of a dynamic ONNX input")
    parser.add_argument("--input-value", action="append", metavar="NAME=V[,V...]",
                        help="fix an ONNX graph input to a constant (e.g. a VAD's sample "
                             "rate sr=16000): what it decides folds, an If on it keeps one "
                             "branch")
    parser.add_argument("--name", help="network name (default: the model's)")
    parser.add_argument("--input-size", type=int, help="input size of a zoo network")
    parser.add_argument("--report", action="store_true", help="print the accuracy report")
    parser.add_argument("--bundle-shapes", nargs="+", metavar="SHAPE",
                        help="quantize once and lower one network per input shape into one "
                             "bundle file <name>_<SUFFIX>.bundle whose weights are stored once "
                             "(each SHAPE like x=1,3,320,320; several inputs joined by ';'); "
                             "needs --target")


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


def mixed_precision_lines(mp: dict[str, Any]) -> list[str]:
    """What automatic mixed precision measured and chose (`tags["quantization"]
    ["mixed_precision"]`), as the compile prints it: the cosine per output part before and
    after, the ops raised to int16 (names), the int16 share of MACs and the chip cycles they
    cost (`raise_cycles_line`)."""
    if not mp:
        return []
    before, after = mp.get("cosine_before", {}), mp.get("cosine_after", {})
    raised = mp.get("raised", [])
    head = (f"mixed precision: --min-cosine {mp['min_cosine']}, --max-int16 "
            f"{mp['max_int16']:.0%} of MACs; worst part {mp['worst_before'][0]} "
            f"{mp['worst_before'][1]:.4f} in int8")
    if raised:
        head += (f"; {len(raised)} layer{'s' if len(raised) > 1 else ''} raised to int16 -> "
                 f"{mp['worst_after'][1]:.4f}")
    elif mp.get("warning"):
        head += "; target missed within the cap, int8 kept"
    else:
        head += ": target met, nothing raised"
    lines = [head]
    for part, c in before.items():
        lines.append(f"  part {part}: cosine {c:.4f} -> {after.get(part, c):.4f}")
    if raised:
        lines.append(f"  int16 layers: {', '.join(raised)}")
    lines.append(f"  int16 cost: {mp['int16_mac_share']:.1%} of MACs (int8 network "
                 f"{mp['int16_mac_share_before']:.1%}), {mp['int16_ops']} of "
                 f"{mp['integer_ops']} integer ops in int16"
                 + (f", {mp['int16_layers']} of {mp['layers']} layers (HardOps) holding "
                    f"16-bit values" if "layers" in mp else ""))
    if raised:
        lines.append(raise_cycles_line(mp))
    return lines  # the warning, when the cap missed the target, the pipeline logs itself


def raise_cycles_line(mp: dict[str, Any]) -> str:
    """`int16 raise: N layers, cycles X -> Y (+Z%)`: the chip cycles of one cycles-only forward
    of the all-int8 and of the mixed network (`cycles_int8`, `cycles_mixed`), or why they were
    not counted (no --target, or a target without a cycles-only simulator)."""
    n = len(mp.get("raised", []))
    head = f"int16 raise: {n} layer{'s' if n != 1 else ''}"
    if "cycles_int8" in mp and "cycles_mixed" in mp:
        x, y = int(mp["cycles_int8"]), int(mp["cycles_mixed"])
        return f"{head}, cycles {x} -> {y} ({(y - x) / max(x, 1):+.1%})"
    why = mp.get("cycles_skipped") or "no --target to count them on"
    return f"{head}, cycles not counted ({why})"


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

    if opts.get("bundle_shapes"):
        bundle = xir.Bundle.CreateFromFile(written["bundle"])
        print(f"bundle {bundle.name}: {len(bundle)} networks ({', '.join(bundle.names())}); "
              f"weights stored once: {bundle.shared_bytes} bytes in {len(bundle.blocks)} "
              f"blocks ({bundle.separate_bytes()} as separate networks)")
        return 0

    # the last stage carries the quantization tags of every stage before it
    last = xir.Network.CreateFromJsonFile(list(written.values())[-1])
    mp = last.tags.get("quantization", {}).get("mixed_precision") or {}
    for line in mixed_precision_lines(mp):
        print(line)
    rec = int16_record(last)
    if rec:  # why each op computing or storing in 16 bits does
        for line in summary_lines(rec):
            print(line)
    if opts.get("target"):
        from xcompile.placement import placement

        for line in placement(last, str(opts["target"])).lines():
            print(line)
    return 0

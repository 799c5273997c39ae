"""`xrt quant-report` (registered by the xcompile plugin): per-layer accuracy of a quantized
network against its float network, and of its outputs per part (a Concat output per branch,
score parts with top-5 agreement and kept entries). It ends with a verdict and exits with
status 1 when the network is not accurate: an output part collapsed, or a part's worst sample is
below --min-cosine."""

from __future__ import annotations

import argparse

HELP = ("per-layer cosine similarity and max abs error of quantized vs float, outputs per part "
        "(table + json); exit status 1 when an output part collapsed")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("float_json", help="float network (e.g. *_optimized.json)")
    parser.add_argument("quant_json", help="quantized network (*_quantized.json)")
    parser.add_argument("--calib", help="calibration folder (default: the zoo set of a zoo "
                                        "network, recognised by its tags, not its name)")
    parser.add_argument("--count", type=int, default=4, help="samples from the zoo set")
    parser.add_argument("--json", dest="json_out", help="write the report as json here")
    parser.add_argument("--onnx", metavar="MODEL.onnx",
                        help="the float ONNX model the networks came from: adds onnxruntime's "
                             "own int8 (quantize_static, QDQ, per-channel, the same samples) "
                             "as a column of the outputs and of the output parts tables")
    parser.add_argument("--min-cosine", type=float, default=0.99,
                        help="the verdict's aim: every output part's worst sample at least "
                             "this cosine (default 0.99); a collapsed part always fails")
    parser.add_argument("--channel-groups", default="0", metavar="N|auto",
                        help="cut outputs without a Concat into N channel groups, each a part "
                             "('auto': about 16 channels a group, at most 16; default 0: "
                             "whole, as the compile's check measures them)")
    parser.add_argument("--suggest", type=int, metavar="N", default=0,
                        help="print the N 8-bit ops whose own rounding costs most (lowest "
                             "'alone' cosine) as --op-bits flags for xrt compile")


def run(args: argparse.Namespace) -> int:
    import json
    import os

    import xir
    from xcompile import zoo
    from xcompile.quant.calibrate import load_calibration
    from xcompile.quant.int16_reasons import int16_record, summary_lines, table_lines
    from xcompile.quant.report import accuracy_report
    from xrt.errors import XrtError

    def load(path: str) -> xir.Network:
        net = xir.Network.CreateFromJsonFile(path)
        net.loadParamsFromFile(os.path.splitext(path)[0] + ".raw")
        return net

    fnet, qnet = load(args.float_json), load(args.quant_json)
    if "quantization" in fnet.tags and "quantization" not in qnet.tags:
        raise XrtError(f"{args.float_json} is the quantized network and {args.quant_json} the "
                       f"float one: give the float network first (xrt quant-report FLOAT "
                       f"QUANTIZED)")
    if "quantization" not in qnet.tags:
        raise XrtError(f"{args.quant_json} is not a quantized network (no quantization tag): "
                       f"give the *_quantized.json of a compile")
    origin = fnet.tags.get("zoo") if isinstance(fnet.tags.get("zoo"), dict) else {}
    if args.calib:
        samples = load_calibration(args.calib, fnet)
    elif origin.get("name") in zoo.names():
        size = origin.get("input_size")
        samples = zoo.calibration_set(origin["name"], count=args.count,
                                      **({"input_size": int(size)} if size else {}))
    else:
        raise XrtError(f"quant-report: {fnet.name} is not a zoo network (an imported or "
                       f"renamed model): give --calib DIR with its samples")
    groups = args.channel_groups
    if groups != "auto" and not str(groups).isdigit():
        raise XrtError(f"--channel-groups {groups!r}: give a number of groups or 'auto'")
    report = accuracy_report(fnet, qnet, samples,
                             channel_groups=None if groups == "auto" else int(groups))
    if not report.rows:
        print("warning: no quantized layer matches a float value: are these two networks "
              "the float and the quantized stage of one compile?")
    if args.onnx:
        from xcompile.quant.report import attach_onnxruntime

        attach_onnxruntime(report, args.onnx, samples, samples)
    report.print()
    rec = int16_record(qnet)
    if rec:  # why each op computing or storing in 16 bits does (the compile's record)
        for line in summary_lines(rec) + (table_lines(rec) if rec.get("ops") else []):
            print(line)
    ok, why = report.verdict(args.min_cosine)
    print(f"accurate: {'yes' if ok else 'NO'} -- {why}")
    if args.suggest:
        flags = " ".join(f"--op-bits {name}=16"
                         for name in report.suggest_op_bits(args.suggest))
        print(f"raise these to 16 bits: {flags}" if flags else "no 8-bit op to raise")
    if args.json_out:
        d = report.to_dict()
        d["verdict"] = {"accurate": ok, "min_cosine": args.min_cosine, "why": why}
        d["int16"] = rec
        with open(args.json_out, "w") as fh:
            json.dump(d, fh, indent=2)
    return 0 if ok else 1

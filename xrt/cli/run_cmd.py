"""`xrt run`: run a network (json+raw, or what a plugin loads: a zoo name, an .onnx file) in the
manner of the vendor's `icraft run`."""

from __future__ import annotations

import argparse
import os
from typing import Any

HELP = "run a network on backends such as 'ZG330,sim://zg330;Host' and show its profile"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="network json (raw beside it), a zoo name (resnet18...) "
                                      "or an .onnx file (run in float)")
    parser.add_argument("--raw", help="params file (default: the json's stem + .raw)")
    parser.add_argument("--target", help="compile a zoo network for this target first (cached "
                                         "in .icraft/cache), e.g. zg330")
    parser.add_argument("--input-size", type=int, help="zoo network input size")
    parser.add_argument("--inputs", nargs="*", default=[], help=".npy files, one per input")
    parser.add_argument("--backends", default="Host",
                        help="';'-separated 'Backend[,device-url]' list in binding priority")
    parser.add_argument("--profile", action="store_true", help="print the per-op time profile")
    parser.add_argument("--profile-json", help="write the profile rows as json")
    parser.add_argument("--profile-csv", help="write the per-layer table as CSV")
    parser.add_argument("--trace", help="write a Chrome/Perfetto trace json")
    parser.add_argument("--plot", help="write a PNG plot of the per-layer time")
    parser.add_argument("--report", help="write a one-page HTML report (per-layer time, chip "
                                         "timeline, memory map, placement, precision)")
    parser.add_argument("--dump-outputs", metavar="DIR", help="dump every op's outputs")
    parser.add_argument("--dump-format", default="SFB", help="three-letter dump format")
    parser.add_argument("--log-time", action="store_true", help="print each op's times")
    parser.add_argument("--log-io", action="store_true", help="print each op's outputs")
    parser.add_argument("--repeat", type=int, default=1, help="forwards to run (last profiled)")
    parser.add_argument("--strict", action="store_true",
                        help="an op falling back to a later backend is an error")
    parser.add_argument("--save-outputs", metavar="DIR", help="save outputs as .npy")


def backend_urls(text: str) -> list[tuple[str, str]]:
    """'ZG330,sim://zg330;Host' -> [(backend name, device URL)], a missing URL defaulted from
    the backend class."""
    from .. import plugins
    from ..errors import XrtError

    pairs = []
    for entry in [e.strip() for e in text.split(";") if e.strip()]:
        name, _, url = entry.partition(",")
        cls = plugins.backend_class(name.strip())
        url = url.strip() or getattr(cls, "default_url", "")
        if not url:
            raise XrtError(f"backend '{name}' needs a device URL: '{name},scheme://...'")
        pairs.append((name.strip(), url))
    if not pairs:
        raise XrtError("--backends is empty")
    return pairs


def open_backends(pairs: list[tuple[str, str]]) -> tuple[list[type], list[Any]]:
    """[(backend name, device URL)] -> backend classes and opened devices."""
    from .. import plugins
    from ..device import Device

    return ([plugins.backend_class(n) for n, _ in pairs], [Device.Open(u) for _, u in pairs])


def parse_backends(text: str) -> tuple[list[type], list[Any]]:
    """'ZG330,sim://zg330;Host' -> backend classes and opened devices."""
    return open_backends(backend_urls(text))


def load_model(model: str, raw: str | None, target: str | None = None,
               input_size: int | None = None) -> Any:
    """A network from json(+raw), or from a plugin's `xrt_load_model` (the compile pipeline:
    .onnx files in float, zoo names, compiled for `target` when given)."""
    import xir

    from .. import plugins
    from ..errors import XrtError

    if model.endswith(".json") or (os.path.isfile(model) and not model.endswith(".onnx")):
        net = xir.Network.CreateFromJsonFile(model)
        raw = raw or os.path.splitext(model)[0] + ".raw"
        net.loadParamsFromFile(raw)
        return net
    net = plugins.plugin_manager().hook.xrt_load_model(model=model, target=target,
                                                       input_size=input_size)
    if net is None:
        raise XrtError(f"{model}: not a network json, and no installed plugin loads it (the "
                       f"compile pipeline loads .onnx files and zoo names)")
    if isinstance(net, str):  # a compiled json path
        return load_model(net, None)
    return net


def default_inputs(model: str, net: Any, input_size: int | None = None) -> list[Any]:
    """Inputs for a run without --inputs: a plugin's sample (a zoo image), else seeded noise."""
    import numpy as np

    from .. import plugins

    sample = plugins.plugin_manager().hook.xrt_sample_inputs(model=model, network=net,
                                                             input_size=input_size)
    if sample is not None:
        return list(sample)
    rng = np.random.default_rng(0)
    return [rng.standard_normal(v.shape).astype(v.dtype.numpy_dtype) for v in net.inputs()]


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from ..console import progress_bar, stage
    from ..profiling import (
        plot_profile,
        print_profile,
        profile_rows,
        write_chrome_trace,
        write_profile_csv,
    )
    from ..session import Session
    from .files import read_npy, writable, writable_dir

    for opt in ("profile_json", "profile_csv", "trace", "plot", "report"):  # checked first
        if getattr(args, opt):
            writable(getattr(args, opt), "--" + opt.replace("_", "-"))
    for opt in ("dump_outputs", "save_outputs"):
        if getattr(args, opt):
            writable_dir(getattr(args, opt), "--" + opt.replace("_", "-"))
    inputs = [read_npy(p, "--inputs") for p in args.inputs]
    with stage(f"load {args.model}" + (f" compiled for {args.target}" if args.target else "")):
        net = load_model(args.model, args.raw, args.target, args.input_size)
    classes, devices = parse_backends(args.backends)
    if not inputs:
        inputs = default_inputs(args.model, net, args.input_size)
    sess = Session.Create(classes, net.view(0), devices, strict=args.strict)
    sess.enableTimeProfile(True)
    sess.setLogTime(args.log_time)
    sess.setLogIO(args.log_io)
    if args.dump_outputs:
        sess.setDumpOutputs(True, args.dump_outputs, args.dump_format)
    with stage(f"apply: deploy {net.name} on {args.backends}"):
        sess.apply()
    with stage("first forward (Numba compiles the chip's kernels once, on a cold cache)"):
        outs = sess.forward(inputs)
    if args.repeat > 1:
        with progress_bar(args.repeat - 1, "forwards") as advance:
            for _ in range(args.repeat - 1):
                outs = sess.forward(inputs)
                advance()
    rows = profile_rows(sess)
    if args.profile:
        print_profile(rows, title=f"{net.name}: per-op time profile ({args.backends})")
    if args.profile_json:
        import json

        with open(args.profile_json, "w") as fh:
            json.dump(rows, fh, indent=1)
    if args.profile_csv:
        write_profile_csv(rows, args.profile_csv)
    if args.trace:
        write_chrome_trace(rows, args.trace)
    if args.plot:
        plot_profile(rows, args.plot, title=f"{net.name}: per-layer time")
    if args.report:
        from ..report_html import write_report

        write_report(args.report, sess, rows, title=f"{net.name} on {args.backends}")
    for v, t in zip(net.outputs(), outs):
        arr = np.asarray(t)
        print(f"output v{v.v_id} {list(arr.shape)} {arr.dtype}: mean {arr.mean():.6g} "
              f"std {arr.std():.6g}")
        if args.save_outputs:
            os.makedirs(args.save_outputs, exist_ok=True)
            np.save(os.path.join(args.save_outputs, f"output_{v.v_id}.npy"), arr)
    print(f"total {sess.totalTime():.3f} ms")
    return 0

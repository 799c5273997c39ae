"""`xrt run`: run a network (json+raw or a zoo name) in the manner of the vendor's `icraft run`."""

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
    parser.add_argument("--trace", help="write a Chrome/Perfetto trace json")
    parser.add_argument("--plot", help="write a PNG plot of the per-layer time")
    parser.add_argument("--dump-outputs", metavar="DIR", help="dump every op's outputs")
    parser.add_argument("--dump-format", default="SFB", help="three-letter dump format")
    parser.add_argument("--log-time", action="store_true", help="print each op's times")
    parser.add_argument("--log-io", action="store_true", help="print each op's outputs")
    parser.add_argument("--repeat", type=int, default=1, help="forwards to run (last profiled)")
    parser.add_argument("--strict", action="store_true",
                        help="an op falling back to a later backend is an error")
    parser.add_argument("--save-outputs", metavar="DIR", help="save outputs as .npy")


def parse_backends(text: str) -> tuple[list[type], list[Any]]:
    """'ZG330,sim://zg330;Host' -> backend classes and opened devices."""
    from .. import plugins
    from ..device import Device
    from ..errors import XrtError

    classes, devices = [], []
    for entry in [e.strip() for e in text.split(";") if e.strip()]:
        name, _, url = entry.partition(",")
        cls = plugins.backend_class(name.strip())
        url = url.strip() or getattr(cls, "default_url", "")
        if not url:
            raise XrtError(f"backend '{name}' needs a device URL: '{name},scheme://...'")
        classes.append(cls)
        devices.append(Device.Open(url))
    if not classes:
        raise XrtError("--backends is empty")
    return classes, devices


def load_model(model: str, raw: str | None, target: str | None = None,
               input_size: int | None = None) -> Any:
    """A network from json(+raw) or the zoo (compiled for `target` when given, cached)."""
    import xir

    if model.endswith(".onnx"):
        from ..errors import XrtError

        if target:
            raise XrtError(f"{model}: an ONNX model needs calibration data to compile: run "
                           f"'xrt compile {model} --target {target} --calib DIR -o out/', then "
                           f"'xrt run' on the generated json in out/")
        from xir.frontend import import_onnx

        return import_onnx(model)  # the float network, on whatever backends are asked for
    if os.path.exists(model) or model.endswith(".json"):
        net = xir.Network.CreateFromJsonFile(model)
        raw = raw or os.path.splitext(model)[0] + ".raw"
        net.loadParamsFromFile(raw)
        return net
    from xir import zoo

    if target:
        return load_model(compiled_zoo(model, target, input_size), None)
    return zoo.build(model, input_size=input_size) if input_size else zoo.build(model)


def _source_stamp() -> str:
    """A short hash of the code a cached compile depends on, so a changed compiler never runs a
    stale cached network: the sources of every loaded package that is not installed into the
    interpreter's library folders (this project's editable packages: xir, the target plugin,
    the shared hardware model), and the versions of the installed icraft-xrt distributions."""
    import hashlib
    import importlib.metadata as md
    import sys
    import sysconfig
    from pathlib import Path

    libs = {Path(sysconfig.get_paths()[k]).resolve() for k in ("purelib", "platlib", "stdlib")}
    h = hashlib.sha256()
    for name, mod in sorted(list(sys.modules.items()), key=lambda kv: kv[0]):
        paths = getattr(mod, "__path__", None)
        if "." in name or not paths or not getattr(mod, "__file__", None):
            continue
        pkg = Path(mod.__file__).resolve().parent
        if any(pkg.is_relative_to(lib) for lib in libs):
            continue
        for f in sorted(pkg.rglob("*.py")):
            h.update(f"{name}/{f.relative_to(pkg)}".encode())
            h.update(f.read_bytes())
    for dist in sorted(d.metadata["Name"] for d in md.distributions()
                       if d.metadata["Name"] and d.metadata["Name"].startswith("icraft-xrt")):
        h.update(f"{dist}={md.version(dist)}".encode())
    return h.hexdigest()[:10]


def compiled_zoo(model: str, target: str, input_size: int | None = None) -> str:
    """Path of the zoo network compiled for `target`, compiling it on first use."""
    from .. import plugins
    from .compile_cmd import DEFAULTS, compile_model

    lower = plugins.target(target)
    suffix = getattr(lower, "suffix", target.upper())
    tag = f"{model}_{input_size}" if input_size else model
    out = os.path.join(".icraft", "cache", f"{tag}_{target}_{_source_stamp()}")
    path = os.path.join(out, f"{tag}_{suffix}.json")
    if not os.path.exists(path):
        print(f"compiling {model} for {target} into {out} (cached for later runs)")
        opts = dict(DEFAULTS, model=model, target=target, output=out, name=tag,
                    input_size=input_size)
        compile_model(opts)
    return path


def default_inputs(model: str, net: Any, input_size: int | None = None) -> list[Any]:
    import numpy as np

    try:
        from xir import zoo

        if model in zoo.names():
            kw = {"input_size": input_size} if input_size else {}
            return zoo.calibration_set(model, count=1, seed=1, **kw)[0]
    except ImportError:
        pass
    rng = np.random.default_rng(0)
    return [rng.standard_normal(v.shape).astype(v.dtype.numpy_dtype) for v in net.inputs()]


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from ..profiling import plot_profile, print_profile, profile_rows, write_chrome_trace
    from ..session import Session

    net = load_model(args.model, args.raw, args.target, args.input_size)
    classes, devices = parse_backends(args.backends)
    if args.inputs:
        inputs = [np.load(p) for p in args.inputs]
    else:
        inputs = default_inputs(args.model, net, args.input_size)
    sess = Session.Create(classes, net.view(0), devices, strict=args.strict)
    sess.enableTimeProfile(True)
    sess.setLogTime(args.log_time)
    sess.setLogIO(args.log_io)
    if args.dump_outputs:
        sess.setDumpOutputs(True, args.dump_outputs, args.dump_format)
    sess.apply()
    outs = []
    for _ in range(max(1, args.repeat)):
        outs = sess.forward(inputs)
    rows = profile_rows(sess)
    if args.profile:
        print_profile(rows, title=f"{net.name}: per-op time profile ({args.backends})")
    if args.profile_json:
        import json

        with open(args.profile_json, "w") as fh:
            json.dump(rows, fh, indent=1)
    if args.trace:
        write_chrome_trace(rows, args.trace)
    if args.plot:
        plot_profile(rows, args.plot, title=f"{net.name}: per-layer time")
    for v, t in zip(net.outputs(), outs):
        arr = np.asarray(t)
        print(f"output v{v.v_id} {list(arr.shape)} {arr.dtype}: mean {arr.mean():.6g} "
              f"std {arr.std():.6g}")
        if args.save_outputs:
            os.makedirs(args.save_outputs, exist_ok=True)
            np.save(os.path.join(args.save_outputs, f"output_{v.v_id}.npy"), arr)
    print(f"total {sess.totalTime():.3f} ms")
    return 0

"""The compile of a bundle: one quantization, one lowered network per input shape, one file.

    written = compile_bundle({"model": "tiny_cnn", "target": "zg330", "output": "out",
                              "bundle_shapes": ["input=1,32,32,3", "input=1,64,64,3"]})
    # {"quantized": out/tiny_cnn_quantized.json, "bundle": out/tiny_cnn_ZG.bundle}

`xrt compile MODEL --target T --bundle-shapes SHAPE SHAPE ...` runs it (Ascend's
`aclgrphBundleBuildModel`: several graphs, one set of weights). The model is parsed and
calibrated once, at `--input-shape` or else the first bundle shape, and quantized once; then,
per shape, the quantized network is given that input shape (every value's shape inferred again
from its op; the scales stay) and lowered for the target. The lowered members go into an
`xir.Bundle` (xir/bundle.py), which stores each distinct weight block once; members whose
weight blocks agree hold the same `Params`.

A SHAPE is `NAME=D0,D1,...` in the graph input's own dimensions (an ONNX model's NCHW input
as ONNX states it), several inputs joined by `;`. A shape the graph cannot take -- a rank that
differs, a Reshape or Concat whose fixed sizes the new shape breaks, an ONNX model that does
not import at that shape -- is refused before anything is written, naming the op.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from typing import Any

from xir.bundle import Bundle
from xir.errors import XirError
from xir.network import Network
from xir.types import TensorType
from xrt import plugins
from xrt.console import stage
from xrt.errors import XrtError

__all__ = ["BundleShapeError", "compile_bundle", "member_name", "parse_bundle_shapes",
           "reshape_network"]


class BundleShapeError(XrtError, ValueError):
    """A `--bundle-shapes` entry is malformed or names a shape the graph cannot take."""


def parse_bundle_shapes(specs: Any) -> list[dict[str, tuple[int, ...]]]:
    """`["x=1,3,32,32", "x=1,3,64,64"]` (or the TOML list) -> one {input: shape} per member."""
    if isinstance(specs, str):
        specs = [specs]
    if not specs:
        raise BundleShapeError("--bundle-shapes needs at least one SHAPE (NAME=D0,D1,...)")
    out = []
    for spec in specs:
        shapes: dict[str, tuple[int, ...]] = {}
        for item in str(spec).split(";"):
            name, eq, dims = item.strip().partition("=")
            try:
                shape = tuple(int(d) for d in dims.split(","))
            except ValueError:
                shape = ()
            if not eq or not name or not shape or min(shape) < 1:
                raise BundleShapeError(f"--bundle-shapes {spec!r}: {item!r} is not NAME=D0,D1,"
                                       f"... with positive dimensions (e.g. x=1,3,320,320)")
            if name in shapes:
                raise BundleShapeError(f"--bundle-shapes {spec!r} gives input {name!r} twice")
            shapes[name] = shape
        out.append(shapes)
    names = [member_name(s) for s in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise BundleShapeError(f"--bundle-shapes gives the shape {dup[0]} twice")
    return out


def member_name(shapes: dict[str, tuple[int, ...]]) -> str:
    """A member's name in the bundle: its input dimensions (`1x3x320x320`; several inputs
    joined by `_`, each prefixed by its name)."""
    dims = ["x".join(map(str, s)) for s in shapes.values()]
    if len(dims) == 1:
        return dims[0]
    return "_".join(f"{re.sub(r'[^A-Za-z0-9-]+', '-', k)}-{d}" for k, d in zip(shapes, dims))


def reshape_network(net: Network, shapes: dict[str, tuple[int, ...]]) -> Network:
    """A copy of `net` whose graph inputs have `shapes` (by input name, every input named),
    each value's shape inferred again from its op in order. Element types -- quantization
    scales included -- and parameters are kept; a Cast keeps its input's shape. Refused with
    `BundleShapeError` naming the op when the graph cannot take the shapes."""
    inputs = net.inputs()
    by_name = {v.name: v for v in inputs}
    unknown = sorted(set(shapes) - set(by_name))
    if unknown:
        raise BundleShapeError(f"--bundle-shapes names input {unknown[0]!r}; network "
                               f"'{net.name}' has inputs {sorted(by_name)}")
    missing = sorted(set(by_name) - set(shapes))
    if missing:
        raise BundleShapeError(f"--bundle-shapes gives no shape for input {missing[0]!r} of "
                               f"network '{net.name}' (several inputs: NAME=D,...;NAME=D,...)")
    for name, shape in shapes.items():
        want = by_name[name].shape
        if len(shape) != len(want):
            raise BundleShapeError(
                f"--bundle-shapes {name}={','.join(map(str, shape))}: input {name!r} of "
                f"network '{net.name}' has rank {len(want)} ({list(want)}), not {len(shape)}")
    copy = Network.CreateFromJsonStr(net.dumpJsonToStr())
    copy.loadParamsFromBuffer(net.dumpParamsToBuffer())
    label = ", ".join(f"{k}={list(v)}" for k, v in shapes.items())
    for op in copy.ops:
        if op.op_type == "Output":
            continue
        if op.op_type == "Input":
            new = [tuple(shapes[v.name]) for v in op.outputs]
        elif op.op_type == "Cast":  # its declared output shape is its input's
            new = [tuple(op.inputs[0].shape)]
        else:
            try:
                new = [tuple(int(d) for d in s)
                       for s in op.infer_shapes([tuple(v.shape) for v in op.inputs])]
            except XirError as err:
                raise BundleShapeError(f"network '{net.name}' cannot take input shape {label}: "
                                       f"op {op.op_id} ({op.op_type} '{op.name}'): "
                                       f"{err.message}") from err
        if any(d < 1 for s in new for d in s):
            raise BundleShapeError(f"network '{net.name}' cannot take input shape {label}: "
                                   f"op {op.op_id} ({op.op_type} '{op.name}') would output "
                                   f"{[list(s) for s in new]}")
        for v, s in zip(op.outputs, new):
            t = v.dtype
            v.dtype = TensorType(t.element_dtype, s, t.layout if t.layout.rank == len(s)
                                 else None)
    try:
        copy.validate()
    except XirError as err:
        raise BundleShapeError(f"network '{net.name}' cannot take input shape {label}: "
                               f"{err}") from err
    return copy


def _check_onnx_shape(model: str, shapes: dict[str, tuple[int, ...]], member: Network,
                      opts: dict[str, Any]) -> None:
    """An ONNX model imported at `shapes` must give the outputs `member` infers."""
    from xcompile.pipeline import parse_values
    from xcompile.quant.qdq import import_qdq

    label = ", ".join(f"{k}={list(v)}" for k, v in shapes.items())
    try:
        ref = import_qdq(model, {k: list(v) for k, v in shapes.items()},
                         name=opts.get("name"), input_values=parse_values(opts.get("input_value")))
    except XirError as err:
        raise BundleShapeError(f"{model} does not import at input shape {label}: "
                               f"{err}") from err
    got = [tuple(v.shape) for v in member.outputs()]
    want = [tuple(v.shape) for v in ref.outputs()]
    if got != want:
        raise BundleShapeError(f"{model} at input shape {label}: the model's outputs are "
                               f"{[list(s) for s in want]}, the quantized graph reshaped gives "
                               f"{[list(s) for s in got]} (a size fixed at import)")


def compile_bundle(opts: dict[str, Any], runner: Any = None) -> dict[str, str]:
    """Parse, calibrate and quantize `opts["model"]` once; lower it for `opts["target"]` at
    every shape of `opts["bundle_shapes"]`; write `<name>_quantized.json/raw` and
    `<name>_<SUFFIX>.bundle` into `opts["output"]`. Returns {"quantized": path, "bundle":
    path}. Nothing is written unless every member lowers."""
    from xcompile.passes import optimize
    from xcompile.pipeline import is_onnx_model, parse_model, parse_shapes, quantize_stage

    members = parse_bundle_shapes(opts.get("bundle_shapes"))
    if not opts.get("target"):
        raise XrtError("--bundle-shapes needs --target (a bundle holds networks lowered for "
                       "one chip: run once per target)")
    lower = plugins.target(opts["target"])
    model = str(opts["model"])
    onnx_model = is_onnx_model(model)
    first = parse_shapes(opts.get("input_shape")) or {k: list(v) for k, v in members[0].items()}
    net, name, samples = parse_model(opts, first if onnx_model else None)
    with stage(f"optimize {name}"):
        optimized = optimize(net)
        del net
    with stage(f"quantize {name} once: int{opts['bits']}, {opts['method']} scales"):
        quantized = quantize_stage(optimized, samples, opts, runner, name)
        del optimized
    lowered: dict[str, Network] = {}
    for shapes in members:
        key = member_name(shapes)
        with stage(f"lower {name} at {key} for {opts['target']}"):
            member = reshape_network(quantized, shapes)
            if onnx_model:
                _check_onnx_shape(model, shapes, member, opts)
            adapted = lower.adapt(member, opts) if hasattr(lower, "adapt") else member
            lowered[key] = lower(adapted, opts)
    suffix = getattr(lower, "suffix", str(opts["target"]).upper())
    bundle = Bundle.from_networks(lowered, name=name)
    out_dir = os.path.abspath(opts.get("output") or "out")
    os.makedirs(os.path.dirname(out_dir) or ".", exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".xrt-bundle-", dir=os.path.dirname(out_dir) or ".")
    try:
        quantized.save(os.path.join(tmp, f"{name}_quantized.json"))
        bundle.save(os.path.join(tmp, f"{name}_{suffix}.bundle"))
        os.makedirs(out_dir, exist_ok=True)
        for fname in sorted(os.listdir(tmp)):
            os.replace(os.path.join(tmp, fname), os.path.join(out_dir, fname))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"quantized": os.path.join(out_dir, f"{name}_quantized.json"),
            "bundle": os.path.join(out_dir, f"{name}_{suffix}.bundle")}

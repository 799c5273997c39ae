"""Every extension point of xrt, declared with pluggy (project name "xrt").

A plugin is a plain module with `@hookimpl` functions, found through the entry-point group
`xrt.plugins` (`xrt.plugins` loads them). Registration hooks receive a `register` callback (as
llm's plugins do) and are called through pluggy one plugin at a time, so the core validates
what each plugin sends and blames the plugin that sent something bad; the other hooks are
called through the plugin manager's relay (`plugin_manager().hook.NAME(...)`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pluggy

PROJECT = "xrt"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


# --- backends -------------------------------------------------------------------------------

@hookspec
def xrt_register_backends(register: Callable) -> None:
    """Register backend classes: `register(BackendClass)`.

    The class must subclass `xrt.Backend` and carry a unique `name` (used in backend strings
    such as "ZG330,sim://zg330;Host"). Registering makes it importable by name through
    `xrt.plugins.backend_class(name)`; the vendor-style import (`from host_backend import *`)
    works independently of this.
    """


# --- devices --------------------------------------------------------------------------------

@hookspec
def xrt_register_device_schemes(register: Callable) -> None:
    """Claim device URL schemes: `register(scheme, opener, description="", names=None)`.

    `opener(url: xrt.url.DeviceUrl) -> xrt.Device` opens a device for a URL of that scheme
    (`sim`, `mock`, `axi`, `socket`, `host`...); the URL arrives parsed (scheme, device name,
    host, port, query params) and is also the URL text. `names` limits the claim to those
    device names (`sim://zg330`); without it the plugin claims every name of the scheme. A
    (scheme, name) pair may be claimed by one plugin only; a second claim is reported as a
    plugin error. `Device.Open(url)` dispatches on the pair, the exact name first.
    """


# --- compile path -----------------------------------------------------------------------------

@hookspec
def xrt_register_targets(register: Callable) -> None:
    """Register compile targets: `register(name, lower, description="", compile_target="")`.

    `lower(network: xir.Network, options: dict) -> xir.Network` turns a quantized (adapted)
    network into the target's generated stage: HardOps with instructions and weights, plus the
    Cast/AlignAxis/PruneAxis edges; ops the target cannot run stay host ops. The compile CLI
    (`xrt compile --target NAME`) writes its result as `<name>_<SUFFIX>.json/.raw`; a target
    declares SUFFIX as `lower.suffix` (e.g. "ZG", "BY") and may give `lower.adapt(quantized,
    options)`, the adapt stage run before it. `compile_target` names what its HardOps carry
    ("@zhuget(330)", "@buyi"); the IR accepts any "@name(N)", the registry records whose it is.
    """


@hookspec(firstresult=True)
def xrt_refit_plan(network: Any, source: Any) -> Any:
    """The compile half of `Session.refitWeights(source)`: new weights for compiled `network`
    (an `xir.Network` or view, quantized or lowered) from `source` (an ONNX file path, an
    `onnx.ModelProto` or a dict of ONNX initializer names to arrays), or None to let the next
    plugin try.

    Returns a plan: `plan.layers` maps op ids to objects with `.op` (the layer as a quantized
    xir op with its new parameters and the frozen input / output types: what a target's
    lowering rule packs) and `.names` (its initializers); `plan.report` is what the session
    returns (the backends add what they wrote: `.hardops`, `.bytes`, `.host_ops`);
    `plan.finish(network)` records the new weights' digests once every backend committed. A
    source that cannot be applied raises an `XrtError` naming the initializer or layer, before
    anything is written. The compile pipeline (`xcompile.plugin`, `xcompile.refit`) implements
    it; xrt itself cannot, since it never imports the compiler.
    """


# --- networks for `xrt run` -------------------------------------------------------------------

@hookspec(firstresult=True)
def xrt_load_model(model: str, target: str | None, input_size: int | None) -> Any:
    """Load what `xrt run MODEL` names when it is not a network json: return an
    `xir.Network`, the path of a compiled network json, or None to let the next plugin try.

    `target` asks for the network compiled for that target (a plugin that cannot compile says
    so with an `XrtError`); `input_size` is the `--input-size` flag. The compile pipeline
    (`xcompile.plugin`) loads zoo names and .onnx files.
    """


@hookspec(firstresult=True)
def xrt_sample_inputs(model: str, network: Any, input_size: int | None) -> Any:
    """Inputs for `xrt run MODEL` without `--inputs`: a list of arrays, one per network input,
    or None (the run then feeds seeded noise)."""


# --- command line -----------------------------------------------------------------------------

@hookspec
def xrt_register_commands(register: Callable) -> None:
    """Add CLI subcommands: `register(name, configure, run, help="")`.

    `configure(parser: argparse.ArgumentParser)` adds the command's arguments and
    `run(args: argparse.Namespace) -> int` executes it and returns the exit code.
    """

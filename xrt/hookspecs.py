"""Every extension point of xrt, declared with pluggy (project name "xrt").

A plugin is a plain module with `@hookimpl` functions, found through the entry-point group
`xrt.plugins`. Registration hooks receive a `register` callback (as llm's plugins do), so the
core can validate what each plugin sends and blame the plugin that sent something bad.
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
    """Claim device URL schemes: `register(scheme, opener, description="")`.

    `opener(url: str) -> xrt.Device` opens a device for a URL of that scheme (`sim`, `mock`,
    `axi`, `socket`, `host`...). A scheme may be claimed by one plugin only; a second claim is
    reported as a plugin error. `Device.Open(url)` dispatches on the scheme.
    """


# --- compile path -----------------------------------------------------------------------------

@hookspec
def xrt_register_targets(register: Callable) -> None:
    """Register compile targets: `register(name, lower, description="")`.

    `lower(network: xir.Network, options: dict) -> xir.Network` turns a quantized (adapted)
    network into the target's generated stage: HardOps with instructions and weights, plus the
    Cast/AlignAxis/PruneAxis edges; ops the target cannot run stay host ops. The compile CLI
    (`xrt compile --target NAME`) writes its result as `<name>_<SUFFIX>.json/.raw`; a target
    declares SUFFIX as `lower.suffix` (e.g. "ZG", "BY").
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

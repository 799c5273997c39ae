"""The plugin module the entry point names (`xrt.plugins` group): the hook implementations
that register the backend, the `npcpu://` device scheme and one command."""

from __future__ import annotations

import argparse

from xrt.hookspecs import hookimpl


@hookimpl
def xrt_register_backends(register) -> None:
    from .backend import NumpyCpuBackend

    register(NumpyCpuBackend)


@hookimpl
def xrt_register_device_schemes(register) -> None:
    from .device import SCHEME, open_device

    register(SCHEME, open_device, "the CPU with its own memory region (xrt-numpy-cpu)")


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _run(args: argparse.Namespace) -> int:
    import json

    from .kernels import KERNELS

    ops = sorted(KERNELS)
    print(json.dumps({"ops": ops}) if args.json else "NumpyCpu runs: " + ", ".join(ops))
    return 0


@hookimpl
def xrt_register_commands(register) -> None:
    register("numpy-cpu-ops", _configure, _run, help="list the ops the NumpyCpu backend runs")

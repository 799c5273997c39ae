"""The host plugin: registers HostBackend and the `host://` device URL scheme."""

from __future__ import annotations

from xrt.hookspecs import hookimpl


@hookimpl
def xrt_register_backends(register) -> None:
    from .backend import HostBackend

    register(HostBackend)


@hookimpl
def xrt_register_device_schemes(register) -> None:
    from xrt.device import HostDevice

    register("host", lambda url: HostDevice.Default(), "the process's host memory (CPU)")

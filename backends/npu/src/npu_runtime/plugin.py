"""One helper for the chip plugins: `chip_hooks` makes the `@hookimpl` functions a chip's plugin
module exposes (device URL schemes, the backend, the compile target), all read from its `Chip`.

    # zg330backend/plugin.py
    xrt_register_device_schemes, xrt_register_backends, xrt_register_targets = chip_hooks(
        ZG330_CHIP, device="zg330backend.device:ZG330Device",
        socket_device="zg330backend.device:ZG330SocketDevice",
        backend="zg330backend.backend:ZG330Backend", target="zg330backend.lowering:target",
        socket_methods=())

Classes are named as "module:attr" strings and imported on first use, so loading the plugin
imports no simulator.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from importlib import import_module
from typing import Any

from xrt.hookspecs import hookimpl

from .chip import Chip
from .remote import SOCKET_METHODS


def _load(ref: str) -> Any:
    mod, _, attr = ref.partition(":")
    return getattr(import_module(mod), attr)


def chip_hooks(chip: Chip, *, device: str, socket_device: str, backend: str, target: str,
               socket_methods: Sequence[str] = ()) -> tuple[Callable, Callable, Callable]:
    """The three registration hookimpls of `chip`'s plugin: ``sim://``, ``axi://`` and
    ``mock://`` open the simulator (mock: allocation only), ``socket://`` a served one; the
    backend class; the compile target. `socket_methods` are the chip device's methods beyond
    the shared `SOCKET_METHODS` that a socket client may call."""

    def open_url(url: Any) -> Any:
        from .device import open_simulated

        return open_simulated(_load(device), url)

    def open_socket(url: Any) -> Any:
        return _load(socket_device)(url)

    @hookimpl
    def xrt_register_device_schemes(register: Callable) -> None:
        from xrt.remote.server import expose

        expose(device.replace(":", "."), tuple(SOCKET_METHODS) + tuple(socket_methods))
        sim = chip.url_names.get("sim", (chip.kind,))
        register("sim", open_url, f"{chip.name} NPU simulator (sim://{sim[0]})", names=list(sim))
        axi = chip.url_names.get("axi", ())
        if axi:
            register("axi", open_url, f"{chip.name} board URL axi://{axi[0]}?npu=...&dma=... "
                     f"(simulated)", names=list(axi))
        mock = chip.url_names.get("mock", (chip.kind,))
        register("mock", open_url, f"{chip.name} mock device: allocation only "
                 f"(mock://{mock[0]})", names=list(mock))
        if chip.socket_names:
            register("socket", open_socket, f"{chip.name} on a device server: socket://"
                     f"{chip.socket_names[0]}@host:port (start one with `xrt serve "
                     f"{chip.kind}`)", names=list(chip.socket_names))

    @hookimpl
    def xrt_register_backends(register: Callable) -> None:
        register(_load(backend))

    @hookimpl
    def xrt_register_targets(register: Callable) -> None:
        lower = _load(target)
        register(chip.kind, lower, f"{chip.name} NPU: HardOps for {chip.compile_target} "
                 f"(*_{chip.target.suffix}.json/raw)", compile_target=chip.compile_target)

    return xrt_register_device_schemes, xrt_register_backends, xrt_register_targets

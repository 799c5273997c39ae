"""The socket transport of an `NpuDevice`: a chip's device opened by ``socket://NAME@host:port``
holds a `SocketTransport` instead of the in-process core (`npu_runtime.transport`).

The device is the chip's own device class to the rest of the runtime (its backend checks that
type); its "etm"/"ocm" regions and "regs" registers are remote (`xrt.remote.client`), so every
method that works through memory and registers (`readReg(cid, rid, offset)`, timer and profiler
records, ...) runs unchanged over the socket. The methods that need the model itself
(`icoreCalc`, `reset`, `stats`) or that would cost many register round trips (`mmuMap`,
`calcTime`, ... the device's `served` methods) are one CALL each, from the allow-list
`SOCKET_METHODS` the server exposes (a chip adds its own). The OCM arena the backends share is a
lease: the served OCM is time-shared between the clients (docs/socket-protocol.md, LEASE).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from npu_model.config import NpuConfig
from xrt.errors import DeviceError, DeviceUrlError
from xrt.memory.chunk import MemChunk
from xrt.memory.region import MemRegion
from xrt.remote import protocol as P
from xrt.remote.client import RemoteEndpoint
from xrt.url import DeviceUrl

from . import regs as R
from .transport import Transport

#: NpuDevice methods a socket client may call on the served device (the rest of the traffic is
#: memory and registers)
SOCKET_METHODS = ("icoreCalc", "reset", "mmuMap", "mmuClear", "calcTime", "calcCycles",
                  "layerCount", "getRowsCols", "set_rows_cols", "set_icore_clock",
                  "set_ddr_clock", "set_master_cid", "tile_counts", "stats", "clear_stats",
                  "check", "status", "version", "model_version", "mmu_enabled")

#: default per-request timeout: one icoreCalc of a large network may run for seconds on the
#: simulator (change it with setWaitTime; 0 waits without limit)
SOCKET_WAIT_TIME_MS = 60_000


def _config(desc: dict[str, Any]) -> NpuConfig:
    raw = dict(desc.get("config") or {})
    kw = {}
    for f in dataclasses.fields(NpuConfig):
        if f.name in raw:
            v = raw[f.name]
            kw[f.name] = tuple(v) if isinstance(v, list) else v
    return NpuConfig(**kw)


class SocketTransport(Transport):
    """A served `chip` (``xrt serve KIND``) at `url`: the connection is opened when the device
    attaches (it needs the device's wait time)."""

    def __init__(self, url: DeviceUrl, chip: Any) -> None:
        self.url = url
        self.chip = chip
        url.require_server()  # a host and a port, or DeviceUrlError
        if url.name not in chip.socket_names:
            raise DeviceUrlError(f"{str(url)!r}: the {chip.name} plugin serves socket://"
                                 f"{' or '.join(chip.socket_names)}@host:port, not {url.name}")
        self.core = None
        # the server keeps each client's MMU entries apart (its serve guard): only this
        # client's own mmuMap / mmuClear / MMU register writes / resets change them, and
        # each one bumps the generation (so a backend programs the MMU only when it changed)
        self.mmu_generation = 0
        self.confined = None
        #: the link to the server (set by `attach`)
        self.remote: RemoteEndpoint | None = None
        self.config = chip.config
        self.mock = False
        self.wait_time_ms = SOCKET_WAIT_TIME_MS

    def attach(self, device: Any) -> tuple[MemRegion, MemRegion | None, Any]:
        remote = RemoteEndpoint(str(self.url), lambda: device.wait_time)
        desc = remote.description
        served = device.served_class_name()
        if desc.get("device_class") != served:
            remote.close()
            raise DeviceError(f"{str(self.url)!r}: the server serves a "
                              f"{desc.get('device_class')}, not a {self.chip.name}; start it "
                              f"with `xrt serve {self.chip.kind}`")
        self.remote = remote
        self.config = _config(desc)
        self.mock = bool(desc.get("mock", False))
        remote.attach(device)
        lo = R.REG_BASE + R.MMU_BASE
        device.defaultRegRegion().watch(lo, lo + R.MMU_ENTRY_BYTES * self.config.mmu_entries,
                                        self._mmu_changed)
        names = {m["name"] for m in desc["mem"]}
        return (device.getMemRegion("etm"),
                device.getMemRegion("ocm") if "ocm" in names else None,
                device.defaultRegRegion())

    def _link(self) -> RemoteEndpoint:
        if self.remote is None:
            raise DeviceError(f"{str(self.url)!r} is not connected")
        return self.remote

    def call(self, method: str, *args: Any) -> Any:
        """`method(*args)` on the served device (its allow-list)."""
        return self._link().call(method, *args)

    def server_info(self) -> dict[str, Any]:
        return self._link().server_info()

    def invoke(self, device: Any, method: Callable, args: tuple, cast: Callable | None) -> Any:
        try:
            out = self.call(method.__name__, *args)
        finally:
            if method.changes_mmu:  # (a refused change changed nothing; counted all the same)
                self._mmu_changed()
        return cast(out) if cast is not None else out

    def _mmu_changed(self) -> None:
        self.mmu_generation += 1

    def run(self, addr: int, size: int) -> None:
        self.call("icoreCalc", int(addr), int(size))

    def reset(self, level: int) -> None:
        try:
            self.call("reset", int(level))
        finally:
            if level == 0:  # a full reset empties this client's MMU entries on the server
                self._mmu_changed()

    def stats(self) -> dict[str, int]:
        return dict(self.call("stats"))

    def clear_stats(self) -> None:
        self.call("clear_stats")

    def ocm_arena(self, region: MemRegion) -> MemChunk:
        """The served OCM leased whole: time-shared with the server's other clients, so two
        clients' OCM deployments neither wait for each other nor see each other's bytes."""
        return region.lease()  # type: ignore[attr-defined]  # a RemoteMemRegion

    def about(self) -> dict[str, str]:
        desc = self._link().description
        return {"server": str(desc.get("server", "")),
                "protocol": str(desc.get("version", P.VERSION))}

    def close(self) -> None:
        if self.remote is not None:
            self.remote.close()

    @property
    def description(self) -> dict[str, Any]:
        """The server's HELLO reply."""
        return self._link().description

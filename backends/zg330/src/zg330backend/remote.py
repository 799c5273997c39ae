"""`ZG330SocketDevice`: a ZG330 on a device server, opened as ``socket://zg330@host:port``.

It *is* a `ZG330Device` to the rest of the runtime (ZG330Backend checks that type), but it
builds no simulator: its "etm"/"ocm" regions and "regs" registers are remote
(`xrt.remote.client`), so every inherited method that works through memory and registers
(`readReg(cid, rid, offset)`, `configTimer`, `configProfiler`, `showLayerTime`, ...) runs
unchanged over the socket. The methods that need the model itself (`icoreCalc`, `reset`,
`stats`) or that would cost many register round trips (`mmuMap`, `mmuClear`, `calcTime`) are
one CALL each, from the allow-list `plugin.SOCKET_METHODS` the server exposes.

`ZG330RemoteMixin` holds all of that for any device class built on `ZG330Device`
(`buyibackend.remote.BuyiSocketDevice` reuses it).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from npu_model.config import NpuConfig
from xrt.errors import DeviceError, DeviceUrlError
from xrt.remote.client import RemoteDeviceMixin, parse_socket_url

from .device import ZG330Device
from .plugin import SOCKET_NAMES

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


class ZG330RemoteMixin(RemoteDeviceMixin):
    """The client side of a served ZG330-family device (the ZG330, and devices built on
    `ZG330Device` such as the Buyi): mix it in front of the device class, set the class
    attributes, and call `_open_remote(url)` from `__init__`."""

    #: device names of ``socket://NAME@host:port`` the subclass opens
    socket_names: tuple[str, ...] = SOCKET_NAMES
    #: ``device_class`` values of the server's HELLO reply the subclass accepts
    served_classes: tuple[str, ...] = ("ZG330Device",)
    #: a method the served device must expose (tells a plugin's device from a bare one)
    served_marker: str = "icoreCalc"
    #: the device's name in messages, and the kind ``xrt serve KIND`` serves
    family: str = "ZG330"
    serve_kind: str = "zg330"

    def _open_remote(self, url: str) -> None:
        name, host, port = parse_socket_url(url)
        if name not in self.socket_names:
            raise DeviceUrlError(f"{url!r}: the {self.family} plugin serves socket://"
                                 f"{' or '.join(self.socket_names)}@host:port, not {name}")
        from xrt.device import Device

        Device.__init__(self, url, SOCKET_WAIT_TIME_MS)  # type: ignore[arg-type]
        desc = self._connect(url, host, port)
        if desc.get("device_class") not in self.served_classes or self.served_marker not in \
                desc.get("methods", ()):
            self._conn.close()  # type: ignore[union-attr]
            raise DeviceError(f"{url!r}: the server serves a {desc.get('device_class')}, not a "
                              f"{self.family}; start it with `xrt serve {self.serve_kind}`")
        self.config = _config(desc)
        self.mock = bool(desc.get("mock", False))
        self._etm = self.getMemRegion("etm")  # type: ignore[attr-defined]
        self._ocm = self.getMemRegion("ocm")  # type: ignore[attr-defined]
        self._reg = self.defaultRegRegion()  # type: ignore[attr-defined]
        self.url_params: dict[str, Any] = {}

    # --- methods run by the served model -------------------------------------------------------

    def icoreCalc(self, addr: int, size: int) -> None:
        self._check_open()
        self.call("icoreCalc", int(addr), int(size))

    def reset(self, level: int = 0) -> None:
        self._check_open()
        self.call("reset", int(level))

    def mmuMap(self, index: int, logical: int, physical: int, size: int,
               valid: bool = True) -> None:
        self.call("mmuMap", int(index), int(logical), int(physical), int(size), bool(valid))

    def mmuClear(self) -> None:
        self.call("mmuClear")

    def calcTime(self) -> float:
        return float(self.call("calcTime"))

    def calcCycles(self) -> int:
        return int(self.call("calcCycles"))

    def layerCount(self) -> int:
        return int(self.call("layerCount"))

    def getRowsCols(self) -> tuple[int, int]:
        rows, cols = self.call("getRowsCols")
        return int(rows), int(cols)

    def stats(self) -> dict[str, int]:
        return dict(self.call("stats"))

    def clear_stats(self) -> None:
        self.call("clear_stats")

    def check(self, level: int = 0) -> bool:
        if not self.is_open:
            return False
        local = all(r.memManager().check() for r in self.mem_regions.values())
        return local and bool(self.call("check", int(level)))

    def status(self, level: int = 0) -> str:
        return f"{self.url} ->\n" + str(self.call("status", int(level)))

    def version(self) -> dict[str, str]:
        v = {str(k): str(x) for k, x in dict(self.call("version")).items()}
        v.update({"server": str(self.description.get("server", "")),
                  "protocol": str(self.description.get("version", ""))})
        return v

    # --- read locally from remote registers and memory --------------------------------------------

    def _mem_index(self, addr: int, size: int) -> int:
        return 0 if self._etm.contains(addr, max(size, 1)) else 1

    def clone(self, depth: int = 1) -> Any:
        return self

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"  # type: ignore[attr-defined]


class ZG330SocketDevice(ZG330RemoteMixin, ZG330Device):
    """A ZG330 served by ``xrt serve zg330``; see the module docstring."""

    def __init__(self, url: Any = "socket://zg330@127.0.0.1:5001", config: Any = None,
                 mock: bool = False) -> None:
        if not isinstance(url, str):  # ZG330Device(dev) cast of an opened device
            return
        self._open_remote(url)

"""The client side of a served NPU: `NpuRemoteMixin` in front of a chip's device class gives
its socket device (``socket://NAME@host:port``).

The socket device *is* the chip's device class to the rest of the runtime (its backend checks
that type), but it builds no simulator: its "etm"/"ocm" regions and "regs" registers are
remote (`xrt.remote.client`), so every inherited method that works through memory and
registers (`readReg(cid, rid, offset)`, timer and profiler records, ...) runs unchanged over
the socket. The methods that need the model itself (`icoreCalc`, `reset`, `stats`) or that
would cost many register round trips (`mmuMap`, `mmuClear`, `calcTime`) are one CALL each,
from the allow-list `SOCKET_METHODS` the server exposes (a chip adds its own).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from npu_model.config import NpuConfig
from xrt.device import Device
from xrt.errors import DeviceError, DeviceUrlError
from xrt.remote.client import RemoteDeviceMixin
from xrt.url import DeviceUrl

#: NpuDevice methods a socket client may call on the served device (the rest of the traffic is
#: memory and registers)
SOCKET_METHODS = ("icoreCalc", "reset", "mmuMap", "mmuClear", "calcTime", "calcCycles",
                  "layerCount", "getRowsCols", "set_rows_cols", "set_icore_clock",
                  "set_ddr_clock", "set_master_cid", "tile_counts", "stats", "clear_stats",
                  "check", "status", "version", "mmu_enabled")

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


class NpuRemoteMixin(RemoteDeviceMixin):
    """Mix in front of a chip's device class (``class ZG330SocketDevice(NpuRemoteMixin,
    ZG330Device)``): the device's `chip` says which socket names it opens and which served
    class it accepts; `served_marker` is a method only that chip's served device exposes."""

    served_marker: str = "icoreCalc"

    def __init__(self, url: Any = None, config: Any = None, mock: bool = False) -> None:
        if isinstance(url, Device):  # Cls(dev) cast of an opened device
            return
        self._open_remote(DeviceUrl.parse(url or f"socket://{self.chip.kind}@127.0.0.1:5001"))

    def _open_remote(self, url: DeviceUrl) -> None:
        chip = self.chip  # type: ignore[attr-defined]
        host, port = url.require_server()
        if url.name not in chip.socket_names:
            raise DeviceUrlError(f"{str(url)!r}: the {chip.name} plugin serves socket://"
                                 f"{' or '.join(chip.socket_names)}@host:port, not {url.name}")
        Device.__init__(self, url, SOCKET_WAIT_TIME_MS)  # type: ignore[arg-type]
        desc = self._connect(url, host, port)
        served = next(c.__name__ for c in type(self).__mro__ if "chip" in vars(c))
        if desc.get("device_class") != served or self.served_marker not in \
                desc.get("methods", ()):
            self._conn.close()  # type: ignore[union-attr]
            raise DeviceError(f"{str(url)!r}: the server serves a {desc.get('device_class')}, "
                              f"not a {chip.name}; start it with `xrt serve {chip.kind}`")
        # the fields of every NpuDevice; no in-process model, no MMU generation to track
        self._declare(_config(desc), bool(desc.get("mock", False)),  # type: ignore[attr-defined]
                      mmu_generation=None)
        self._etm = self.getMemRegion("etm")  # type: ignore[attr-defined]
        self._ocm = self.getMemRegion("ocm")  # type: ignore[attr-defined]
        self._reg = self.defaultRegRegion()  # type: ignore[attr-defined]

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

    def tile_counts(self, cid: int) -> tuple[int, int]:
        r, w = self.call("tile_counts", int(cid))
        return int(r), int(w)

    def mmu_enabled(self) -> bool:
        return bool(self.call("mmu_enabled"))

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

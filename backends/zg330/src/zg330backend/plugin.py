"""The ZG330 plugin: device URL schemes `sim`, `axi` and `mock` for the ZG330 simulator.

- ``sim://zg330``: the simulator (bit-exact compute, cycle model);
- ``axi://zg330aiu?npu=0x...&dma=0x...``: the vendor's board URL; opens the same simulator (the
  query's register addresses are recorded in ``device.url_params`` and otherwise ignored);
- ``mock://zg330``: memory allocation only; icoreCalc raises UnsupportedOpError;
- ``socket://zg330@host:port`` (or ``socket://haps-zg330@host:port``, the vendor's board name):
  a ZG330 run by ``xrt serve zg330`` in another process or on another machine
  (`zg330backend.remote`, protocol in docs/socket-protocol.md).
"""

from __future__ import annotations

from xrt.hookspecs import hookimpl

#: device names of ``socket://NAME@host:port`` this plugin opens
SOCKET_NAMES = ("zg330", "haps-zg330")
#: ZG330Device methods a socket client may call on the served device (the rest of the traffic
#: is memory and registers)
SOCKET_METHODS = ("icoreCalc", "reset", "mmuMap", "mmuClear", "calcTime", "calcCycles",
                  "layerCount", "rTileCount", "wTileCount", "getRowsCols", "setRowsCols",
                  "setIcoreClkFreq", "setDDRClkFreq", "setMasterCID", "stats", "clear_stats",
                  "check", "status", "version")

_HOSTS = {"sim": ("zg330",), "axi": ("zg330aiu", "zg330"), "mock": ("zg330",)}


def open_url(url: str):
    from .device import ZG330Device, open_simulated

    return open_simulated(ZG330Device, url, _HOSTS, "ZG330")


def open_socket(url: str):
    from .remote import ZG330SocketDevice

    return ZG330SocketDevice(url)


@hookimpl
def xrt_register_device_schemes(register) -> None:
    from xrt.remote.server import expose

    expose("zg330backend.device.ZG330Device", SOCKET_METHODS)
    register("sim", open_url, "ZG330 NPU simulator (sim://zg330)", names=["zg330"])
    register("axi", open_url, "ZG330 board URL axi://zg330aiu?npu=...&dma=... (simulated)",
             names=["zg330aiu", "zg330"])
    register("mock", open_url, "ZG330 mock device: allocation only (mock://zg330)",
             names=["zg330"])
    register("socket", open_socket, "ZG330 on a device server: socket://zg330@host:port "
             "(start one with `xrt serve zg330`)", names=list(SOCKET_NAMES))


@hookimpl
def xrt_register_backends(register) -> None:
    from .backend import ZG330Backend

    register(ZG330Backend)


@hookimpl
def xrt_register_targets(register) -> None:
    from .lowering import target

    register("zg330", target, "ZG330 NPU: HardOps with ISA v1 instructions (*_ZG.json/raw)")

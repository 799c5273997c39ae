"""The Buyi plugin: device URL schemes `sim`, `axi` and `mock` for the Buyi simulator, the
BuyiBackend and the compile target "buyi".

- ``sim://buyi``: the simulator (bit-exact compute, cycle model);
- ``axi://ql100aiu?npu=0x...&dma=0x...``: the vendor's board URL; opens the same simulator (the
  query is recorded in ``device.url_params``);
- ``mock://buyi``: memory allocation only; icoreCalc raises UnsupportedOpError;
- ``socket://buyi@host:port`` (or ``socket://ql100aiu@host:port``, the vendor's board name): a
  Buyi run by ``xrt serve buyi`` in another process or on another machine (`buyibackend.remote`,
  protocol in docs/socket-protocol.md).
"""

from __future__ import annotations

from xrt.hookspecs import hookimpl

#: device names of ``socket://NAME@host:port`` this plugin opens
SOCKET_NAMES = ("buyi", "ql100aiu")
#: BuyiDevice methods a socket client may call on the served device, beyond the ZG330's
#: (`zg330backend.plugin.SOCKET_METHODS`, exposed for the base class): the state the served
#: model reads in icoreCalc
SOCKET_METHODS = ("setDType", "dtype", "mmuModeSwitch", "modeInfo")

_HOSTS = {"sim": ("buyi",), "axi": ("ql100aiu", "buyi"), "mock": ("buyi",)}


def open_url(url: str):
    from zg330backend.device import open_simulated

    from .device import BuyiDevice

    return open_simulated(BuyiDevice, url, _HOSTS, "Buyi")


def open_socket(url: str):
    from .remote import BuyiSocketDevice

    return BuyiSocketDevice(url)


@hookimpl
def xrt_register_device_schemes(register) -> None:
    from xrt.remote.server import expose

    expose("buyibackend.device.BuyiDevice", SOCKET_METHODS)
    register("sim", open_url, "Buyi NPU simulator (sim://buyi)", names=["buyi"])
    register("axi", open_url, "Buyi board URL axi://ql100aiu?npu=...&dma=... (simulated)",
             names=["ql100aiu", "buyi"])
    register("mock", open_url, "Buyi mock device: allocation only (mock://buyi)",
             names=["buyi"])
    register("socket", open_socket, "Buyi on a device server: socket://buyi@host:port "
             "(start one with `xrt serve buyi`)", names=list(SOCKET_NAMES))


@hookimpl
def xrt_register_backends(register) -> None:
    from .backend import BuyiBackend

    register(BuyiBackend)


@hookimpl
def xrt_register_targets(register) -> None:
    from .lowering import target

    register("buyi", target, "Buyi NPU: HardOps for @buyi, int8 / int16 (*_BY.json/raw)")

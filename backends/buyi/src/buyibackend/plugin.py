"""The Buyi plugin: device URL schemes `sim`, `axi` and `mock` for the Buyi simulator, the
BuyiBackend and the compile target "buyi".

- ``sim://buyi``: the simulator (bit-exact compute, cycle model);
- ``axi://ql100aiu?npu=0x...&dma=0x...``: the vendor's board URL; opens the same simulator (the
  query is recorded in ``device.url_params``);
- ``mock://buyi``: memory allocation only; icoreCalc raises UnsupportedOpError.
"""

from __future__ import annotations

from xrt.errors import DeviceUrlError
from xrt.hookspecs import hookimpl

_HOSTS = {"sim": ("buyi",), "axi": ("ql100aiu", "buyi"), "mock": ("buyi",)}


def open_url(url: str):
    from zg330backend.device import parse_url

    from .device import BuyiDevice

    parts = parse_url(url)
    scheme, host = parts["scheme"], parts["host"].lower()
    allowed = set(_HOSTS.get(scheme, ()))
    if host not in allowed:
        raise DeviceUrlError(
            f"{url!r}: the Buyi plugin opens {scheme}://{' or '.join(sorted(allowed))}, "
            f"not {scheme}://{host}")
    dev = BuyiDevice(url, mock=scheme == "mock")
    dev.url_params = parts["params"]
    return dev


@hookimpl
def xrt_register_device_schemes(register) -> None:
    register("sim", open_url, "Buyi NPU simulator (sim://buyi)", names=["buyi"])
    register("axi", open_url, "Buyi board URL axi://ql100aiu?npu=...&dma=... (simulated)",
             names=["ql100aiu", "buyi"])
    register("mock", open_url, "Buyi mock device: allocation only (mock://buyi)",
             names=["buyi"])


@hookimpl
def xrt_register_backends(register) -> None:
    from .backend import BuyiBackend

    register(BuyiBackend)


@hookimpl
def xrt_register_targets(register) -> None:
    from .lowering import target

    register("buyi", target, "Buyi NPU: HardOps for @buyi, int8 / int16 (*_BY.json/raw)")

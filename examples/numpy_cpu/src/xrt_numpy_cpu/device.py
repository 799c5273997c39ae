"""`NumpyCpuDevice`: the device `npcpu://` opens: the host CPU with a memory region of its own
("numpy-cpu"), so tensors crossing from the HostBackend are copied in (and timed as memcpy), as
they would be for a real accelerator's memory."""

from __future__ import annotations

from xrt import Device, DeviceUrlError, HostMemRegion
from xrt.url import DeviceUrl

SCHEME = "npcpu"


class NumpyCpuDevice(Device):
    """The CPU as a device with one memory region, "numpy-cpu" (the default)."""

    def __init__(self, url: str = f"{SCHEME}://") -> None:
        super().__init__(url)
        self.add_mem_region(HostMemRegion("numpy-cpu", self), default=True)

    def version(self) -> dict[str, str]:
        import numpy

        return {"device": "numpy-cpu", "numpy": numpy.__version__}


def open_device(url: DeviceUrl) -> NumpyCpuDevice:
    """The opener of `npcpu://` (receives the parsed `xrt.url.DeviceUrl`); it takes no query
    parameters, so a typo is an error rather than silently ignored."""
    if url.params:
        raise DeviceUrlError(f"{url}: npcpu:// takes no parameters, got {sorted(url.params)}")
    return NumpyCpuDevice(str(url))

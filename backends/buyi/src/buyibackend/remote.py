"""`BuyiSocketDevice`: a Buyi on a device server, opened as ``socket://buyi@host:port`` (or the
vendor's board name ``socket://ql100aiu@host:port``).

It *is* a `BuyiDevice` (BuyiBackend checks that type) built on the ZG330 client
(`zg330backend.remote.ZG330RemoteMixin`): remote "etm"/"ocm" memory and "regs" registers, and
the ZG330 allow-listed CALLs for what needs the model (`icoreCalc`, `reset`, `mmuMap`, ...).
The Buyi's own methods run unchanged where they only touch registers (`clkFreq`,
`setClkFreq`, `setEnabledMPE`, `getRowsCols`, `updateBuffer` through `mmuClear`/`mmuMap`);
the ones that change state the served model reads in `icoreCalc` (data type, MMU mode) are
CALLs from `plugin.SOCKET_METHODS`.
"""

from __future__ import annotations

from typing import Any

from zg330backend.remote import ZG330RemoteMixin

from .device import BuyiDevice
from .plugin import SOCKET_NAMES


class BuyiSocketDevice(ZG330RemoteMixin, BuyiDevice):
    """A Buyi served by ``xrt serve buyi``; see the module docstring."""

    socket_names = SOCKET_NAMES
    served_classes = ("BuyiDevice",)
    served_marker = "setDType"
    family = "Buyi"
    serve_kind = "buyi"

    def __init__(self, url: Any = "socket://buyi@127.0.0.1:5001", config: Any = None,
                 mock: bool = False) -> None:
        if not isinstance(url, str):  # BuyiDevice(dev) cast of an opened device
            return
        self._open_remote(url)

    # --- state of the served model ---------------------------------------------------------------

    def setDType(self, dtype: int) -> None:
        self.call("setDType", int(dtype))

    def dtype(self) -> int:
        return int(self.call("dtype"))

    def mmuModeSwitch(self, is_on: bool) -> None:
        self.call("mmuModeSwitch", bool(is_on))

    def modeInfo(self) -> int:
        return int(self.call("modeInfo"))

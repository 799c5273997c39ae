"""The Buyi plugin: ``sim://buyi``, ``axi://ql100aiu?npu=...&dma=...`` (the vendor's board URL,
opening the same simulator), ``mock://buyi`` (allocation only) and ``socket://buyi@host:port``
/ ``socket://ql100aiu@host:port`` (served by ``xrt serve buyi``, protocol in
docs/socket-protocol.md); the BuyiBackend; the compile target "buyi".
"""

from __future__ import annotations

from npu_runtime.plugin import chip_hooks

from .chip import BUYI_CHIP
from .device import SOCKET_METHODS

xrt_register_device_schemes, xrt_register_backends, xrt_register_targets = chip_hooks(
    BUYI_CHIP, device="buyibackend.device:BuyiDevice",
    socket_device="buyibackend.device:BuyiSocketDevice",
    backend="buyibackend.backend:BuyiBackend", target="buyibackend.lowering:target",
    socket_methods=SOCKET_METHODS)

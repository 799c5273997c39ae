"""The ZG330 plugin: ``sim://zg330``, ``axi://zg330aiu?npu=...&dma=...`` (the vendor's board
URL, opening the same simulator), ``mock://zg330`` (allocation only) and
``socket://zg330@host:port`` / ``socket://haps-zg330@host:port`` (served by ``xrt serve
zg330``, protocol in docs/socket-protocol.md); the ZG330Backend; the compile target "zg330".
"""

from __future__ import annotations

from npu_runtime.plugin import chip_hooks

from .chip import ZG330_CHIP

xrt_register_device_schemes, xrt_register_backends, xrt_register_targets = chip_hooks(
    ZG330_CHIP, device="zg330backend.device:ZG330Device",
    socket_device="zg330backend.device:ZG330SocketDevice",
    backend="zg330backend.backend:ZG330Backend", target="zg330backend.lowering:target")

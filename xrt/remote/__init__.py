"""Devices over a socket: the xrt socket protocol, a device server and the client pieces.

`xrt serve <kind>` runs a `DeviceServer`; `Device.Open("socket://<kind>@host:port")` opens a
client through the plugin that claims `socket://` for that device kind. The wire format is
documented in docs/socket-protocol.md.
"""

from __future__ import annotations

from .client import (
    Connection,
    RemoteDevice,
    RemoteEndpoint,
    RemoteMemRegion,
    RemoteRegRegion,
    RemoteStorage,
)
from .protocol import MAX_PAYLOAD, VERSION, ProtocolError
from .server import DeviceServer, expose, exposed_methods

__all__ = [
    "MAX_PAYLOAD", "VERSION", "Connection", "DeviceServer", "ProtocolError", "RemoteDevice",
    "RemoteEndpoint", "RemoteMemRegion", "RemoteRegRegion", "RemoteStorage", "expose",
    "exposed_methods",
]

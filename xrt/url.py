"""A device URL, parsed once: `Device.Open` parses the text into a `DeviceUrl` and hands that to
the plugin that claims its scheme and device name, so no plugin parses it again.

    sim://zg330                         scheme "sim", name "zg330"
    axi://zg330aiu?npu=0x40000000       scheme "axi", name "zg330aiu", params {"npu": ...}
    socket://zg330@127.0.0.1:5001       scheme "socket", name "zg330", host, port
    host://                             scheme "host", name ""

`DeviceUrl` is a `str` (the text as given), so a plugin that wants the text has it.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any
from urllib.parse import parse_qs, urlsplit

from .errors import DeviceUrlError

__all__ = ["DeviceUrl"]


class DeviceUrl(str):
    """A parsed device URL; the str value is the URL as given."""

    scheme: str
    name: str
    host: str
    port: int | None
    params: MappingProxyType

    def __new__(cls, url: Any) -> DeviceUrl:
        if isinstance(url, DeviceUrl):
            return url
        if not isinstance(url, str) or "://" not in url:
            raise DeviceUrlError(f"device URL {url!r} has no scheme; expected e.g. "
                                 f"'sim://zg330' or 'host://'")
        self = super().__new__(cls, url)
        scheme, rest = url.split("://", 1)
        if not scheme:
            raise DeviceUrlError(f"device URL {url!r} has an empty scheme")
        parts = urlsplit(f"{scheme}://{rest}")
        self.scheme = scheme.lower()
        netloc = parts.netloc
        self.host, self.port = "", None
        if "@" in netloc:
            self.name = netloc.rsplit("@", 1)[0].lower()
            self.host = parts.hostname or ""
            try:
                self.port = parts.port
            except ValueError:
                raise DeviceUrlError(f"{url!r}: the port is not a number in 0..65535") from None
        else:
            self.name = netloc.split(":", 1)[0].lower()
        self.params = MappingProxyType({k: v[0] for k, v in parse_qs(parts.query).items()})
        return self

    @classmethod
    def parse(cls, url: Any) -> DeviceUrl:
        """`url` as a DeviceUrl (a DeviceUrl is returned as it is)."""
        return cls(url)

    def require_server(self) -> tuple[str, int]:
        """(host, port) of a ``NAME@HOST:PORT`` URL, or DeviceUrlError."""
        if not self.name or not self.host or self.port is None:
            raise DeviceUrlError(f"{str(self)!r}: expected {self.scheme}://DEVICE@HOST:PORT, "
                                 f"e.g. socket://zg330@127.0.0.1:5001")
        return self.host, self.port

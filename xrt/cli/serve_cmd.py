"""`xrt serve`: run a device (e.g. the ZG330 simulator) as a socket device server.

`xrt serve zg330 --port 5001` opens `sim://zg330` in this process and serves it; clients open
`socket://zg330@HOST:5001`. The device kind is resolved through the plugins (the scheme `sim`
claimed for that name); `--url` serves any other device URL instead.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

HELP = "serve a simulated device over a socket (clients open socket://KIND@HOST:PORT)"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kind", help="device kind, e.g. zg330 (serves sim://KIND)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to bind (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=5001, help="TCP port; 0 picks a free one")
    parser.add_argument("--url", help="device URL to serve instead of sim://KIND")
    parser.add_argument("--max-clients", type=int, default=32)
    parser.add_argument("--frame-timeout", type=float, default=10.0,
                        help="seconds a started frame may take to arrive before the client is "
                             "dropped")
    parser.add_argument("--token", default=None,
                        help="shared secret clients must present (their XRT_SERVE_TOKEN); "
                             "default $XRT_SERVE_TOKEN; required off loopback")
    parser.add_argument("--quota", type=int, default=None,
                        help="bytes of device memory one client may hold (default: no limit)")
    parser.add_argument("--idle-timeout", type=float, default=600.0,
                        help="seconds a client may stay silent before it is dropped")
    parser.add_argument("--test-hooks", action="store_true", help=argparse.SUPPRESS)


def resolve(kind: str) -> str:
    """The device URL `xrt serve KIND` opens: the `sim` scheme claimed for KIND."""
    from .. import plugins
    from ..errors import DeviceUrlError

    if "://" in kind:
        return kind
    schemes = plugins.registry().schemes
    name = kind.lower()
    for scheme in ("sim", "axi", "mock"):
        if (scheme, name) in schemes:
            return f"{scheme}://{name}"
    known = sorted({n for (s, n) in schemes if s == "sim" and n != "*"})
    raise DeviceUrlError(f"no installed plugin simulates a device called {kind!r}; "
                         f"servable kinds: {', '.join(known) or 'none'}")


def run(args: argparse.Namespace) -> int:
    import os

    from ..device import Device
    from ..remote.server import DeviceServer

    url = args.url or resolve(args.kind)
    token = args.token or os.environ.get("XRT_SERVE_TOKEN") or None
    device = Device.Open(url)
    try:
        server = DeviceServer(device, args.host, args.port, max_clients=args.max_clients,
                              frame_timeout=args.frame_timeout, test_hooks=args.test_hooks,
                              close_device=True, name=url, token=token,
                              idle_timeout=args.idle_timeout, quota_bytes=args.quota)
    except BaseException:
        device.close()
        raise
    host, port = server.address
    print(f"serving {url} on {host}:{port} (clients open socket://{args.kind.split('://')[-1]}"
          f"@{host}:{port}); Ctrl-C stops", flush=True)
    stop = threading.Event()

    def _stop(*_: object) -> None:
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _stop)
    server.start()
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        print("server stopped", file=sys.stderr, flush=True)
    return 0

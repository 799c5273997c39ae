"""The `xrt` command line: built-in subcommands (one module each) plus plugin commands (the
compile pipeline's `compile` and `quant-report` come from `xcompile.plugin`)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence

from ..errors import XrtError

BUILTIN = ("bench", "conformance", "plugins", "run", "serve")


def _builtin(name: str) -> tuple[Callable, Callable, str]:
    from importlib import import_module

    mod = import_module(f"{__name__}.{name.replace('-', '_')}_cmd")
    return mod.configure, mod.run, mod.HELP


def build_parser() -> argparse.ArgumentParser:
    from .. import plugins

    parser = argparse.ArgumentParser(prog="xrt", description="Icraft runtime on simulated NPUs")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in BUILTIN:
        configure, run, help_text = _builtin(name)
        p = sub.add_parser(name, help=help_text, description=help_text)
        configure(p)
        p.set_defaults(_run=run)
    for name, (configure, run, help_text, _plugin) in sorted(plugins.registry().commands.items()):
        if name in BUILTIN:
            continue
        p = sub.add_parser(name, help=help_text, description=help_text)
        configure(p)
        p.set_defaults(_run=run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args._run(args) or 0)
    except XrtError as err:
        print(f"xrt {args.command}: error: {err}", file=sys.stderr)
        return 2
    except Exception as err:  # xir errors and friends: one clean line, no traceback
        from xir import XirError

        if isinstance(err, XirError):
            print(f"xrt {args.command}: error: {err}", file=sys.stderr)
            return 2
        raise

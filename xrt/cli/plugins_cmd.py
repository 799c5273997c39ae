"""`xrt plugins`: what plugins were found, with their backends, URL schemes, targets and
commands."""

from __future__ import annotations

import argparse

HELP = "list discovered plugins: backends, device URL schemes, compile targets, commands"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    import json

    from rich.table import Table

    from .. import plugins
    from ..console import report_console

    reg = plugins.registry()

    def dist(plugin: str) -> str:
        info = reg.plugins.get(plugin)
        return f"{info.distribution} {info.version}".strip() if info else ""

    rows = [("backend", name, plugin, dist(plugin)) for name, (_, plugin) in
            sorted(reg.backends.items())]
    rows += [("scheme", plugins._url(key), plugin, dist(plugin)) for key, (_, plugin, _) in
             sorted(reg.schemes.items())]
    rows += [("target", f"{t} {reg.compile_targets.get(t, '')}".strip(), plugin, dist(plugin))
             for t, (_, plugin, _) in sorted(reg.targets.items())]
    rows += [("command", name, plugin, dist(plugin)) for name, (_, _, _, plugin) in
             sorted(reg.commands.items())]
    broken = [(name, info.error) for name, info in sorted(reg.plugins.items()) if info.error]
    if args.json:
        print(json.dumps({"entries": [dict(zip(("kind", "name", "plugin", "distribution"), r))
                                      for r in rows],
                          "broken": dict(broken)}, indent=2))
        return 0
    table = Table(title="xrt plugins")
    for col in ("kind", "name", "plugin", "distribution"):
        table.add_column(col)
    for r in rows:
        table.add_row(*r)
    console = report_console()
    console.print(table)
    for name, err in broken:
        console.print(f"[red]broken plugin {name}: {err}")
    return 0

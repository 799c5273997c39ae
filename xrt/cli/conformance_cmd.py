"""`xrt conformance BACKEND`: run the conformance kit (`xrt.testing`) on an installed backend and
say which parts of the contract it meets; exit status 1 when a check failed."""

from __future__ import annotations

import argparse

HELP = "check a backend plugin against the xrt backend contract (the conformance kit)"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("backend", help="registered backend name (see `xrt plugins`)")
    parser.add_argument("--device", default="",
                        help="device URL (default: the backend's default_url)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random cases")
    parser.add_argument("--trials", type=int, default=2, help="random shapes per op and dtype")
    parser.add_argument("--model", action="append", default=[],
                        help="model the plugins compile for a HardOp backend (tiny_cnn)")
    parser.add_argument("-k", dest="only", default="", help="only checks whose name has this")
    parser.add_argument("--json", metavar="FILE", help="write the results as json")


def run(args: argparse.Namespace) -> int:
    import json

    from rich.table import Table

    from ..console import progress_bar, report_console
    from ..errors import XrtError
    from ..testing import checks, run_check, subject
    from ..testing.result import Report
    from .files import writable

    if args.json:
        writable(args.json, "--json")
    if args.trials < 1:
        raise XrtError(f"--trials {args.trials}: give at least 1")
    s = subject(args.backend, args.device, seed=args.seed, trials=args.trials,
                models=tuple(args.model) or ("tiny_cnn",))
    todo = [c for c in checks(s) if args.only in c.name]
    report = Report(s.name, s.device_url)
    with progress_bar(len(todo), f"conformance of {s.name} on {s.device_url}") as advance:
        for check in todo:
            report.results.append(run_check(check))
            advance()
    table = Table(title=f"xrt conformance: {s.name} on {s.device_url}")
    for col, just in (("check", "left"), ("result", "left"), ("s", "right"),
                      ("detail", "left")):
        table.add_column(col, justify=just)
    style = {"passed": "green", "failed": "bold red", "skipped": "yellow"}
    for r in report.results:
        table.add_row(r.name, f"[{style[r.status]}]{r.status}", f"{r.seconds:.2f}", r.message)
    console = report_console()
    console.print(table)
    print(f"{s.name}: {report.summary()}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report.as_dict(), fh, indent=1)
    return 0 if report.failed == 0 else 1

"""The rich console every report prints to: the terminal's width on a terminal, and wide
enough for the whole table when the output goes to a file or a pipe (rich would otherwise cut
tables to 80 columns there: `cosi…`, `0.99…`)."""

from __future__ import annotations

from typing import Any

#: columns of a report written to a file or a pipe
FILE_WIDTH = 240


def report_console() -> Any:
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=FILE_WIDTH)

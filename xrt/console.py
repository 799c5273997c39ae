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


class progress_bar:
    """A rich progress bar on stderr for work of `total` steps (``with progress_bar(n, "eval")
    as advance: ... advance(k)``); on a non-terminal it prints only the finished line."""

    def __init__(self, total: int, description: str) -> None:
        self.total, self.description = total, description

    def __enter__(self) -> Any:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                  MofNCompleteColumn(), TimeElapsedColumn(),
                                  TimeRemainingColumn(), console=Console(stderr=True))
        self._progress.start()
        task = self._progress.add_task(self.description, total=self.total)
        return lambda k=1: self._progress.advance(task, k)

    def __exit__(self, *exc: Any) -> None:
        self._progress.stop()

"""The rich console every report prints to: the terminal's width on a terminal, and wide
enough for the whole table when the output goes to a file or a pipe (rich would otherwise cut
tables to 80 columns there: `cosi…`, `0.99…`)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: columns of a report written to a file or a pipe
FILE_WIDTH = 240


def report_console() -> Any:
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=FILE_WIDTH)


#: set XRT_PROGRESS=0 to silence progress (a library embedding xrt that reports its own)
_ENV = "XRT_PROGRESS"
_live: dict[str, Any] = {"progress": None, "depth": 0}


def _enabled() -> bool:
    return os.environ.get(_ENV, "1") not in ("0", "false", "no", "")


def _stderr_is_terminal() -> bool:
    from rich.console import Console

    return Console(stderr=True).is_terminal


def _progress() -> Any:
    """The one live rich display of this process (stages and bars share it: rich allows one
    live display at a time); started by the outermost user."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    if _live["progress"] is None:
        _live["progress"] = Progress(SpinnerColumn(), TextColumn("{task.description}"),
                                     BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                     console=Console(stderr=True), transient=False)
        _live["progress"].start()
    _live["depth"] += 1
    return _live["progress"]


def _release() -> None:
    _live["depth"] -= 1
    if _live["depth"] == 0 and _live["progress"] is not None:
        _live["progress"].stop()
        _live["progress"] = None


def _line(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


@contextmanager
def stage(description: str) -> Iterator[None]:
    """Show that `description` is under way: a spinner with its elapsed time on a terminal
    (stderr); in a log, one line when it starts and one with its duration when it ends."""
    if not _enabled():
        yield
        return
    t0 = time.perf_counter()
    if not _stderr_is_terminal():
        _line(f"{description} ...")
        try:
            yield
        finally:
            _line(f"{description}: {time.perf_counter() - t0:.1f} s")
        return
    progress = _progress()
    task = progress.add_task(description, total=None)
    try:
        yield
    finally:
        progress.update(task, total=1, completed=1,
                        description=f"{description} ({time.perf_counter() - t0:.1f} s)")
        _release()


class progress_bar:
    """Progress of work of `total` steps (``with progress_bar(n, "calibration") as advance:
    ... advance(k)``): a rich bar on a terminal (stderr); in a log, a line every few seconds
    while it runs and one at the end when it took a second or more."""

    #: seconds between two lines in a log
    LOG_EVERY = 5.0

    def __init__(self, total: int, description: str) -> None:
        self.total, self.description = int(total), description
        self._plain = True
        self._done = 0

    def __enter__(self) -> Any:
        self._t0 = self._last = time.perf_counter()
        if not _enabled():
            return lambda k=1: None
        if not _stderr_is_terminal():
            def advance(k: int = 1) -> None:
                self._done += k
                now = time.perf_counter()
                if now - self._last >= self.LOG_EVERY and self._done < self.total:
                    _line(f"{self.description}: {self._done}/{self.total} "
                          f"({now - self._t0:.1f} s)")
                    self._last = now
            return advance
        self._plain = False
        self._progress = _progress()
        task = self._progress.add_task(self.description, total=self.total)
        return lambda k=1: self._progress.advance(task, k)

    def __exit__(self, *exc: Any) -> None:
        if not _enabled():
            return
        if not self._plain:
            _release()
        elif time.perf_counter() - self._t0 >= 1.0:
            _line(f"{self.description}: {self._done}/{self.total} done in "
                  f"{time.perf_counter() - self._t0:.1f} s")

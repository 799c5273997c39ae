"""Files written whole or not at all: a temporary file beside the target, with the mode a plain
`open()` would give it (the user's umask, not mkstemp's 0600), moved into place by the caller."""

from __future__ import annotations

import os
import tempfile

__all__ = ["temp_beside", "unlink_quietly"]


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def temp_beside(path: str | os.PathLike) -> tuple[int, str]:
    """(fd, name) of a new temporary file in `path`'s folder, readable as `open(path, "w")`
    would make it."""
    path = os.fspath(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp",
                               dir=os.path.dirname(os.path.abspath(path)))
    try:
        os.fchmod(fd, 0o666 & ~_umask())
    except OSError:  # a filesystem without modes keeps mkstemp's
        pass
    return fd, tmp


def unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass

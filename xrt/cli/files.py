"""Files the commands read and write, checked up front: an output folder that cannot take the
file, or an input that is not an .npy array, is a one-line error before any work starts."""

from __future__ import annotations

import os
from typing import Any

from ..errors import XrtError


def writable(path: str, what: str) -> str:
    """`path` if a file can be written there; XrtError before any work is done otherwise."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise XrtError(f"{what} {path}: is a folder, give a file name")
    if not os.path.isdir(folder):
        raise XrtError(f"{what} {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise XrtError(f"{what} {path}: the folder {folder} is not writable")
    return path


def writable_dir(path: str, what: str) -> str:
    """`path` if it is, or can be made as, a writable folder."""
    probe = path
    while probe and not os.path.exists(probe):
        probe = os.path.dirname(os.path.abspath(probe.rstrip(os.sep)))
    if probe and not os.path.isdir(probe):
        raise XrtError(f"{what} {path}: {probe} is a file, not a folder")
    if not os.access(probe or ".", os.W_OK):
        raise XrtError(f"{what} {path}: the folder {probe} is not writable")
    return path


def read_npy(path: str, what: str) -> Any:
    """The array in .npy file `path`; XrtError naming the file for anything else."""
    import numpy as np

    try:
        return np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise XrtError(f"{what} {path}: no such file") from None
    except IsADirectoryError:
        raise XrtError(f"{what} {path}: is a folder, not an .npy file") from None
    except (OSError, ValueError, EOFError) as exc:
        raise XrtError(f"{what} {path}: not a readable .npy array ({exc})") from None

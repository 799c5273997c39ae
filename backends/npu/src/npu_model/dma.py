"""DMA tile counters: read and write tiles per channel.

The DMA has one read and one write channel per MPE column (channel id ``cid`` = column). A
layer's row tiles are split across the enabled columns, so every enabled channel moves one
sub-tile of each tile; disabled columns count nothing. The counters are what the vendor's
``rTileCount(cid)`` / ``wTileCount(cid)`` report; they wrap at 2**32 like the hardware's
registers (the device stores them in 32-bit registers).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def add_tiles(rcount, wcount, rtiles, wtiles, cols_en):
    """Credit `rtiles` / `wtiles` (of one layer) to each of the first `cols_en` channels."""
    n = rcount.shape[0]
    for c in range(min(cols_en, n)):
        rcount[c] += rtiles
        wcount[c] += wtiles


class TileCounters:
    """Per-channel read/write tile counts (int64, reported modulo 2**32)."""

    def __init__(self, channels: int) -> None:
        self.read = np.zeros(channels, dtype=np.int64)
        self.write = np.zeros(channels, dtype=np.int64)

    def add(self, rtiles: int, wtiles: int, cols_en: int) -> None:
        add_tiles(self.read, self.write, int(rtiles), int(wtiles), int(cols_en))

    def clear(self) -> None:
        self.read[:] = 0
        self.write[:] = 0

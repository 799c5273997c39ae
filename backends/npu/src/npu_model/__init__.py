"""npu_model: the hardware model shared by the FMSH NPU simulators (ZG330, later Buyi).

- `config.NpuConfig`: every hardware parameter, one object (and its mock variant);
- `isa`: 64-bit instruction words, encode/decode/disassemble;
- `asm`: layer descriptors -> instruction words; weight and parameter packing;
- `mmu`: logical segment -> physical address table;
- `kernels`: Numba compute kernels (MPE array, vector unit);
- `dma`, `cycles`: tile counters and the per-layer cycle model (Numba);
- `core.Icore`: executes an instruction stream read from simulated memory.
"""

from __future__ import annotations

from .config import DEFAULT, NpuConfig
from .core import Icore, MemoryBus, NpuFault, RunResult
from .mmu import MEM_ETM, MEM_OCM, MmuFault, MmuTable, Segment

__all__ = ["DEFAULT", "Icore", "MEM_ETM", "MEM_OCM", "MemoryBus", "MmuFault", "MmuTable",
           "NpuConfig", "NpuFault", "RunResult", "Segment"]
__version__ = "0.1.0"

"""ETM feature-map reuse planner: offsets for every feature map in one FTMP segment.

The problem (dynamic storage allocation on an interval graph): buffer ``i`` has ``sizes[i]``
bytes and is live over the inclusive positions ``[starts[i], ends[i]]`` of the execution order
(produced at ``start``, last read at ``end``). Two buffers whose lifetimes overlap must not share
bytes. A buffer may instead be an alias *member* of an owner (``alias_owner[i] >= 0``): it then
sits at ``alias_offset[i]`` inside its owner (concat inputs in the concat output, split outputs
in the split input, a reshape output at offset 0 of its input). Alias chains and trees are
allowed. Every placed buffer starts on an ``alignment`` boundary (64 bytes on ZG330).

An alias group (a root owner with all its direct and indirect members) is placed as one block of
``align_up(size of the root)`` bytes, live over the union of its members' lifetimes. One module
per concern:

- `errors`: `PlanError` (a `ValueError`) and its subclasses, each message naming the buffer;
- `instance`: the layered input checks and the alias groups;
- `bound`: `lower_bound`, the peak of the bytes of the groups live at once: no plan can use
  less, so a plan that meets it is optimal and the search stops there;
- `search`: greedy by size (TFLite's "greedy by size" offset calculation, best fit and first
  fit) over several orderings, and the annealed local search over the placement order (groups
  that rise above the bound move earlier, their time neighbours later; only the suffix after the
  first change is re-placed). One module because the search kernel calls the placement kernel
  and Numba's cache only notices changes to a kernel's own file;
- `planner`: `plan_etm` / `plan_etm_detailed` (greedy, then the search) and `plan_no_reuse`
  (every group its own slot, the ``disableEtmOptimize`` layout);
- `verify`: `verify_plan`, an independent check of any plan.

The instances of xir networks the tests and benchmarks plan (`instance_from_network`) live
with them (tests/support/etm_network.py): the runtime builds its own from the `Layout`.

The hot loops are module-level Numba kernels of plain arrays (`npu_model.kernels.jit`'s
``kernel``/``helper``: cached, no wrappers nobody calls), so ``NUMBA_DISABLE_JIT=1`` runs them
as Python with the same results. Kernels that call each other share a file. See
docs/etm-planner.md.
"""

from __future__ import annotations

from .bound import lower_bound
from .errors import AliasError, BufferSpecError, PlanError
from .instance import DEFAULT_ALIGNMENT as DEFAULT_ALIGNMENT
from .planner import EtmPlan, plan_etm, plan_etm_detailed, plan_no_reuse

# public constants: the defaults in the signatures below
from .search import ANNEAL_T0 as ANNEAL_T0
from .search import DEFAULT_MAX_ITERS as DEFAULT_MAX_ITERS
from .verify import verify_plan

__all__ = [
    "AliasError",
    "BufferSpecError",
    "EtmPlan",
    "PlanError",
    "lower_bound",
    "plan_etm",
    "plan_etm_detailed",
    "plan_no_reuse",
    "verify_plan",
]

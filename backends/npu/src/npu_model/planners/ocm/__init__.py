"""OCM planners: which feature maps live in on-chip memory, and at which OCM address.

The problem (docs/ocm-planner.md has the long story). A network's feature maps are buffers with a
size, a lifetime ``[start, end]`` (positions in the execution order, both ends inclusive) and a
score: what keeping the map in OCM instead of ETM saves. A plan picks a set of *resident* buffers
and gives each an OCM offset such that

- two resident buffers whose lifetimes intersect do not intersect in address;
- every resident buffer lies in ``[0, capacity)`` (so the live bytes never exceed the OCM);
- offsets and sizes are multiples of ``alignment``.

Lifetimes are closed intervals, so a layer's inputs and its output are live together at the
layer's position: a layer whose input and output are both resident has them side by side in OCM.
That is the "a layer needs its operands whole" constraint, with no extra rule. A buffer larger
than the OCM, or with no positive score, is never resident.

The options mirror the vendor's `OcmOpt`; every option ends with the same refill pass (a buffer
that still fits somewhere is added), and every plan is checked by `check_plan` before it is
returned. One module per concern:

- `problem`: options, the plan, the error, input normalisation and `check_plan`;
- `kernels`: every Numba kernel of the options (conflicts, offset search, refill, total,
  OPTION1's improvement passes, OPTION2's beam, OPTION3's evicting walk), in one file because
  they call each other and Numba's cache only notices changes to a kernel's own file;
- `options`: the Python drivers of OPTION1 (global scoring), OPTION2 (local dynamic
  programming, a beam of the top M states) and OPTION3 (sequential evict-by-score);
- `driver`: `plan_ocm`, which runs one option or all three for BEST_SCORE;

The MILP reference optima the tests and benchmarks measure plans against live with them
(tests/support/ocm_optimum.py): the planners never need scipy. So do the instances of xir
networks they plan (`OcmInstance`, `instance_from_network`: tests/support/ocm_network.py).

Hot loops are module-level Numba kernels taking arrays only (`npu_model.kernels.jit`'s
``kernel``/``helper``: cached, no wrappers nobody calls); ``NUMBA_DISABLE_JIT=1`` runs them as
Python.
"""

from __future__ import annotations

from .driver import plan_ocm
from .options import OPTION2_MAX_OPS
from .problem import OcmOpt, OcmPlan, OcmPlanError, check_plan

__all__ = ["OcmOpt", "OcmPlan", "OcmPlanError", "plan_ocm", "check_plan", "OPTION2_MAX_OPS"]

"""Memory planners of the NPU model: where feature maps live in the device's segments.

`etm`: the ETM feature-map reuse planner (FTMP segment offsets, alias groups, lower bound).
`ocm`: the OCM planners (OPTION1/2/3, BEST_SCORE): which feature maps live on chip, and where.
"""

from __future__ import annotations

from .etm import (
    AliasError,
    BufferSpecError,
    EtmPlan,
    PlanError,
    lower_bound,
    plan_etm,
    plan_etm_detailed,
    plan_no_reuse,
    verify_plan,
)
from .ocm import OcmOpt, OcmPlan, OcmPlanError, check_plan, plan_ocm

__all__ = ["AliasError", "BufferSpecError", "EtmPlan", "PlanError",
           "lower_bound", "plan_etm", "plan_etm_detailed", "plan_no_reuse", "verify_plan",
           "OcmOpt", "OcmPlan", "OcmPlanError", "check_plan", "plan_ocm"]

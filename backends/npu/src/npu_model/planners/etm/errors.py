"""The ETM planner's errors: one `PlanError` (a `ValueError`) with a subclass per kind of bad
input, so callers can catch all of them or tell them apart."""

from __future__ import annotations


class PlanError(ValueError):
    """The planner's input or a plan is invalid (the backend wraps this into an xrt error)."""


class BufferSpecError(PlanError):
    """A buffer's size or lifetime is invalid (negative size, end before start, bad array)."""


class AliasError(PlanError):
    """The alias structure is invalid: unknown owner, cycle, member outside or misaligned."""

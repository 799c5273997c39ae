"""What a conformance check gives back: a result per check and the report of a run, and the
two ways a check ends early (a failure, or a check that does not apply to the backend)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import XrtError


class ConformanceError(XrtError, AssertionError):
    """A backend broke the contract: the message names the check, the op and what differed."""


class SkipCheck(Exception):  # noqa: N818 - the name says what the check does: it skips
    """The check does not apply to this backend (e.g. it claims no op of a case, or it does
    not support snapshots); the message says why."""


@dataclass
class CheckResult:
    """One check's outcome: "passed", "failed" or "skipped", with the reason."""

    name: str
    status: str
    message: str = ""
    seconds: float = 0.0


@dataclass
class Report:
    """The results of one conformance run over one backend."""

    backend: str
    device: str
    results: list[CheckResult] = field(default_factory=list)

    def count(self, status: str) -> int:
        return sum(1 for r in self.results if r.status == status)

    @property
    def passed(self) -> int:
        return self.count("passed")

    @property
    def failed(self) -> int:
        return self.count("failed")

    @property
    def skipped(self) -> int:
        return self.count("skipped")

    @property
    def ok(self) -> bool:
        """True when no check failed and at least one passed."""
        return self.failed == 0 and self.passed > 0

    def summary(self) -> str:
        return (f"{self.passed} passed, {self.failed} failed"
                + (f", {self.skipped} skipped" if self.skipped else ""))

    def as_dict(self) -> dict:
        return {"backend": self.backend, "device": self.device, "passed": self.passed,
                "failed": self.failed, "skipped": self.skipped,
                "results": [r.__dict__ for r in self.results]}
